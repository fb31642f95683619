"""Specification of the checks of assignment 07_efficient_attention (course_lib.grading.rubrics.ch07).

For each graded function (tiled_attention, sliding_window_mask, cached_attention_step):

- the reference and correct implementations written differently score full marks;
- each classic mistake, written here the way a student might write it, loses points and is
  named in ``report.diagnoses``;
- tiled attention that computes the whole (L, S) score matrix, or ignores ``block_size``,
  gives the right numbers but loses points: its temporaries are too large;
- a forbidden call gives status "forbidden" and 0 points.

The implementations are module-level functions so that the forbidden-call check can read
their source.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_diagnosed, assert_forbidden, assert_full_marks, implementation_id

import course_lib
from course_lib.grading import check, exercise, judge, run_calls
from course_lib.grading.rubrics.ch07 import TEMPORARY_MESSAGE

INF = float("inf")


# =============================================================================================
# tiled_attention
# =============================================================================================

# --- correct ----------------------------------------------------------------------------------


def tiled_normalised_as_it_goes(q, k, v, mask=None, block_size=128):
    """Keeps the output normalised after every block, with the log of the denominator."""
    S = k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    out = None
    lse = None  # log of the running denominator, relative to nothing: log(sum e^x)
    for start in range(0, S, block_size):
        stop = min(start + block_size, S)
        x = (q @ k[..., start:stop, :].transpose(-2, -1)) * scale  # (*, L, B)
        if mask is not None:
            x = torch.where(mask[..., start:stop] if mask.shape[-1] == S else mask, x, -INF)
        block_lse = torch.logsumexp(x, dim=-1, keepdim=True)  # (*, L, 1), -inf where all masked
        safe = torch.where(torch.isfinite(block_lse), block_lse, torch.zeros_like(block_lse))
        block_out = torch.exp(x - safe) @ v[..., start:stop, :]  # normalised within the block
        if out is None:
            out, lse = block_out, block_lse
            continue
        new_lse = torch.logaddexp(lse, block_lse)  # (*, L, 1)
        new_safe = torch.where(torch.isfinite(new_lse), new_lse, torch.zeros_like(new_lse))
        w_old = torch.exp(lse - new_safe)  # share of the keys seen before
        w_new = torch.exp(block_lse - new_safe)
        out = w_old * out + w_new * block_out
        lse = new_lse
    return out


def tiled_two_passes(q, k, v, mask=None, block_size=128):
    """First pass: each row's maximum and denominator, block by block; second pass: the values."""
    S = k.shape[-2]
    q = q / q.shape[-1] ** 0.5
    blocks = []
    for start in range(0, S, block_size):
        keys = slice(start, start + block_size)
        blocks.append((keys, None if mask is None else mask[..., keys]))

    def scores_of(keys, m):
        s = q @ k[..., keys, :].transpose(-2, -1)
        return s if m is None else s.masked_fill(~m, -INF)

    row_max = None
    for keys, m in blocks:
        block_max = scores_of(keys, m).amax(-1, keepdim=True)
        row_max = block_max if row_max is None else torch.maximum(row_max, block_max)
    row_max = row_max.nan_to_num(neginf=0.0)
    total, acc = 0, 0
    for keys, m in blocks:
        p = torch.exp(scores_of(keys, m) - row_max)
        total = total + p.sum(-1, keepdim=True)
        acc = acc + p @ v[..., keys, :]
    return acc / total.clamp_min(1e-30)


# --- wrong ------------------------------------------------------------------------------------


def _batch_and_queries(q, k):
    """(*, L): the broadcast batch dims and the number of queries (one score per query)."""
    return (q @ k[..., :1, :].transpose(-2, -1)).shape[:-1]


