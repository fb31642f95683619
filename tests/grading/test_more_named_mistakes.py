"""Single mistakes found by writing wrong versions as a student would (issue 29): each is named,
rightly, and by one "Likely mistake" line only.

Each student below has exactly one mistake, written the way the round of trials wrote it; the
phrase is from the mistake's message. The honest alternatives (einsum, loops, float64) are in
the chapters' own test files and in test_invariants.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import assert_diagnosed, assert_full_marks

from course_lib.grading import check

INF = float("inf")


# --- tiled_attention (07) ---------------------------------------------------------------------


def _tiled(q, k, v, mask, block_size, *, flip=False, fill=-INF, block_max=False, width=None, m_start=-INF):
    """One student's tiled attention; the keywords put in one mistake each."""
    S, D = k.shape[-2], q.shape[-1]
    m = torch.full((*q.shape[:-1], 1), m_start)
    l = torch.zeros((*q.shape[:-1], 1))
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]))
    for s in range(0, S, block_size):
        scores = q @ k[..., s : s + block_size, :].transpose(-2, -1) / math.sqrt(width or D)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., s : s + block_size], fill)
        block = scores.amax(-1, keepdim=True)
        m_new = block if block_max else torch.maximum(m, block)
        m_safe = torch.where(m_new == -INF, torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - m_safe)
        r = torch.exp(m_safe - m) if flip else torch.exp(m - m_safe)
        l = r * l + p.sum(-1, keepdim=True)
        acc = r * acc + p @ v[..., s : s + block_size, :]
        m = m_new
    return acc / torch.where(l == 0, torch.ones_like(l), l)


def tiled_with_the_rescale_factor_upside_down(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, flip=True)


def tiled_with_the_rescale_factor_upside_down_from_zero(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, flip=True, m_start=0.0)  # no NaN on the first block


def tiled_masking_with_zero(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, fill=0.0)


def tiled_with_the_block_maximum_as_running_maximum(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, block_max=True)


def tiled_scaled_by_sqrt_s(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, width=k.shape[-2])


MISTAKES = [
    ("tiled_attention", tiled_with_the_rescale_factor_upside_down, "the rescale factor is upside down"),
    ("tiled_attention", tiled_with_the_rescale_factor_upside_down_from_zero, "starting m at 0 instead of -inf"),
    ("tiled_attention", tiled_masking_with_zero, "masking with 0 instead of -inf"),
    ("tiled_attention", tiled_with_the_block_maximum_as_running_maximum, "replaced by each block's own maximum"),
    ("tiled_attention", tiled_scaled_by_sqrt_s, "scaling by sqrt(S)"),
]


# --- cosine_score, local_attention_weights (01) --------------------------------------------------


def cosine_clamping_the_product_of_the_norms(query, keys, eps=1e-8):
    dots = (keys @ query.unsqueeze(-1)).squeeze(-1)  # (N, S)
    return dots / (query.norm(dim=-1, keepdim=True) * keys.norm(dim=-1)).clamp_min(eps)


def local_weights_with_positions_from_one(scores, center, half_window):
    positions = torch.arange(1, scores.shape[-1] + 1, dtype=scores.dtype)
    distance = positions - center.unsqueeze(-1)  # (N, S)
    inside = distance.abs() <= half_window
    weights = torch.softmax(scores.masked_fill(~inside, -INF), dim=-1).nan_to_num(0.0)
    sigma = half_window / 2
    return weights * torch.exp(-(distance**2) / (2 * sigma**2))


MISTAKES += [
    ("cosine_score", cosine_clamping_the_product_of_the_norms, "clamping the product of the norms"),
    ("local_attention_weights", local_weights_with_positions_from_one, "counting the positions from 1"),
]


# --- sinusoidal_positional_encoding, relative_position_matrix (04) -------------------------------


def _table(num_positions, d_model, base=10000.0, odd=torch.cos):
    pos = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angles = pos / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), odd(angles)
    return pe.float()


def pe_with_base_1000(num_positions, d_model):
    return _table(num_positions, d_model, base=1000.0)


def pe_with_the_sine_written_twice(num_positions, d_model):
    return _table(num_positions, d_model, odd=torch.sin)


def relative_with_sin_and_cos_swapped_in_the_block(offset, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        angle = offset / 10000 ** (2 * i / d_model)
        c, s = math.cos(angle), math.sin(angle)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[s, -c], [c, s]])
    return M


def _rotation_block(offset, d_model, i):
    angle = offset / 10000 ** (2 * i / d_model)
    return math.cos(angle), math.sin(angle)


