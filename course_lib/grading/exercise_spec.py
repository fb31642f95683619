"""An :class:`Exercise`: everything needed to grade one function of the graded API.

Its reference, the :class:`~course_lib.grading.model.Case` objects that test it, the classic
:class:`~course_lib.grading.model.Mistake` implementations that name what went wrong, and what
is computed once from them: the cases under an instructor's seed (:mod:`.seeding`), the
reference's outputs, each mistake's outputs. The exercises themselves are defined in
``rubrics/chNN.py``; :func:`run_calls` runs one on a student's function in this process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .compare import default_judge
from .model import Call, Case, ErrorHint, Mistake, Outcome
from .run import call_once
from .seeding import fresh_cases, input_independent

__all__ = ["Exercise", "run_calls"]


@dataclass
class Exercise:
    """Everything needed to grade one function of the graded API.

    Args:
        name: the function's name (as in ``course_lib``).
        reference: the reference implementation.
        make_cases: builds the cases (deterministic: fixed seeds).
        mistakes: classic mistakes, tried in order when a test fails.
        forbidden: calls the student may not use, as dotted paths
            (``"torch.nn.functional.softmax"``), ``"method:NAME"`` for a tensor method, or
            ``"module:NAME"`` for a whole library (``module:numpy``).
        output_names: names of the items when the function returns a tuple.
        structure_args: arguments (positions or keyword names) that are structure, not values
            (positions, lengths): fresh inputs under ``--seed`` redraw them but never rescale
            them (see :mod:`course_lib.grading.seeding`).
        temporary_limit: when set, the largest new floating-point tensor (in elements) that one
            call may create, as a function of the call (e.g. one block of scores for tiled
            attention). The runtime layer measures it (:class:`~course_lib.grading.opwatch.OpWatch`);
            a call over the limit fails its case, with ``temporary_message`` as the diagnosis.
        temporary_message: the named mistake for a call over ``temporary_limit``.
        error_hints: hints for the errors this exercise's realistic mistakes raise, tried before
            the hints for every exercise (:func:`~course_lib.grading.feedback.error_hint`).
    """

    name: str
    reference: Callable[..., Any]
    make_cases: Callable[[], list[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    forbidden: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    structure_args: tuple[int | str, ...] = ()
    temporary_limit: Callable[[Call], int] | None = None
    temporary_message: str = ""
    error_hints: tuple[ErrorHint, ...] = ()
    _cases: dict[int | None, list[Case]] = field(default_factory=dict, repr=False)
    _expected: dict[int | None, list[list[Any]]] = field(default_factory=dict, repr=False)
    _fallbacks: dict[int, int] = field(default_factory=dict, repr=False)
    _unchanged: dict[int, int] = field(default_factory=dict, repr=False)
    _failing: dict[int, list[Mistake]] = field(default_factory=dict, repr=False)  # per self-check case
    _gated: set[int] | None = field(default=None, repr=False)
    _mistake_runs: dict[int | None, list[_MistakeRun]] = field(default_factory=dict, repr=False)

    def cases(self, seed: int | None = None) -> list[Case]:
        """The cases: the self-check's (``seed=None``), or every input drawn anew from the
        instructor's ``seed`` (:mod:`course_lib.grading.seeding`). Computed once per seed."""
        if seed not in self._cases:
            if seed is None:
                self._cases[None] = self.make_cases()
            else:
                fresh = fresh_cases(self, int(seed))
                self._cases[seed], self._fallbacks[seed] = fresh.cases, fresh.fallbacks
                self._unchanged[seed] = fresh.unchanged
        return self._cases[seed]

    def fallbacks(self, seed: int) -> int:
        """How many cases fell back to the self-check's under ``seed`` (no fresh one would do)."""
        self.cases(seed)
        return self._fallbacks.get(seed, 0)

    def unchanged(self, seed: int) -> int:
        """How many cases have the self-check's very inputs under ``seed`` (0 when all are fresh):
        the fallbacks and any case drawn equal to the public one."""
        self.cases(seed)
        return self._unchanged.get(seed, 0)

    def expected(self, seed: int | None = None) -> list[list[Any]]:
        """The reference's output for every call of every case (computed once per seed)."""
        if seed not in self._expected:
            expected = []
            for case in self.cases(seed):
                outs = []
                for c in case.calls:
                    out = call_once(self.reference, c, time_limit=None)
                    if out.status != "ok":
                        raise RuntimeError(f"reference {self.name} failed on case {case.name!r}: {out.message}")
                    outs.append(out.value)
                expected.append(outs)
            self._expected[seed] = expected
        return self._expected[seed]

    def gated(self) -> set[int]:
        """Indices of the cases that earn their points only once the function's other value cases
        pass: properties and invariances (a case with its own judge), and value cases whose answer
        does not depend on the input values. Empty when no other value case is left to require."""
        if self._gated is None:
            cases = self.cases()
            gated = {i for i, c in enumerate(cases) if c.judge is not None} | input_independent(self)
            self._gated = gated if any(i not in gated for i in range(len(cases))) else set()
        return self._gated

    def watch(self) -> dict[str, Any]:
        """What the runtime layer watches while the student's function runs (see
        :mod:`course_lib.grading.opwatch`)."""
        from .forbidden import watch_spec

        spec: dict[str, Any] = dict(watch_spec(self.forbidden))
        if self.temporary_limit is not None:
            spec["largest"] = True
        return spec

    def mistake_runs(self, seed: int | None = None) -> list[_MistakeRun]:
        """Each named mistake's outputs on every case, and which cases it fails (computed once
        per seed: they do not depend on the student)."""
        if seed not in self._mistake_runs:
            cases, expected = self.cases(seed), self.expected(seed)
            runs = []
            for m in self.mistakes:
                outputs: list[list[Any] | None] = []
                fails: list[bool] = []
                for case, exp in zip(cases, expected, strict=True):
                    outs = []
                    for c in case.calls:
                        o = call_once(m.implementation, c, time_limit=None)
                        if o.status != "ok":
                            break
                        outs.append(o.value)
                    else:
                        outputs.append(outs)
                        try:
                            verdict = (case.judge or default_judge(case, self.output_names))(case.calls, outs, exp)
                        except Exception:  # noqa: BLE001 - a mistake's odd output fails the case
                            verdict = "could not be judged"
                        fails.append(verdict is not None)
                        continue
                    outputs.append(None)
                    fails.append(False)  # an error is not evidence against the diagnosis
                runs.append(_MistakeRun(m, outputs, fails))
            self._mistake_runs[seed] = runs
        return self._mistake_runs[seed]

    @property
    def max_score(self) -> float:
        return float(sum(c.points for c in self.cases()))


@dataclass
class _MistakeRun:
    """A named mistake's outputs per case (``None`` where it raised) and the cases it fails."""

    mistake: Mistake
    outputs: list[list[Any] | None]
    fails: list[bool]


def run_calls(fn: Callable[..., Any], exercise: Exercise, seed: int | None = None) -> list[list[Outcome]]:
    """Run every call of every case of ``exercise`` on ``fn``, in this process, watching
    for the torch calls the exercise forbids."""
    watch = exercise.watch()
    return [[call_once(fn, c, watch=watch) for c in case.calls] for case in exercise.cases(seed)]
