"""Fresh inputs from the instructor's seed: every case drawn anew, so no output can be looked up.

The self-check in a notebook uses fixed seeds, so its inputs (and the reference's outputs) are
public. When grading with ``course-lib grade --seed S`` every input is drawn from ``S``:

- **random inputs** come from :func:`course_lib.grading.exercises._common.rng`, which mixes
  ``S`` into every generator's seed, so they are drawn anew;
- **fixed and edge-case inputs** written out in the exercise (a 2 x 3 example, scores of
  magnitude 1e4, a row of -inf) keep their structure and character: every floating-point
  tensor of a case is multiplied by one positive factor drawn from ``S`` (zeros, signs, ties,
  infinities, orderings, masks and every linear relation between the inputs survive), except
  tensors of only 0, 1 and -1 (identities, all-ones gains) and the arguments an exercise names
  as structure (``Exercise.structure_args``: positions, such as a window's centre), which keep
  their meaning.

A fresh case is kept only if the reference still passes it and every classic mistake that
fails the self-check's version of the case still fails it (so the feedback can still name
it); otherwise the next factor is tried, then the plain redraw, and as a last resort the
self-check's own case (counted in :attr:`FreshCases.fallbacks`).
"""

from __future__ import annotations

import contextvars
import hashlib
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .core import Call, Case, Exercise

__all__ = ["current_seed", "mixed_seed", "fresh_cases", "FreshCases", "input_independent"]

_SEED: contextvars.ContextVar[int | None] = contextvars.ContextVar("course_lib_case_seed", default=None)
_FACTORS = 3


def current_seed() -> int | None:
    """The instructor's seed while fresh cases are being built, else None."""
    return _SEED.get()


def mixed_seed(*parts: Any) -> int:
    """A 63-bit seed from the parts (stable across runs and machines)."""
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class FreshCases:
    """The cases of one exercise for one seed, and how many fell back to the self-check's."""

    cases: list[Case]
    fallbacks: int


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
    from .core import Call

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


def _build(exercise: Exercise, seed: int) -> list[Case]:
    token = _SEED.set(seed)
    try:
        return exercise.make_cases()
    finally:
        _SEED.reset(token)


def _fails(exercise: Exercise, case: Case, fn: Any, expected: list[Any]) -> bool:
    from .core import _default_judge, call_once

    outs = []
    for c in case.calls:
        o = call_once(fn, c, time_limit=None)
        if o.status != "ok":
            return True
        outs.append(o.value)
    try:
        return (case.judge or _default_judge(case, exercise.output_names))(case.calls, outs, expected) is not None
    except Exception:  # noqa: BLE001 - a judge that cannot read a wrong output: a failure
        return True


def _reference_outputs(exercise: Exercise, case: Case) -> list[Any] | None:
    from .core import call_once

    outs = []
    for c in case.calls:
        o = call_once(exercise.reference, c, time_limit=None)
        if o.status != "ok":
            return None
        outs.append(o.value)
    return outs


def fresh_cases(exercise: Exercise, seed: int) -> FreshCases:
    """The exercise's cases with every input drawn from ``seed`` (see the module docstring)."""
    plain = exercise.cases()
    drawn = _build(exercise, seed)
    if len(drawn) != len(plain):
        raise RuntimeError(f"{exercise.name}: the cases depend on the seed in number ({len(drawn)} vs {len(plain)})")
    out: list[Case] = []
    fallbacks = 0
    for i, (base, new) in enumerate(zip(plain, drawn, strict=False)):
        if i not in exercise._failing:  # the mistakes this case catches (the same for every seed)
            base_expected = exercise.expected()[i]
            exercise._failing[i] = [
                m for m in exercise.mistakes if _fails(exercise, base, m.implementation, base_expected)
            ]
        failing = exercise._failing[i]
        keep = exercise.structure_args
        candidates = [_scaled(new, _factor(seed, exercise.name, i, k), keep) for k in range(_FACTORS)] + [new]
        chosen = None
        for cand in candidates:
            ref = _reference_outputs(exercise, cand)
            if ref is None or _fails(exercise, cand, exercise.reference, ref):
                continue
            if all(_fails(exercise, cand, m.implementation, ref) for m in failing):
                chosen = cand
                break
        if chosen is None:
            chosen, fallbacks = base, fallbacks + 1
        out.append(chosen)
    return FreshCases(out, fallbacks)


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
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=False))
    return type(a) is type(b) and a == b


def input_independent(exercise: Exercise) -> set[int]:
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
