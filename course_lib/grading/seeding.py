"""Fresh inputs from the instructor's seed: every case drawn anew, so no output can be looked up.

The self-check in a notebook uses fixed seeds, so its inputs (and the reference's outputs) are
public. When grading with ``course-lib grade --seed S`` every input is drawn from ``S``:

- **random inputs** come from :func:`course_lib.grading.rubrics._common.rng`, which mixes
  ``S`` into every generator's seed, so they are drawn anew;
- **fixed and edge-case inputs** written out in the exercise (a 2 x 3 example, scores of
  magnitude 1e4, a row of -inf) keep their structure and character: every floating-point
  tensor of a case is multiplied by one positive factor drawn from ``S`` (zeros, signs, ties,
  infinities, orderings, masks and every linear relation between the inputs survive), except
  tensors of only 0, 1 and -1 (identities, all-ones gains) and the arguments an exercise names
  as structure (``Exercise.structure_args``: positions, such as a window's centre), which keep
  their meaning;
- **integer and structure inputs** (sequence lengths, widths, offsets, mask sizes, pad ids) are
  drawn by the exercise itself with :func:`course_lib.grading.rubrics._common.fresh_int`:
  the self-check's value without a seed, else another value from the range that keeps what
  the case tests (a single position stays one position, a width stays even).

A fresh case is kept only if the reference still passes it and every classic mistake that
fails the self-check's version of the case still fails it (so the feedback can still name
it); otherwise the next factor is tried, then the plain redraw, and as a last resort the
self-check's own case (counted in :attr:`FreshCases.fallbacks`). The record's count of
unchanged cases (:attr:`FreshCases.unchanged`) compares the inputs themselves, so a case
drawn equal to the public one counts too, and so does a case whose every call the self-check
makes somewhere (its outputs could be looked up call by call); such a case is first drawn again
from derived seeds.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from .compare import default_judge
from .model import Call, Case, Mistake
from .run import call_once

__all__ = ["current_seed", "mixed_seed", "fresh_cases", "FreshCases", "input_independent", "same_inputs"]

_SEED: contextvars.ContextVar[int | None] = contextvars.ContextVar("course_lib_case_seed", default=None)
_FACTORS = 3
_REDRAWS = 3


def current_seed() -> int | None:
    """The instructor's seed while fresh cases are being built, else None."""
    return _SEED.get()


def mixed_seed(*parts: Any) -> int:
    """A 63-bit seed from the parts (stable across runs and machines)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class _Exercise(Protocol):
    """What seeding reads of an :class:`~course_lib.grading.exercise_spec.Exercise` (which calls it,
    so it is not imported here)."""

    name: str
    mistakes: list[Mistake]
    output_names: tuple[str, ...]
    structure_args: tuple[int | str, ...]
    _failing: dict[int, list[Mistake]]

    @property
    def reference(self) -> Callable[..., Any]: ...

    @property
    def make_cases(self) -> Callable[[], list[Case]]: ...

    def cases(self, seed: int | None = None) -> list[Case]: ...

    def expected(self, seed: int | None = None) -> list[list[Any]]: ...


@dataclass
class FreshCases:
    """The cases of one exercise for one seed.

    Attributes:
        cases: the fresh cases, in the self-check's order.
        fallbacks: how many fell back to the self-check's case (no fresh one kept the mistakes).
        unchanged: how many have the self-check's inputs: the fallbacks, and any case whose
            every call is a self-check call (:func:`public`), however it was drawn. What the
            record reports.
    """

    cases: list[Case]
    fallbacks: int
    unchanged: int = 0


def _is_structure(t: torch.Tensor) -> bool:
    finite = t[torch.isfinite(t)]
    return finite.numel() == 0 or bool(((finite == 0) | (finite == 1) | (finite == -1)).all())


def _scale_value(v: Any, factor: float, memo: dict[int, Any]) -> Any:
    if isinstance(v, torch.Tensor):
        if id(v) in memo:
            return memo[id(v)]
        out = v
        if v.is_floating_point() and v.numel() and not _is_structure(v):
            out = v * factor
        memo[id(v)] = out
        return out
    if type(v) in (tuple, list):
        return type(v)(_scale_value(x, factor, memo) for x in v)
    return v


def _scaled(case: Case, factor: float, keep: tuple[int | str, ...] = ()) -> Case:
    """The case with its value tensors times ``factor``; arguments in ``keep`` stay as they are."""
    memo: dict[int, Any] = {}
    calls = [
        Call(
            tuple(a if i in keep else _scale_value(a, factor, memo) for i, a in enumerate(c.args)),
            {k: v if k in keep else _scale_value(v, factor, memo) for k, v in c.kwargs.items()},
        )
        for c in case.calls
    ]
    return replace(case, calls=calls)


def _factor(seed: int, name: str, index: int, attempt: int) -> float:
    g = torch.Generator().manual_seed(mixed_seed("scale", seed, name, index, attempt))
    u = float(torch.rand((), generator=g))
    return 0.6 + 0.3 * u if u < 0.5 else 1.1 + 0.5 * (u - 0.5) * 2  # in [0.6, 0.75) or [1.1, 1.6)


def _build(exercise: _Exercise, seed: int) -> list[Case]:
    token = _SEED.set(seed)
    try:
        return exercise.make_cases()
    finally:
        _SEED.reset(token)


def _fails(exercise: _Exercise, case: Case, fn: Any, expected: list[Any]) -> bool:
    outs = []
    for c in case.calls:
        o = call_once(fn, c, time_limit=None)
        if o.status != "ok":
            return True
        outs.append(o.value)
    try:
        return (case.judge or default_judge(case, exercise.output_names))(case.calls, outs, expected) is not None
    except Exception:  # noqa: BLE001 - a judge that cannot read a wrong output: a failure
        return True


def _reference_outputs(exercise: _Exercise, case: Case) -> list[Any] | None:
    outs = []
    for c in case.calls:
        o = call_once(exercise.reference, c, time_limit=None)
        if o.status != "ok":
            return None
        outs.append(o.value)
    return outs


def _failing_mistakes(exercise: _Exercise, i: int, base: Case) -> list[Any]:
    """The named mistakes that the self-check's case ``i`` catches (computed once)."""
    if i not in exercise._failing:  # the mistakes this case catches (the same for every seed)
        base_expected = exercise.expected()[i]
        exercise._failing[i] = [m for m in exercise.mistakes if _fails(exercise, base, m.implementation, base_expected)]
    return exercise._failing[i]


