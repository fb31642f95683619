"""Exercises of ``01_seq2seq_attention``: score functions, attention pooling, local attention.

Shapes follow the reference (``course_lib.scores``, ``course_lib.pooling``): one query per
batch element, ``query (N, D)``, ``keys (N, S, D)``, scores and weights ``(N, S)``; weight
matrices multiply from the right (``query @ W``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import (
    additive_score,
    attention_pool,
    cosine_score,
    dot_score,
    local_attention_weights,
    masked_softmax,
    multiplicative_score,
    scaled_dot_score,
    softmax,
)
from ..exercise_spec import Exercise
from ..model import Call, Case, Judge, Mistake
from ._common import first_structure_problem, randn, rng, structure_problem, sums_to_one

__all__ = ["EXERCISES"]

#: Nobody writes scaled dot-product attention in chapter 1; the fused kernel does the whole job.
_NO_SDPA = ("torch.nn.functional.scaled_dot_product_attention",)


# --- dot_score ------------------------------------------------------------------------------


def _dot_transposed(query, keys):
    return dot_score(query, keys).T


def _dot_matrix_query(query, keys):
    return query @ keys.transpose(1, 2)


def _dot_keys_query_t(query, keys):
    return keys @ query.T


def _dot_no_unsqueeze(query, keys):
    return (query * keys).sum(-1)


def _dot_sum_over_keys(query, keys):
    return (query.unsqueeze(1) * keys).sum(1)


_DOT_MISTAKES = [
    Mistake(
        "the result is transposed: the scores must have shape (N, S), one row per batch element, not (S, N)",
        _dot_transposed,
    ),
    Mistake(
        "computing query @ keys.transpose(1, 2) with the query still of shape (N, D): broadcasting "
        "scores every query against every batch element's keys, giving shape (N, N, S); unsqueeze the "
        "query to (N, 1, D) first and squeeze the result",
        _dot_matrix_query,
    ),
    Mistake(
        "computing keys @ query.T: every batch element's keys meet every query, giving shape "
        "(N, S, N); each batch element's keys must meet only its own query",
        _dot_keys_query_t,
    ),
    Mistake(
        "multiplying query * keys without unsqueezing the query to (N, 1, D): the query broadcasts "
        "along the key axis, so key s is paired with query s instead of its own batch element's query "
        "(this only runs at all when N == S or N == 1)",
        _dot_no_unsqueeze,
    ),
    Mistake(
        "summing the products over the key axis (dim 1) instead of the feature axis D: the result "
        "has shape (N, D) instead of (N, S)",
        _dot_sum_over_keys,
    ),
]


def _dot_cases() -> list[Case]:
    g = rng(100)
    return [
        Case(
            "fixed small case",
            "one query against three hand-made keys (N=1, S=3, D=2)",
            [Call((torch.tensor([[1.0, 2.0]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 3.0]]])))],
            points=1,
        ),
        Case(
            "random shapes",
            "batches of random queries and keys with S != D, including S = 1",
            [
                Call((randn(g, 2, 3), randn(g, 2, 5, 3))),
                Call((randn(g, 3, 4), randn(g, 3, 1, 4))),
                Call((randn(g, 2, 6), randn(g, 2, 4, 6))),
            ],
            points=2,
        ),
        Case(
            "N == S",
            "as many batch elements as keys (each key meets its own batch element's query)",
            [Call((randn(g, 4, 3), randn(g, 4, 4, 3)))],
            points=2,
        ),
        Case(
            "one batch element",
            "a single query (N=1) against many keys",
            [Call((randn(g, 1, 5), randn(g, 1, 7, 5)))],
            points=1,
        ),
        Case(
            "large values",
            "queries and keys of magnitude 100 (no normalisation of any kind)",
            [Call((randn(g, 2, 4, scale=100.0), randn(g, 2, 3, 4, scale=100.0)))],
            points=1,
        ),
    ]


# --- scaled_dot_score -------------------------------------------------------------------------


def _scaled_none(query, keys):
    return dot_score(query, keys)


def _scaled_by_d(query, keys):
    return dot_score(query, keys) / query.shape[-1]


def _scaled_by_s(query, keys):
    return dot_score(query, keys) / keys.shape[1]


def _scaled_by_sqrt_s(query, keys):
    return dot_score(query, keys) / math.sqrt(keys.shape[1])


def _scaled_times_sqrt_d(query, keys):
    return dot_score(query, keys) * math.sqrt(query.shape[-1])


_SCALED_MISTAKES = [
    Mistake(
        "no scaling: this is the plain dot score; divide by sqrt(D) so the scores do not grow with the width D",
        _scaled_none,
    ),
    Mistake("dividing by D instead of sqrt(D): the scores are too small and the weights too flat", _scaled_by_d),
    Mistake("dividing by the number of keys S instead of sqrt(D), the square root of the vectors' width", _scaled_by_s),
    Mistake(
        "dividing by sqrt(S), the square root of the number of keys, instead of sqrt(D), the square "
        "root of the vectors' width",
        _scaled_by_sqrt_s,
    ),
    Mistake(
        "multiplying by sqrt(D) instead of dividing by it: the scores grow with the width and the "
        "weights become nearly one-hot",
        _scaled_times_sqrt_d,
    ),
]


def _scaled_cases() -> list[Case]:
    g = rng(110)
    return [
        Case(
            "fixed small case",
            "one query against three hand-made keys (N=1, S=3, D=4)",
            [
                Call(
                    (
                        torch.tensor([[1.0, 2.0, 0.0, -1.0]]),
                        torch.tensor([[[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 0.0], [0.0, -1.0, 3.0, 2.0]]]),
                    )
                )
            ],
            points=1,
        ),
        Case(
            "random shapes",
            "batches with S != D, including S = 1",
            [
                Call((randn(g, 2, 9), randn(g, 2, 5, 9))),
                Call((randn(g, 3, 16), randn(g, 3, 2, 16))),
                Call((randn(g, 3, 6), randn(g, 3, 1, 6))),
            ],
            points=2,
        ),
        Case(
            "wide vectors",
            "width D = 64: the scaling keeps the scores of order 1",
            [Call((randn(g, 2, 64), randn(g, 2, 4, 64)))],
            points=2,
        ),
        Case(
            "one batch element",
            "a single query (N=1) against many keys",
            [Call((randn(g, 1, 25), randn(g, 1, 7, 25)))],
            points=1,
        ),
    ]


# --- cosine_score ---------------------------------------------------------------------------


def _cos_unnormalised(query, keys, eps=1e-8):
    return dot_score(query, keys)


def _cos_query_only(query, keys, eps=1e-8):
    return dot_score(query, keys) / query.norm(dim=-1, keepdim=True).clamp_min(eps)


def _cos_keys_only(query, keys, eps=1e-8):
    return dot_score(query, keys) / keys.norm(dim=-1).clamp_min(eps)


def _cos_no_eps(query, keys, eps=1e-8):
    return dot_score(query, keys) / (query.norm(dim=-1, keepdim=True) * keys.norm(dim=-1))


def _cos_keys_normed_over_s(query, keys, eps=1e-8):
    q = query / query.norm(dim=-1, keepdim=True).clamp_min(eps)
    k = keys / keys.norm(dim=1, keepdim=True).clamp_min(eps)
    return dot_score(q, k)


def _cos_fixed_eps(query, keys, eps=1e-8):
    return cosine_score(query, keys, eps=1e-8)


def _cos_eps_added_to_norms(query, keys, eps=1e-8):
    return dot_score(query, keys) / ((query.norm(dim=-1, keepdim=True) + eps) * (keys.norm(dim=-1) + eps))


def _cos_eps_added_to_product(query, keys, eps=1e-8):
    return dot_score(query, keys) / (query.norm(dim=-1, keepdim=True) * keys.norm(dim=-1) + eps)


def _cos_product_clamped(query, keys, eps=1e-8):
    return dot_score(query, keys) / (query.norm(dim=-1, keepdim=True) * keys.norm(dim=-1)).clamp_min(eps)


_COS_MISTAKES = [
    Mistake("not normalising at all: this is the dot score, which grows with the vectors' lengths", _cos_unnormalised),
    Mistake("dividing by the query's norm only: the keys must be normalised too, or long keys win", _cos_query_only),
    Mistake(
        "dividing by the keys' norms only: the query must be normalised too, or the scores leave [-1, 1]",
        _cos_keys_only,
    ),
    Mistake(
        "no eps: a zero query or a zero key gives 0 / 0 = NaN instead of a score of 0; clamp each norm "
        "at eps (norm.clamp_min(eps))",
        _cos_no_eps,
    ),
    Mistake(
        "normalising the keys along the key axis S (dim 1) instead of the feature axis D: each key "
        "must be divided by its own length",
        _cos_keys_normed_over_s,
    ),
    Mistake("ignoring the eps argument: use the eps that is passed in, not a fixed constant", _cos_fixed_eps),
    Mistake(
        "adding eps to each norm instead of clamping each norm at eps: use max(norm, eps), i.e. norm.clamp_min(eps)",
        _cos_eps_added_to_norms,
    ),
    Mistake(
        "adding eps to the product of the norms instead of clamping each norm at eps: use "
        "max(norm, eps) for the query and for each key",
        _cos_eps_added_to_product,
    ),
    Mistake(
        "clamping the product of the norms at eps instead of each norm: two short vectors then have a "
        "product below eps and their score shrinks. Clamp each norm separately, max(||q||, eps) * "
        "max(||k||, eps), as F.cosine_similarity does",
        _cos_product_clamped,
    ),
]


def _within_minus_one_one(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    for a, e in zip(actual, expected, strict=False):
        msg = structure_problem(a, e)
        if msg:
            return msg
        if bool((a.abs() > 1 + 1e-5).any()):
            return f"some scores lie outside [-1, 1] (largest magnitude {float(a.abs().max()):.4g})"
    return None


def _invariant_to_rescaling(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    msg = first_structure_problem(actual, expected)
    if msg:
        return msg
    for i in range(0, len(actual), 2):
        if not bool(torch.allclose(actual[i], actual[i + 1], atol=1e-4, rtol=1e-4)):
            worst = float((actual[i] - actual[i + 1]).abs().max())
            return (
                "the scores change when the keys (or the query) are multiplied by positive numbers "
                f"(by up to {worst:.3g}); a cosine compares directions only"
            )
    return None


def _cosine_cases() -> list[Case]:
    g = rng(120)
    q_fixed = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    k_fixed = torch.tensor(
        [
            [
                [2.0, 2.0, 0.0, 0.0],
                [0.5, 0.5, 0.0, 0.0],
                [1.0, 0.0, 1.0, 0.0],
                [0.0, 0.0, 1.0, 1.0],
                [-1.0, -1.0, 0.0, 0.0],
            ]
        ]
    )
    k_zero = randn(g, 2, 4, 3)
    k_zero[0, 2] = 0.0
    k_zero[1, 0] = 0.0
    q_zero = randn(g, 3, 5)
    q_zero[1] = 0.0
    q_inv, k_inv = randn(g, 2, 4), randn(g, 2, 5, 4)
    key_scale = torch.rand(2, 5, 1, generator=g) * 10 + 0.1
    q_inv2, k_inv2 = randn(g, 3, 6), randn(g, 3, 2, 6)
    q_scale = torch.rand(3, 1, generator=g) * 10 + 0.1
    q_eps = torch.tensor([[0.3, 0.4, 0.0], [2.0, -1.0, 0.5]])  # norms 0.5 and about 2.3
    k_eps = torch.tensor(
        [[[0.1, 0.0, 0.0], [0.0, 0.6, 0.0], [3.0, 0.0, 4.0]], [[0.0, 0.0, 0.0], [-0.2, 0.1, 0.2], [1.0, 1.0, 1.0]]]
    )
    return [
        Case(
            "fixed small case",
            "one query against keys that are long, short, at 60 degrees, orthogonal and opposite",
            [Call((q_fixed, k_fixed))],
            points=1,
        ),
        Case(
            "random shapes",
            "batches of random vectors with S != D, including S = 1",
            [
                Call((randn(g, 2, 3, scale=3.0), randn(g, 2, 5, 3, scale=3.0))),
                Call((randn(g, 3, 4), randn(g, 3, 1, 4))),
                Call((randn(g, 1, 6), randn(g, 1, 4, 6))),
            ],
            points=2,
        ),
        Case(
            "zero vectors",
            "a zero key or a zero query scores 0, not NaN",
            [Call((randn(g, 2, 3), k_zero)), Call((q_zero, randn(g, 3, 2, 5)))],
            points=2,
        ),
        Case(
            "bounded",
            "scores of long random vectors lie in [-1, 1]",
            [Call((randn(g, 4, 8, scale=50.0), randn(g, 4, 6, 8, scale=50.0)))],
            points=1,
            judge=_within_minus_one_one,
        ),
        Case(
            "scale invariance",
            "multiplying keys or queries by positive numbers leaves the scores unchanged",
            [
                Call((q_inv, k_inv)),
                Call((q_inv, k_inv * key_scale)),
                Call((q_inv2, k_inv2)),
                Call((q_inv2 * q_scale, k_inv2)),
            ],
            points=1,
            judge=_invariant_to_rescaling,
        ),
        Case(
            "eps argument",
            "norms smaller than the given eps are clamped to eps, each norm separately",
            [Call((q_eps, k_eps), {"eps": 1.0})],
            points=1,
        ),
    ]


# --- multiplicative_score -------------------------------------------------------------------


def _mult_w_transposed(query, keys, W):
    return dot_score(query @ W.T, keys)


def _mult_no_w(query, keys, W):
    return dot_score(query, keys)


def _mult_matrix_query(query, keys, W):
    return (query @ W) @ keys.transpose(1, 2)


def _mult_transposed(query, keys, W):
    return multiplicative_score(query, keys, W).T


_MULT_MISTAKES = [
    Mistake(
        "using W transposed (query @ W.T, or keys @ W): that computes q W^T k^T, which differs for "
        "a non-symmetric W (and fails when D_q != D_k); project the query with query @ W, "
        "or the keys with keys @ W.T",
        _mult_w_transposed,
    ),
    Mistake("ignoring W: this is the dot score", _mult_no_w),
    Mistake(
        "computing (query @ W) @ keys.transpose(1, 2) with the projected query of shape (N, D_k): "
        "broadcasting gives shape (N, N, S); unsqueeze it to (N, 1, D_k) first and squeeze the result",
        _mult_matrix_query,
    ),
    Mistake("the result is transposed: the scores must have shape (N, S), not (S, N)", _mult_transposed),
]


def _mult_cases() -> list[Case]:
    g = rng(130)
    return [
        Case(
            "fixed small case",
            "a hand-made non-symmetric W with D_q = D_k = 2",
            [
                Call(
                    (
                        torch.tensor([[1.0, -1.0]]),
                        torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]]]),
                        torch.tensor([[1.0, 2.0], [0.0, 1.0]]),
                    )
                )
            ],
            points=1,
        ),
        Case(
            "different widths",
            "queries and keys of different widths (D_q != D_k), including S = 1",
            [
                Call((randn(g, 2, 3), randn(g, 2, 5, 4), randn(g, 3, 4))),
                Call((randn(g, 3, 6), randn(g, 3, 1, 2), randn(g, 6, 2))),
            ],
            points=2,
        ),
        Case(
            "square W",
            "D_q = D_k with a random, non-symmetric W",
            [Call((randn(g, 3, 5), randn(g, 3, 4, 5), randn(g, 5, 5)))],
            points=2,
        ),
        Case(
            "identity W",
            "with W the identity the score is the dot score",
            [Call((randn(g, 2, 4), randn(g, 2, 3, 4), torch.eye(4)))],
            points=1,
        ),
        Case(
            "one batch element",
            "a single query (N=1) against many keys",
            [Call((randn(g, 1, 3), randn(g, 1, 6, 5), randn(g, 3, 5)))],
            points=1,
        ),
    ]


# --- additive_score -------------------------------------------------------------------------


def _add_no_tanh(query, keys, W_q, W_k, v):
    return ((query @ W_q).unsqueeze(1) + keys @ W_k) @ v


def _add_v_before_tanh(query, keys, W_q, W_k, v):
    return torch.tanh(((query @ W_q).unsqueeze(1) + keys @ W_k) @ v)


def _add_swapped(query, keys, W_q, W_k, v):
    return torch.tanh((query @ W_k).unsqueeze(1) + keys @ W_q) @ v


def _add_tanh_separately(query, keys, W_q, W_k, v):
    return (torch.tanh(query @ W_q).unsqueeze(1) + torch.tanh(keys @ W_k)) @ v


def _add_no_unsqueeze(query, keys, W_q, W_k, v):
    return torch.tanh(query @ W_q + keys @ W_k) @ v


_ADD_MISTAKES = [
    Mistake(
        "missing tanh: without it the score is linear, v . (q W_q) + v . (k W_k), and the query "
        "adds the same amount to every key's score, so it cannot change the weights",
        _add_no_tanh,
    ),
    Mistake(
        "applying v before tanh: the score is v . tanh(q W_q + k W_k), the tanh acts on the A hidden "
        "units, then v sums them",
        _add_v_before_tanh,
    ),
    Mistake("swapping W_q and W_k: the query is projected with W_q and the keys with W_k", _add_swapped),
    Mistake(
        "applying tanh to the two projections separately: the tanh acts on their sum, tanh(q W_q + k W_k)",
        _add_tanh_separately,
    ),
    Mistake(
        "adding query @ W_q of shape (N, A) to keys @ W_k of shape (N, S, A) without unsqueezing: "
        "the query broadcasts along the key axis and key s meets query s; unsqueeze it to (N, 1, A)",
        _add_no_unsqueeze,
    ),
]


def _bounded_by_v(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    for c, a, e in zip(calls, actual, expected, strict=False):
        msg = structure_problem(a, e)
        if msg:
            return msg
        bound = float(c.args[4].abs().sum())
        if bool((a.abs() > bound + 1e-4).any()):
            return "some scores exceed the sum of |v| in magnitude; with tanh in [-1, 1] they cannot"
    return None


def _additive_cases() -> list[Case]:
    g = rng(140)

    def args(N, S, Dq, Dk, A, scale=1.0):
        return (
            randn(g, N, Dq, scale=scale),
            randn(g, N, S, Dk, scale=scale),
            randn(g, Dq, A) / math.sqrt(Dq),
            randn(g, Dk, A) / math.sqrt(Dk),
            randn(g, A),
        )

    return [
        Case(
            "fixed small case",
            "hand-made parameters (N=1, S=2, D_q=2, D_k=3, A=2)",
            [
                Call(
                    (
                        torch.tensor([[1.0, -1.0]]),
                        torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, -1.0]]]),
                        torch.tensor([[1.0, 0.0], [0.5, 1.0]]),
                        torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.5, 0.5]]),
                        torch.tensor([1.0, -2.0]),
                    )
                )
            ],
            points=1,
        ),
        Case(
            "different widths",
            "D_q != D_k and random parameters, including S = 1",
            [Call(args(2, 5, 3, 4, 6)), Call(args(3, 1, 2, 5, 3)), Call(args(1, 4, 6, 3, 8))],
            points=2,
        ),
        Case(
            "equal widths",
            "D_q = D_k and N = S (each projection goes with its own input)",
            [Call(args(3, 3, 4, 4, 5)), Call(args(4, 4, 3, 3, 6))],
            points=2,
        ),
        Case(
            "large inputs", "inputs of magnitude 10: tanh saturates", [Call(args(2, 6, 3, 5, 4, scale=10.0))], points=1
        ),
        Case(
            "bounded",
            "every score lies within the sum of |v| in magnitude",
            [Call(args(3, 5, 4, 2, 7, scale=20.0))],
            points=1,
            judge=_bounded_by_v,
        ),
    ]


# --- attention_pool -------------------------------------------------------------------------


def _pool(weights, values):
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def _pool_dim0(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _pool(softmax(scores, dim=0), values)


def _pool_ignore_mask(scores, values, mask=None):
    return _pool(softmax(scores, dim=-1), values)


def _pool_mask_after(scores, values, mask=None):
    w = softmax(scores, dim=-1)
    if mask is not None:
        w = w * mask
    return _pool(w, values)


def _pool_inverted(scores, values, mask=None):
    return _pool(masked_softmax(scores, None if mask is None else ~mask), values)


def _pool_nan_rows(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _pool(torch.softmax(scores, dim=-1), values)


def _pool_big_negative(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return _pool(torch.softmax(scores, dim=-1), values)


def _pool_unstable(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores)
    return _pool(e / e.sum(dim=-1, keepdim=True), values)


def _pool_swapped(scores, values, mask=None):
    c, w = attention_pool(scores, values, mask)
    return w, c


def _pool_matrix_weights(scores, values, mask=None):
    w = masked_softmax(scores, mask)
    return w @ values, w


def _pool_sum_over_features(scores, values, mask=None):
    w = masked_softmax(scores, mask)
    return (w.unsqueeze(-1) * values).sum(-1), w


_POOL_MISTAKES = [
    Mistake(
        "softmax over the batch axis (dim 0) instead of the key axis (dim -1): each batch element's "
        "weights must sum to 1 over its S keys",
        _pool_dim0,
    ),
    Mistake("ignoring the mask: masked (padding) keys must get weight 0", _pool_ignore_mask),
    Mistake(
        "applying the mask after the softmax: zeroing weights afterwards leaves rows that no longer sum "
        "to 1; set masked scores to -inf before the softmax",
        _pool_mask_after,
    ),
    Mistake("inverted mask: True means 'may attend', so the keys where the mask is False get weight 0", _pool_inverted),
    Mistake(
        "a fully masked row gives NaN: the softmax of a row of all -inf is 0 / 0; give such rows zero "
        "weights and a zero context",
        _pool_nan_rows,
    ),
    Mistake(
        "filling masked scores with a large finite number such as -1e9: a fully masked row then gets "
        "uniform weights (and the mean of the values as context) instead of zero weights and a zero "
        "context",
        _pool_big_negative,
    ),
    Mistake(
        "softmax without subtracting the row maximum first: large scores overflow exp to inf and the "
        "weights become NaN (unstable softmax)",
        _pool_unstable,
    ),
    Mistake("returning (weights, context) instead of (context, weights)", _pool_swapped),
    Mistake(
        "computing weights @ values with the weights of shape (N, S): broadcasting gives shape "
        "(N, N, D_v); unsqueeze the weights to (N, 1, S) first and squeeze the result",
        _pool_matrix_weights,
    ),
    Mistake(
        "summing weights * values over the feature axis instead of the key axis: the context must have shape (N, D_v)",
        _pool_sum_over_features,
    ),
]


def _permutation_equivariant(perm: torch.Tensor) -> Judge:
    """A judge: call 2 is call 1 with the keys reordered by ``perm``; context equal, weights permuted."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        msg = first_structure_problem(actual, expected, ("context", "weights"))
        if msg:
            return msg
        (c0, w0), (c1, w1) = actual
        if not bool(torch.allclose(c0, c1, atol=1e-4, rtol=1e-4)):
            return (
                "the context changes when the keys are reordered (scores, values and mask permuted "
                "together); a weighted average does not depend on the order"
            )
        if not bool(torch.allclose(w0[:, perm], w1, atol=1e-4, rtol=1e-4)):
            return (
                "the weights are not permuted with the keys (scores, values and mask permuted "
                "together): each weight must follow its own score"
            )
        return None

    return judge


