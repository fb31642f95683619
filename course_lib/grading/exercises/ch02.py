"""Exercises of ``02_self_attention``: softmax, scaled dot-product attention, self-attention."""

from __future__ import annotations

import torch

from ... import scaled_dot_product_attention, self_attention, softmax
from ..core import Call, Case, Exercise, Mistake
from ._common import randn, rng, sums_to_one

__all__ = ["EXERCISES"]


# --- softmax --------------------------------------------------------------------------------


def _softmax_no_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_dim0(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return softmax(x, dim=0)


def _softmax_last(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return softmax(x, dim=-1)


def _softmax_no_norm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.exp(x - x.amax(dim=dim, keepdim=True))


def _softmax_cases() -> list[Case]:
    g = rng(200)
    return [
        Case("fixed small case", "a 2 x 3 input along the last dim",
             [Call((torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),))], points=1),
        Case("random shapes", "3-d and 4-d inputs, softmax along the last dim",
             [Call((randn(g, 2, 3, 5),)), Call((randn(g, 2, 2, 4, 7, scale=3.0),))], points=1),
        Case("other dims", "softmax along dim=0 and dim=1 (the dim argument is used)",
             [Call((randn(g, 4, 3, 5),), {"dim": 0}), Call((randn(g, 4, 3, 5),), {"dim": 1})], points=2),
        Case("sums to one", "outputs are non-negative and sum to 1 along the dim",
             [Call((randn(g, 6, 9, scale=5.0),))], points=1, judge=sums_to_one()),
        Case("large inputs", "inputs of magnitude 1e4 give finite, correct weights (stability)",
             [Call((torch.tensor([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 + 2.0, -1e4 + 1.0]]),))], points=2),
        Case("single element", "a dim of size 1 gives weight 1",
             [Call((randn(g, 3, 1),))], points=1),
    ]


# --- exercises ---------------------------------------------------------------------------------------

EXERCISES = [
    Exercise(
        name="softmax",
        reference=softmax,
        make_cases=_softmax_cases,
        mistakes=[
            Mistake("exponentiating without subtracting the max first: large scores overflow to inf "
                    "and the weights become NaN (unstable softmax)", _softmax_no_max),
            Mistake("normalising over dim 0 instead of the `dim` argument", _softmax_dim0),
            Mistake("always normalising over the last dim, ignoring the `dim` argument", _softmax_last),
            Mistake("forgetting to divide by the sum: the weights do not sum to 1", _softmax_no_norm),
        ],
        forbidden=(
            "torch.softmax",
            "torch.nn.functional.softmax",
            "torch.special.softmax",
            "torch.nn.Softmax",
            "torch.log_softmax",
            "torch.nn.functional.log_softmax",
            "method:softmax",
            "method:log_softmax",
        ),
    ),
]