def _online(q, k, v, mask, block_size, update, finish=None, fill=-INF, stop=None):
    """A student's loop skeleton: state (m, l, acc) updated by ``update`` per block."""
    S = k.shape[-2]
    out_shape = _batch_and_queries(q, k)
    m = torch.full((*out_shape, 1), -INF)
    l = torch.zeros(*out_shape, 1)
    acc = torch.zeros(*out_shape, v.shape[-1])
    for i in range(0, S if stop is None else stop(S, block_size), block_size):
        s = q @ k[..., i : i + block_size, :].transpose(-2, -1)
        if mask is not None:
            s = s.masked_fill(~mask.expand(*out_shape, S)[..., i : i + block_size], fill)
        m, l, acc = update(s, v[..., i : i + block_size, :], m, l, acc)
    if finish is not None:
        return finish(acc, l)
    return acc / torch.where(l == 0, torch.ones_like(l), l)


def _scaled(q):
    return q / math.sqrt(q.shape[-1])


def tiled_forgets_to_rescale_acc(q, k, v, mask=None, block_size=128):
    def update(s, vb, m, l, acc):
        m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
        m2s = torch.where(m2 == -INF, torch.zeros_like(m2), m2)
        p = torch.exp(s - m2s)
        return m2, torch.exp(m - m2s) * l + p.sum(-1, keepdim=True), acc + p @ vb

    return _online(_scaled(q), k, v, mask, block_size, update)


def tiled_forgets_to_rescale_denominator(q, k, v, mask=None, block_size=128):
    def update(s, vb, m, l, acc):
        m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
        m2s = torch.where(m2 == -INF, torch.zeros_like(m2), m2)
        p = torch.exp(s - m2s)
        return m2, l + p.sum(-1, keepdim=True), torch.exp(m - m2s) * acc + p @ vb

    return _online(_scaled(q), k, v, mask, block_size, update)


def tiled_forgets_to_rescale_both(q, k, v, mask=None, block_size=128):
    def update(s, vb, m, l, acc):
        m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
        p = torch.exp(s - torch.where(m2 == -INF, torch.zeros_like(m2), m2))
        return m2, l + p.sum(-1, keepdim=True), acc + p @ vb

    return _online(_scaled(q), k, v, mask, block_size, update)


def _correct_update(s, vb, m, l, acc):
    m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
    m2s = torch.where(m2 == -INF, torch.zeros_like(m2), m2)
    p = torch.exp(s - m2s)
    c = torch.exp(m - m2s)
    return m2, c * l + p.sum(-1, keepdim=True), c * acc + p @ vb


def tiled_unscaled(q, k, v, mask=None, block_size=128):
    return _online(q, k, v, mask, block_size, _correct_update)


def tiled_nan_in_fully_masked_block(q, k, v, mask=None, block_size=128):
    def update(s, vb, m, l, acc):
        m2 = torch.maximum(m, s.max(-1, keepdim=True).values)
        p = torch.exp(s - m2)  # -inf - (-inf) = NaN while nothing was allowed yet
        c = torch.exp(m - m2)
        return m2, c * l + p.sum(-1, keepdim=True), c * acc + p @ vb

    return _online(_scaled(q), k, v, mask, block_size, update)


def tiled_nan_for_fully_masked_rows(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, mask, block_size, _correct_update, finish=lambda acc, l: acc / l)


def tiled_large_negative_mask(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, mask, block_size, _correct_update, fill=-1e9)


def tiled_ignoring_mask(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, None, block_size, _correct_update)


