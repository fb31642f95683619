"""Exercises of ``03_multi_head_attention``: split_heads, merge_heads, multi_head_attention
and its sum-over-heads form.

Shapes follow course_lib: inputs ``(N, L, E)`` / ``(N, S, E)``, heads ``(N, H, L, D)`` with
``D = E / H``, weight matrices ``(E, E)`` used as ``x @ W``, masks boolean (``True`` = may
attend) broadcastable to ``(N, H, L, S)``, and per-head weights ``(N, H, L, S)``.

The classic mistakes are written as variants of one small implementation
(:func:`_mha_variant`), so that each differs from the reference in exactly one step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import merge_heads, multi_head_attention, multi_head_attention_sum_form, split_heads
from ..compare import compare
from ..exercise_spec import Exercise
from ..model import Call, Case, Judge, Mistake
from ._common import WHOLE_ATTENTION, rand_mask, randn, rng

__all__ = ["EXERCISES"]


# --- split_heads ------------------------------------------------------------------------------


def _split_bare_view(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    N, L, E = x.shape
    return x.reshape(N, num_heads, L, E // num_heads)


def _split_no_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    N, L, E = x.shape
    return x.reshape(N, L, num_heads, E // num_heads)


def _split_head_major(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    N, L, E = x.shape
    return x.reshape(N, L, E // num_heads, num_heads).permute(0, 3, 1, 2)


def _split_h_d_swapped(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    N, L, E = x.shape
    return x.reshape(N, L, E // num_heads, num_heads).transpose(1, 2)


def _split_wrong_transpose(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    N, L, E = x.shape
    return x.reshape(N, L, num_heads, E // num_heads).transpose(2, 3)


_SPLIT_BARE_VIEW = (
    "reshaping (or viewing) straight to (N, H, L, D) without the transpose: each head gets a slice "
    "of the flat token-by-token memory, so tokens are scrambled across heads and positions; "
    "reshape to (N, L, H, D) and then transpose(1, 2)"
)
_SPLIT_HEAD_MAJOR = (
    "cutting each token's features as (D, H) instead of (H, D): head h gets every H-th feature "
    "(columns h, h+H, h+2H, ...) instead of the consecutive block hD ... (h+1)D - 1"
)


def _split_cases() -> list[Case]:
    g = rng(300)
    return [
        Case(
            "fixed small case",
            "a 1 x 3 x 4 input split into 2 heads (head h gets columns 2h, 2h+1)",
            [Call((torch.arange(12.0).reshape(1, 3, 4), 2))],
            points=2,
        ),
        Case(
            "random shapes",
            "several batch sizes, lengths and head counts (H != L, D != H)",
            [Call((randn(g, 2, 5, 12), 3)), Call((randn(g, 3, 4, 16), 2)), Call((randn(g, 1, 7, 30), 5))],
            points=2,
        ),
        Case("one head", "H = 1 gives the input with a head axis of size 1", [Call((randn(g, 2, 5, 6), 1))], points=1),
        Case("width-1 heads", "H = E gives heads of width D = 1", [Call((randn(g, 2, 3, 5), 5))], points=1),
        Case("one token", "a sequence of length L = 1", [Call((randn(g, 2, 1, 12), 4))], points=1),
        Case(
            "integer and bool inputs",
            "token ids (int64) and a boolean tensor are split like floats, keeping their dtype (any dtype)",
            [
                Call((torch.randint(-50, 50, (2, 3, 6), generator=g), 3)),
                Call((rand_mask(g, 2, 4, 8, p=0.5, keep_first=False), 2)),
            ],
            points=1,
        ),
    ]


# --- merge_heads ------------------------------------------------------------------------------


def _merge_no_transpose(x: torch.Tensor) -> torch.Tensor:
    N, H, L, D = x.shape
    return x.reshape(N, L, H * D)


def _merge_interleaved(x: torch.Tensor) -> torch.Tensor:
    N, H, L, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(N, L, H * D)


def _merge_wrong_axes(x: torch.Tensor) -> torch.Tensor:
    N, H, L, D = x.shape
    return x.transpose(2, 3).reshape(N, L, H * D)


def _merge_mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean(dim=1)


def _merge_sum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=1)


def _merge_cases() -> list[Case]:
    g = rng(310)
    x = randn(g, 2, 6, 12)
    return [
        Case(
            "fixed small case",
            "2 heads of a 3-token input merged back into 1 x 3 x 4",
            [Call((split_heads(torch.arange(12.0).reshape(1, 3, 4), 2).contiguous(),))],
            points=2,
        ),
        Case(
            "random shapes",
            "several batch sizes, head counts, lengths and widths (H != L, D != H)",
            [Call((randn(g, 2, 3, 5, 4),)), Call((randn(g, 3, 2, 4, 7),)), Call((randn(g, 1, 4, 6, 3),))],
            points=2,
        ),
        Case(
            "undoes split_heads",
            "merging the heads of an input split into 3 heads gives the input back",
            [Call((split_heads(x, 3).contiguous(),))],
            points=1,
        ),
        Case("one head", "H = 1 only removes the head axis", [Call((randn(g, 2, 1, 5, 6),))], points=1),
        Case("one token", "a sequence of length L = 1", [Call((randn(g, 2, 4, 1, 3),))], points=1),
    ]


# --- multi-head attention: the reference's steps, each replaceable by a classic mistake ------------


def _split(x: torch.Tensor, H: int, how: str) -> torch.Tensor:
    return {"ok": split_heads, "bare_view": _split_bare_view, "head_major": _split_head_major}[how](x, H)


def _merge(x: torch.Tensor, how: str) -> torch.Tensor:
    N, H, L, D = x.shape
    if how == "ok":
        return merge_heads(x)
    if how == "bare":
        return x.reshape(N, L, H * D)
    if how == "head_major":  # the inverse of _split_head_major
        return x.permute(0, 2, 3, 1).reshape(N, L, H * D)
    raise ValueError(how)


def _merge_annotated(x: torch.Tensor, N: int, E: int) -> torch.Tensor:
    """The Annotated Transformer's x.transpose(1, 2).contiguous().view(nbatches, -1, h * d_k): the
    merge for heads (N, H, L, D), and what it makes of the 5-d heads of a mask given a head axis."""
    return x.transpose(1, 2).contiguous().view(N, -1, E)


def _weights(scores: torch.Tensor, mask: torch.Tensor | None, how: str, dim: int = -1) -> torch.Tensor:
    """Softmax of the scores with the mask applied as ``how`` says."""
    if how == "after":  # softmax first, then zero the masked weights (no renormalisation)
        w = torch.softmax(scores, dim=dim)
        return w if mask is None else w * mask
    if mask is not None:
        if how == "inverted":
            mask = ~mask
        fill = {"big_negative": -1e9, "big_negative_1e4": -1e4, "zero_fill": 0.0}.get(how, float("-inf"))
        scores = scores.masked_fill(~mask, fill)
    if how == "naive_exp":  # no max subtracted: overflows, and 0/0 on fully masked rows
        e = torch.exp(scores)
        return e / e.sum(dim=dim, keepdim=True)
    w = torch.softmax(scores, dim=dim)
    if how in ("nan", "big_negative", "big_negative_1e4", "zero_fill"):
        return w
    return torch.nan_to_num(w, nan=0.0)  # a fully masked row: zero weights


def _mha_variant(
    query,
    key,
    value,
    W_q,
    W_k,
    W_v,
    W_o,
    num_heads,
    mask=None,
    *,
    scale="d",
    mask_how="ok",
    softmax_dim=-1,
    split="ok",
    merge="ok",
    out="concat",
    weights="per_head",
    transpose_w=False,
    kv="ok",
    residual="none",
    unsqueeze_mask=False,
):
    """Multi-head attention with one step done differently; all defaults give the reference."""
    H = num_heads
    E = query.shape[-1]
    D = E // H
    if unsqueeze_mask and mask is not None:  # the Annotated Transformer's "same mask for all heads"
        mask = mask.unsqueeze(1)
    if transpose_w:
        W_q, W_k, W_v, W_o = W_q.T, W_k.T, W_v.T, W_o.T
    if kv == "query":
        key = value = query
    elif kv == "key":
        value = key
    q = _split(query @ W_q, H, split)  # (N, H, L, D)
    k = _split(key @ W_k, H, split)  # (N, H, S, D)
    v = _split(value @ W_v, H, split)  # (N, H, S, D)
    divisor = {"d": math.sqrt(D), "e": math.sqrt(E), "none": 1.0}[scale]
    scores = q @ k.transpose(-2, -1) / divisor  # (N, H, L, S)
    w = _weights(scores, mask, mask_how, softmax_dim)  # (N, H, L, S)
    heads = w @ v  # (N, H, L, D)
    result = _combine_heads(heads, W_o, H, E, query.shape[0], out, merge)
    if residual != "none":  # the sublayer's residual connection (and layer norm) folded in
        result = query + result
        if residual == "add_norm":
            centred = result - result.mean(dim=-1, keepdim=True)
            result = centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + 1e-5)
    if weights == "mean":
        w = w.mean(dim=1)
    return result, w


def _combine_heads(heads, W_o, H, E, N, out, merge):
    """The ``H`` heads' outputs ``heads`` (N, H, L, D) made one (N, L, E): merged and projected
    by ``W_o`` as the reference does (``out="concat"``), or one of the mistakes ``out`` names."""
    D = E // H
    if out == "concat" and merge == "annotated":
        return _merge_annotated(heads, N, E) @ W_o
    elif out == "concat":
        return _merge(heads, merge) @ W_o
    elif out == "no_wo":
        return _merge(heads, merge)
    elif out == "mean_heads":
        return heads.mean(dim=1)
    elif out == "sum_heads":
        return heads.sum(dim=1)
    elif out == "mean_contrib":
        return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(H)) / H
    elif out == "diag_block":
        return torch.cat([heads[:, h] @ W_o[h * D : (h + 1) * D, h * D : (h + 1) * D] for h in range(H)], dim=-1)
    elif out == "concat_contrib":
        return torch.cat([heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(H)], dim=-1)
    elif out == "wo_columns":
        return sum(heads[:, h] @ W_o[:, h * D : (h + 1) * D].T for h in range(H))
    else:
        raise ValueError(out)


def _mha_mistake(**how):
    return functools.partial(_mha_variant, **how)


def _sum_form_mistake(**how):
    def implementation(*args, **kwargs):
        return _mha_variant(*args, **{**kwargs, **how})[0]

    return implementation


def _big_negative_message(fill: str) -> str:
    return (
        f"filling masked scores with a large negative number ({fill}) instead of -inf: a query that may "
        f"attend to nothing gets uniform weights instead of zero weights and a zero output, and where the "
        f"real scores are below {fill} the masked keys win the weight; fill with float('-inf') and use a "
        "softmax that gives zeros for an all -inf row"
    )


_RESIDUAL_NORM = (
    "returning layer_norm(query + attention output): the residual connection and the layer norm "
    "belong to the transformer layer around the attention (Add & Norm), not inside it; return "
    "the attention output itself"
)
_RESIDUAL = (
    "adding the query to the attention output (a residual connection): the residual belongs to the "
    "transformer layer around the attention, not inside it; return the attention output itself"
)

_CORE_MISTAKES: list[tuple[str, str, dict[str, Any]]] = [
    ("no_scale", "forgetting to divide the scores by sqrt(D): the weights are too peaked", {"scale": "none"}),
    (
        "sqrt_e",
        "scaling the scores by sqrt(E) (d_model) instead of sqrt(D) = sqrt(E / H), the width of "
        "one head (d_k): the weights are too flat",
        {"scale": "e"},
    ),
    (
        "inverted_mask",
        "inverting the mask: True means *may attend* in this course, so masked_fill "
        "must fill where the mask is False (~mask)",
        {"mask_how": "inverted"},
    ),
    (
        "mask_after",
        "applying the mask after the softmax: the masked weights are zeroed but the rest "
        "no longer sum to 1; mask the scores (with -inf) before the softmax",
        {"mask_how": "after"},
    ),
    (
        "zero_fill",
        "filling masked scores with 0 (or a tiny number such as 1e-15) instead of -inf: a score of 0 is "
        "an ordinary score, so the masked keys still get weight; fill with float('-inf')",
        {"mask_how": "zero_fill"},
    ),
    ("big_negative", _big_negative_message("-1e9"), {"mask_how": "big_negative"}),
    ("big_negative_1e4", _big_negative_message("-1e4"), {"mask_how": "big_negative_1e4"}),
    (
        "nan",
        "a fully masked row gives NaN (softmax of a row of -inf): set such rows to zero weights",
        {"mask_how": "nan"},
    ),
    (
        "naive_exp",
        "computing the softmax as exp(s) / sum(exp(s)) without subtracting the row maximum: "
        "large scores overflow to inf and give NaN (unstable softmax)",
        {"mask_how": "naive_exp"},
    ),
    (
        "softmax_queries",
        "taking the softmax over the queries (dim=-2) instead of over the keys (dim=-1)",
        {"softmax_dim": -2},
    ),
    (
        "bare_view",
        "splitting into heads with a bare view/reshape to (N, H, L, D), without the "
        "transpose: tokens are scrambled across heads and positions (and a causal mask leaks the future)",
        {"split": "bare_view", "merge": "bare"},
    ),
    (
        "bare_view_split_only",
        "splitting into heads with a bare view/reshape to (N, H, L, D), without "
        "the transpose: tokens are scrambled across heads and positions (and a causal mask leaks the future)",
        {"split": "bare_view"},
    ),
    (
        "head_major",
        "giving head h every H-th feature (columns h, h+H, ...) instead of the consecutive "
        "columns hD ... (h+1)D - 1: split as (N, L, H, D), not (N, L, D, H)",
        {"split": "head_major", "merge": "head_major"},
    ),
    (
        "transposed_w",
        "multiplying by the transposed weight matrices (x @ W.T, nn.Linear's convention); "
        "in this course the projections are x @ W",
        {"transpose_w": True},
    ),
    (
        "kv_from_query",
        "computing keys and values from the query instead of the key and value arguments",
        {"kv": "query"},
    ),
    ("v_from_key", "computing the values from the key argument instead of the value argument", {"kv": "key"}),
    ("residual_norm", _RESIDUAL_NORM, {"residual": "add_norm"}),
    ("residual", _RESIDUAL, {"residual": "add"}),
]

_MHA_OUTPUT_MISTAKES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "mean_heads",
        "averaging the heads instead of concatenating them (and then multiplying by W_o): "
        "the output has width D = E / H instead of E",
        {"out": "mean_heads"},
    ),
    (
        "sum_heads",
        "summing the heads instead of concatenating them (and then multiplying by W_o): "
        "the output has width D = E / H instead of E",
        {"out": "sum_heads"},
    ),
    (
        "mean_contrib",
        "averaging the heads' contributions instead of adding them: after concatenation, "
        "W_o adds the heads up, it does not average them (the output is H times too small)",
        {"out": "mean_contrib"},
    ),
    ("no_wo", "forgetting the output projection W_o after concatenating the heads", {"out": "no_wo"}),
    (
        "diag_block",
        "applying only head h's diagonal block of W_o to head h before concatenating: "
        "concatenate all heads first and multiply by the whole W_o, so every output feature mixes all heads",
        {"out": "diag_block"},
    ),
    (
        "concat_contrib",
        "concatenating the heads after projecting each one to width E with its rows of "
        "W_o: the output has width H * E; concatenate the heads first, then multiply by W_o",
        {"out": "concat_contrib"},
    ),
    (
        "unsqueeze_mask",
        "adding a head axis to the mask (mask.unsqueeze(1), as the Annotated Transformer does for its "
        "(N, 1, S) and (N, L, L) masks): the mask you are given already broadcasts to (N, H, L, S), so "
        "the extra axis broadcasts the scores to 5 dims and mixes the batch into the heads; pass it on as it is",
        {"unsqueeze_mask": True, "merge": "annotated"},
    ),
    (
        "mean_weights",
        "returning the weights averaged over the heads, (N, L, S), like "
        "nn.MultiheadAttention's default: return them per head, (N, H, L, S)",
        {"weights": "mean"},
    ),
]

_SUM_FORM_OUTPUT_MISTAKES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "wo_columns",
        "taking head h's block of W_o from its columns (W_o[:, hD:(h+1)D], transposed) instead "
        "of its rows W_o[hD:(h+1)D, :]: the rows are the ones that multiply head h's part of the concatenation",
        {"out": "wo_columns"},
    ),
    (
        "mean_contrib",
        "averaging the heads' contributions instead of summing them: the output is H times too small",
        {"out": "mean_contrib"},
    ),
    (
        "sum_heads",
        "summing the heads without projecting each one with its rows of W_o: the output has "
        "width D = E / H instead of E",
        {"out": "sum_heads"},
    ),
    ("no_wo", "concatenating the heads without the output projection W_o", {"out": "no_wo"}),
    (
        "concat_contrib",
        "concatenating the per-head projections instead of adding them: the output has width H * E",
        {"out": "concat_contrib"},
    ),
]


def _mha_mistakes() -> list[Mistake]:
    return [Mistake(msg, _mha_mistake(**how)) for _, msg, how in _CORE_MISTAKES + _MHA_OUTPUT_MISTAKES]


def _sum_form_mistakes() -> list[Mistake]:
    return [Mistake(msg, _sum_form_mistake(**how)) for _, msg, how in _CORE_MISTAKES + _SUM_FORM_OUTPUT_MISTAKES]


# --- cases shared by both forms ------------------------------------------------------------------


def _weights_set(g: torch.Generator, E: int, *, scale: float = 1.0) -> tuple[torch.Tensor, ...]:
    """W_q, W_k, W_v, W_o of shape (E, E), entries of size about 1/sqrt(E)."""
    return tuple(randn(g, E, E, scale=scale / math.sqrt(E)) for _ in range(4))


def _mha_call(
    g: torch.Generator,
    N: int,
    L: int,
    S: int | None,
    E: int,
    H: int,
    mask: torch.Tensor | None = None,
    *,
    distinct_value: bool = False,
    q_scale: float = 1.0,
    self_attention: bool = False,
) -> Call:
    query = randn(g, N, L, E, scale=q_scale)
    if self_attention:
        key = value = query
    else:
        assert S is not None, "cross-attention needs S"
        key = randn(g, N, S, E, scale=q_scale)
        value = randn(g, N, S, E) if distinct_value else key
    args = (query, key, value, *_weights_set(g, E), H)
    return Call(args if mask is None else (*args, mask))


def _future_invariance(index: int | None) -> Judge:
    """A judge for pairs of self-attention calls under a causal mask whose inputs differ only
    from some position on: outputs (and weights) before that position must not change."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        if index is not None and not all(isinstance(a, tuple) and len(a) == 2 for a in actual):
            return "should return a tuple (output, weights)"
        for i in range(0, len(calls), 2):
            x1, x2 = calls[i].args[0], calls[i + 1].args[0]
            changed = (x1 != x2).any(dim=-1).any(dim=0).nonzero()
            t = int(changed[0]) if len(changed) else x1.shape[1]
            for part, name, axis in ((0, "output", 1), (1, "weights", 2)):
                if index is None and part == 1:
                    continue
                a1 = actual[i] if index is None else actual[i][part]
                a2 = actual[i + 1] if index is None else actual[i + 1][part]
                e1 = expected[i] if index is None else expected[i][part]
                for a in (a1, a2):
                    msg = compare(a, e1, atol=float("inf"), rtol=0.0, what=f"the {name}")
                    if msg and "shape" in msg:
                        return msg
                early1 = a1.narrow(axis, 0, t).to(torch.float64)
                early2 = a2.narrow(axis, 0, t).to(torch.float64)
                if not bool(torch.isfinite(early1).all() and torch.isfinite(early2).all()):
                    return f"the {name} contain NaN or inf"
                if not bool(torch.allclose(early1, early2, atol=1e-4, rtol=1e-4)):
                    return (
                        f"with a causal mask, changing the inputs from position {t} on changed the "
                        f"{name} at earlier positions: some position sees the future"
                    )
        return None

    return judge


