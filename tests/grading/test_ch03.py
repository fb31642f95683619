"""Specification of the checks of assignment 03_multi_head_attention (course_lib.grading.rubrics.ch03).

For each graded function (split_heads, merge_heads, multi_head_attention,
multi_head_attention_sum_form):

- the reference and alternative correct implementations score full marks;
- a stub raising NotImplementedError scores 0 with status "not implemented";
- each classic mistake, written here the way a student might write it, loses points and is
  named in ``report.diagnoses``;
- a forbidden call gives status "forbidden" and 0 points;
- a wrong shape, an exception, NaN or a wrong return type gives failed tests with feedback.

The implementations are module-level functions so that the forbidden-call check can read
their source.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_diagnosed, assert_forbidden, assert_full_marks, implementation_id

import course_lib
from course_lib.grading import check, exercise
from course_lib.grading.rubrics import ch03

INF = float("inf")
FUNCTIONS = ("split_heads", "merge_heads", "multi_head_attention", "multi_head_attention_sum_form")


# --- shared pieces of the student-style implementations ---------------------------------------


def _attend(q, k, v, mask=None, *, scale=None, fill=-INF, zero_empty_rows=True):
    """Scaled dot-product attention as the notebook provides it (torch.softmax allowed)."""
    scores = q @ k.transpose(-2, -1) / (math.sqrt(q.shape[-1]) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None and zero_empty_rows:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights


def _split(x, H):
    N, L, E = x.shape
    return x.view(N, L, H, E // H).transpose(1, 2)  # (N, H, L, D)


def _merge(x):
    N, H, L, D = x.shape
    return x.transpose(1, 2).reshape(N, L, H * D)  # (N, L, H*D)


def _heads(query, key, value, W_q, W_k, W_v, H, mask=None, **attend):
    q, k, v = _split(query @ W_q, H), _split(key @ W_k, H), _split(value @ W_v, H)
    return _attend(q, k, v, mask, **attend)  # (N, H, L, D), (N, H, L, S)


# =============================================================================================
# split_heads
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def split_heads_by_chunks(x, num_heads):
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def split_heads_by_slicing(x, num_heads):
    D = x.shape[-1] // num_heads
    return torch.stack([x[:, :, h * D : (h + 1) * D] for h in range(num_heads)], dim=1)


def split_heads_in_numpy(x, num_heads):
    N, L, E = x.shape
    a = x.numpy().reshape(N, L, num_heads, E // num_heads)
    return torch.from_numpy(np.ascontiguousarray(np.transpose(a, (0, 2, 1, 3))))


def split_heads_by_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)


# --- wrong ------------------------------------------------------------------------------------


def split_heads_bare_view(x, num_heads):
    N, L, E = x.shape
    return x.view(N, num_heads, L, E // num_heads)


def split_heads_without_transpose(x, num_heads):
    N, L, E = x.shape
    return x.view(N, L, num_heads, E // num_heads)


def split_heads_head_major(x, num_heads):
    N, L, E = x.shape
    return x.view(N, L, E // num_heads, num_heads).permute(0, 3, 1, 2)


def split_heads_d_and_h_swapped(x, num_heads):
    N, L, E = x.shape
    return x.view(N, L, E // num_heads, num_heads).transpose(1, 2)


def split_heads_transposing_wrong_axes(x, num_heads):
    N, L, E = x.shape
    return x.view(N, L, num_heads, E // num_heads).transpose(2, 3)


def split_heads_by_matmul_with_a_permutation(x, num_heads):
    # right for float inputs, but a matmul is not defined for integer or bool tensors
    N, L, E = x.shape
    return (x @ torch.eye(E)).view(N, L, num_heads, E // num_heads).transpose(1, 2)


def split_heads_using_course_lib(x, num_heads):
    return course_lib.split_heads(x, num_heads)


def split_heads_returns_numpy(x, num_heads):
    return split_heads_by_chunks(x, num_heads).numpy()


def split_heads_raises(x, num_heads):
    raise IndexError("tuple index out of range")


# =============================================================================================
# merge_heads
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def merge_heads_by_cat(x):
    return torch.cat(x.unbind(dim=1), dim=-1)


def merge_heads_by_permute_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(2)


def merge_heads_in_numpy(x):
    N, H, L, D = x.shape
    a = np.transpose(x.numpy(), (0, 2, 1, 3)).reshape(N, L, H * D)
    return torch.from_numpy(np.ascontiguousarray(a))


# --- wrong ------------------------------------------------------------------------------------


def merge_heads_without_transpose(x):
    N, H, L, D = x.shape
    return x.reshape(N, L, H * D)


def merge_heads_wrong_order(x):
    N, H, L, D = x.shape
    return x.permute(0, 2, 3, 1).reshape(N, L, H * D)


def merge_heads_transposing_wrong_axes(x):
    N, H, L, D = x.shape
    return x.transpose(2, 3).reshape(N, L, H * D)


def merge_heads_by_averaging(x):
    return x.mean(dim=1)


def merge_heads_wrong_shape(x):
    N, H, L, D = x.shape
    return x.transpose(1, 2).reshape(N, L * H, D)


def merge_heads_raises(x):
    raise RuntimeError("view size is not compatible with input tensor's size and stride")


# =============================================================================================
# multi_head_attention
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads) @ W_o, weights


def mha_by_einsum(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    E = query.shape[-1]
    H, D = num_heads, E // num_heads
    q = torch.einsum("nle,ehd->nhld", query, W_q.view(E, H, D))
    k = torch.einsum("nse,ehd->nhsd", key, W_k.view(E, H, D))
    v = torch.einsum("nse,ehd->nhsd", value, W_v.view(E, H, D))
    scores = torch.einsum("nhld,nhsd->nhls", q, k) / math.sqrt(D)
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    m = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    weights = e / e.sum(-1, keepdim=True).clamp_min(1e-30)
    out = torch.einsum("nhls,nhsd,hde->nle", weights, v, W_o.view(H, D, E))
    return out, weights


def mha_by_loop_over_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    m = torch.ones(N, num_heads, L, S, dtype=torch.bool) if mask is None else mask.expand(N, num_heads, L, S)
    heads, weights = [], []
    for h in range(num_heads):
        cols = slice(h * D, (h + 1) * D)
        head, w = _attend(query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols], m[:, h])
        heads.append(head)
        weights.append(w)
    return torch.cat(heads, dim=-1) @ W_o, torch.stack(weights, dim=1)


def mha_in_numpy(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    zq, xk, xv, wq, wk, wv, wo = (t.numpy().astype(np.float64) for t in (query, key, value, W_q, W_k, W_v, W_o))
    N, L, E = zq.shape
    S, H = xk.shape[1], num_heads
    D = E // H

    def split(a):
        return a.reshape(a.shape[0], a.shape[1], H, D).transpose(0, 2, 1, 3)

    q, k, v = split(zq @ wq), split(xk @ wk), split(xv @ wv)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
    m = np.ones((N, H, L, S), dtype=bool) if mask is None else np.broadcast_to(mask.numpy(), (N, H, L, S))
    scores = np.where(m, scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1.0)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(N, L, E) @ wo
    return torch.from_numpy(out).to(query.dtype), torch.from_numpy(weights).to(query.dtype)


# --- wrong ------------------------------------------------------------------------------------


def mha_averaging_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return heads.mean(dim=1), weights  # (N, L, D)


def mha_averaging_head_contributions(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    parts = [heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads)]
    return torch.stack(parts).mean(dim=0), weights


def mha_unscaled(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, scale=1.0)
    return _merge(heads) @ W_o, weights


def mha_scaled_by_sqrt_d_model(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    E = query.shape[-1]
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, scale=math.sqrt(E))
    return _merge(heads) @ W_o, weights


def mha_without_w_o(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads), weights


def mha_w_o_block_per_head(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    projected = [heads[:, h] @ W_o[h * D : (h + 1) * D, h * D : (h + 1) * D] for h in range(num_heads)]
    return torch.cat(projected, dim=-1), weights


def mha_concatenating_projected_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    return torch.cat([heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads)], dim=-1), weights


def mha_inverted_mask(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, None if mask is None else ~mask)
    return _merge(heads) @ W_o, weights


def mha_mask_after_softmax(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return _merge(weights @ v) @ W_o, weights


def mha_large_negative_mask(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, fill=-1e9, zero_empty_rows=False)
    return _merge(heads) @ W_o, weights


def mha_with_a_half_precision_safe_fill(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    # -1e4 instead of -inf (kept finite for float16, as some public code does)
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, fill=-1e4, zero_empty_rows=False)
    return _merge(heads) @ W_o, weights


def mha_as_in_the_annotated_transformer(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    # MultiHeadedAttention.forward, with the notebook's weights and attention
    if mask is not None:
        # Same mask applied to all h heads.
        mask = mask.unsqueeze(1)
    nbatches = query.size(0)
    d_k = query.size(-1) // num_heads
    query, key, value = [
        (x @ W).view(nbatches, -1, num_heads, d_k).transpose(1, 2)
        for W, x in zip((W_q, W_k, W_v), (query, key, value), strict=True)
    ]
    x, attn = _attend(query, key, value, mask=mask)
    x = x.transpose(1, 2).contiguous().view(nbatches, -1, num_heads * d_k)
    return x @ W_o, attn


def mha_filling_masked_scores_with_zero(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, fill=0.0, zero_empty_rows=False)
    return _merge(heads) @ W_o, weights


def mha_with_residual_and_layer_norm_inside(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    # as a MultiHeadAttention module that ends with `q += residual; q = self.layer_norm(q)`
    residual = query
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    q = _merge(heads) @ W_o
    q += residual
    q = F.layer_norm(q, q.shape[-1:])
    return q, weights


def mha_with_residual_inside(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return query + _merge(heads) @ W_o, weights


def mha_nan_for_fully_masked_rows(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, zero_empty_rows=False)
    return _merge(heads) @ W_o, weights


def mha_unstable_softmax(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True)
    return _merge(weights @ v) @ W_o, weights


def mha_softmax_over_queries(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    weights = torch.nan_to_num(torch.softmax(scores, dim=-2))
    return _merge(weights @ v) @ W_o, weights


def mha_bare_view_split(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    q = (query @ W_q).view(N, num_heads, L, D)
    k = (key @ W_k).view(N, num_heads, S, D)
    v = (value @ W_v).view(N, num_heads, S, D)
    heads, weights = _attend(q, k, v, mask)
    return _merge(heads) @ W_o, weights


def mha_bare_view_split_and_merge(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    q = (query @ W_q).view(N, num_heads, L, D)
    k = (key @ W_k).view(N, num_heads, S, D)
    v = (value @ W_v).view(N, num_heads, S, D)
    heads, weights = _attend(q, k, v, mask)
    return heads.reshape(N, L, E) @ W_o, weights


def mha_head_major_split(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    def split(x):
        N, T, E = x.shape
        return x.view(N, T, E // num_heads, num_heads).permute(0, 3, 1, 2)

    heads, weights = _attend(split(query @ W_q), split(key @ W_k), split(value @ W_v), mask)
    N, H, L, D = heads.shape
    return heads.permute(0, 2, 3, 1).reshape(N, L, H * D) @ W_o, weights


def mha_weights_averaged_over_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads) @ W_o, weights.mean(dim=1)


def mha_transposed_weights(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q.T, W_k.T, W_v.T, num_heads, mask)
    return _merge(heads) @ W_o.T, weights


def mha_keys_and_values_from_query(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, query, query, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads) @ W_o, weights


def mha_values_from_key(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, key, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads) @ W_o, weights


def mha_weights_of_the_wrong_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, weights = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return _merge(heads) @ W_o, weights.flip(1)


def mha_returns_scores_as_weights(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    heads, _ = _attend(q, k, v, mask)
    return _merge(heads) @ W_o, scores


def mha_using_torch_sdpa(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    return _merge(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)) @ W_o, None


def mha_using_torch_module(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    m = nn.MultiheadAttention(query.shape[-1], num_heads, bias=False, batch_first=True)
    return m(query, key, value, need_weights=True, average_attn_weights=False)


def mha_using_multi_head_attention_forward(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    W = torch.cat([W_q, W_k, W_v], dim=1).T
    out, w = F.multi_head_attention_forward(
        query.transpose(0, 1),
        key.transpose(0, 1),
        value.transpose(0, 1),
        query.shape[-1],
        num_heads,
        W,
        None,
        None,
        None,
        False,
        0.0,
        W_o.T,
        None,
        average_attn_weights=False,
    )
    return out.transpose(0, 1), w


def mha_using_course_lib(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return course_lib.multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)


def mha_returns_output_only(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)[0]


def mha_raises(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")


def mha_returns_nan(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    out, weights = mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)
    return torch.full_like(out, float("nan")), weights


def mha_returns_dict(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    out, weights = mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)
    return {"output": out, "weights": weights}


# =============================================================================================
# multi_head_attention_sum_form
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def sum_form_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    output = torch.zeros_like(query)
    for h in range(num_heads):
        output = output + heads[:, h] @ W_o[h * D : (h + 1) * D, :]
    return output


def sum_form_by_einsum(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    H, D = num_heads, heads.shape[-1]
    return torch.einsum("nhld,hde->nle", heads, W_o.view(H, D, -1))


def sum_form_head_by_head(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    m = None if mask is None else mask.expand(N, num_heads, L, S)
    output = 0
    for h in range(num_heads):
        block = slice(h * D, (h + 1) * D)
        head, _ = _attend(
            query @ W_q[:, block], key @ W_k[:, block], value @ W_v[:, block], None if m is None else m[:, h]
        )
        output = output + head @ W_o[block]
    return output


def sum_form_in_numpy(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return mha_in_numpy(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)[0]


# --- wrong ------------------------------------------------------------------------------------


def sum_form_unscaled(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, scale=1.0)
    D = heads.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_scaled_by_sqrt_d_model(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, scale=math.sqrt(query.shape[-1]))
    D = heads.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_w_o_columns(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    output = torch.zeros_like(query)
    for h in range(num_heads):
        W_h = W_o[:, h * D : (h + 1) * D]  # (E, D): columns, as in Zhu et al.'s W_m, but of the wrong matrix side
        output = output + (W_h @ heads[:, h].transpose(-2, -1)).transpose(-2, -1)
    return output


def sum_form_averaging_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    return torch.stack([heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads)]).mean(0)


def sum_form_without_w_o(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return heads.sum(dim=1)


def sum_form_inverted_mask(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return sum_form_as_in_the_notebook(
        query, key, value, W_q, W_k, W_v, W_o, num_heads, None if mask is None else ~mask
    )


def sum_form_mask_after_softmax(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        weights = weights * mask
    heads, D = weights @ v, q.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_nan_for_fully_masked_rows(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, zero_empty_rows=False)
    D = heads.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_with_a_minus_1e9_fill(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask, fill=-1e9, zero_empty_rows=False)
    D = heads.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_with_residual_and_layer_norm_inside(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    out = sum_form_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)
    return F.layer_norm(query + out, query.shape[-1:])


def multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    """The student's own (correct) concatenation form, under its graded name, as in the notebook."""
    return mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)