def tiled_drops_the_last_partial_block(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, mask, block_size, _correct_update, stop=lambda S, B: S // B * B)


def tiled_without_running_max(q, k, v, mask=None, block_size=128):
    def update(s, vb, m, l, acc):
        p = s.exp()
        return m, l + p.sum(-1, keepdim=True), acc + p @ vb

    return _online(_scaled(q), k, v, mask, block_size, update)


def tiled_not_dividing_at_the_end(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, mask, block_size, _correct_update, finish=lambda acc, l: acc)


def tiled_in_name_only(q, k, v, mask=None, block_size=128):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # the whole (*, L, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    m = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    return (e / e.sum(-1, keepdim=True).clamp_min(1e-30)) @ v


def tiled_with_a_fixed_block_of_128(q, k, v, mask=None, block_size=128):
    return _online(_scaled(q), k, v, mask, 128, _correct_update)


def tiled_with_an_additive_mask(q, k, v, mask=None, block_size=128):
    bias = None
    if mask is not None:  # a float (L, S) tensor: as large as the scores
        bias = torch.zeros(mask.shape).masked_fill(~mask, -INF)

    def update(s, vb, m, l, acc):
        return _correct_update(s, vb, m, l, acc)

    S = k.shape[-2]
    q = _scaled(q)
    out_shape = _batch_and_queries(q, k)
    m, l, acc = torch.full((*out_shape, 1), -INF), torch.zeros(*out_shape, 1), torch.zeros(*out_shape, v.shape[-1])
    for i in range(0, S, block_size):
        s = q @ k[..., i : i + block_size, :].transpose(-2, -1)
        if bias is not None:
            s = s + bias[..., i : i + block_size]
        m, l, acc = update(s, v[..., i : i + block_size, :], m, l, acc)
    return acc / torch.where(l == 0, torch.ones_like(l), l)


def tiled_using_torch_softmax(q, k, v, mask=None, block_size=128):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -INF)
    return torch.softmax(scores, dim=-1).nan_to_num() @ v


def tiled_using_softmax_per_block(q, k, v, mask=None, block_size=128):
    # a softmax inside the loop is forbidden too (it would hide the online update)
    outs = [
        F.softmax(q @ k[..., i : i + block_size, :].transpose(-2, -1), dim=-1) @ v[..., i : i + block_size, :]
        for i in range(0, k.shape[-2], block_size)
    ]
    return sum(outs) / len(outs)


def tiled_using_torch_sdpa(q, k, v, mask=None, block_size=128):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def tiled_using_course_lib(q, k, v, mask=None, block_size=128):
    return course_lib.tiled_attention(q, k, v, mask, block_size)


# =============================================================================================
# sliding_window_mask
# =============================================================================================


def window_by_tril_and_triu(L, S=None, *, window, causal=False):
    S = L if S is None else S
    ones = torch.ones(L, S, dtype=torch.bool)
    upper = 0 if causal else window
    return ones.tril(upper) & ones.triu(-window)


def window_by_loops(L, S=None, *, window, causal=False):
    S = S or L
    mask = torch.zeros(L, S, dtype=torch.bool)
    for i in range(L):
        for j in range(S):
            mask[i, j] = (0 <= i - j <= window) if causal else (abs(i - j) <= window)
    return mask


def window_strict(L, S=None, *, window, causal=False):
    d = torch.arange(L)[:, None] - torch.arange(S or L)[None, :]
    return ((d >= 0) & (d < window)) if causal else (d.abs() < window)


def window_one_too_wide(L, S=None, *, window, causal=False):
    d = torch.arange(L).unsqueeze(1) - torch.arange(S or L).unsqueeze(0)
    return ((d >= 0) & (d <= window + 1)) if causal else (d.abs() <= window + 1)


def window_looking_forwards(L, S=None, *, window, causal=False):
    d = torch.arange(S or L)[None, :] - torch.arange(L)[:, None]  # j - i
    return ((d >= 0) & (d <= window)) if causal else (d.abs() <= window)


def window_ignoring_causal(L, S=None, *, window, causal=False):
    d = torch.arange(L)[:, None] - torch.arange(S or L)[None, :]
    return d.abs() <= window


def window_without_lower_bound(L, S=None, *, window, causal=False):
    d = torch.arange(L)[:, None] - torch.arange(S or L)[None, :]
    return (d <= window) if causal else (d.abs() <= window)


def window_excluding_the_query(L, S=None, *, window, causal=False):
    d = torch.arange(L)[:, None] - torch.arange(S or L)[None, :]
    return ((d > 0) & (d <= window)) if causal else (d.abs() <= window)


def window_square(L, S=None, *, window, causal=False):
    return window_by_tril_and_triu(L, window=window, causal=causal)


