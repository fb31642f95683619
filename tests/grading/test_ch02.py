"""Specification of the checks of assignment 02_self_attention (course_lib.grading.rubrics.ch02).

For each graded function (softmax, scaled_dot_product_attention, self_attention):

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
import torch.nn.functional as F
from conftest import assert_diagnosed, assert_forbidden, implementation_id

import course_lib
from course_lib.grading import check, exercise

INF = float("inf")


def _stable(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """A correct softmax (zeros for an all -inf slice), for the attention implementations below."""
    m = scores.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total > 0, total, torch.ones_like(total))


# =============================================================================================
# softmax
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def softmax_by_logsumexp(x, dim=-1):
    lse = torch.logsumexp(x, dim=dim, keepdim=True)
    lse = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(x - lse)


def softmax_in_numpy(x, dim=-1):
    a = x.numpy().astype(np.float64)
    m = np.max(a, axis=dim, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(a - m)
    total = np.sum(e, axis=dim, keepdims=True)
    return torch.from_numpy(e / np.where(total > 0, total, 1.0)).to(x.dtype)


def softmax_by_moving_dim(x, dim=-1):
    y = x.movedim(dim, -1)  # (..., K)
    m = y.max(dim=-1, keepdim=True).values
    m = m.masked_fill(m == -INF, 0.0)
    e = (y - m).exp()
    e = e / e.sum(-1, keepdim=True).clamp_min(1e-30)
    return e.movedim(-1, dim)


# --- wrong ------------------------------------------------------------------------------------


def softmax_unstable(x, dim=-1):
    return x.exp() / x.exp().sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):
    e = torch.exp(x - torch.max(x))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_nan_for_all_minus_inf(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def softmax_over_dim_0(x, dim=-1):
    return _stable(x, dim=0)


def softmax_ignoring_dim(x, dim=-1):
    return _stable(x, dim=-1)


def softmax_not_normalised(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))


def softmax_using_torch_softmax(x, dim=-1):
    return torch.softmax(x, dim=dim)


def softmax_using_functional(x, dim=-1):
    return F.softmax(x, dim=dim)


def softmax_using_method(x, dim=-1):
    return x.softmax(dim)


def softmax_using_course_lib(x, dim=-1):
    return course_lib.softmax(x, dim)


def softmax_wrong_shape(x, dim=-1):
    return _stable(x, dim).sum(dim=dim)


def softmax_raises(x, dim=-1):
    raise ValueError("something went wrong")


def softmax_returns_nan(x, dim=-1):
    return torch.full_like(x, float("nan"))


def softmax_returns_numpy(x, dim=-1):
    return _stable(x, dim).numpy()


# =============================================================================================
# scaled_dot_product_attention
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def sdpa_by_einsum(q, k, v, mask=None):
    scores = torch.einsum("...ld,...sd->...ls", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    weights = _stable(scores)
    return torch.einsum("...ls,...sv->...lv", weights, v), weights


def sdpa_by_loops(q, k, v, mask=None):
    *batch, L, D = q.shape
    S, Dv = k.shape[-2], v.shape[-1]
    shape = torch.broadcast_shapes((*tuple(batch), L, S), mask.shape if mask is not None else (1,))
    m = (mask if mask is not None else torch.ones(1, dtype=torch.bool)).expand(shape).reshape(-1, L, S)
    qf, kf, vf = q.reshape(-1, L, D), k.reshape(-1, S, D), v.reshape(-1, S, Dv)
    out = torch.zeros(qf.shape[0], L, Dv)
    weights = torch.zeros(qf.shape[0], L, S)
    for b in range(qf.shape[0]):
        for i in range(L):
            allowed = [j for j in range(S) if m[b, i, j]]
            if not allowed:
                continue  # zero weights, zero output
            scores = torch.stack([qf[b, i] @ kf[b, j] for j in allowed]) / math.sqrt(D)
            w = torch.exp(scores - scores.max())
            w = w / w.sum()
            for w_j, j in zip(w, allowed, strict=False):
                weights[b, i, j] = w_j
                out[b, i] += w_j * vf[b, j]
    return out.reshape(*batch, L, Dv), weights.reshape(*batch, L, S)


def sdpa_in_numpy(q, k, v, mask=None):
    qn, kn, vn = (t.numpy().astype(np.float64) for t in (q, k, v))
    scores = qn @ np.swapaxes(kn, -1, -2) / np.sqrt(qn.shape[-1])
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(scores - m)
    total = e.sum(axis=-1, keepdims=True)
    weights = e / np.where(total > 0, total, 1.0)
    return torch.from_numpy(weights @ vn).float(), torch.from_numpy(weights).float()


# --- wrong ------------------------------------------------------------------------------------


def _masked_scores(q, k, mask, scale):
    scores = q @ k.transpose(-2, -1) / scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    return scores


def sdpa_unscaled(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, 1.0))
    return w @ v, w


def sdpa_scaled_by_d_k(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, q.shape[-1]))
    return w @ v, w


def sdpa_multiplied_by_sqrt_d_k(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, 1 / math.sqrt(q.size(-1))))
    return w @ v, w


def sdpa_scaled_by_d_v(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(v.shape[-1])))
    return w @ v, w


def sdpa_scaled_by_key_count(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(k.shape[-2])))
    return w @ v, w


def sdpa_softmax_over_queries(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=-2)
    return w @ v, w


def sdpa_unstable_softmax(q, k, v, mask=None):
    e = torch.exp(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])))
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w


def sdpa_ignoring_mask(q, k, v, mask=None):
    w = _stable(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return w @ v, w


def sdpa_mask_after_softmax(q, k, v, mask=None):
    w = _stable(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    if mask is not None:
        w = w.masked_fill(~mask, 0.0)
    return w @ v, w


def sdpa_inverted_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, -INF)
    w = _stable(scores)
    return w @ v, w


def _nan_softmax(scores, dim=-1):
    """A softmax that subtracts the max but gives NaN (0 / 0) for an all -inf row, as torch.softmax."""
    e = torch.exp(scores - scores.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def sdpa_large_negative_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e4)
    w = _nan_softmax(scores)
    return w @ v, w


def sdpa_as_in_the_annotated_transformer(query, key, value, mask=None):
    # The Annotated Transformer's attention(), with the student's own softmax in place of scores.softmax
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = _nan_softmax(scores, dim=-1)
    return torch.matmul(p_attn, value), p_attn


def sdpa_filling_masked_scores_with_a_tiny_number(query, key, value, mask=None):
    d_k = query.size()[-1]
    attention_logits = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        attention_logits.masked_fill_(mask == 0, 1e-15)
    attention = _stable(attention_logits, dim=-1)
    return torch.matmul(attention, value), attention


def sdpa_softmax_over_dim_1(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=1)
    return w @ v, w


def sdpa_nan_for_fully_masked_rows(q, k, v, mask=None):
    w = _nan_softmax(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=-1)
    return w @ v, w


def sdpa_calling_the_softmax_method(query, key, value, mask=None):
    # the Annotated Transformer's own line: scores.softmax(dim=-1)
    scores = _masked_scores(query, key, mask, math.sqrt(query.size(-1)))
    p_attn = scores.softmax(dim=-1)
    return p_attn @ value, p_attn


def sdpa_calling_torch_softmax(q, k, v, mask=None):
    w = torch.softmax(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=-1)
    return w @ v, w


def sdpa_calling_functional_softmax(q, k, v, mask=None):
    w = F.softmax(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=-1)
    return w @ v, w


def sdpa_weights_transposed(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])))
    return w @ v, w.transpose(-1, -2)


def sdpa_outputs_swapped(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])))
    return w, w @ v


def sdpa_keys_as_values(q, k, v, mask=None):
    w = _stable(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])))
    return w @ k, w


def sdpa_using_torch_sdpa(q, k, v, mask=None):
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out, out


def sdpa_using_multihead_forward(q, k, v, mask=None):
    return torch.nn.functional.multi_head_attention_forward(
        q, k, v, q.shape[-1], 1, None, None, None, None, False, 0.0, None, None
    )


def sdpa_using_course_lib(q, k, v, mask=None):
    return course_lib.scaled_dot_product_attention(q, k, v, mask)


def sdpa_returns_output_only(q, k, v, mask=None):
    return sdpa_by_einsum(q, k, v, mask)[0]


def sdpa_raises(q, k, v, mask=None):
    return torch.matmul(q, k) @ v, None  # forgot the transpose: a shape error


def sdpa_returns_nan(q, k, v, mask=None):
    out, w = sdpa_by_einsum(q, k, v, mask)
    return out * float("nan"), w


def sdpa_returns_lists(q, k, v, mask=None):
    out, w = sdpa_by_einsum(q, k, v, mask)
    return out.tolist(), w.tolist()


# =============================================================================================
# self_attention
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def self_attention_by_einsum(x, W_q, W_k, W_v, mask=None):
    q = torch.einsum("nte,ed->ntd", x, W_q)
    k = torch.einsum("nte,ed->ntd", x, W_k)
    v = torch.einsum("nte,ev->ntv", x, W_v)
    return sdpa_by_einsum(q, k, v, mask)


def self_attention_by_loops(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_loops(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_with_linear(x, W_q, W_k, W_v, mask=None):
    # F.linear(x, W) computes x @ W.T, so pass the transposes
    q, k, v = F.linear(x, W_q.T), F.linear(x, W_k.T), F.linear(x, W_v.T)
    return sdpa_in_numpy(q, k, v, mask)


# --- wrong ------------------------------------------------------------------------------------


def self_attention_transposed_weights(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_einsum(x @ W_q.T, x @ W_k.T, x @ W_v.T, mask)


def self_attention_x_as_values(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_einsum(x @ W_q, x @ W_k, x, mask)


def self_attention_swapped_q_and_k(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_einsum(x @ W_k, x @ W_q, x @ W_v, mask)


def self_attention_unscaled(x, W_q, W_k, W_v, mask=None):
    return sdpa_unscaled(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_scaled_by_d_model(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ k.transpose(1, 2) / math.sqrt(x.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    w = _stable(scores)
    return w @ v, w


def self_attention_scaled_by_d_k(x, W_q, W_k, W_v, mask=None):
    return sdpa_scaled_by_d_k(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_scaled_by_d_v(x, W_q, W_k, W_v, mask=None):
    return sdpa_scaled_by_d_v(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_dropping_mask(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_einsum(x @ W_q, x @ W_k, x @ W_v)


def self_attention_softmax_over_queries(x, W_q, W_k, W_v, mask=None):
    return sdpa_softmax_over_queries(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_weights_transposed(x, W_q, W_k, W_v, mask=None):
    return sdpa_weights_transposed(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_large_negative_mask(x, W_q, W_k, W_v, mask=None):
    return sdpa_large_negative_mask(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_nan_for_fully_masked_rows(x, W_q, W_k, W_v, mask=None):
    return sdpa_nan_for_fully_masked_rows(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_as_in_the_annotated_transformer(x, W_q, W_k, W_v, mask=None):
    return sdpa_as_in_the_annotated_transformer(x @ W_q, x @ W_k, x @ W_v, mask)


def self_attention_filling_masked_scores_with_zero(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores * mask  # masked scores become 0
    w = _stable(scores)
    return w @ v, w


def self_attention_calling_torch_softmax(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    w = torch.softmax(_masked_scores(q, k, mask, math.sqrt(q.shape[-1])), dim=-1)
    return w @ v, w


def self_attention_using_torch_sdpa(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None


def self_attention_using_multihead_module(x, W_q, W_k, W_v, mask=None):
    mha = torch.nn.MultiheadAttention(x.shape[-1], 1, batch_first=True)
    return mha(x, x, x)


def self_attention_using_course_lib(x, W_q, W_k, W_v, mask=None):
    return course_lib.self_attention(x, W_q, W_k, W_v, mask)


def self_attention_wrong_shape(x, W_q, W_k, W_v, mask=None):
    out, w = sdpa_by_einsum(x @ W_q, x @ W_k, x @ W_v, mask)
    return out.transpose(1, 2), w


def self_attention_raises(x, W_q, W_k, W_v, mask=None):
    return sdpa_by_einsum(W_q @ x, W_k @ x, W_v @ x, mask)  # wrong order: a shape error


def self_attention_returns_nan(x, W_q, W_k, W_v, mask=None):
    out, w = sdpa_by_einsum(x @ W_q, x @ W_k, x @ W_v, mask)
    return out, w / 0 * 0


def self_attention_returns_dict(x, W_q, W_k, W_v, mask=None):
    out, w = sdpa_by_einsum(x @ W_q, x @ W_k, x @ W_v, mask)
    return {"output": out, "weights": w}


# =============================================================================================
# tests
# =============================================================================================

FUNCTIONS = ["softmax", "scaled_dot_product_attention", "self_attention"]

CORRECT = [
    ("softmax", softmax_by_logsumexp),
    ("softmax", softmax_in_numpy),
    ("softmax", softmax_by_moving_dim),
    ("scaled_dot_product_attention", sdpa_by_einsum),
    ("scaled_dot_product_attention", sdpa_by_loops),
    ("scaled_dot_product_attention", sdpa_in_numpy),
    ("self_attention", self_attention_by_einsum),
    ("self_attention", self_attention_by_loops),
    ("self_attention", self_attention_with_linear),
]


@pytest.mark.parametrize("name, fn", [pytest.param(n, f, id=implementation_id(f)) for n, f in CORRECT])
def test_alternative_correct_implementations_score_full_marks(name, fn):
    report = check(fn, name=name)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score
    assert report.diagnoses == []


@pytest.mark.parametrize("name, total", [("softmax", 10), ("scaled_dot_product_attention", 13), ("self_attention", 11)])
def test_points_per_function(name, total):
    ex = exercise(name)
    assert ex.max_score == total
    assert all(float(c.points).is_integer() and c.points >= 1 for c in ex.cases())


MISTAKES = [
    # softmax
    ("softmax", softmax_unstable, "without subtracting the max"),
    ("softmax", softmax_global_max, "max of the whole tensor"),
    ("softmax", softmax_nan_for_all_minus_inf, "entirely -inf gives NaN"),
    ("softmax", softmax_over_dim_0, "over dim 0"),
    ("softmax", softmax_ignoring_dim, "ignoring the `dim` argument"),
    ("softmax", softmax_not_normalised, "divide by the sum"),
    # scaled_dot_product_attention
    ("scaled_dot_product_attention", sdpa_unscaled, "sqrt(d_k) times too sharp"),
    ("scaled_dot_product_attention", sdpa_scaled_by_d_k, "by d_k instead of sqrt(d_k)"),
    ("scaled_dot_product_attention", sdpa_multiplied_by_sqrt_d_k, "multiplying the scores by sqrt(d_k)"),
    ("scaled_dot_product_attention", sdpa_scaled_by_d_v, "sqrt(d_v)"),
    ("scaled_dot_product_attention", sdpa_scaled_by_key_count, "sqrt(S), the number of keys"),
    ("scaled_dot_product_attention", sdpa_softmax_over_queries, "softmax over the queries"),
    ("scaled_dot_product_attention", sdpa_unstable_softmax, "unstable softmax"),
    ("scaled_dot_product_attention", sdpa_ignoring_mask, "ignoring the mask"),
    ("scaled_dot_product_attention", sdpa_mask_after_softmax, "mask after the softmax"),
    ("scaled_dot_product_attention", sdpa_inverted_mask, "inverting the mask"),
    ("scaled_dot_product_attention", sdpa_large_negative_mask, "large negative number (-1e4) instead of -inf"),
    ("scaled_dot_product_attention", sdpa_as_in_the_annotated_transformer, "large negative number (-1e9)"),
    ("scaled_dot_product_attention", sdpa_softmax_over_dim_1, "softmax over dim 1"),
    ("scaled_dot_product_attention", sdpa_filling_masked_scores_with_a_tiny_number, "filling masked scores with 0"),
    ("scaled_dot_product_attention", sdpa_nan_for_fully_masked_rows, "returns NaN when a whole row"),
    ("scaled_dot_product_attention", sdpa_weights_transposed, "weights transposed"),
    ("scaled_dot_product_attention", sdpa_outputs_swapped, "(weights, output) instead of (output, weights)"),
    ("scaled_dot_product_attention", sdpa_keys_as_values, "by the keys instead of the values"),
    # self_attention
    ("self_attention", self_attention_transposed_weights, "transposed weights (x @ W.T)"),
    ("self_attention", self_attention_x_as_values, "x itself as the values"),
    ("self_attention", self_attention_swapped_q_and_k, "swapping W_q and W_k"),
    ("self_attention", self_attention_unscaled, "sqrt(d_k) times too sharp"),
    ("self_attention", self_attention_scaled_by_d_model, "sqrt(E), the width of x (d_model)"),
    ("self_attention", self_attention_scaled_by_d_k, "by d_k instead of sqrt(d_k)"),
    ("self_attention", self_attention_scaled_by_d_v, "sqrt(d_v)"),
    ("self_attention", self_attention_dropping_mask, "not passing the mask on"),
    ("self_attention", self_attention_softmax_over_queries, "softmax over the queries"),
    ("self_attention", self_attention_weights_transposed, "weights transposed"),
    ("self_attention", self_attention_large_negative_mask, "large negative number (-1e4) instead of -inf"),
    ("self_attention", self_attention_as_in_the_annotated_transformer, "large negative number (-1e9)"),
    ("self_attention", self_attention_filling_masked_scores_with_zero, "filling masked scores with 0"),
    ("self_attention", self_attention_nan_for_fully_masked_rows, "returns NaN when a whole row"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*m, id=m[1].__name__) for m in MISTAKES])
def test_classic_mistake_loses_points_and_is_diagnosed(name, fn, phrase):
    assert_diagnosed(check(fn, name=name), phrase)


def test_unstable_attention_is_diagnosed_on_the_large_magnitude_test():
    report = check(sdpa_unstable_softmax, name="scaled_dot_product_attention")
    large = next(r for r in report.results if r.name == "large magnitudes")
    assert not large.passed and "unstable softmax" in large.diagnosis
    assert "NaN" in large.feedback


def test_unscaled_attention_fails_value_tests_and_its_properties_earn_nothing_alone():
    report = check(sdpa_unscaled, name="scaled_dot_product_attention")
    by_name = {r.name: r for r in report.results}
    assert not by_name["fixed small case"].passed
    assert "too sharp" in by_name["fixed small case"].diagnosis
    assert by_name["single key (S = 1)"].passed
    for name in ("weights sum to 1", "causal mask", "permutation"):  # they hold, but their points wait
        assert by_name[name].withheld and by_name[name].points == 0, name


def test_inverted_mask_fails_the_future_invariance_test():
    report = check(sdpa_inverted_mask, name="scaled_dot_product_attention")
    causal = next(r for r in report.results if r.name == "causal mask")
    assert not causal.passed and causal.feedback


def test_ignoring_the_mask_in_self_attention_fails_the_future_invariance_test():
    report = check(self_attention_dropping_mask, name="self_attention")
    causal = next(r for r in report.results if r.name == "causal: future invariance")
    assert not causal.passed
    assert "earlier" in causal.feedback or "later keys" in causal.feedback


def test_large_negative_mask_fails_on_fully_masked_rows_and_under_very_negative_scores_only():
    report = check(sdpa_large_negative_mask, name="scaled_dot_product_attention")
    failed = {r.name: r for r in report.results if not r.passed and not r.withheld}
    assert set(failed) == {"fully masked row", "masked keys under very negative scores"}
    assert "uniform weights" in failed["fully masked row"].diagnosis
    assert "below -1e4 the masked keys win" in failed["masked keys under very negative scores"].diagnosis


def test_a_minus_1e4_fill_lets_masked_keys_win_when_the_real_scores_are_below_it():
    # scores about -1e5: a fill of -1e4 is the largest score of the row, a fill of -1e9 is not
    ex = exercise("scaled_dot_product_attention")
    case = next(c for c in ex.cases() if c.name == "masked keys under very negative scores")
    call = case.calls[0]
    _, w = sdpa_large_negative_mask(*call.args, **call.kwargs)
    blocked = ~call.kwargs["mask"]
    assert torch.allclose(w.masked_fill(~blocked, 0.0).sum(-1), torch.ones(w.shape[:-1]))
    _, w9 = sdpa_as_in_the_annotated_transformer(*call.args, **call.kwargs)
    assert float(w9.masked_fill(~blocked, 0.0).sum()) == 0.0


def test_annotated_transformer_attention_with_a_minus_1e9_fill_is_named_on_both_of_its_failures():
    report = check(sdpa_as_in_the_annotated_transformer, name="scaled_dot_product_attention")
    failed = {r.name: r for r in report.results if not r.passed and not r.withheld}
    assert set(failed) == {"fully masked row", "masked keys under very negative scores"}
    for r in failed.values():
        assert "(-1e9) instead of -inf" in r.diagnosis and "float('-inf')" in r.diagnosis


def test_softmax_over_dim_1_is_named_where_dim_1_is_a_batch_dim():
    report = check(sdpa_softmax_over_dim_1, name="scaled_dot_product_attention")
    extra = next(r for r in report.results if r.name == "extra batch dims")
    assert not extra.passed and "over dim 1" in extra.diagnosis
    fixed = next(r for r in report.results if r.name == "fixed small case")  # 3-d: dim 1 is the queries
    assert not fixed.passed and "over dim 1" in fixed.diagnosis
    # softmax over the queries matches on the 3-d tests only: dim 1 explains more, and alone
    assert not any("over the queries (dim -2)" in d for d in report.diagnoses)


FORBIDDEN = [
    ("softmax", softmax_using_torch_softmax, "torch.softmax"),
    ("softmax", softmax_using_functional, "torch.nn.functional.softmax"),
    ("softmax", softmax_using_method, ".softmax()"),
    ("softmax", softmax_using_course_lib, "reference implementation"),
    ("scaled_dot_product_attention", sdpa_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("scaled_dot_product_attention", sdpa_using_multihead_forward, "multi_head_attention_forward"),
    ("scaled_dot_product_attention", sdpa_using_course_lib, "reference implementation"),
    ("scaled_dot_product_attention", sdpa_calling_torch_softmax, "torch.softmax"),
    ("scaled_dot_product_attention", sdpa_calling_functional_softmax, "torch.nn.functional.softmax"),
    ("scaled_dot_product_attention", sdpa_calling_the_softmax_method, ".softmax()"),
    ("self_attention", self_attention_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("self_attention", self_attention_using_multihead_module, "torch.nn.MultiheadAttention"),
    ("self_attention", self_attention_using_course_lib, "reference implementation"),
    ("self_attention", self_attention_calling_torch_softmax, "torch.softmax"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*f, id=f[1].__name__) for f in FORBIDDEN])
def test_forbidden_call_is_reported_and_scores_zero(name, fn, phrase):
    assert_forbidden(check(fn, name=name), phrase)


def test_attention_must_call_the_students_own_softmax_not_torchs():
    # the notebook: "call your own softmax instead"; self_attention calls your own attention
    for name in ("scaled_dot_product_attention", "self_attention"):
        assert set(exercise("softmax").forbidden) <= set(exercise(name).forbidden), name
    report = check(sdpa_nan_for_fully_masked_rows, name="scaled_dot_product_attention")  # its own softmax
    assert report.status == "failed"
    assert sum(r.passed for r in report.results) > 0


def test_the_reference_attention_runs_no_softmax_operator_under_the_runtime_watch():
    from course_lib.grading import run_calls
    from course_lib.grading.judging import runtime_violations

    for name in ("scaled_dot_product_attention", "self_attention"):
        ex = exercise(name)
        assert runtime_violations(run_calls(getattr(course_lib, name), ex)) == [], name


BROKEN = [
    ("softmax", softmax_wrong_shape, "shape"),
    ("softmax", softmax_raises, "raised ValueError: something went wrong"),
    ("softmax", softmax_returns_nan, "NaN"),
    ("softmax", softmax_returns_numpy, "expected a torch.Tensor"),
    ("scaled_dot_product_attention", sdpa_returns_output_only, "single value"),
    ("scaled_dot_product_attention", sdpa_raises, "raised RuntimeError"),
    ("scaled_dot_product_attention", sdpa_returns_nan, "NaN"),
    ("scaled_dot_product_attention", sdpa_returns_lists, "expected a torch.Tensor"),
    ("self_attention", self_attention_wrong_shape, "shape"),
    ("self_attention", self_attention_raises, "raised RuntimeError"),
    ("self_attention", self_attention_returns_nan, "NaN"),
    ("self_attention", self_attention_returns_dict, "expected a torch.Tensor"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*b, id=b[1].__name__) for b in BROKEN])
def test_wrong_shape_exception_nan_or_type_gives_failed_tests_with_feedback(name, fn, phrase):
    report = check(fn, name=name)
    assert report.status == "failed"
    assert report.score < report.max_score
    failed = [r for r in report.results if not r.passed]
    assert failed and all(r.feedback for r in failed)
    # an error's message is said once for its tests (``error``); each test names the exception
    assert any(phrase in r.feedback + " " + r.error for r in failed), [r.feedback for r in failed]
    str(report), report._repr_html_()  # the report renders