_pool_sums_to_one = sums_to_one(index=1, names=("context", "weights"))


def _pool_cases() -> list[Case]:
    g = rng(150)
    mask_pad = torch.tensor(
        [
            [True, True, True, False, False, False],
            [True, False, True, True, False, True],
            [True, True, True, True, True, False],
        ]
    )
    mask_full = torch.tensor([[True, True, False, True], [False, False, False, False], [True, False, True, True]])
    mask_sum = torch.tensor(
        [
            [True, False, True, True, True],
            [False, True, True, False, True],
            [True, True, False, False, False],
            [True, True, True, True, True],
        ]
    )
    s_perm, v_perm = randn(g, 3, 6, scale=2.0), randn(g, 3, 6, 4)
    m_perm = torch.tensor(
        [
            [True, True, False, True, True, False],
            [True, True, True, True, True, True],
            [False, True, True, False, True, True],
        ]
    )
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    return [
        Case(
            "fixed small case",
            "hand-made scores and values, no mask",
            [
                Call(
                    (
                        torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),
                        torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[2.0, 4.0], [0.0, 1.0], [1.0, 1.0]]]),
                    )
                )
            ],
            points=1,
        ),
        Case(
            "random shapes",
            "random scores and values with S != D_v, including S = 1 and N = 1, no mask",
            [
                Call((randn(g, 3, 5, scale=2.0), randn(g, 3, 5, 4))),
                Call((randn(g, 2, 1), randn(g, 2, 1, 3))),
                Call((randn(g, 1, 6), randn(g, 1, 6, 2))),
            ],
            points=2,
        ),
        Case(
            "padding mask",
            "keys where the mask is False get weight 0, the rest sum to 1",
            [Call((randn(g, 3, 6, scale=2.0), randn(g, 3, 6, 4), mask_pad))],
            points=2,
        ),
        Case(
            "fully masked row",
            "a row with no key to attend to gets zero weights and a zero context, not NaN",
            [Call((randn(g, 3, 4), randn(g, 3, 4, 5), mask_full))],
            points=2,
        ),
        Case(
            "large scores",
            "scores of magnitude 1e4 give finite, correct weights (stable softmax)",
            [Call((torch.tensor([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 + 2.0, -1e4 + 1.0]]), randn(g, 2, 3, 2)))],
            points=1,
        ),
        Case(
            "broadcast mask",
            "a mask of shape (1, S) shared by every batch element",
            [Call((randn(g, 4, 5), randn(g, 4, 5, 3), torch.tensor([[True, False, True, True, False]])))],
            points=1,
        ),
        Case(
            "weights sum to one",
            "with a mask, the weights are non-negative and sum to 1 over the keys",
            [Call((randn(g, 4, 5, scale=3.0), randn(g, 4, 5, 2), mask_sum))],
            points=1,
            judge=_pool_sums_to_one,
        ),
        Case(
            "permutation equivariance",
            "reordering the keys (scores, values and mask together) permutes the "
            "weights the same way and leaves the context unchanged",
            [Call((s_perm, v_perm, m_perm)), Call((s_perm[:, perm], v_perm[:, perm], m_perm[:, perm]))],
            points=1,
            judge=_permutation_equivariant(perm),
        ),
    ]


