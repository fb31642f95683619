"""Comparing a student's output with the reference's, and saying in words what differs.

:func:`compare` dispatches on the expected value: a tuple (item by item), a Python number, a
boolean tensor (a mask: every entry must be equal) or a floating-point tensor (within
``atol + rtol * |expected|``). :func:`default_judge` is the judge of a case that has none of
its own: every output compared with the reference's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from .._validation import shape_str
from .model import Case, Judge

__all__ = ["compare", "default_judge"]


def _with_article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


#: id(expected), atol, rtol -> (expected, what :func:`_allowed_error` found for it); at most
#: _ALLOWED_MAX_BYTES of float64 tensors (cleared when full).
_ALLOWED: dict[tuple[int, float, float], tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor | None]]] = {}
_ALLOWED_BYTES = [0]
_ALLOWED_MAX_BYTES = 32 << 20


def _allowed_error(expected: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``expected`` in float64 and the error each entry may have, ``atol + |rtol * expected|``
    (as :func:`torch.isclose` computes it), or None for the latter when an allowed error is not
    finite (an inf expected: only the full comparison decides). Kept per expected tensor: the
    grader compares the same reference outputs with every student's."""
    key = (id(expected), float(atol), float(rtol))
    hit = _ALLOWED.get(key)
    if hit is not None and hit[0] is expected:
        return hit[1]
    e = expected.detach().to(torch.float64)
    allowed = atol + (rtol * e).abs()
    found = (e, allowed if bool(torch.isfinite(allowed).all()) else None)
    size = 16 * e.numel()
    if size <= _ALLOWED_MAX_BYTES // 4:
        if _ALLOWED_BYTES[0] + size > _ALLOWED_MAX_BYTES:
            _ALLOWED.clear()
            _ALLOWED_BYTES[0] = 0
        _ALLOWED[key] = (expected, found)  # expected kept alive: its id stays its own
        _ALLOWED_BYTES[0] += size
    return found


def compare(
    actual: Any,
    expected: Any,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    what: str = "the output",
    names: Sequence[str] = (),
    nested: bool = False,
    detail: bool = True,
) -> str | None:
    """``None`` when ``actual`` matches ``expected``; otherwise what differs, in words.

    Tensors must have the expected shape, a compatible dtype (bool for masks, floating
    point for values), and values within ``atol + rtol * |expected|``; a ``NaN`` or
    ``inf`` counts as a match only where the expected value has the same. A tensor on the
    ``meta`` device (a shape and dtype, no values) matches one on ``meta`` of the same shape and
    dtype, and nothing on another device; other devices' values are compared on the CPU (the
    autograder's sandbox sends values, not devices, except ``meta``'s). ``nested`` says
    ``actual`` is an item of a returned tuple (for the wording of the feedback). With
    ``detail=False`` differing values are only said to differ (for a caller that asks
    whether two outputs match, not how far apart they are).
    """
    if isinstance(expected, tuple):
        return _compare_tuple(actual, expected, atol, rtol, names, detail)
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return _compare_number(actual, expected, atol, rtol, what)
    if not isinstance(expected, torch.Tensor):
        return None if actual == expected else f"{what} is {actual!r}, expected {expected!r}"
    return _compare_tensor(actual, expected, atol, rtol, what, nested, detail)


def _compare_tuple(
    actual: Any, expected: tuple, atol: float, rtol: float, names: Sequence[str], detail: bool
) -> str | None:
    if not isinstance(actual, tuple):
        return f"returned a single value, expected a tuple of {len(expected)} ({', '.join(names) or 'values'})"
    if len(actual) != len(expected):
        return f"returned a tuple of {len(actual)} values, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
        item = names[i] if i < len(names) else f"item {i}"
        msg = compare(a, e, atol, rtol, what=f"the {item}", nested=True, detail=detail)
        if msg:
            return msg
    return None