def _causal_pairs(g: torch.Generator, shapes: Sequence[tuple[int, int, int, int, int]]) -> list[Call]:
    """For each (N, L, E, H, t): two self-attention calls whose inputs differ from position t on."""
    calls = []
    for N, L, E, H, t in shapes:
        x1 = randn(g, N, L, E)
        x2 = x1.clone()
        x2[:, t:] = randn(g, N, L - t, E, scale=3.0)
        Ws = _weights_set(g, E)
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        calls += [Call((x1, x1, x1, *Ws, H, causal)), Call((x2, x2, x2, *Ws, H, causal))]
    return calls


def _fully_masked_calls(g: torch.Generator) -> list[Call]:
    N, L, S, E, H = 2, 3, 5, 8, 2
    mask = rand_mask(g, N, 1, L, S)
    mask[0, 0, 1] = False  # query 1 of sequence 0 may attend to nothing
    padding = torch.ones(N, 1, 1, S, dtype=torch.bool)
    padding[1] = False  # sequence 1 is all padding
    return [_mha_call(g, N, L, S, E, H, mask), _mha_call(g, N, L, S, E, H, padding)]


def _large_call(g: torch.Generator) -> Call:
    # scores of order 1e3 and more, far apart: the exact weights are one-hot
    return _mha_call(g, 2, 4, 6, 8, 2, q_scale=30.0, distinct_value=True)