# --- local_attention_weights ----------------------------------------------------------------


def _local(scores, center, half_window, sigma=None, in_window=None, exponent_scale=2.0, first=0):
    positions = torch.arange(first, first + scores.shape[-1], dtype=scores.dtype)
    distance = positions - center.to(scores.dtype).unsqueeze(-1)
    if in_window is None:
        in_window = distance.abs() <= half_window
    sigma = half_window / 2 if sigma is None else sigma
    gaussian = torch.exp(-(distance**2) / (exponent_scale * sigma**2))
    return masked_softmax(scores, in_window) * gaussian, gaussian, in_window, distance


def _local_sigma_d(scores, center, half_window):
    return _local(scores, center, half_window, sigma=half_window)[0]


def _local_no_two(scores, center, half_window):
    return _local(scores, center, half_window, exponent_scale=1.0)[0]


def _local_no_window(scores, center, half_window):
    full = torch.ones_like(scores, dtype=torch.bool)
    return _local(scores, center, half_window, in_window=full)[0]


def _local_strict_window(scores, center, half_window):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    inside = (positions - center.unsqueeze(-1)).abs() < half_window
    return _local(scores, center, half_window, in_window=inside)[0]


def _local_wide_window(scores, center, half_window):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    inside = (positions - center.unsqueeze(-1)).abs() <= half_window + 1
    return _local(scores, center, half_window, in_window=inside)[0]