def window_as_floats(L, S=None, *, window, causal=False):
    return window_by_tril_and_triu(L, S, window=window, causal=causal).float()


def window_using_course_lib(L, S=None, *, window, causal=False):
    return course_lib.sliding_window_mask(L, S, window=window, causal=causal)


# =============================================================================================
# cached_attention_step
# =============================================================================================


def _attend(q, K, V, scale=True):
    s = q @ K.transpose(-1, -2)
    if scale:
        s = s / math.sqrt(q.size(-1))
    return torch.softmax(s, dim=-1) @ V  # torch.softmax is allowed here


def kv_by_einsum(q, k, v, cache=None):
    K = k if cache is None else torch.cat((cache[0], k), dim=2)
    V = v if cache is None else torch.cat((cache[1], v), dim=2)
    s = torch.einsum("nhqd,nhkd->nhqk", q, K) / q.shape[-1] ** 0.5
    w = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.einsum("nhqk,nhkd->nhqd", w / w.sum(-1, keepdim=True), V), (K, V)


def kv_by_loops(q, k, v, cache=None):
    K = k.clone() if cache is None else torch.cat([cache[0], k], -2)
    V = v.clone() if cache is None else torch.cat([cache[1], v], -2)
    N, H, _, D = q.shape
    out = torch.empty_like(q)
    for n in range(N):
        for h in range(H):
            out[n, h] = torch.softmax(q[n, h] @ K[n, h].T / math.sqrt(D), dim=-1) @ V[n, h]
    return out, (K, V)


def kv_cat_on_heads(q, k, v, cache=None):
    if cache is None:
        return _attend(q, k, v), (k, v)
    K, V = torch.cat([cache[0], k], dim=1), torch.cat([cache[1], v], dim=1)
    return _attend(q, K, V), (K, V)


def kv_cat_on_batch(q, k, v, cache=None):
    if cache is None:
        return _attend(q, k, v), (k, v)
    K, V = torch.cat([cache[0], k]), torch.cat([cache[1], v])  # dim=0 by default
    return _attend(q, K, V), (K, V)


def kv_cat_on_features(q, k, v, cache=None):
    if cache is None:
        return _attend(q, k, v), (k, v)
    K, V = torch.cat([cache[0], k], dim=-1), torch.cat([cache[1], v], dim=-1)
    return _attend(q, K, V), (K, V)