def _far_below_call(g: torch.Generator, M: float, N: int, L: int, S: int, E: int = 8, H: int = 2) -> Call:
    """Cross-attention whose scores are all about -M in every head: feature 0 of every query and key
    is 1 and feature 1 + h of a key its rank for head h; W_q and W_k turn them into one large
    component per head (column hD), so head h's score of key s is -M (1 + 0.02 r) plus a little,
    and the allowed key of lowest rank takes all the weight. The mask, (N, 1, L, S), leaves every
    query an allowed and a blocked key: a masked key filled with a number above -M would win."""
    D, root = E // H, math.sqrt(M)
    query, key = randn(g, N, L, E), randn(g, N, S, E)
    query[..., 0] = 1.0
    key[..., 0] = 1.0
    W_q, W_k = randn(g, E, E, scale=0.1), randn(g, E, E, scale=0.1)
    for h in range(H):
        c = h * D
        key[..., 1 + h] = torch.stack([torch.randperm(S, generator=g) for _ in range(N)]).float()
        W_q[:, c] = 0.0
        W_q[0, c] = root
        W_k[:, c] = 0.0
        W_k[0, c] = -math.sqrt(D) * root
        W_k[1 + h, c] = -0.02 * math.sqrt(D) * root
    mask = rand_mask(g, N, 1, L, S, p=0.6)  # key 0 allowed
    blocked = torch.randint(1, S, (N, 1, L, 1), generator=g)
    mask = mask.scatter(-1, blocked, False)
    W_v, W_o = (randn(g, E, E, scale=1 / math.sqrt(E)) for _ in range(2))
    return Call((query, key, randn(g, N, S, E), W_q, W_k, W_v, W_o, H, mask))