def _local_window_after_softmax(scores, center, half_window):
    _, gaussian, in_window, _ = _local(scores, center, half_window)
    return softmax(scores, dim=-1) * in_window * gaussian


def _local_renormalised(scores, center, half_window):
    w = local_attention_weights(scores, center, half_window)
    return w / w.sum(dim=-1, keepdim=True)


def _local_gaussian_before(scores, center, half_window):
    _, gaussian, in_window, _ = _local(scores, center, half_window)
    return masked_softmax(scores * gaussian, in_window)


def _local_rounded_center(scores, center, half_window):
    return local_attention_weights(scores, torch.round(center), half_window)


def _local_softmax_only(scores, center, half_window):
    _, _, in_window, _ = _local(scores, center, half_window)
    return masked_softmax(scores, in_window)


def _local_from_one(scores, center, half_window):
    return _local(scores, center, half_window, first=1)[0]


_LOCAL_MISTAKES = [
    Mistake("sigma = D (the half window) instead of Luong's sigma = D / 2: the Gaussian is too wide", _local_sigma_d),
    Mistake(
        "Gaussian exp(-(s - p)^2 / sigma^2) without the factor 2: it should be exp(-(s - p)^2 / (2 sigma^2))",
        _local_no_two,
    ),
    Mistake(
        "no window: the softmax must run only over the positions with |s - p| <= D, and positions outside get weight 0",
        _local_no_window,
    ),
    Mistake("window off by one: the edges |s - p| = D belong to the window (use <=, not <)", _local_strict_window),
    Mistake("window off by one: it holds the positions with |s - p| <= D, not D + 1", _local_wide_window),
    Mistake(
        "softmax over all positions, then zeroing those outside the window: the softmax must run over "
        "the window only, so the window's weights (before the Gaussian) sum to 1",
        _local_window_after_softmax,
    ),
    Mistake(
        "renormalising after the Gaussian (or adding log-Gaussian terms to the scores before the "
        "softmax): Luong's local weights are softmax-inside-the-window times the Gaussian, not "
        "renormalised, so a row sums to less than 1",
        _local_renormalised,
    ),
    Mistake(
        "multiplying the scores by the Gaussian before the softmax: the Gaussian multiplies the softmax's output",
        _local_gaussian_before,
    ),
    Mistake(
        "rounding the centre p to an integer: p is a real number; the window and the Gaussian use it as it is",
        _local_rounded_center,
    ),
    Mistake(
        "forgetting the Gaussian: the softmax inside the window is multiplied by exp(-(s - p)^2 / (2 sigma^2))",
        _local_softmax_only,
    ),
    Mistake(
        "counting the positions from 1 (torch.arange(1, S + 1)): the source positions are 0 .. S - 1, the "
        "indices the centre p refers to; counted from 1, the window and the Gaussian sit one position too "
        "early. Use torch.arange(S)",
        _local_from_one,
    ),
]


