"""The graded API, in one table: each assignment and the functions it grades.

Everything else derives from :data:`TABLE`: ``course_lib.GRADED_FUNCTIONS``, the grading
registry (:mod:`course_lib.grading.registry`), the autograder's columns and the tests. An
assignment is one exercise notebook, named as in ``exercises/`` and ``solutions/``; its
exercises (cases, named mistakes, feedback) are the list ``EXERCISES`` of the module
``course_lib.grading.rubrics.<module>``, one :class:`~course_lib.grading.Exercise` per
function, in the same order.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Assignment", "TABLE", "ASSIGNMENTS", "GRADED_FUNCTIONS"]


class Assignment(NamedTuple):
    """One exercise notebook and what it grades."""

    slug: str  #: the notebook's file name without ``.ipynb``, e.g. ``02_self_attention``
    module: str  #: the module under ``course_lib.grading.rubrics`` that defines its exercises
    functions: tuple[str, ...]  #: the graded functions, in notebook order


TABLE: tuple[Assignment, ...] = (
    Assignment(
        "01_seq2seq_attention",
        "ch01",
        (
            "dot_score",
            "scaled_dot_score",
            "cosine_score",
            "multiplicative_score",
            "additive_score",
            "attention_pool",
            "local_attention_weights",
        ),
    ),
    Assignment("02_self_attention", "ch02", ("softmax", "scaled_dot_product_attention", "self_attention")),
    Assignment(
        "03_multi_head_attention",
        "ch03",
        ("split_heads", "merge_heads", "multi_head_attention", "multi_head_attention_sum_form"),
    ),
    Assignment("04_positional_encoding", "ch04", ("sinusoidal_positional_encoding", "relative_position_matrix")),
    Assignment("05_layer_norm", "ch05", ("layer_norm", "add_and_norm")),
    Assignment(
        "06_transformer",
        "ch06",
        ("padding_mask", "causal_mask", "position_wise_feed_forward", "label_smoothing_loss"),
    ),
    Assignment("07_efficient_attention", "ch07", ("tiled_attention", "sliding_window_mask", "cached_attention_step")),
)

#: Assignment slug -> its graded functions, in notebook order.
ASSIGNMENTS: dict[str, tuple[str, ...]] = {a.slug: a.functions for a in TABLE}

#: Every function students implement, in course order.
GRADED_FUNCTIONS: tuple[str, ...] = tuple(name for a in TABLE for name in a.functions)