def _far_below_case(g: torch.Generator) -> Case:
    return Case(
        "masked keys under very negative scores",
        "when every real score is far below -1e4 (and below -1e9), a masked key still gets weight exactly 0",
        [_far_below_call(g, 2e5, 2, 3, 5), _far_below_call(g, 2e10, 2, 4, 3)],
        points=1,
    )


def _per_head_mask(g: torch.Generator, N: int, H: int, L: int, S: int) -> torch.Tensor:
    return rand_mask(g, N, H, L, S)


# --- multi_head_attention -------------------------------------------------------------------------


def _heads_consistent(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """The weights are per head (N, H, L, S), sum to 1 over the keys, and the output is
    what they give: concat_h(A_h V_h) W_o, with V_h the head-h columns of value @ W_v."""
    for c, a, e in zip(calls, actual, expected, strict=False):
        if not isinstance(a, tuple) or len(a) != 2:
            return "should return a tuple (output, weights)"
        out, w = a
        for got, exp, name in ((out, e[0], "output"), (w, e[1], "weights")):
            msg = compare(got, exp, atol=float("inf"), rtol=0.0, what=f"the {name}")
            if msg and ("shape" in msg or "dtype" in msg or "expected a" in msg):
                return msg
        w64 = w.to(torch.float64)
        if not bool(torch.isfinite(w64).all()):
            return "the weights contain NaN or inf"
        if bool((w64 < -1e-6).any()):
            return "the weights contain negative values"
        if not bool(torch.allclose(w64.sum(-1), torch.ones_like(w64.sum(-1)), atol=1e-4)):
            return "each head's weights should sum to 1 over the keys (the last dim)"
        _query, _key, value, _W_q, _W_k, W_v, W_o, H = c.args[:8]
        v = split_heads(value.to(torch.float64) @ W_v.to(torch.float64), H)  # (N, H, S, D)
        implied = merge_heads(w64 @ v) @ W_o.to(torch.float64)  # (N, L, E)
        if not bool(torch.allclose(out.to(torch.float64), implied, atol=1e-4, rtol=1e-4)):
            return (
                "the output is not what the returned weights give: head h's output should be "
                "weights[:, h] @ V_h, concatenated over heads and multiplied by W_o"
            )
    return None


def _mha_cases() -> list[Case]:
    g = rng(320)
    N, L, S, E = 2, 4, 6, 8
    return [
        Case(
            "fixed small case",
            "self-attention, one sequence of 3 tokens of width 4, 2 heads",
            [_mha_call(g, 1, 3, None, 4, 2, self_attention=True)],
            points=1,
        ),
        Case(
            "cross-attention",
            "queries and keys of different lengths (L != S), 2 heads",
            [_mha_call(g, 2, 3, 5, 8, 2)],
            points=1,
        ),
        Case(
            "several head counts",
            "H = 1, 2 and 4 heads on the same shapes (L != S)",
            [_mha_call(g, N, L, S, E, H) for H in (1, 2, 4)],
            points=2,
        ),
        Case(
            "keys != values",
            "different key and value tensors",
            [_mha_call(g, 2, 3, 5, 12, 3, distinct_value=True)],
            points=1,
        ),
        Case(
            "per-head weights",
            "weights have shape (N, H, L, S), sum to 1 per head, and give the output",
            [_mha_call(g, 2, 3, 5, 12, 4, distinct_value=True)],
            points=1,
            judge=_heads_consistent,
        ),
        Case(
            "mask (L, S)",
            "a boolean mask shared by the batch and the heads (True = may attend)",
            [_mha_call(g, N, L, S, E, 2, rand_mask(g, L, S))],
            points=1,
        ),
        Case(
            "mask per sequence and per head",
            "masks of shape (N, 1, L, S) and (N, H, L, S)",
            [
                _mha_call(g, N, L, S, E, 2, rand_mask(g, N, 1, L, S)),
                _mha_call(g, N, L, S, E, 2, _per_head_mask(g, N, 2, L, S)),
            ],
            points=1,
        ),
        Case(
            "padding mask",
            "a key-padding mask of shape (N, 1, 1, S)",
            [
                _mha_call(
                    g,
                    3,
                    L,
                    S,
                    E,
                    4,
                    torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 2 + [False] * 4])[:, None, None, :],
                )
            ],
            points=1,
        ),
        Case(
            "causal mask: no look-ahead",
            "with a causal mask, changing later tokens leaves earlier outputs and weights unchanged",
            _causal_pairs(g, [(2, 5, 8, 2, 2), (1, 6, 12, 4, 3)]),
            points=1,
            judge=_future_invariance(index=0),
        ),
        Case(
            "fully masked rows",
            "a query that may attend to nothing gets zero weights and a zero output, never NaN",
            _fully_masked_calls(g),
            points=1,
        ),
        Case(
            "large scores",
            "inputs of size about 30 (scores of order 1e3) give finite, correct outputs",
            [_large_call(g)],
            points=1,
        ),
        _far_below_case(g),
    ]