def relative_with_pairs_counted_from_one(offset, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        c, s = _rotation_block(offset, d_model, i)
        M[2 * i - 1, 2 * i - 1], M[2 * i - 1, 2 * i] = c, -s  # 2i - 1, 2i: meant 2i, 2i + 1
        M[2 * i, 2 * i - 1], M[2 * i, 2 * i] = s, c
    return M


def relative_with_the_rows_one_down(offset, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        c, s = _rotation_block(offset, d_model, i)
        top, bottom = 2 * i + 1, (2 * i + 2) % d_model  # meant 2i, 2i + 1
        M[top, 2 * i], M[top, 2 * i + 1] = c, -s
        M[bottom, 2 * i], M[bottom, 2 * i + 1] = s, c
    return M


def relative_with_the_columns_one_left(offset, d_model):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        c, s = _rotation_block(offset, d_model, i)
        M[2 * i, 2 * i - 1], M[2 * i, 2 * i] = c, -s  # columns 2i - 1, 2i: meant 2i, 2i + 1
        M[2 * i + 1, 2 * i - 1], M[2 * i + 1, 2 * i] = s, c
    return M


MISTAKES += [
    ("relative_position_matrix", relative_with_pairs_counted_from_one, "one row and one column off"),
    ("relative_position_matrix", relative_with_the_rows_one_down, "the blocks sit one row off"),
    ("relative_position_matrix", relative_with_the_columns_one_left, "the blocks sit one column off"),
]


MISTAKES += [
    ("sinusoidal_positional_encoding", pe_with_base_1000, "base 1000 instead of 10000"),
    ("sinusoidal_positional_encoding", pe_with_the_sine_written_twice, "the sine written twice"),
    ("relative_position_matrix", relative_with_sin_and_cos_swapped_in_the_block, "swapped inside each block"),
]


# --- layer_norm, add_and_norm (05) ----------------------------------------------------------------


def _ln(x, gamma, beta, eps, dims=(-1,)):
    mu = x.mean(dim=dims, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=dims, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta


def layer_norm_over_all_but_the_batch_dim(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, eps, dims=tuple(range(1, x.dim())))


def add_and_norm_adding_the_residual_twice(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + _ln(x + sublayer_output, gamma, beta, eps)


MISTAKES += [
    ("layer_norm", layer_norm_over_all_but_the_batch_dim, "every dim but the first"),
    ("add_and_norm", add_and_norm_adding_the_residual_twice, "the residual is added twice"),
]


# --- causal_mask (06) -------------------------------------------------------------------------


def causal_mask_one_step_into_the_future(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=1)


MISTAKES += [("causal_mask", causal_mask_one_step_into_the_future, "tril with diagonal=1")]


# --- cached_attention_step (07) ---------------------------------------------------------------


def kv_softmax_over_the_query_axis(q, k, v, cache=None):
    K = k if cache is None else torch.cat([cache[0], k], dim=-2)
    V = v if cache is None else torch.cat([cache[1], v], dim=-2)
    scores = q @ K.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (N, H, 1, t + 1)
    return torch.softmax(scores, dim=-2) @ V, (K, V)


MISTAKES += [("cached_attention_step", kv_softmax_over_the_query_axis, "the single query (size 1)")]


@pytest.mark.parametrize("name, fn, phrase", [pytest.param(*m, id=m[1].__name__) for m in MISTAKES])
def test_a_single_mistake_is_named_by_one_line(name, fn, phrase):
    report = check(fn, name=name)
    assert_diagnosed(report, phrase)
    assert len(report.diagnoses) == 1, report.diagnoses


def relative_with_the_sine_rows_one_up(offset, d_model):
    M = torch.zeros(d_model, d_model)
    idx = torch.arange(0, d_model, 2)
    angle = offset / 10000 ** (idx / d_model)
    M[idx - 1, idx], M[idx, idx] = torch.cos(angle), torch.sin(angle)  # idx - 1: meant idx
    M[idx - 1, idx + 1], M[idx, idx + 1] = -torch.sin(angle), torch.cos(angle)
    return M


def test_relative_blocks_one_row_off_are_named():
    assert_diagnosed(check(relative_with_the_sine_rows_one_up, name="relative_position_matrix"), "one row off")


def tiled_with_the_running_maximum_from_zero(q, k, v, mask=None, block_size=128):
    return _tiled(q, k, v, mask, block_size, m_start=0.0)  # any start >= the scores' max gives the same softmax


def relative_from_2x2_blocks(offset, d_model):
    blocks = []
    for i in range(d_model // 2):
        c, s = _rotation_block(offset, d_model, i)
        blocks.append(torch.tensor([[c, -s], [s, c]]))
    return torch.block_diag(*blocks)


def relative_with_block_slices(offset, d_model):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        c, s = _rotation_block(offset, d_model, i)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return M.float()


@pytest.mark.parametrize(
    "name, fn",
    [
        ("tiled_attention", tiled_with_the_running_maximum_from_zero),
        ("relative_position_matrix", relative_from_2x2_blocks),
        ("relative_position_matrix", relative_with_block_slices),
    ],
    ids=lambda x: getattr(x, "__name__", x),
)
def test_the_same_code_without_the_mistake_keeps_full_marks(name, fn):
    assert_full_marks(check(fn, name=name))
