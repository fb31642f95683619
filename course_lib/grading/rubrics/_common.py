"""Small helpers shared by the rubrics (the exercise definitions of each chapter)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..compare import compare
from ..model import Call, Judge
from ..oplists import ATTENTION_OPS, NORMALISATION_OPS, SOFTMAX_OPS, family_rules
from ..seeding import current_seed, mixed_seed

__all__ = [
    "WHOLE_ATTENTION",
    "SOFTMAX_FAMILY",
    "NORMALISATIONS",
    "randn",
    "rand_mask",
    "rng",
    "fresh_int",
    "item",
    "structure_problem",
    "first_structure_problem",
    "sums_to_one",
]


#: Forbidden wherever students write attention: the library calls that do all of it (public,
#: private and module forms; :data:`~course_lib.grading.oplists.ATTENTION_OPS` their kernels).
WHOLE_ATTENTION = family_rules(ATTENTION_OPS)

#: The softmax family: forbidden where students write a softmax, or call their own (softmin,
#: the masked, "safe", sparse and log forms too).
SOFTMAX_FAMILY = family_rules(SOFTMAX_OPS)

#: Every normalisation layer (layer, group, instance, batch, local response, RMS): each one
#: standardises rows reshaped into its axes, so each can stand in for a layer norm.
NORMALISATIONS = family_rules(NORMALISATION_OPS)


def rng(seed: int) -> torch.Generator:
    """A generator for one exercise's cases: seeded with ``seed`` for the self-check (the same
    inputs every time), or with ``seed`` mixed with the instructor's seed when grading with
    ``--seed`` (:mod:`course_lib.grading.seeding`), so every input is drawn anew."""
    instructor = current_seed()
    return torch.Generator().manual_seed(seed if instructor is None else mixed_seed("rng", instructor, seed))


def fresh_int(g: torch.Generator, default: int, choices: Sequence[int]) -> int:
    """An integer input (a length, a width, an offset, a pad id) of a case.

    The self-check gets ``default`` (and ``g`` is left untouched, so the self-check's other
    inputs stay as they were). Under ``--seed`` (:mod:`course_lib.grading.seeding`) it is one
    of ``choices`` other than ``default``, drawn with ``g``: a value of the same character
    (the range that keeps what the case tests), never the public one.

    Args:
        g: the exercise's generator (:func:`rng`).
        default: the self-check's value.
        choices: the values a fresh case may take; ``default`` among them is skipped.

    Returns:
        ``default``, or a drawn value (``default`` only if ``choices`` holds nothing else).
    """
    if current_seed() is None:
        return default
    pool = [c for c in choices if c != default] or [default]
    return pool[int(torch.randint(len(pool), (), generator=g))]


def randn(g: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    """Standard normal float32 values, times ``scale``."""
    return torch.randn(*shape, generator=g) * scale


def rand_mask(g: torch.Generator, *shape: int, p: float = 0.7, keep_first: bool = True) -> torch.Tensor:
    """A random boolean mask (``True`` = may attend); by default key 0 is always allowed."""
    m = torch.rand(*shape, generator=g) < p
    if keep_first:
        m[..., 0] = True
    return m


def item(value: Any, index: int | None) -> Any:
    """``value[index]`` for tuple outputs, ``value`` itself when ``index`` is None."""
    if index is None:
        return value
    if not isinstance(value, tuple) or len(value) <= index:
        raise ValueError(f"expected a tuple with at least {index + 1} values")
    return value[index]


def structure_problem(actual: Any, expected: Any, names: Sequence[str] = (), nested: bool = False) -> str | None:
    """What is wrong with the structure of an output, before a property is judged: not the
    expected tuple, not a tensor, the wrong shape, not floating point, NaN or inf; else None."""
    if isinstance(expected, tuple):
        if not isinstance(actual, tuple) or len(actual) != len(expected):
            return compare(actual, expected, names=names)
        for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
            msg = structure_problem(a, e, (names[i] if i < len(names) else f"item {i}",), nested=True)
            if msg:
                return msg
        return None
    what = f"the {names[0]}" if names else "the output"
    if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape:
        return compare(actual, expected, what=what, nested=nested)
    if not actual.is_floating_point():
        return f"{what} has dtype {actual.dtype}, expected a floating-point tensor"
    if not bool(torch.isfinite(actual).all()):
        return f"{what} contains NaN or inf"
    return None


def first_structure_problem(actual: Sequence[Any], expected: Sequence[Any], names: Sequence[str] = ()) -> str | None:
    """:func:`structure_problem` of a case's first call that has one (one output per call)."""
    for a, e in zip(actual, expected, strict=False):
        msg = structure_problem(a, e, names)
        if msg:
            return msg
    return None


def sums_to_one(
    index: int | None = None, dim: int = -1, what: str = "the weights", atol: float = 1e-4, names: Sequence[str] = ()
) -> Judge:
    """A judge: outputs are structured like the reference's, and output (or output[index]) is
    non-negative and sums to 1 along ``dim``. ``names`` names the items of a tuple output."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        problem = first_structure_problem(actual, expected, names)
        if problem:
            return problem
        for a in actual:
            w = item(a, index)
            if not isinstance(w, torch.Tensor) or not w.is_floating_point():
                return f"{what} should be a floating-point tensor"
            if not bool(torch.isfinite(w).all()):
                return f"{what} contain NaN or inf"
            if bool((w < -atol).any()):
                return f"{what} contain negative values"
            total = w.to(torch.float64).sum(dim=dim)
            if not bool(torch.allclose(total, torch.ones_like(total), atol=atol)):
                worst = float((total - 1).abs().max())
                return f"{what} do not sum to 1 along dim {dim} (off by up to {worst:.3g})"
        return None

    return judge