def _compare_number(actual: Any, expected: float, atol: float, rtol: float, what: str) -> str | None:
    if isinstance(actual, torch.Tensor) and actual.numel() == 1:
        actual = actual.item()
    if type(actual) not in (int, float):
        return f"{what} is {_with_article(type(actual).__name__)}, expected a number"
    if math.isnan(expected) and math.isnan(actual):
        return None
    if not abs(actual - expected) <= atol + rtol * abs(expected):
        return f"{what} is {actual:.6g}, expected {expected:.6g}"
    return None


def _compare_tensor(
    actual: Any, expected: torch.Tensor, atol: float, rtol: float, what: str, nested: bool, detail: bool
) -> str | None:
    if isinstance(actual, tuple):
        if nested:  # an item of a returned tuple
            return f"{what} is a tuple of {len(actual)} values, expected a torch.Tensor"
        return f"returned a tuple of {len(actual)} values, expected a single tensor"
    if not isinstance(actual, torch.Tensor):
        return f"{what} is {_with_article(type(actual).__name__)}, expected a torch.Tensor"
    meta = (actual.device.type == "meta", expected.device.type == "meta")
    if meta[0] != meta[1]:
        return f"{what} is on the {actual.device.type} device, expected the {expected.device.type} device"
    if actual.shape != expected.shape:
        return f"{what} has shape {shape_str(actual)}, expected {shape_str(expected)}"
    if expected.dtype == torch.bool:
        if actual.dtype != torch.bool:
            return f"{what} has dtype {actual.dtype}, expected torch.bool (True = may attend)"
        if any(meta):
            return None  # a meta tensor holds no values
        wrong = int((actual.cpu() != expected.cpu()).sum())
        return None if wrong == 0 else f"{what} has {wrong} of {expected.numel()} entries wrong"
    if expected.is_floating_point() and not (actual.is_floating_point()):
        return f"{what} has dtype {actual.dtype}, expected a floating-point tensor"
    if any(meta):
        return None
    return _compare_values(actual.cpu(), expected.cpu(), atol, rtol, what, detail)


def _compare_values(
    actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, what: str, detail: bool
) -> str | None:
    """Two tensors of one shape, compared entry by entry within the tolerances."""
    a = actual.to(torch.float64)
    e, allowed = _allowed_error(expected, atol, rtol)
    if allowed is not None and bool(((a - e).abs_() <= allowed).all()):
        return None  # every error finite and within its bound: what isclose says below, in 4 operations
    ok = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)  # a NaN or inf only where expected
    if bool(ok.all()):
        return None
    if not detail:
        return f"{what} differs from the expected one"
    a_bad, e_bad = ~torch.isfinite(a), ~torch.isfinite(e)
    if bool(a_bad.any()) and not bool(torch.equal(a_bad, e_bad)):
        kind = "NaN" if bool(torch.isnan(a).any()) else "inf"
        return f"{what} contains {kind} where the expected output is finite"
    finite = ~a_bad & ~e_bad
    err = (a - e).abs()[finite]
    worst = float(err.max()) if err.numel() else float("nan")
    n_wrong = int((~ok).sum())
    return f"{what} differs from the expected one in {n_wrong} of {ok.numel()} entries (largest error {worst:.3g})"


def default_judge(case: Case, names: Sequence[str], detail: bool = True) -> Judge:
    """The judge of a case without one of its own: each output compared with the reference's.

    Args:
        case: the case; its ``atol`` and ``rtol`` are the tolerances.
        names: the names of the items of a returned tuple (for the feedback).
        detail: whether a difference in values is said in numbers (see :func:`compare`).

    Returns:
        A :data:`~course_lib.grading.model.Judge`: the first difference in words, or None.
    """

    def judge_(calls, actual, expected):
        for a, e in zip(actual, expected, strict=False):
            msg = compare(a, e, case.atol, case.rtol, names=names, detail=detail)
            if msg:
                return msg
        return None

    return judge_