def _keeps_the_mistakes(exercise: _Exercise, cand: Case, failing: list[Any]) -> bool:
    """The reference passes ``cand`` and every mistake in ``failing`` still fails it."""
    ref = _reference_outputs(exercise, cand)
    if ref is None or _fails(exercise, cand, exercise.reference, ref):
        return False
    return all(_fails(exercise, cand, m.implementation, ref) for m in failing)


def public(case: Case, plain: list[Case]) -> bool:
    """Whether every call of ``case`` is a call of the self-check (in any of its cases): its
    outputs could be looked up in a table of the self-check's, call by call.

    Args:
        case: a case, e.g. a fresh one.
        plain: the self-check's cases.

    Returns:
        True when each of the case's calls has the same arguments as some self-check call.
    """
    calls = calls_of(plain)
    return all(any(_same_call(c, p) for p in calls) for c in case.calls)


def fresh_cases(exercise: _Exercise, seed: int) -> FreshCases:
    """The exercise's cases with every input drawn from ``seed`` (see the module docstring).

    A drawn case whose calls are all the self-check's (:func:`public`: integer inputs drawn
    from a small range can repeat a public size) is drawn again from a derived seed, up to
    ``_REDRAWS`` times, before a rescaled or plain candidate is accepted.
    """
    plain = exercise.cases()
    builds = [_build(exercise, seed)]
    if len(builds[0]) != len(plain):
        raise RuntimeError(
            f"{exercise.name}: the cases depend on the seed in number ({len(builds[0])} vs {len(plain)})"
        )
    out: list[Case] = []
    fallbacks = 0
    for i, base in enumerate(plain):
        failing = _failing_mistakes(exercise, i, base)
        chosen = None
        for attempt in range(_REDRAWS + 1):
            if attempt == len(builds):
                builds.append(_build(exercise, mixed_seed("redraw", seed, attempt)))
            chosen = _choose(exercise, seed, i, builds[attempt][i], plain, failing)
            if chosen is not None:
                break
        if chosen is None:
            chosen, fallbacks = base, fallbacks + 1
        out.append(chosen)
    unchanged = sum(same_inputs(a, b) or public(b, plain) for a, b in zip(plain, out, strict=True))
    return FreshCases(out, fallbacks, unchanged)


def _choose(exercise: _Exercise, seed: int, i: int, new: Case, plain: list[Case], failing: list[Any]) -> Case | None:
    """The first of ``new`` rescaled by each factor, then ``new`` itself, that is not public
    and keeps the mistakes; None when none is."""
    keep = exercise.structure_args
    candidates = [_scaled(new, _factor(seed, exercise.name, i, k), keep) for k in range(_FACTORS)] + [new]
    for cand in candidates:
        if not public(cand, plain) and _keeps_the_mistakes(exercise, cand, failing):
            return cand
    return None


def calls_of(cases: list[Case]) -> list[Call]:
    return [c for case in cases for c in case.calls]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return (
            a.shape == b.shape
            and a.dtype == b.dtype
            and bool(
                torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
            )
        )
    if type(a) in (tuple, list) and type(a) is type(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return False
    return type(a) is type(b) and bool(a == b)


def same_inputs(a: Case, b: Case) -> bool:
    """Whether two cases make the very same calls (same arguments, dtypes and shapes).

    Args:
        a: a case, e.g. the self-check's.
        b: another, e.g. its fresh version under a seed.

    Returns:
        True when every call's positional and keyword arguments are equal.
    """
    return len(a.calls) == len(b.calls) and all(_same_call(x, y) for x, y in zip(a.calls, b.calls, strict=True))


def _same_call(x: Call, y: Call) -> bool:
    return _same(x.args, y.args) and _same(dict(x.kwargs), dict(y.kwargs))


def input_independent(exercise: _Exercise) -> set[int]:
    """The value cases whose expected output does not depend on the input values (a softmax over
    a dimension of size 1 is 1 whatever the scores): redrawn and rescaled inputs give the very
    same reference output. Such a case can be passed by outputs that are not an implementation."""
    plain = exercise.cases()
    drawn = _build(exercise, 1)
    out: set[int] = set()
    for i, (case, new) in enumerate(zip(plain, drawn, strict=False)):
        if case.judge is not None:
            continue
        ref = _reference_outputs(exercise, _scaled(new, 1.37, exercise.structure_args))
        if ref is not None and _same(tuple(ref), tuple(exercise.expected()[i])):
            out.add(i)
    return out
