"""Specification of the chapter 1 exercises (``course_lib.grading.rubrics.ch01``).

Score functions, attention pooling and Luong's local weights: the references and other
correct implementations score full marks, stubs score 0 as "not implemented", each classic
mistake loses points and is named in the report, forbidden calls score 0, and odd outputs
(wrong shape, exceptions, NaN, wrong types) are failed tests with feedback.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_diagnosed, assert_full_marks

import course_lib
from course_lib.assignments import ASSIGNMENTS
from course_lib.grading import check, judge, run_calls
from course_lib.grading.rubrics import ch01

SLUG = "01_seq2seq_attention"
NAMES = ASSIGNMENTS[SLUG]


# ---------------------------------------------------------------------------------------
# Alternative correct implementations
# ---------------------------------------------------------------------------------------


def dot_score_einsum(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys)


def dot_score_loops(query, keys):
    N, S, _ = keys.shape
    out = torch.zeros(N, S)
    for n in range(N):
        for s in range(S):
            out[n, s] = (query[n] * keys[n, s]).sum()
    return out


def dot_score_numpy(query, keys):
    q, k = query.numpy(), keys.numpy()
    return torch.from_numpy(np.matmul(k, q[:, :, None])[:, :, 0])


def dot_score_bmm(query, keys):
    return torch.bmm(query.unsqueeze(1), keys.transpose(1, 2)).squeeze(1)  # (N, 1, S) -> (N, S)


def scaled_dot_score_einsum(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys) / math.sqrt(query.shape[-1])


def scaled_dot_score_prescaled(query, keys):
    q = query / query.shape[-1] ** 0.5
    return (q.unsqueeze(1) * keys).sum(-1)


def scaled_dot_score_numpy(query, keys):
    q, k = query.numpy(), keys.numpy()
    return torch.from_numpy((k @ q[:, :, None])[:, :, 0] / np.sqrt(q.shape[-1]))


def cosine_score_normalize(query, keys, eps=1e-8):
    q = F.normalize(query, dim=-1, eps=eps)
    k = F.normalize(keys, dim=-1, eps=eps)
    return torch.einsum("nd,nsd->ns", q, k)


def cosine_score_loops(query, keys, eps=1e-8):
    N, S, _ = keys.shape
    out = torch.zeros(N, S)
    for n in range(N):
        qn = max(math.sqrt(float((query[n] ** 2).sum())), eps)
        for s in range(S):
            kn = max(math.sqrt(float((keys[n, s] ** 2).sum())), eps)
            out[n, s] = float((query[n] * keys[n, s]).sum()) / (qn * kn)
    return out


def cosine_score_numpy(query, keys, eps=1e-8):
    q, k = query.double().numpy(), keys.double().numpy()
    qn = np.maximum(np.linalg.norm(q, axis=-1), eps)[:, None]
    kn = np.maximum(np.linalg.norm(k, axis=-1), eps)
    return torch.from_numpy(np.einsum("nd,nsd->ns", q, k) / (qn * kn)).float()


def multiplicative_score_project_keys(query, keys, W):
    return ((keys @ W.T) * query.unsqueeze(1)).sum(-1)  # (N, S, Dq) * (N, 1, Dq) -> (N, S)


def multiplicative_score_einsum(query, keys, W):
    return torch.einsum("ni,ij,nsj->ns", query, W, keys)


def multiplicative_score_loops(query, keys, W):
    N, S, _ = keys.shape
    out = torch.zeros(N, S)
    for n in range(N):
        for s in range(S):
            out[n, s] = query[n] @ W @ keys[n, s]
    return out


def additive_score_concat(query, keys, W_q, W_k, v):
    N, S, _ = keys.shape
    qk = torch.cat([query.unsqueeze(1).expand(N, S, query.shape[-1]), keys], dim=-1)  # (N, S, Dq + Dk)
    W = torch.cat([W_q, W_k], dim=0)  # (Dq + Dk, A)
    return torch.tanh(qk @ W) @ v


def additive_score_einsum(query, keys, W_q, W_k, v):
    hidden = torch.tanh(torch.einsum("nq,qa->na", query, W_q)[:, None] + torch.einsum("nsk,ka->nsa", keys, W_k))
    return torch.einsum("nsa,a->ns", hidden, v)


def additive_score_loops(query, keys, W_q, W_k, v):
    N, S, _ = keys.shape
    out = torch.zeros(N, S)
    for n in range(N):
        for s in range(S):
            out[n, s] = torch.dot(v, torch.tanh(query[n] @ W_q + keys[n, s] @ W_k))
    return out


def attention_pool_nan_to_num(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("ns,nsd->nd", weights, values), weights


def attention_pool_own_softmax(scores, values, mask=None):
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    mask = mask.expand_as(scores)
    m = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m) * mask
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return (weights.unsqueeze(-1) * values).sum(dim=1), weights


def attention_pool_loops(scores, values, mask=None):
    N, S = scores.shape
    weights = torch.zeros(N, S)
    context = torch.zeros(N, values.shape[-1])
    for n in range(N):
        allowed = [s for s in range(S) if mask is None or bool(mask.expand(N, S)[n, s])]
        if not allowed:
            continue
        best = max(float(scores[n, s]) for s in allowed)
        e = {s: math.exp(float(scores[n, s]) - best) for s in allowed}
        total = sum(e.values())
        for s in allowed:
            weights[n, s] = e[s] / total
            context[n] += weights[n, s] * values[n, s]
    return context, weights


def local_attention_weights_where(scores, center, half_window):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    distance = positions - center.unsqueeze(-1)  # (N, S)
    inside = distance.abs() <= half_window
    weights = torch.softmax(torch.where(inside, scores, torch.full_like(scores, float("-inf"))), dim=-1)
    sigma = half_window / 2
    return weights * torch.exp(-(distance**2) / (2 * sigma**2))


def local_attention_weights_loops(scores, center, half_window):
    N, S = scores.shape
    out = torch.zeros(N, S)
    sigma = half_window / 2
    for n in range(N):
        p = float(center[n])
        window = [s for s in range(S) if abs(s - p) <= half_window and float(scores[n, s]) != float("-inf")]
        if not window:
            continue
        best = max(float(scores[n, s]) for s in window)
        total = sum(math.exp(float(scores[n, s]) - best) for s in window)
        for s in window:
            soft = math.exp(float(scores[n, s]) - best) / total
            out[n, s] = soft * math.exp(-((s - p) ** 2) / (2 * sigma**2))
    return out


ALTERNATIVES = [
    (dot_score_einsum, "dot_score"),
    (dot_score_loops, "dot_score"),
    (dot_score_numpy, "dot_score"),
    (dot_score_bmm, "dot_score"),
    (scaled_dot_score_einsum, "scaled_dot_score"),
    (scaled_dot_score_prescaled, "scaled_dot_score"),
    (scaled_dot_score_numpy, "scaled_dot_score"),
    (cosine_score_normalize, "cosine_score"),
    (cosine_score_loops, "cosine_score"),
    (cosine_score_numpy, "cosine_score"),
    (multiplicative_score_project_keys, "multiplicative_score"),
    (multiplicative_score_einsum, "multiplicative_score"),
    (multiplicative_score_loops, "multiplicative_score"),
    (additive_score_concat, "additive_score"),
    (additive_score_einsum, "additive_score"),
    (additive_score_loops, "additive_score"),
    (attention_pool_nan_to_num, "attention_pool"),
    (attention_pool_own_softmax, "attention_pool"),
    (attention_pool_loops, "attention_pool"),
    (local_attention_weights_where, "local_attention_weights"),
    (local_attention_weights_loops, "local_attention_weights"),
]


# ---------------------------------------------------------------------------------------
# The exercise set
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_each_function_is_worth_six_to_twelve_points_in_integers(name):
    ex = next(e for e in ch01.EXERCISES if e.name == name)
    assert 6 <= ex.max_score <= 12
    assert all(float(c.points).is_integer() and c.points >= 1 for c in ex.cases())


@pytest.mark.parametrize("name", NAMES)
def test_cases_are_deterministic_plain_data(name):
    ex = next(e for e in ch01.EXERCISES if e.name == name)
    a, b = ex.make_cases(), ex.make_cases()
    for ca, cb in zip(a, b, strict=True):
        for x, y in zip(ca.calls, cb.calls, strict=True):
            for u, w in zip(
                list(x.args) + list(x.kwargs.values()), list(y.args) + list(y.kwargs.values()), strict=True
            ):
                assert isinstance(u, (torch.Tensor, int, float, bool, str, type(None)))
                if isinstance(u, torch.Tensor):
                    assert torch.equal(u.nan_to_num(), w.nan_to_num())
                else:
                    assert u == w


@pytest.mark.parametrize("fn, name", ALTERNATIVES, ids=[f.__name__ for f, _ in ALTERNATIVES])
def test_alternative_correct_implementations_score_full_marks(fn, name):
    assert_full_marks(check(fn, name=name))


@pytest.mark.parametrize("exercise", ch01.EXERCISES, ids=lambda e: e.name)
def test_each_listed_mistake_gets_its_own_diagnosis_and_no_other(exercise):
    # The unstable softmax also gives NaN on a fully masked row: that diagnosis is true as well.
    also_true = {"_pool_unstable": ("a fully masked row gives NaN",)}
    for mistake in exercise.mistakes:
        report = judge(exercise, run_calls(mistake.implementation, exercise))
        assert report.score < report.max_score, mistake.message
        assert mistake.message in report.diagnoses, mistake.message
        extra = [d for d in report.diagnoses if d != mistake.message]
        allowed = also_true.get(mistake.implementation.__name__, ())
        assert all(any(d.startswith(a) for a in allowed) for d in extra), (mistake.message, extra)


# ---------------------------------------------------------------------------------------
# Not implemented
# ---------------------------------------------------------------------------------------


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


# ---------------------------------------------------------------------------------------
# Classic mistakes, as a student would write them
# ---------------------------------------------------------------------------------------

# dot_score


def dot_score_transposed(query, keys):
    return torch.einsum("nd,nsd->sn", query, keys)


def dot_score_query_as_matrix(query, keys):
    return torch.matmul(query, keys.transpose(-2, -1))


def dot_score_keys_times_query_t(query, keys):
    return torch.matmul(keys, query.t())


def dot_score_without_unsqueeze(query, keys):
    return torch.sum(query * keys, dim=-1)


def dot_score_summed_over_keys(query, keys):
    return torch.sum(query[:, None, :] * keys, dim=1)


# scaled_dot_score


def scaled_dot_score_unscaled(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys)


def scaled_dot_score_by_d(query, keys):
    d = keys.size(-1)
    return torch.einsum("nd,nsd->ns", query, keys) / d


def scaled_dot_score_by_num_keys(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys) / keys.size(1)


def scaled_dot_score_by_sqrt_num_keys(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys) / math.sqrt(keys.size(1))


def scaled_dot_score_times_sqrt_d(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys) * math.sqrt(keys.size(-1))


# cosine_score


def cosine_score_query_only(query, keys, eps=1e-8):
    q = query / query.norm(dim=1, keepdim=True).clamp(min=eps)
    return torch.einsum("nd,nsd->ns", q, keys)


def cosine_score_keys_only(query, keys, eps=1e-8):
    k = keys / keys.norm(dim=2, keepdim=True).clamp(min=eps)
    return torch.einsum("nd,nsd->ns", query, k)


def cosine_score_no_eps(query, keys, eps=1e-8):
    q = query / query.norm(dim=-1, keepdim=True)
    k = keys / keys.norm(dim=-1, keepdim=True)
    return torch.einsum("nd,nsd->ns", q, k)


def cosine_score_unnormalised(query, keys, eps=1e-8):
    return torch.einsum("nd,nsd->ns", query, keys)


def cosine_score_hardcoded_eps(query, keys, eps=1e-8):
    q = query / query.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    k = keys / keys.norm(dim=-1, keepdim=True).clamp(min=1e-8)
    return torch.einsum("nd,nsd->ns", q, k)


def cosine_score_eps_in_denominator(query, keys, eps=1e-8):
    denominator = query.norm(dim=-1)[:, None] * keys.norm(dim=-1) + eps
    return torch.einsum("nd,nsd->ns", query, keys) / denominator


# multiplicative_score


def multiplicative_score_keys_times_w(query, keys, W):
    return ((keys @ W) * query[:, None, :]).sum(-1)


def multiplicative_score_w_t(query, keys, W):
    return torch.einsum("nd,nsd->ns", query @ W.t(), keys)


def multiplicative_score_ignores_w(query, keys, W):
    return torch.einsum("nd,nsd->ns", query, keys)


# additive_score


def additive_score_no_tanh(query, keys, W_q, W_k, v):
    return (query @ W_q)[:, None, :] @ v + (keys @ W_k) @ v


def additive_score_v_before_tanh(query, keys, W_q, W_k, v):
    return torch.tanh(torch.einsum("nsa,a->ns", (query @ W_q).unsqueeze(1) + keys @ W_k, v))


def additive_score_swapped(query, keys, W_q, W_k, v):
    return torch.tanh((keys @ W_q) + (query @ W_k).unsqueeze(1)) @ v


def additive_score_tanh_each(query, keys, W_q, W_k, v):
    return (torch.tanh(query @ W_q)[:, None] + torch.tanh(keys @ W_k)) @ v


# attention_pool


def attention_pool_batch_axis(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, -float("inf"))
    weights = torch.softmax(scores, dim=0)
    return torch.einsum("ns,nsd->nd", weights, values), weights


def attention_pool_mask_after_softmax(scores, values, mask=None):
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return torch.einsum("ns,nsd->nd", weights, values), weights


def attention_pool_inverted_mask(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("ns,nsd->nd", weights, values), weights


def attention_pool_nan_on_empty_rows(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = F.softmax(scores, dim=1)
    return (weights[:, :, None] * values).sum(1), weights


def attention_pool_minus_1e9(scores, values, mask=None):
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-1e9))
    weights = torch.softmax(scores, dim=-1)
    return (weights[:, :, None] * values).sum(1), weights


def attention_pool_unstable(scores, values, mask=None):
    e = torch.exp(scores)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True)
    return (weights[:, :, None] * values).sum(1), weights


def attention_pool_swapped_outputs(scores, values, mask=None):
    context, weights = attention_pool_nan_to_num(scores, values, mask)
    return weights, context


def attention_pool_ignores_mask(scores, values, mask=None):
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("ns,nsd->nd", weights, values), weights


# local_attention_weights


def _window_and_gaussian(scores, center, half_window, sigma):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    distance = positions - center.unsqueeze(-1)
    return distance.abs() <= half_window, torch.exp(-(distance**2) / (2 * sigma**2))


def local_attention_weights_sigma_d(scores, center, half_window):
    inside, gauss = _window_and_gaussian(scores, center, half_window, sigma=half_window)
    return torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1) * gauss


def local_attention_weights_no_window(scores, center, half_window):
    _, gauss = _window_and_gaussian(scores, center, half_window, sigma=half_window / 2)
    return torch.softmax(scores, dim=-1) * gauss


def local_attention_weights_strict(scores, center, half_window):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    distance = positions - center.unsqueeze(-1)
    inside = distance.abs() < half_window
    gauss = torch.exp(-(distance**2) / (2 * (half_window / 2) ** 2))
    return torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1) * gauss


def local_attention_weights_log_gaussian(scores, center, half_window):
    positions = torch.arange(scores.shape[-1], dtype=scores.dtype)
    distance = positions - center.unsqueeze(-1)
    inside = distance.abs() <= half_window
    sigma = half_window / 2
    return torch.softmax((scores - distance**2 / (2 * sigma**2)).masked_fill(~inside, float("-inf")), dim=-1)


def local_attention_weights_gaussian_first(scores, center, half_window):
    inside, gauss = _window_and_gaussian(scores, center, half_window, sigma=half_window / 2)
    return torch.softmax((scores * gauss).masked_fill(~inside, float("-inf")), dim=-1)


def local_attention_weights_zeroed_after_softmax(scores, center, half_window):
    inside, gauss = _window_and_gaussian(scores, center, half_window, sigma=half_window / 2)
    return torch.softmax(scores, dim=-1) * inside * gauss


def local_attention_weights_rounded(scores, center, half_window):
    inside, gauss = _window_and_gaussian(scores, center.round(), half_window, sigma=half_window / 2)
    return torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1) * gauss


def local_attention_weights_no_gaussian(scores, center, half_window):
    inside, _ = _window_and_gaussian(scores, center, half_window, sigma=half_window / 2)
    return torch.softmax(scores.masked_fill(~inside, float("-inf")), dim=-1)


CLASSIC_MISTAKES = [
    (dot_score_transposed, "dot_score", "the result is transposed"),
    (dot_score_query_as_matrix, "dot_score", "query @ keys.transpose(1, 2)"),
    (dot_score_keys_times_query_t, "dot_score", "keys @ query.T"),
    (dot_score_without_unsqueeze, "dot_score", "without unsqueezing the query"),
    (dot_score_summed_over_keys, "dot_score", "over the key axis"),
    (scaled_dot_score_unscaled, "scaled_dot_score", "no scaling"),
    (scaled_dot_score_by_d, "scaled_dot_score", "dividing by D instead of sqrt(D)"),
    (scaled_dot_score_by_num_keys, "scaled_dot_score", "number of keys S"),
    (scaled_dot_score_by_sqrt_num_keys, "scaled_dot_score", "dividing by sqrt(S)"),
    (scaled_dot_score_times_sqrt_d, "scaled_dot_score", "multiplying by sqrt(D)"),
    (cosine_score_query_only, "cosine_score", "query's norm only"),
    (cosine_score_keys_only, "cosine_score", "keys' norms only"),
    (cosine_score_no_eps, "cosine_score", "no eps"),
    (cosine_score_unnormalised, "cosine_score", "not normalising at all"),
    (cosine_score_hardcoded_eps, "cosine_score", "ignoring the eps argument"),
    (cosine_score_eps_in_denominator, "cosine_score", "adding eps to the product of the norms"),
    (multiplicative_score_keys_times_w, "multiplicative_score", "W transposed"),
    (multiplicative_score_w_t, "multiplicative_score", "W transposed"),
    (multiplicative_score_ignores_w, "multiplicative_score", "ignoring W"),
    (additive_score_no_tanh, "additive_score", "missing tanh"),
    (additive_score_v_before_tanh, "additive_score", "applying v before tanh"),
    (additive_score_swapped, "additive_score", "swapping W_q and W_k"),
    (additive_score_tanh_each, "additive_score", "tanh to the two projections separately"),
    (attention_pool_batch_axis, "attention_pool", "softmax over the batch axis"),
    (attention_pool_mask_after_softmax, "attention_pool", "mask after the softmax"),
    (attention_pool_inverted_mask, "attention_pool", "inverted mask"),
    (attention_pool_nan_on_empty_rows, "attention_pool", "fully masked row gives NaN"),
    (attention_pool_minus_1e9, "attention_pool", "large finite number"),
    (attention_pool_unstable, "attention_pool", "without subtracting the row maximum"),
    (attention_pool_swapped_outputs, "attention_pool", "(weights, context) instead of (context, weights)"),
    (attention_pool_ignores_mask, "attention_pool", "ignoring the mask"),
    (local_attention_weights_sigma_d, "local_attention_weights", "sigma = D"),
    (local_attention_weights_no_window, "local_attention_weights", "no window"),
    (local_attention_weights_strict, "local_attention_weights", "use <=, not <"),
    (local_attention_weights_log_gaussian, "local_attention_weights", "renormalising after the Gaussian"),
    (local_attention_weights_gaussian_first, "local_attention_weights", "Gaussian before the softmax"),
    (local_attention_weights_zeroed_after_softmax, "local_attention_weights", "then zeroing those outside"),
    (local_attention_weights_rounded, "local_attention_weights", "rounding the centre"),
    (local_attention_weights_no_gaussian, "local_attention_weights", "forgetting the Gaussian"),
]


@pytest.mark.parametrize("fn, name, phrase", CLASSIC_MISTAKES, ids=[f.__name__ for f, _, _ in CLASSIC_MISTAKES])
def test_classic_mistakes_lose_points_and_are_diagnosed(fn, name, phrase):
    assert_diagnosed(check(fn, name=name), phrase)


def test_scaling_by_d_is_diagnosed_on_every_failed_test():
    report = check(scaled_dot_score_by_d, name="scaled_dot_score")
    assert report.score == 0
    by_d = next(m.message for m in ch01.EXERCISES[1].mistakes if "dividing by D instead" in m.message)
    assert report.diagnoses == [by_d]


def test_a_zero_key_without_eps_fails_the_zero_vector_test_only():
    report = check(cosine_score_no_eps, name="cosine_score")
    failed = {r.name for r in report.results if not r.passed}
    assert "zero vectors" in failed and "eps argument" in failed
    zero = next(r for r in report.results if r.name == "zero vectors")
    assert "NaN" in zero.feedback


def test_a_fully_masked_row_with_nan_loses_only_that_test():
    report = check(attention_pool_nan_on_empty_rows, name="attention_pool")
    failed = [r.name for r in report.results if not r.passed and not r.withheld]
    assert failed == ["fully masked row"]
    assert all(r.points == 0 for r in report.results if r.withheld)  # properties wait for the values


def test_swapping_w_q_and_w_k_fails_with_an_error_when_the_widths_differ():
    report = check(additive_score_swapped, name="additive_score")
    widths = next(r for r in report.results if r.name == "different widths")
    assert not widths.passed and "raised RuntimeError" in widths.feedback


# ---------------------------------------------------------------------------------------
# Forbidden calls
# ---------------------------------------------------------------------------------------


def cosine_score_builtin(query, keys, eps=1e-8):
    return F.cosine_similarity(query.unsqueeze(1), keys, dim=-1, eps=eps)


def cosine_score_torch_alias(query, keys, eps=1e-8):
    return torch.cosine_similarity(query[:, None], keys, dim=-1)


def multiplicative_score_bilinear(query, keys, W):
    S = keys.shape[1]
    q = query.unsqueeze(1).expand(-1, S, -1)  # (N, S, Dq)
    return F.bilinear(q, keys, W.unsqueeze(0)).squeeze(-1)  # (N, S)


def attention_pool_sdpa(scores, values, mask=None):
    context = F.scaled_dot_product_attention(scores.unsqueeze(1), values, values, attn_mask=mask)
    return context.squeeze(1), torch.softmax(scores, dim=-1)


def dot_score_from_course_lib(query, keys):
    return course_lib.dot_score(query, keys)


FORBIDDEN = [
    (cosine_score_builtin, "cosine_score", "cosine_similarity"),
    (cosine_score_torch_alias, "cosine_score", "cosine_similarity"),
    (multiplicative_score_bilinear, "multiplicative_score", "bilinear"),
    (attention_pool_sdpa, "attention_pool", "scaled_dot_product_attention"),
    (dot_score_from_course_lib, "dot_score", "reference implementation"),
]


@pytest.mark.parametrize("fn, name, phrase", FORBIDDEN, ids=[f.__name__ for f, _, _ in FORBIDDEN])
def test_forbidden_calls_score_zero(fn, name, phrase):
    report = check(fn, name=name)
    assert report.status == "forbidden"
    assert report.score == 0
    assert any(phrase in n for n in report.notes), report.notes


def attention_pool_with_torch_softmax(scores, values, mask=None):
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return (weights.unsqueeze(1) @ values).squeeze(1), weights


def test_softmax_from_torch_is_allowed_in_chapter_one():
    assert_full_marks(check(attention_pool_with_torch_softmax, name="attention_pool"))
    assert_full_marks(check(local_attention_weights_where, name="local_attention_weights"))


# ---------------------------------------------------------------------------------------
# Odd outputs: failed tests with feedback, never a crash
# ---------------------------------------------------------------------------------------


def dot_score_numpy_output(query, keys):
    return np.einsum("nd,nsd->ns", query.numpy(), keys.numpy())


def dot_score_raises(query, keys):
    raise ValueError("shapes do not fit")


def dot_score_nan(query, keys):
    return torch.full(keys.shape[:2], float("nan"))


def dot_score_flat(query, keys):
    return torch.einsum("nd,nsd->ns", query, keys).reshape(-1)


def attention_pool_context_only(scores, values, mask=None):
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("ns,nsd->nd", weights, values)


def attention_pool_three_outputs(scores, values, mask=None):
    context, weights = attention_pool_nan_to_num(scores, values, mask)
    return context, weights, scores


def local_attention_weights_integer(scores, center, half_window):
    return torch.zeros(scores.shape, dtype=torch.long)


def test_a_numpy_result_is_a_failed_test_with_feedback():
    report = check(dot_score_numpy_output, name="dot_score")
    assert report.score == 0 and report.status == "failed"
    assert all("expected a torch.Tensor" in r.feedback for r in report.results)


def test_an_exception_is_a_failed_test_with_its_message():
    report = check(dot_score_raises, name="dot_score")
    assert report.score == 0 and report.status == "failed"
    assert all(r.feedback.startswith("raised ValueError") for r in report.results)
    assert all("raised ValueError: shapes do not fit" in r.error for r in report.results)  # said once for them all


def test_nan_outputs_fail_with_feedback():
    report = check(dot_score_nan, name="dot_score")
    assert report.score == 0
    assert all("NaN" in r.feedback for r in report.results)


def test_a_wrong_shape_is_named_in_the_feedback():
    report = check(dot_score_flat, name="dot_score")
    fixed = report.results[0]
    assert not fixed.passed and "has shape (3), expected (1, 3)" in fixed.feedback


def test_a_single_tensor_instead_of_a_tuple_fails_with_feedback():
    report = check(attention_pool_context_only, name="attention_pool")
    assert report.score == 0
    assert "expected a tuple of 2 (context, weights)" in report.results[0].feedback


def test_a_tuple_of_the_wrong_length_fails_with_feedback():
    report = check(attention_pool_three_outputs, name="attention_pool")
    assert report.score == 0
    assert "returned a tuple of 3 values, expected 2" in report.results[0].feedback


def test_an_integer_tensor_fails_with_feedback():
    report = check(local_attention_weights_integer, name="local_attention_weights")
    assert report.score == 0
    assert any("floating-point" in r.feedback for r in report.results)


def test_property_tests_name_the_property_that_fails():
    report = check(cosine_score_unnormalised, name="cosine_score")
    bounded = next(r for r in report.results if r.name == "bounded")
    assert "outside [-1, 1]" in bounded.feedback
    invariance = next(r for r in report.results if r.name == "scale invariance")
    assert "multiplied by positive numbers" in invariance.feedback
    report = check(attention_pool_batch_axis, name="attention_pool")
    sums = next(r for r in report.results if r.name == "weights sum to one")
    assert "do not sum to 1" in sums.feedback
    report = check(local_attention_weights_no_window, name="local_attention_weights")
    window = next(r for r in report.results if r.name == "window property")
    assert "outside the window" in window.feedback


def test_forbidden_calls_are_found_in_notebook_source_too():
    from course_lib.grading.forbidden import violations_in_source

    source = (
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n"
        "def cosine_score(query, keys, eps=1e-8):\n    return nn.CosineSimilarity(dim=-1)(query[:, None], keys)\n"
        "def multiplicative_score(query, keys, W):\n    return torch.bilinear(query, keys, W)\n"
    )
    rules = {ex.name: ex.forbidden for ex in ch01.EXERCISES}
    assert violations_in_source(source, "cosine_score", rules["cosine_score"])
    assert violations_in_source(source, "multiplicative_score", rules["multiplicative_score"])
