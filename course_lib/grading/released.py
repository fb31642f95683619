"""The self-check of a released graded course: exercises rebuilt from precomputed data.

A graded course gives students ``course_lib_student`` (``course-lib release``,
:mod:`course_lib.autograder.release`), which holds ``course_lib.grading`` without the rubrics and
without any reference implementation. What :func:`~course_lib.grading.check` needs from them is
stored instead, per exercise, as a :class:`FrozenExercise`: the self-check's inputs, the
reference's outputs on them, each named mistake's outputs on them, the gated cases, and the
reference's signature (for the feedback's argument names). They are the public inputs only: the
autograder draws fresh inputs from the instructor's ``--seed``, so these outputs earn nothing there.

What the released self-check cannot do, it says: a property test (a case with its own judge) is
judged by comparing the outputs with the reference's (a correct implementation gives them; an
output that differs fails here, though the grader's property might accept it), and a function
whose graded callee fails its own check is not re-checked with the reference standing in
(:data:`NO_STAND_IN`). The data is saved with :func:`torch.save` as plain containers and read
with ``weights_only=True``: loading it runs no code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import torch

from .compare import default_judge
from .exercise_spec import Exercise, _MistakeRun
from .model import Call, Case, ErrorHint, Mistake

__all__ = [
    "FrozenParameter",
    "FrozenCase",
    "FrozenMistake",
    "FrozenExercise",
    "RELEASE_FOLDER",
    "NO_STAND_IN",
    "is_released",
    "freeze",
    "thaw",
    "to_plain",
    "from_plain",
    "load_assignment",
    "NotReleased",
]

#: The folder of ``course_lib/grading`` that holds the data of a released course (absent in the
#: full course_lib): one ``<assignment>.pt`` per released assignment.
RELEASE_FOLDER = "_release"

#: The note of a released check whose function calls a graded function that fails its own check.
NO_STAND_IN = (
    "{function} calls your {callees}, which {verb} {its} own check: fix {that} first. This self-check "
    "has no reference implementations, so it cannot grade {function} with a correct {callees} in "
    "{its} place. The course's grader does, so there a mistake in {callees} costs points only once."
)

#: The feedback of a property test whose outputs differ from the reference's in a released check.
PROPERTY_DIFFERS = (
    "{difference}. The grader judges this test by a property; this self-check has no reference "
    "implementation, so it asks for the reference's outputs here"
)


class NotReleased(KeyError):
    """A graded function whose assignment is not part of this release (its message says so)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class FrozenParameter:
    """One parameter of the reference's signature (the feedback names arguments by it)."""

    name: str
    kind: int  #: :class:`inspect.Parameter` kind, as its int value
    has_default: bool = False
    default: Any = None


@dataclass
class FrozenCase:
    """One self-check case, with the reference's outputs on its calls.

    ``limits`` holds the largest temporary each call may make (for exercises with a
    ``temporary_limit``), ``property`` whether the case has its own judge.
    """

    name: str
    checks: str
    calls: list[Call]
    points: float
    atol: float
    rtol: float
    property: bool
    expected: list[Any]
    limits: list[int] | None = None


@dataclass
class FrozenMistake:
    """A named mistake: its words, its outputs per case (None where it raised), the cases it fails."""

    message: str
    outputs: list[list[Any] | None]
    fails: list[bool]


@dataclass
class FrozenExercise:
    """What a released self-check needs of one exercise; no code."""

    name: str
    parameters: list[FrozenParameter]
    cases: list[FrozenCase]
    mistakes: list[FrozenMistake]
    gated: list[int]
    forbidden: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    temporary_message: str = ""
    error_hints: list[ErrorHint] = field(default_factory=list)


def is_released() -> bool:
    """Whether this ``course_lib`` is a released student package (it has the release data)."""
    return resources.files(__package__).joinpath(RELEASE_FOLDER).is_dir()


def _parameter(p: inspect.Parameter) -> FrozenParameter:
    has_default = p.default is not inspect.Parameter.empty
    return FrozenParameter(p.name, int(p.kind), has_default, p.default if has_default else None)


def freeze(ex: Exercise) -> FrozenExercise:
    """The data of ``ex``'s self-check (``seed=None``), computed with the full course_lib."""
    cases, expected = ex.cases(), ex.expected()
    frozen = []
    for case, exp in zip(cases, expected, strict=True):
        limits = [int(ex.temporary_limit(c)) for c in case.calls] if ex.temporary_limit else None
        frozen.append(
            FrozenCase(
                case.name, case.checks, list(case.calls), float(case.points), float(case.atol), float(case.rtol),
                case.judge is not None, list(exp), limits,
            )
        )  # fmt: skip
    mistakes = [FrozenMistake(r.mistake.message, r.outputs, r.fails) for r in ex.mistake_runs()]
    params = [_parameter(p) for p in inspect.signature(ex.reference).parameters.values()]
    return FrozenExercise(
        ex.name, params, frozen, mistakes, sorted(ex.gated()), tuple(ex.forbidden), tuple(ex.output_names),
        ex.temporary_message, list(ex.error_hints),
    )  # fmt: skip


