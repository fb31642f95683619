"""Which functions each assignment grades, and where their exercises are defined.

An assignment is one exercise notebook, named as in ``exercises/`` (``02_self_attention``);
its exercises live in ``course_lib/grading/exercises/chNN.py`` as a list ``EXERCISES``.
"""

from __future__ import annotations

import importlib

from .core import Exercise

__all__ = ["ASSIGNMENTS", "assignment_of", "exercise", "exercises_of"]

#: Assignment (notebook name without ``.ipynb``) -> graded functions, in notebook order.
ASSIGNMENTS: dict[str, tuple[str, ...]] = {
    "01_seq2seq_attention": (
        "dot_score",
        "scaled_dot_score",
        "cosine_score",
        "multiplicative_score",
        "additive_score",
        "attention_pool",
        "local_attention_weights",
    ),
    "02_self_attention": ("softmax", "scaled_dot_product_attention", "self_attention"),
    "03_multi_head_attention": (
        "split_heads",
        "merge_heads",
        "multi_head_attention",
        "multi_head_attention_sum_form",
    ),
    "04_positional_encoding": ("sinusoidal_positional_encoding", "relative_position_matrix"),
    "05_layer_norm": ("layer_norm", "add_and_norm"),
    "06_transformer": ("padding_mask", "causal_mask", "position_wise_feed_forward", "label_smoothing_loss"),
}

_MODULES = {slug: f"course_lib.grading.exercises.ch{slug[:2]}" for slug in ASSIGNMENTS}
_cache: dict[str, Exercise] = {}


def assignment_of(name: str) -> str:
    """The assignment that grades function ``name``."""
    for slug, names in ASSIGNMENTS.items():
        if name in names:
            return slug
    raise KeyError(f"{name!r} is not a graded function; graded: {', '.join(n for v in ASSIGNMENTS.values() for n in v)}")


def exercise(name: str) -> Exercise:
    """The :class:`Exercise` for graded function ``name``."""
    if name not in _cache:
        module = importlib.import_module(_MODULES[assignment_of(name)])
        for ex in module.EXERCISES:
            _cache[ex.name] = ex
        if name not in _cache:
            raise KeyError(f"{_MODULES[assignment_of(name)]} defines no exercise for {name!r}")
    return _cache[name]


def exercises_of(slug: str) -> list[Exercise]:
    """The exercises of one assignment, in notebook order."""
    if slug not in ASSIGNMENTS:
        raise KeyError(f"unknown assignment {slug!r}; choose from {', '.join(ASSIGNMENTS)}")
    return [exercise(n) for n in ASSIGNMENTS[slug]]