def _local_shape(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    for c, a, e in zip(calls, actual, expected, strict=False):
        msg = structure_problem(a, e)
        if msg:
            return msg
        scores, center, half_window = c.args
        positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
        outside = (positions - center.unsqueeze(-1)).abs() > half_window
        if bool((a < -1e-6).any()):
            return "some weights are negative"
        if bool((a[outside].abs() > 1e-6).any()):
            return "positions outside the window [p - D, p + D] get non-zero weight"
        if bool((a.sum(-1) > 1 + 1e-5).any()):
            return "a row of weights sums to more than 1 (softmax inside the window times a Gaussian <= 1)"
    return None


def _local_cases() -> list[Case]:
    g = rng(160)
    pad = randn(g, 2, 9)
    pad[0, 4] = float("-inf")
    pad[1, 6:] = float("-inf")
    return [
        Case(
            "fixed small case",
            "an integer centre well inside the sequence (S=8, p=3, D=2)",
            [Call((torch.tensor([[0.5, -1.0, 2.0, 0.0, 1.0, 3.0, -0.5, 1.5]]), torch.tensor([3.0]), 2))],
            points=1,
        ),
        Case(
            "fractional centres",
            "real-valued centres p, different in each batch element",
            [Call((randn(g, 3, 10), torch.tensor([2.3, 5.5, 8.9]), 3))],
            points=2,
        ),
        Case(
            "edges of the sequence",
            "integer centres at the first and last position: the window is "
            "cut off and its edges |s - p| = D are included",
            [Call((randn(g, 2, 7), torch.tensor([0.0, 6.0]), 2)), Call((randn(g, 2, 6), torch.tensor([1.0, 4.0]), 1))],
            points=2,
        ),
        Case(
            "random",
            "random scores and centres, several half windows, including S = 1",
            [
                Call((randn(g, 4, 16, scale=2.0), torch.rand(4, generator=g) * 16, 4)),
                Call((randn(g, 3, 12), torch.rand(3, generator=g) * 12, 1)),
                Call((randn(g, 2, 1), torch.tensor([0.0, 0.6]), 1)),
            ],
            points=2,
        ),
        Case(
            "padding scores",
            "scores of -inf (padding) get weight 0",
            [Call((pad, torch.tensor([4.5, 5.2]), 2))],
            points=1,
        ),
        Case(
            "window property",
            "weights are non-negative, zero outside the window, and a row sums to at most 1",
            [Call((randn(g, 3, 12, scale=3.0), torch.tensor([1.7, 6.0, 10.2]), 3))],
            points=1,
            judge=_local_shape,
        ),
    ]


# --- exercises ---------------------------------------------------------------------------------------

EXERCISES = [
    Exercise(name="dot_score", reference=dot_score, make_cases=_dot_cases, mistakes=_DOT_MISTAKES, forbidden=_NO_SDPA),
    Exercise(
        name="scaled_dot_score",
        reference=scaled_dot_score,
        make_cases=_scaled_cases,
        mistakes=_SCALED_MISTAKES,
        forbidden=_NO_SDPA,
    ),
    Exercise(
        name="cosine_score",
        reference=cosine_score,
        make_cases=_cosine_cases,
        mistakes=_COS_MISTAKES,
        forbidden=(
            *_NO_SDPA,
            "torch.nn.functional.cosine_similarity",
            "torch.cosine_similarity",
            "torch.nn.CosineSimilarity",
        ),
    ),
    Exercise(
        name="multiplicative_score",
        reference=multiplicative_score,
        make_cases=_mult_cases,
        mistakes=_MULT_MISTAKES,
        forbidden=(*_NO_SDPA, "torch.nn.functional.bilinear", "torch.bilinear", "torch.nn.Bilinear"),
    ),
    Exercise(
        name="additive_score",
        reference=additive_score,
        make_cases=_additive_cases,
        mistakes=_ADD_MISTAKES,
        forbidden=_NO_SDPA,
    ),
    Exercise(
        name="attention_pool",
        reference=attention_pool,
        make_cases=_pool_cases,
        mistakes=_POOL_MISTAKES,
        forbidden=_NO_SDPA,
        output_names=("context", "weights"),
    ),
    Exercise(
        name="local_attention_weights",
        reference=local_attention_weights,
        make_cases=_local_cases,
        mistakes=_LOCAL_MISTAKES,
        forbidden=_NO_SDPA,
        structure_args=(1, "center"),
    ),
]