# --- multi_head_attention_sum_form ------------------------------------------------------------------


def _equals_concat_form(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """Judge: the output equals multi_head_attention's (concatenation form) to float64 rounding."""
    for c, a in zip(calls, actual, strict=False):
        concat, _ = multi_head_attention(*c.args)
        if isinstance(a, torch.Tensor) and a.dtype != concat.dtype:
            return (
                f"the output has dtype {a.dtype} for {concat.dtype} inputs: keep the inputs' dtype "
                "(e.g. start the sum from torch.zeros_like(query))"
            )
        msg = compare(a, concat, atol=1e-9, rtol=1e-9, what="the output")
        if msg:
            return msg + " (compared with the concatenation form, in float64)"
    return None


def _sum_form_cases() -> list[Case]:
    g = rng(330)
    N, L, S, E = 2, 4, 6, 8

    def as64(call: Call) -> Call:
        return Call(
            tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in call.args)
        )

    return [
        Case(
            "fixed small case",
            "self-attention, one sequence of 3 tokens of width 4, 2 heads",
            [_mha_call(g, 1, 3, None, 4, 2, self_attention=True)],
            points=1,
        ),
        Case(
            "cross-attention, several head counts",
            "L != S with H = 1, 2 and 4 heads",
            [_mha_call(g, N, L, S, E, H) for H in (1, 2, 4)],
            points=2,
        ),
        Case(
            "keys != values",
            "different key and value tensors",
            [_mha_call(g, 2, 3, 5, 12, 3, distinct_value=True)],
            points=1,
        ),
        Case(
            "masks",
            "masks of shape (L, S) and (N, 1, 1, S) (True = may attend)",
            [_mha_call(g, N, L, S, E, 2, rand_mask(g, L, S)), _mha_call(g, N, L, S, E, 4, rand_mask(g, N, 1, 1, S))],
            points=1,
        ),
        Case(
            "causal mask: no look-ahead",
            "with a causal mask, changing later tokens leaves earlier outputs unchanged",
            _causal_pairs(g, [(2, 5, 8, 2, 2), (1, 6, 12, 4, 3)]),
            points=1,
            judge=_future_invariance(index=None),
        ),
        Case(
            "fully masked rows",
            "a query that may attend to nothing gets a zero output, never NaN",
            _fully_masked_calls(g),
            points=1,
        ),
        Case(
            "large scores",
            "inputs of size about 30 (scores of order 1e3) give finite, correct outputs",
            [_large_call(g)],
            points=1,
        ),
        Case(
            "equals the concatenation form",
            "in float64, the sum over heads equals concat(heads) @ W_o to rounding error",
            [
                as64(_mha_call(g, 2, 5, 7, 16, 4, distinct_value=True)),
                as64(_mha_call(g, 1, 3, 4, 12, 3, _some_blocked(rand_mask(g, 3, 4)))),
            ],
            points=2,
            judge=_equals_concat_form,
        ),
        _far_below_case(g),
    ]