def kv_returns_the_old_cache(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    return _attend(q, K, V), cache


def kv_attends_over_the_cache_only(q, k, v, cache=None):
    if cache is None:
        return _attend(q, k, v), (k, v)
    K, V = cache
    return _attend(q, K, V), (torch.cat([K, k], dim=-2), torch.cat([V, v], dim=-2))


def kv_new_position_first(q, k, v, cache=None):
    K = k if cache is None else torch.cat([k, cache[0]], dim=-2)
    V = v if cache is None else torch.cat([v, cache[1]], dim=-2)
    return _attend(q, K, V), (K, V)


def kv_cache_as_values_then_keys(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    return _attend(q, K, V), (V, K)


def kv_unscaled(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    return _attend(q, K, V, scale=False), (K, V)


def kv_with_a_square_causal_mask(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    s = q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (N, H, 1, t + 1)
    causal = torch.tril(torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool))
    return torch.softmax(s.masked_fill(~causal, -INF), dim=-1) @ V, (K, V)


def kv_unstable_softmax(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    e = torch.exp(q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return (e / e.sum(-1, keepdim=True)) @ V, (K, V)


def kv_using_torch_sdpa(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    return F.scaled_dot_product_attention(q, K, V), (K, V)


def kv_using_course_lib(q, k, v, cache=None):
    return course_lib.cached_attention_step(q, k, v, cache)


# =============================================================================================
# tests
# =============================================================================================

FUNCTIONS = ["tiled_attention", "sliding_window_mask", "cached_attention_step"]

CORRECT = [
    ("tiled_attention", tiled_normalised_as_it_goes),
    ("tiled_attention", tiled_two_passes),
    ("sliding_window_mask", window_by_tril_and_triu),
    ("sliding_window_mask", window_by_loops),
    ("cached_attention_step", kv_by_einsum),
    ("cached_attention_step", kv_by_loops),
]


@pytest.mark.parametrize("name, fn", [pytest.param(n, f, id=implementation_id(f)) for n, f in CORRECT])
def test_alternative_correct_implementations_score_full_marks(name, fn):
    report = check(fn, name=name)
    assert_full_marks(report)
    assert report.diagnoses == []


@pytest.mark.parametrize(
    "name, fn",
    [pytest.param(n, f, id=implementation_id(f)) for n, f in CORRECT if not f.__module__.startswith("course_lib")],
)
def test_correct_implementations_score_full_marks_on_fresh_inputs_too(name, fn):
    # (the references on fresh inputs: tests/autograder/test_notebooks.py, through the solutions)
    ex = exercise(name)
    assert_full_marks(judge(ex, run_calls(fn, ex, seed=7), seed=7))


@pytest.mark.parametrize(
    "name, total", [("tiled_attention", 13), ("sliding_window_mask", 9), ("cached_attention_step", 7)]
)
def test_points_per_function(name, total):
    assert exercise(name).max_score == total


MISTAKES = [
    # tiled_attention
    ("tiled_attention", tiled_forgets_to_rescale_acc, "accumulator is not rescaled"),
    ("tiled_attention", tiled_forgets_to_rescale_denominator, "denominator is not rescaled"),
    ("tiled_attention", tiled_forgets_to_rescale_both, "neither the accumulator nor the denominator"),
    ("tiled_attention", tiled_unscaled, "not scaling the scores"),
    ("tiled_attention", tiled_nan_in_fully_masked_block, "exp(-inf - (-inf)) is NaN"),
    ("tiled_attention", tiled_nan_for_fully_masked_rows, "NaN (0 / 0)"),
    ("tiled_attention", tiled_large_negative_mask, "large negative number"),
    ("tiled_attention", tiled_ignoring_mask, "ignoring the mask"),
    ("tiled_attention", tiled_drops_the_last_partial_block, "partial block is skipped"),
    ("tiled_attention", tiled_without_running_max, "without a running maximum"),
    ("tiled_attention", tiled_not_dividing_at_the_end, "without dividing by the denominator"),
    ("tiled_attention", tiled_in_name_only, "tiling in name only"),
    ("tiled_attention", tiled_with_a_fixed_block_of_128, "not a fixed number"),
    ("tiled_attention", tiled_with_an_additive_mask, "an additive mask included"),
    # sliding_window_mask
    ("sliding_window_mask", window_strict, "one too narrow"),
    ("sliding_window_mask", window_one_too_wide, "one too wide"),
    ("sliding_window_mask", window_looking_forwards, "looks forwards"),
    ("sliding_window_mask", window_ignoring_causal, "ignoring causal"),
    ("sliding_window_mask", window_without_lower_bound, "no lower bound"),
    ("sliding_window_mask", window_excluding_the_query, "leaves out the query's own position"),
    ("sliding_window_mask", window_square, "ignoring S"),
    ("sliding_window_mask", window_as_floats, "float or integer tensor"),
    # cached_attention_step
    ("cached_attention_step", kv_cat_on_heads, "head axis (dim 1)"),
    ("cached_attention_step", kv_cat_on_batch, "batch axis (dim 0)"),
    ("cached_attention_step", kv_returns_the_old_cache, "returning the old cache"),
    ("cached_attention_step", kv_attends_over_the_cache_only, "cached positions only"),
    ("cached_attention_step", kv_new_position_first, "new position first"),
    ("cached_attention_step", kv_cache_as_values_then_keys, "(V', K') instead of (K', V')"),
    ("cached_attention_step", kv_unscaled, "not scaling the scores"),
    ("cached_attention_step", kv_with_a_square_causal_mask, "keeps only position 0"),
    ("cached_attention_step", kv_unstable_softmax, "unstable softmax"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*m, id=m[1].__name__) for m in MISTAKES])
def test_classic_mistake_loses_points_and_is_diagnosed(name, fn, phrase):
    assert_diagnosed(check(fn, name=name), phrase)


@pytest.mark.parametrize("fn", [tiled_in_name_only, tiled_with_a_fixed_block_of_128])
def test_tiling_in_name_only_gives_the_right_numbers_but_loses_points_for_its_temporaries(fn):
    report = check(fn, name="tiled_attention")
    assert report.diagnoses == [TEMPORARY_MESSAGE]
    failed = [r for r in report.results if not r.passed]
    assert failed and all("one temporary held" in r.feedback and "this test allows" in r.feedback for r in failed)
    assert any(r.passed for r in report.results)  # S < block_size: one block is the whole matrix
    long = next(r for r in report.results if r.name == "small blocks, long sequence")
    assert not long.passed


def test_the_temporary_limit_leaves_the_reference_room_and_catches_the_full_score_matrix():
    ex = exercise("tiled_attention")
    watch = ex.watch()
    assert watch.get("largest") is True
    from course_lib.grading.run import call_once

    caught = 0
    for case in ex.cases():
        for call in case.calls:
            limit = ex.temporary_limit(call)
            assert call_once(course_lib.tiled_attention, call, watch=watch).largest <= limit / 2, case.name
            caught += call_once(tiled_in_name_only, call, watch=watch).largest > limit
    assert caught >= len(ex.cases()) - 1  # every case but the single-block one


def test_a_fully_masked_block_and_a_fully_masked_row_are_told_apart():
    by_name = {r.name: r for r in check(tiled_nan_for_fully_masked_rows, name="tiled_attention").results}
    assert by_name["early blocks fully masked"].passed
    assert not by_name["fully masked rows"].passed and "NaN" in by_name["fully masked rows"].feedback
    by_name = {r.name: r for r in check(tiled_nan_in_fully_masked_block, name="tiled_attention").results}
    assert not by_name["early blocks fully masked"].passed
    assert "exp(-inf - (-inf))" in by_name["early blocks fully masked"].diagnosis


def test_fully_masked_rows_give_zeros_not_nan():
    ex = exercise("tiled_attention")
    index = [c.name for c in ex.cases()].index("fully masked rows")
    (call,) = ex.cases()[index].calls
    (out,) = ex.expected()[index]
    empty = ~call.kwargs["mask"].any(dim=-1)  # (L,): the queries that may attend to no key
    assert empty.sum() == 2
    assert torch.isfinite(out).all() and (out[:, empty] == 0).all()
    assert (out[:, ~empty] != 0).any(dim=-1).all()


def test_catting_the_cache_on_the_feature_axis_fails_with_the_error_shown():
    report = check(kv_cat_on_features, name="cached_attention_step")
    assert report.status == "failed" and report.score < report.max_score
    errors = [r.feedback for r in report.results if not r.passed]
    assert errors and all("raised RuntimeError" in f for f in errors)


FORBIDDEN = [
    ("tiled_attention", tiled_using_torch_softmax, "torch.softmax"),
    ("tiled_attention", tiled_using_softmax_per_block, "torch.nn.functional.softmax"),
    ("tiled_attention", tiled_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("tiled_attention", tiled_using_course_lib, "reference implementation"),
    ("sliding_window_mask", window_using_course_lib, "reference implementation"),
    ("cached_attention_step", kv_using_torch_sdpa, "torch.nn.functional.scaled_dot_product_attention"),
    ("cached_attention_step", kv_using_course_lib, "reference implementation"),
]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*f, id=f[1].__name__) for f in FORBIDDEN])
def test_forbidden_call_is_reported_and_scores_zero(name, fn, phrase):
    assert_forbidden(check(fn, name=name), phrase)


def test_torch_softmax_is_allowed_in_the_cached_step():
    # torch.softmax is forbidden only inside tiled_attention, whose point is the online softmax
    assert_full_marks(check(kv_by_loops, name="cached_attention_step"))