def _signature_only(name: str, parameters: Sequence[FrozenParameter]) -> Callable[..., Any]:
    """A stand-in for the reference that has its signature and no body."""

    def reference(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"the released course_lib has no reference implementation of {name}")

    reference.__name__ = reference.__qualname__ = name
    params = [
        inspect.Parameter(
            p.name, inspect._ParameterKind(p.kind), default=p.default if p.has_default else inspect._empty
        )
        for p in parameters
    ]
    reference.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return reference


def _property_judge(case: Case, names: Sequence[str]) -> Callable[..., str | None]:
    compare_ = default_judge(case, names)

    def judge_(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        difference = compare_(calls, actual, expected)
        return None if difference is None else PROPERTY_DIFFERS.format(difference=difference)

    return judge_


def thaw(frozen: FrozenExercise) -> Exercise:
    """An :class:`Exercise` that judges like the full one on the self-check's inputs, from data."""
    cases = []
    for fc in frozen.cases:
        case = Case(fc.name, fc.checks, list(fc.calls), fc.points, None, fc.atol, fc.rtol)
        if fc.property:
            case.judge = _property_judge(case, frozen.output_names)
        cases.append(case)
    limits = {
        id(c): n
        for fc, case in zip(frozen.cases, cases, strict=True)
        for c, n in zip(case.calls, fc.limits or [], strict=False)
    }
    reference = _signature_only(frozen.name, frozen.parameters)
    ex = Exercise(
        frozen.name,
        reference,
        lambda: cases,
        forbidden=tuple(frozen.forbidden),
        output_names=tuple(frozen.output_names),
        temporary_limit=(lambda call: limits[id(call)]) if limits else None,
        temporary_message=frozen.temporary_message,
        error_hints=tuple(frozen.error_hints),
    )
    ex._cases[None] = cases
    ex._expected[None] = [list(fc.expected) for fc in frozen.cases]
    ex._gated = set(frozen.gated)
    ex._mistake_runs[None] = [
        _MistakeRun(Mistake(m.message, reference), list(m.outputs), list(m.fails)) for m in frozen.mistakes
    ]
    return ex


def to_plain(frozen: FrozenExercise) -> dict[str, Any]:
    """``frozen`` as plain containers, tensors and numbers (what ``torch.load(weights_only=True)`` reads)."""
    return {
        "name": frozen.name,
        "parameters": [[p.name, p.kind, p.has_default, p.default] for p in frozen.parameters],
        "cases": [_case_plain(c) for c in frozen.cases],
        "mistakes": [[m.message, m.outputs, m.fails] for m in frozen.mistakes],
        "gated": list(frozen.gated),
        "forbidden": list(frozen.forbidden),
        "output_names": list(frozen.output_names),
        "temporary_message": frozen.temporary_message,
        "error_hints": [[list(h.phrases), h.hint, h.line] for h in frozen.error_hints],
    }


def _case_plain(c: FrozenCase) -> list[Any]:
    calls = [[list(k.args), dict(k.kwargs)] for k in c.calls]
    return [c.name, c.checks, calls, c.points, c.atol, c.rtol, c.property, c.expected, c.limits]


def from_plain(d: dict[str, Any]) -> FrozenExercise:
    """The inverse of :func:`to_plain`."""
    return FrozenExercise(
        name=d["name"],
        parameters=[FrozenParameter(*p) for p in d["parameters"]],
        cases=[
            FrozenCase(n, chk, [Call(tuple(a), dict(k)) for a, k in calls], pts, atol, rtol, prop, exp, lim)
            for n, chk, calls, pts, atol, rtol, prop, exp, lim in d["cases"]
        ],
        mistakes=[FrozenMistake(m, outs, fails) for m, outs, fails in d["mistakes"]],
        gated=list(d["gated"]),
        forbidden=tuple(d["forbidden"]),
        output_names=tuple(d["output_names"]),
        temporary_message=d["temporary_message"],
        error_hints=[ErrorHint(tuple(p), h, line) for p, h, line in d["error_hints"]],
    )


def load_assignment(slug: str) -> list[Exercise]:
    """The exercises of a released assignment, from ``_release/<slug>.pt``.

    Raises:
        NotReleased: the assignment is not part of this release.
    """
    path = resources.files(__package__).joinpath(RELEASE_FOLDER, f"{slug}.pt")
    if not path.is_file():
        raise NotReleased(
            f"{slug} is not part of the self-check you installed (course_lib_student); install the "
            "wheel that came with this notebook"
        )
    with path.open("rb") as f:
        data = torch.load(f, weights_only=True)
    return [thaw(from_plain(d)) for d in data["exercises"]]