def _some_blocked(mask: torch.Tensor) -> torch.Tensor:
    """``mask`` with the last key blocked for the first query, so that no draw is all True (a
    mask applied after the softmax then still gives other outputs, under every ``--seed``)."""
    mask = mask.clone()
    mask[..., 0, -1] = False
    return mask


# --- exercises ---------------------------------------------------------------------------------------


EXERCISES = [
    Exercise(
        name="split_heads",
        reference=split_heads,
        make_cases=_split_cases,
        mistakes=[
            Mistake(_SPLIT_BARE_VIEW, _split_bare_view),
            Mistake(
                "reshaping to (N, L, H, D) but not transposing: the head axis must come before the "
                "token axis, (N, H, L, D); add .transpose(1, 2)",
                _split_no_transpose,
            ),
            Mistake(_SPLIT_HEAD_MAJOR, _split_head_major),
            Mistake(
                "swapping H and D: reshaping to (N, L, D, H) (or using num_heads as the head width) "
                "gives H-wide pieces; reshape to (N, L, H, D) with D = E // H",
                _split_h_d_swapped,
            ),
            Mistake(
                "transposing the wrong axes: transpose(1, 2) swaps the token and head axes of "
                "(N, L, H, D); transpose(2, 3) swaps heads and features",
                _split_wrong_transpose,
            ),
        ],
    ),
    Exercise(
        name="merge_heads",
        reference=merge_heads,
        make_cases=_merge_cases,
        mistakes=[
            Mistake(
                "reshaping (N, H, L, D) straight to (N, L, H*D) without transposing back: tokens are "
                "scrambled; first transpose(1, 2) to (N, L, H, D), then reshape",
                _merge_no_transpose,
            ),
            Mistake(
                "putting the axes in the wrong order before the reshape: the features come out "
                "interleaved (feature d of every head, then feature d+1, ...) instead of head 0's "
                "D features, then head 1's; transpose(1, 2) to (N, L, H, D)",
                _merge_interleaved,
            ),
            Mistake(
                "transposing the wrong axes (tokens and features, transpose(2, 3)) instead of the "
                "head and token axes (transpose(1, 2))",
                _merge_wrong_axes,
            ),
            Mistake(
                "averaging the heads instead of concatenating them: the output has width D instead of H * D",
                _merge_mean,
            ),
            Mistake(
                "summing the heads instead of concatenating them: the output has width D instead of H * D", _merge_sum
            ),
        ],
    ),
    Exercise(
        name="multi_head_attention",
        reference=multi_head_attention,
        make_cases=_mha_cases,
        mistakes=_mha_mistakes(),
        forbidden=WHOLE_ATTENTION,
        output_names=("output", "weights"),
    ),
    Exercise(
        name="multi_head_attention_sum_form",
        reference=multi_head_attention_sum_form,
        make_cases=_sum_form_cases,
        mistakes=_sum_form_mistakes(),
        # the sum form adds the heads' contributions, with no concatenation: returning
        # multi_head_attention(...)[0], or concatenating with merge_heads, is the other form
        forbidden=(*WHOLE_ATTENTION, "graded:multi_head_attention", "graded:merge_heads"),
    ),
]