def merge_heads(x):
    """The student's own merge_heads, under its graded name."""
    return _merge(x)


def sum_form_returning_the_concatenation_form(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)[0]


def sum_form_concatenating_with_merge_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    return merge_heads(heads) @ W_o


def sum_form_bare_view_split(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    q = (query @ W_q).view(N, num_heads, L, D)
    k = (key @ W_k).view(N, num_heads, S, D)
    v = (value @ W_v).view(N, num_heads, S, D)
    heads, _ = _attend(q, k, v, mask)
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_interleaved_heads(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, _E = query.shape
    S = key.shape[1]
    m = None if mask is None else mask.expand(N, num_heads, L, S)
    output = 0
    for h in range(num_heads):
        cols = slice(h, None, num_heads)  # every H-th column
        head, _ = _attend(
            query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols], None if m is None else m[:, h]
        )
        output = output + head @ W_o[cols]
    return output


def sum_form_float32_accumulator(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    N, H, L, D = heads.shape
    output = torch.zeros(N, L, H * D)
    for h in range(num_heads):
        output += heads[:, h] @ W_o[h * D : (h + 1) * D]
    return output


def sum_form_using_torch_sdpa(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    q, k, v = _split(query @ W_q, num_heads), _split(key @ W_k, num_heads), _split(value @ W_v, num_heads)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    D = heads.shape[-1]
    return sum(heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads))


def sum_form_using_course_lib(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return course_lib.multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)[0]


def sum_form_wrong_shape(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    heads, _ = _heads(query, key, value, W_q, W_k, W_v, num_heads, mask)
    D = heads.shape[-1]
    return torch.stack([heads[:, h] @ W_o[h * D : (h + 1) * D] for h in range(num_heads)], dim=1)


def sum_form_returns_tuple(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    return mha_as_in_the_notebook(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask)


# =============================================================================================
# tests
# =============================================================================================

CORRECT = [
    ("split_heads", split_heads_by_chunks),
    ("split_heads", split_heads_by_slicing),
    ("split_heads", split_heads_in_numpy),
    ("split_heads", split_heads_by_unflatten),
    ("merge_heads", merge_heads_by_cat),
    ("merge_heads", merge_heads_by_permute_flatten),
    ("merge_heads", merge_heads_in_numpy),
    ("multi_head_attention", mha_as_in_the_notebook),
    ("multi_head_attention", mha_by_einsum),
    ("multi_head_attention", mha_by_loop_over_heads),
    ("multi_head_attention", mha_in_numpy),
    ("multi_head_attention_sum_form", sum_form_as_in_the_notebook),
    ("multi_head_attention_sum_form", sum_form_by_einsum),
    ("multi_head_attention_sum_form", sum_form_head_by_head),
    ("multi_head_attention_sum_form", sum_form_in_numpy),
]


@pytest.mark.parametrize("name, fn", [pytest.param(n, f, id=implementation_id(f)) for n, f in CORRECT])
def test_alternative_correct_implementations_score_full_marks(name, fn):
    report = check(fn, name=name)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score
    assert report.diagnoses == []


def test_the_reference_concatenation_form_passes_the_sum_form_exercise():
    # the two forms are the same function; only the return value differs (judged directly: a
    # lambda that calls course_lib is, rightly, a forbidden use of the reference for check())
    from course_lib.grading import judge, run_calls

    ex = exercise("multi_head_attention_sum_form")
    report = judge(ex, run_calls(lambda *a: course_lib.multi_head_attention(*a)[0], ex))
    assert report.status == "passed", str(report)


@pytest.mark.parametrize(
    "name, total",
    [("split_heads", 8), ("merge_heads", 7), ("multi_head_attention", 13), ("multi_head_attention_sum_form", 11)],
)
def test_points_per_function(name, total):
    ex = exercise(name)
    assert ex.max_score == total
    assert all(float(c.points).is_integer() and c.points >= 1 for c in ex.cases())


@pytest.mark.parametrize("name", FUNCTIONS)
def test_cases_use_plain_data_only(name):
    for case in exercise(name).cases():
        for call in case.calls:
            for a in (*call.args, *call.kwargs.values()):
                assert a is None or type(a) in (torch.Tensor, int, float, bool, str), (case.name, type(a))


def test_multi_head_attention_names_its_two_outputs():
    assert exercise("multi_head_attention").output_names == ("output", "weights")


MISTAKES = [
    # split_heads
    ("split_heads", split_heads_bare_view, "without the transpose"),
    ("split_heads", split_heads_without_transpose, "but not transposing"),
    ("split_heads", split_heads_head_major, "every H-th feature"),
    ("split_heads", split_heads_d_and_h_swapped, "swapping H and D"),
    ("split_heads", split_heads_transposing_wrong_axes, "transposing the wrong axes"),
    # merge_heads
    ("merge_heads", merge_heads_without_transpose, "without transposing back"),
    ("merge_heads", merge_heads_wrong_order, "features come out interleaved"),
    ("merge_heads", merge_heads_transposing_wrong_axes, "transposing the wrong axes"),
    ("merge_heads", merge_heads_by_averaging, "averaging the heads instead of concatenating"),
    # multi_head_attention
    ("multi_head_attention", mha_averaging_heads, "averaging the heads instead of concatenating"),
    ("multi_head_attention", mha_averaging_head_contributions, "averaging the heads' contributions"),
    ("multi_head_attention", mha_unscaled, "forgetting to divide the scores by sqrt(D)"),
    ("multi_head_attention", mha_scaled_by_sqrt_d_model, "sqrt(E) (d_model) instead of sqrt(D)"),
    ("multi_head_attention", mha_without_w_o, "forgetting the output projection W_o"),
    ("multi_head_attention", mha_w_o_block_per_head, "diagonal block of W_o"),
    ("multi_head_attention", mha_concatenating_projected_heads, "width H * E"),
    ("multi_head_attention", mha_inverted_mask, "inverting the mask"),
    ("multi_head_attention", mha_mask_after_softmax, "mask after the softmax"),
    ("multi_head_attention", mha_large_negative_mask, "large negative number (-1e9) instead of -inf"),
    ("multi_head_attention", mha_with_a_half_precision_safe_fill, "large negative number (-1e4) instead of -inf"),
    ("multi_head_attention", mha_with_residual_and_layer_norm_inside, "returning layer_norm(query + attention output)"),
    ("multi_head_attention", mha_with_residual_inside, "adding the query to the attention output"),
    ("multi_head_attention", mha_filling_masked_scores_with_zero, "filling masked scores with 0"),
    ("multi_head_attention", mha_as_in_the_annotated_transformer, "mask.unsqueeze(1)"),
    ("multi_head_attention", mha_nan_for_fully_masked_rows, "fully masked row gives NaN"),
    ("multi_head_attention", mha_unstable_softmax, "without subtracting the row maximum"),
    ("multi_head_attention", mha_softmax_over_queries, "softmax over the queries"),
    ("multi_head_attention", mha_bare_view_split, "bare view/reshape to (N, H, L, D)"),
    ("multi_head_attention", mha_bare_view_split_and_merge, "bare view/reshape to (N, H, L, D)"),
    ("multi_head_attention", mha_head_major_split, "every H-th feature"),
    ("multi_head_attention", mha_weights_averaged_over_heads, "weights averaged over the heads"),
    ("multi_head_attention", mha_transposed_weights, "x @ W.T"),
    ("multi_head_attention", mha_keys_and_values_from_query, "keys and values from the query"),
    ("multi_head_attention", mha_values_from_key, "values from the key argument"),
    # multi_head_attention_sum_form
    ("multi_head_attention_sum_form", sum_form_unscaled, "forgetting to divide the scores by sqrt(D)"),
    ("multi_head_attention_sum_form", sum_form_scaled_by_sqrt_d_model, "sqrt(E) (d_model) instead of sqrt(D)"),
    ("multi_head_attention_sum_form", sum_form_w_o_columns, "from its columns"),
    ("multi_head_attention_sum_form", sum_form_averaging_heads, "instead of summing them"),
    ("multi_head_attention_sum_form", sum_form_without_w_o, "without projecting each one"),
    ("multi_head_attention_sum_form", sum_form_inverted_mask, "inverting the mask"),
    ("multi_head_attention_sum_form", sum_form_mask_after_softmax, "mask after the softmax"),
    ("multi_head_attention_sum_form", sum_form_nan_for_fully_masked_rows, "fully masked row gives NaN"),
    ("multi_head_attention_sum_form", sum_form_with_a_minus_1e9_fill, "large negative number (-1e9) instead of -inf"),
    (
        "multi_head_attention_sum_form",
        sum_form_with_residual_and_layer_norm_inside,
        "returning layer_norm(query + attention output)",
    ),
    ("multi_head_attention_sum_form", sum_form_bare_view_split, "bare view/reshape to (N, H, L, D)"),
    ("multi_head_attention_sum_form", sum_form_interleaved_heads, "every H-th feature"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*m, id=m[1].__name__) for m in MISTAKES])
def test_classic_mistake_loses_points_and_is_diagnosed(name, fn, phrase):
    assert_diagnosed(check(fn, name=name), phrase)


def test_bare_view_split_passes_only_for_a_single_token():
    report = check(split_heads_bare_view, name="split_heads")
    passed = {r.name for r in report.results if r.passed}
    assert "one token" in passed and "one head" in passed
    assert "fixed small case" not in passed and "random shapes" not in passed


def test_bare_view_split_inside_attention_leaks_the_future():
    report = check(mha_bare_view_split, name="multi_head_attention")
    causal = next(r for r in report.results if r.name == "causal mask: no look-ahead")
    assert not causal.passed
    assert "sees the future" in causal.feedback


def test_scaling_by_d_model_fails_only_where_there_are_several_heads():
    report = check(mha_scaled_by_sqrt_d_model, name="multi_head_attention")
    by_name = {r.name: r for r in report.results}
    assert not by_name["several head counts"].passed
    assert "sqrt(E) (d_model)" in by_name["several head counts"].diagnosis
    for name in ("per-head weights", "causal mask: no look-ahead"):  # properties hold; their points wait
        assert by_name[name].withheld, name


def test_unscaled_attention_fails_value_tests_and_its_properties_earn_nothing_alone():
    report = check(mha_unscaled, name="multi_head_attention")
    by_name = {r.name: r for r in report.results}
    assert not by_name["fixed small case"].passed
    assert "too peaked" in by_name["fixed small case"].diagnosis
    for name in ("per-head weights", "causal mask: no look-ahead"):
        assert by_name[name].withheld, name


def test_averaging_heads_gives_a_shape_feedback_and_its_diagnosis():
    report = check(mha_averaging_heads, name="multi_head_attention")
    first = report.results[0]
    assert "output has shape (1, 3, 2), expected (1, 3, 4)" in first.feedback
    assert "averaging the heads" in first.diagnosis


def test_head_averaged_weights_fail_the_per_head_weights_test():
    report = check(mha_weights_averaged_over_heads, name="multi_head_attention")
    per_head = next(r for r in report.results if r.name == "per-head weights")
    assert not per_head.passed
    assert "weights has shape" in per_head.feedback and "expected (2, 4, 3, 5)" in per_head.feedback


def test_weights_that_do_not_give_the_output_fail_the_per_head_weights_test():
    report = check(mha_weights_of_the_wrong_heads, name="multi_head_attention")
    per_head = next(r for r in report.results if r.name == "per-head weights")
    assert not per_head.passed
    assert "not what the returned weights give" in per_head.feedback


def test_scores_returned_as_weights_fail_the_per_head_weights_test():
    report = check(mha_returns_scores_as_weights, name="multi_head_attention")
    per_head = next(r for r in report.results if r.name == "per-head weights")
    assert not per_head.passed
    assert "negative" in per_head.feedback or "sum to 1" in per_head.feedback


def test_inverted_mask_fails_every_masked_test_and_passes_the_unmasked_ones():
    report = check(mha_inverted_mask, name="multi_head_attention")
    failed = {r.name for r in report.results if not r.passed}
    assert {"mask (L, S)", "mask per sequence and per head", "padding mask", "fully masked rows"} <= failed
    assert "fixed small case" not in failed and "several head counts" not in failed


def test_large_negative_fills_fail_on_fully_masked_rows_and_under_very_negative_scores_only():
    for fn in (mha_large_negative_mask, mha_with_a_half_precision_safe_fill):
        report = check(fn, name="multi_head_attention")
        failed = {r.name: r for r in report.results if not r.passed and not r.withheld}
        assert set(failed) == {"fully masked rows", "masked keys under very negative scores"}, fn.__name__
        assert "uniform weights" in failed["fully masked rows"].diagnosis
        assert "the masked keys win the weight" in failed["masked keys under very negative scores"].diagnosis


def test_a_minus_1e4_fill_is_named_where_the_real_scores_are_below_minus_1e4():
    report = check(mha_with_a_half_precision_safe_fill, name="multi_head_attention")
    far = next(r for r in report.results if r.name == "masked keys under very negative scores")
    assert "(-1e4)" in far.diagnosis and "float('-inf')" in far.diagnosis


def test_a_multi_head_attention_module_with_its_own_add_and_norm_is_named_on_every_value_test():
    report = check(mha_with_residual_and_layer_norm_inside, name="multi_head_attention")
    assert report.score == 0, str(report)
    assert_diagnosed(report, "belong to the transformer layer around the attention (Add & Norm)")


def test_annotated_transformer_attention_is_named_where_its_extra_mask_axis_still_broadcasts():
    report = check(mha_as_in_the_annotated_transformer, name="multi_head_attention")
    by_name = {r.name: r for r in report.results}
    assert by_name["fixed small case"].passed and by_name["cross-attention"].passed  # no mask: right
    assert "raised RuntimeError" in by_name["mask (L, S)"].feedback  # (L, 1, S) does not broadcast
    assert "mask.unsqueeze(1)" in by_name["padding mask"].diagnosis


def test_split_heads_keeps_integer_and_bool_inputs_as_they_are():
    case = next(c for c in exercise("split_heads").cases() if c.name == "integer and bool inputs")
    assert {c.args[0].dtype for c in case.calls} == {torch.int64, torch.bool}
    report = check(split_heads_by_matmul_with_a_permutation, name="split_heads")
    failed = [r for r in report.results if not r.passed]
    assert [r.name for r in failed] == ["integer and bool inputs"]
    assert failed[0].feedback


def test_nan_on_fully_masked_rows_is_reported_as_nan():
    report = check(sum_form_nan_for_fully_masked_rows, name="multi_head_attention_sum_form")
    failed = [r for r in report.results if not r.passed and not r.withheld]
    assert [r.name for r in failed] == ["fully masked rows"]
    assert "NaN" in failed[0].feedback


def test_unstable_softmax_is_diagnosed_on_the_large_scores_test():
    report = check(mha_unstable_softmax, name="multi_head_attention")
    large = next(r for r in report.results if r.name == "large scores")
    assert not large.passed and "NaN" in large.feedback
    assert "without subtracting the row maximum" in large.diagnosis


def test_w_o_columns_in_the_sum_form_fail_the_comparison_with_the_concatenation_form():
    report = check(sum_form_w_o_columns, name="multi_head_attention_sum_form")
    by_name = {r.name: r for r in report.results}
    assert not by_name["equals the concatenation form"].passed
    assert "concatenation form" in by_name["equals the concatenation form"].feedback
    assert "rows" in by_name["equals the concatenation form"].diagnosis
    assert by_name["cross-attention, several head counts"].points == 0


def test_a_float32_accumulator_in_the_sum_form_is_reported_as_a_dtype_problem():
    report = check(sum_form_float32_accumulator, name="multi_head_attention_sum_form")
    failed = [r for r in report.results if not r.passed]
    assert [r.name for r in failed] == ["equals the concatenation form"]
    assert "dtype torch.float32 for torch.float64 inputs" in failed[0].feedback


FORBIDDEN = [
    ("split_heads", split_heads_using_course_lib, "reference implementation"),
    ("multi_head_attention", mha_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("multi_head_attention", mha_using_torch_module, "torch.nn.MultiheadAttention"),
    ("multi_head_attention", mha_using_multi_head_attention_forward, "multi_head_attention_forward"),
    ("multi_head_attention", mha_using_course_lib, "reference implementation"),
    ("multi_head_attention_sum_form", sum_form_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("multi_head_attention_sum_form", sum_form_using_course_lib, "reference implementation"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*f, id=f[1].__name__) for f in FORBIDDEN])
def test_forbidden_call_is_reported_and_scores_zero(name, fn, phrase):
    assert_forbidden(check(fn, name=name), phrase)


@pytest.mark.parametrize(
    "fn, graded",
    [
        (sum_form_returning_the_concatenation_form, "multi_head_attention"),
        (sum_form_concatenating_with_merge_heads, "merge_heads"),
    ],
)
def test_the_sum_form_may_not_call_the_students_own_concatenation_form_or_merge_heads(fn, graded):
    # "the heads' contributions are added, with no concatenation": multi_head_attention(...)[0]
    # scores full marks on values alone, so the rule is a forbidden call (needs the graded: rule)
    assert f"graded:{graded}" in exercise("multi_head_attention_sum_form").forbidden
    report = check(fn, name="multi_head_attention_sum_form")
    assert report.status == "forbidden", str(report)
    assert report.score == 0
    assert any(graded in n for n in report.notes), report.notes


def test_the_students_own_concatenation_form_is_correct_where_it_is_graded():
    assert_full_marks(check(multi_head_attention, name="multi_head_attention"))
    assert_full_marks(check(merge_heads, name="merge_heads"))


def test_softmax_is_allowed_inside_multi_head_attention():
    # the provided helper uses torch.softmax; only the functions that do the whole job are forbidden
    for name in ("multi_head_attention", "multi_head_attention_sum_form"):
        assert "torch.softmax" not in exercise(name).forbidden
    report = check(mha_softmax_over_queries, name="multi_head_attention")
    assert report.status == "failed"


BROKEN = [
    ("split_heads", split_heads_returns_numpy, "expected a torch.Tensor"),
    ("split_heads", split_heads_raises, "raised IndexError"),
    ("merge_heads", merge_heads_wrong_shape, "shape"),
    ("merge_heads", merge_heads_raises, "raised RuntimeError"),
    ("multi_head_attention", mha_returns_output_only, "single value"),
    ("multi_head_attention", mha_raises, "raised RuntimeError"),
    ("multi_head_attention", mha_returns_nan, "NaN"),
    ("multi_head_attention", mha_returns_dict, "expected a torch.Tensor"),
    ("multi_head_attention_sum_form", sum_form_wrong_shape, "shape"),
    ("multi_head_attention_sum_form", sum_form_returns_tuple, "expected a single tensor"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*b, id=b[1].__name__) for b in BROKEN])
def test_wrong_shape_exception_nan_or_type_gives_failed_tests_with_feedback(name, fn, phrase):
    report = check(fn, name=name)
    assert report.status == "failed"
    assert report.score < report.max_score
    failed = [r for r in report.results if not r.passed]
    assert failed and all(r.feedback for r in failed)
    assert any(phrase in r.feedback for r in failed), [r.feedback for r in failed]
    str(report), report._repr_html_()  # the report renders


def test_the_mistake_variants_reduce_to_the_reference_when_nothing_is_changed():
    ex = exercise("multi_head_attention")
    case = ex.cases()[6]  # masks per sequence and per head
    for call, expected in zip(case.calls, ex.expected()[6], strict=False):
        out, w = ch03._mha_variant(*call.args)
        assert torch.allclose(out, expected[0], atol=1e-6) and torch.allclose(w, expected[1], atol=1e-6)
