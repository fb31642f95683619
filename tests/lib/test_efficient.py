"""Specification of course_lib.efficient: tiled_attention, sliding_window_mask,
sliding_window_attention and cached_attention_step, and of the memory benchmark course_lib.memory_probe."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import course_lib
from course_lib import (
    cached_attention_step,
    causal_mask,
    scaled_dot_product_attention,
    sliding_window_attention,
    sliding_window_mask,
    tiled_attention,
)


def sdpa_output(q, k, v, mask=None):
    return scaled_dot_product_attention(q, k, v, mask)[0]


def random_mask(*shape, density=0.6):
    """A random mask with the first query row fully masked and (if L > 1) the last with a key allowed."""
    mask = torch.rand(*shape) < density
    mask[..., 0, :] = False
    if shape[-2] > 1:
        mask[..., -1, 0] = True
    return mask


class OpOutputs(TorchDispatchMode):
    """Records, for every torch op run inside the ``with`` block, its name and the size in
    bytes of the largest storage among its outputs (a view counts as its base's storage)."""

    def __init__(self):
        super().__init__()
        self.outputs: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        sizes = [t.untyped_storage().nbytes() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        self.outputs.append((func.__name__, max(sizes, default=0)))
        return out

    def largest(self, op_prefix: str = "") -> int:
        return max(size for name, size in self.outputs if name.startswith(op_prefix))


# ---------------------------------------------------------------------------------------
# tiled_attention
# ---------------------------------------------------------------------------------------

SHAPES = [
    # (batch dims, L, S, D, Dv, block_size)
    pytest.param((2,), 6, 8, 4, 4, 4, id="S-divisible-by-block"),
    pytest.param((2,), 6, 10, 4, 4, 4, id="S-not-divisible-by-block"),
    pytest.param((2,), 6, 3, 4, 4, 128, id="S<block"),
    pytest.param((2,), 5, 9, 6, 3, 2, id="L!=S-and-Dv!=D"),
    pytest.param((2,), 7, 7, 4, 4, 1, id="block-of-one-key"),
    pytest.param((2, 3), 4, 9, 8, 5, 4, id="extra-batch-dims"),
    pytest.param((), 3, 5, 4, 2, 2, id="no-batch-dims"),
    pytest.param((1,), 1, 1, 4, 4, 3, id="L=S=1"),
]


@pytest.mark.parametrize("batch, L, S, D, Dv, block_size", SHAPES)
def test_tiled_matches_sdpa_without_mask(batch, L, S, D, Dv, block_size):
    q, k, v = torch.randn(*batch, L, D), torch.randn(*batch, S, D), torch.randn(*batch, S, Dv)
    out = tiled_attention(q, k, v, block_size=block_size)
    assert out.shape == (*batch, L, Dv)
    torch.testing.assert_close(out, sdpa_output(q, k, v))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


@pytest.mark.parametrize("batch, L, S, D, Dv, block_size", SHAPES)
def test_tiled_matches_sdpa_with_fully_masked_rows(batch, L, S, D, Dv, block_size):
    q, k, v = torch.randn(*batch, L, D), torch.randn(*batch, S, D), torch.randn(*batch, S, Dv)
    mask = random_mask(*batch, L, S)
    out = tiled_attention(q, k, v, mask, block_size=block_size)
    torch.testing.assert_close(out, sdpa_output(q, k, v, mask))
    assert (out[..., 0, :] == 0).all() and torch.isfinite(out).all()


def test_tiled_matches_sdpa_on_rows_whose_first_blocks_are_fully_masked():
    # Row 0 may attend only to the last key, row 1 only to keys in the middle block, row 2
    # to the first key only: the running max starts at -inf and becomes finite late.
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 9, 4), torch.randn(2, 9, 3)
    mask = torch.zeros(3, 9, dtype=torch.bool)
    mask[0, 8] = mask[1, 4] = mask[1, 5] = mask[2, 0] = True
    out = tiled_attention(q, k, v, mask, block_size=3)
    torch.testing.assert_close(out, sdpa_output(q, k, v, mask))
    torch.testing.assert_close(out[:, 0], v[:, 8])


def test_tiled_with_every_row_fully_masked_gives_zeros_not_nan():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    out = tiled_attention(q, k, v, torch.zeros(3, 5, dtype=torch.bool), block_size=2)
    torch.testing.assert_close(out, torch.zeros(2, 3, 6))


@pytest.mark.parametrize(
    "mask_shape", [(2, 1, 7), (7,), (2, 4, 1), (4, 7), ()], ids=["padding", "keys-only", "per-query", "2-D", "scalar"]
)
def test_tiled_matches_sdpa_with_masks_that_broadcast(mask_shape):
    q, k, v = torch.randn(2, 4, 3), torch.randn(2, 7, 3), torch.randn(2, 7, 5)
    mask = torch.rand(mask_shape) < 0.6
    torch.testing.assert_close(tiled_attention(q, k, v, mask, block_size=3), sdpa_output(q, k, v, mask))


def test_tiled_with_causal_mask_matches_torch_is_causal():
    q, k, v = torch.randn(2, 9, 4), torch.randn(2, 9, 4), torch.randn(2, 9, 4)
    out = tiled_attention(q, k, v, causal_mask(9), block_size=4)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))


def test_tiled_broadcasts_batch_dims_between_queries_and_keys():
    q = torch.randn(2, 1, 3, 4)
    k, v = torch.randn(1, 5, 6, 4), torch.randn(1, 5, 6, 2)
    out = tiled_attention(q, k, v, block_size=4)
    assert out.shape == (2, 5, 3, 2)
    torch.testing.assert_close(out, sdpa_output(q, k, v))


def test_tiled_float64_in_float64_out_matching_sdpa():
    dt = torch.float64
    q, k, v = torch.randn(2, 3, 4, dtype=dt), torch.randn(2, 11, 4, dtype=dt), torch.randn(2, 11, 6, dtype=dt)
    mask = random_mask(2, 3, 11)
    out = tiled_attention(q, k, v, mask, block_size=4)
    assert out.dtype == dt
    torch.testing.assert_close(out, sdpa_output(q, k, v, mask))


@pytest.mark.parametrize("order", ["increasing", "decreasing"])
def test_tiled_with_scores_of_magnitude_1e4_is_finite_and_matches_torch(order):
    # Scores from -7071 to 7071: every block raises (or never raises) the running max, so
    # the rescaling by exp(m_old - m_new) runs with factors that underflow to 0.
    q = torch.tensor([[[100.0, 0.0], [-100.0, 50.0]]])
    first = torch.linspace(-100, 100, 12)
    if order == "decreasing":
        first = first.flip(0)
    k = torch.stack([first, torch.zeros(12)], dim=-1)[None]  # (1, 12, 2)
    v = torch.randn(1, 12, 3)
    out = tiled_attention(q, k, v, block_size=5)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_tiled_gradients_match_sdpa_and_are_finite_with_fully_masked_rows():
    def grads(fn):
        torch.manual_seed(1)
        q, k, v = (torch.randn(2, n, 4, requires_grad=True) for n in (5, 7, 7))
        fn(q, k, v, random_mask(2, 5, 7)).square().sum().backward()
        return q.grad, k.grad, v.grad

    ours, theirs = grads(lambda *a: tiled_attention(*a, block_size=3)), grads(sdpa_output)
    for g_ours, g_theirs in zip(ours, theirs, strict=False):
        assert torch.isfinite(g_ours).all()
        torch.testing.assert_close(g_ours, g_theirs)
    assert (ours[0][:, 0] == 0).all()  # the fully masked query row gets no gradient


@settings(max_examples=60)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.lists(st.integers(1, 3), max_size=2),
    l=st.integers(1, 9),
    s=st.integers(1, 20),
    d=st.integers(1, 6),
    dv=st.integers(1, 6),
    block_size=st.integers(1, 25),
    density=st.sampled_from([None, 0.0, 0.1, 0.5, 1.0]),
)
def test_tiled_matches_sdpa_for_any_shape_block_size_and_mask(seed, batch, l, s, d, dv, block_size, density):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (3 * torch.randn(*batch, n, e, generator=g) for n, e in ((l, d), (s, d), (s, dv)))
    mask = None if density is None else torch.rand(*batch, l, s, generator=g) < density
    torch.testing.assert_close(tiled_attention(q, k, v, mask, block_size=block_size), sdpa_output(q, k, v, mask))


def test_tiled_never_creates_a_tensor_larger_than_one_block_of_scores():
    L = S = 256
    block_size = 16
    q, k, v = torch.randn(1, L, 8), torch.randn(1, S, 8), torch.randn(1, S, 8)
    padding = torch.rand(1, 1, S) < 0.9  # broadcast over queries: must stay a view
    with torch.no_grad(), OpOutputs() as ours:
        tiled_attention(q, k, v, padding, block_size=block_size)
    with torch.no_grad(), OpOutputs() as naive:
        scaled_dot_product_attention(q, k, v, padding)
    assert ours.largest() <= L * block_size * 4  # float32
    assert naive.largest() >= L * S * 4  # the instrument sees the naive (L, S) scores


@pytest.mark.parametrize("block_size, error", [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError)])
def test_tiled_rejects_a_block_size_that_is_not_a_positive_int(block_size, error):
    q = torch.randn(1, 3, 4)
    with pytest.raises(error, match="block_size"):
        tiled_attention(q, q, q, block_size=block_size)


def test_tiled_rejects_bad_shapes_and_masks_naming_the_argument():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match=r"'k'.*\(2, 5, 3\)"):
        tiled_attention(q, k[..., :3], v)
    with pytest.raises(ValueError, match=r"'v'.*\(2, 4, 6\)"):
        tiled_attention(q, k, v[:, :4])
    with pytest.raises(ValueError, match=r"'mask'.*\(2, 3, 5\).*\(3, 4\)"):
        tiled_attention(q, k, v, torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"'mask'.*boolean"):
        tiled_attention(q, k, v, torch.ones(3, 5))
    with pytest.raises(TypeError, match="'q'"):
        tiled_attention(q.tolist(), k, v)


# ---------------------------------------------------------------------------------------
# sliding_window_mask
# ---------------------------------------------------------------------------------------


def test_sliding_window_mask_is_a_band_of_half_width_r():
    expected = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [0, 1, 1, 1, 0], [0, 0, 1, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(sliding_window_mask(4, 5, window=1), expected)


def test_causal_sliding_window_mask_sees_itself_and_r_keys_back():
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    torch.testing.assert_close(sliding_window_mask(4, window=2, causal=True), expected)


@settings(max_examples=60)
@given(L=st.integers(1, 9), S=st.integers(1, 9), r=st.integers(0, 10), causal=st.booleans())
def test_sliding_window_mask_matches_its_definition(L, S, r, causal):
    mask = sliding_window_mask(L, S, window=r, causal=causal)
    assert mask.dtype == torch.bool and mask.shape == (L, S)
    for i in range(L):
        for j in range(S):
            assert bool(mask[i, j]) == ((0 <= i - j <= r) if causal else (abs(i - j) <= r))


def test_sliding_window_mask_with_a_window_covering_the_sequence_is_full_or_causal():
    assert sliding_window_mask(6, window=5).all()
    assert sliding_window_mask(6, window=0).equal(torch.eye(6, dtype=torch.bool))
    assert sliding_window_mask(6, window=100, causal=True).equal(causal_mask(6))


def test_sliding_window_mask_is_created_on_the_requested_device():
    assert sliding_window_mask(3, window=1, device="meta").device.type == "meta"


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"L": 4, "window": -1}, ValueError, "window"),
        ({"L": 4, "window": 1.5}, TypeError, "window"),
        ({"L": 4, "window": True}, TypeError, "window"),
        ({"L": 0, "window": 1}, ValueError, "'L'"),
        ({"L": 4, "S": 0, "window": 1}, ValueError, "'S'"),
    ],
)
def test_sliding_window_mask_rejects_bad_arguments(kwargs, error, name):
    with pytest.raises(error, match=name):
        sliding_window_mask(**kwargs)


# ---------------------------------------------------------------------------------------
# sliding_window_attention
# ---------------------------------------------------------------------------------------


# Random sliding-window problems: batch dims, lengths, widths, window, causal, mask density.
WINDOW_CASES = dict(
    seed=st.integers(0, 2**31 - 1),
    batch=st.lists(st.integers(1, 3), max_size=2),
    l=st.integers(1, 10),
    s=st.integers(1, 10),
    d=st.integers(1, 5),
    dv=st.integers(1, 5),
    window=st.integers(0, 12),
    causal=st.booleans(),
    density=st.sampled_from([None, 0.0, 0.5, 0.9]),
)


def window_inputs(seed, batch, l, s, d, dv, density):
    """q (*, l, d), k (*, s, d), v (*, s, dv) and a random mask of the given density (or None)."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*batch, n, e, generator=g) for n, e in ((l, d), (s, d), (s, dv)))
    mask = None if density is None else torch.rand(*batch, l, s, generator=g) < density
    return q, k, v, mask


def windowed_sdpa(q, k, v, window, causal=False, mask=None):
    """The definition: sdpa with the sliding-window mask and-ed with ``mask``."""
    band = sliding_window_mask(q.shape[-2], k.shape[-2], window=window, causal=causal)
    return scaled_dot_product_attention(q, k, v, band if mask is None else band & mask)


@settings(max_examples=80)
@given(**WINDOW_CASES)
def test_sliding_window_attention_equals_sdpa_with_the_window_mask(seed, batch, l, s, d, dv, window, causal, density):
    q, k, v, mask = window_inputs(seed, batch, l, s, d, dv, density)
    out, weights = sliding_window_attention(q, k, v, window, causal, mask)
    ref_out, ref_weights = windowed_sdpa(q, k, v, window, causal, mask)
    assert out.shape == ref_out.shape and weights.shape == ref_weights.shape
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


@pytest.mark.parametrize("causal", [False, True], ids=["two-sided", "causal"])
def test_sliding_window_output_at_t_ignores_keys_outside_its_window(causal):
    L, r, t = 10, 2, 5
    q, k, v = torch.randn(2, L, 4), torch.randn(2, L, 4), torch.randn(2, L, 3)
    outside = ~sliding_window_mask(L, window=r, causal=causal)[t]
    k2, v2 = k.clone(), v.clone()
    k2[:, outside] = 10 * torch.randn_like(k2[:, outside])
    v2[:, outside] = 10 * torch.randn_like(v2[:, outside])
    out, weights = sliding_window_attention(q, k, v, r, causal)
    out2, _ = sliding_window_attention(q, k2, v2, r, causal)
    torch.testing.assert_close(out2[:, t], out[:, t])
    assert (weights[:, t, outside] == 0).all()
    # and a change inside the window does show
    v2[:, t] += 1
    assert not torch.allclose(sliding_window_attention(q, k2, v2, r, causal)[0][:, t], out[:, t])


def test_sliding_window_queries_with_no_key_in_their_window_get_zero_weights_and_output():
    q, k, v = torch.randn(2, 8, 4), torch.randn(2, 2, 4), torch.randn(2, 2, 3)
    out, weights = sliding_window_attention(q, k, v, window=1)  # queries 3..7 are too far from keys 0, 1
    assert (out[:, 3:] == 0).all() and (weights[:, 3:] == 0).all()
    torch.testing.assert_close(weights[:, :3].sum(-1), torch.ones(2, 3))


def test_sliding_window_with_window_zero_returns_each_queries_own_value():
    q, k, v = torch.randn(2, 5, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    out, weights = sliding_window_attention(q, k, v, window=0)
    torch.testing.assert_close(out, v)
    torch.testing.assert_close(weights, torch.eye(5).expand(2, 5, 5))


def test_sliding_window_broadcasts_batch_dims_and_a_padding_mask():
    q = torch.randn(2, 1, 6, 4)
    k, v = torch.randn(1, 3, 7, 4), torch.randn(1, 3, 7, 2)
    padding = torch.rand(2, 1, 1, 7) < 0.7
    out, weights = sliding_window_attention(q, k, v, 1, mask=padding)
    assert out.shape == (2, 3, 6, 2) and weights.shape == (2, 3, 6, 7)
    ref_out, ref_weights = windowed_sdpa(q, k, v, 1, mask=padding)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_sliding_window_float64_in_float64_out_matching_the_definition():
    dt = torch.float64
    q, k, v = torch.randn(2, 6, 4, dtype=dt), torch.randn(2, 7, 4, dtype=dt), torch.randn(2, 7, 3, dtype=dt)
    mask = random_mask(2, 6, 7)
    out, weights = sliding_window_attention(q, k, v, 2, mask=mask)
    assert out.dtype == dt and weights.dtype == dt
    ref_out, ref_weights = windowed_sdpa(q, k, v, 2, mask=mask)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_sliding_window_gradients_match_the_definition_and_are_finite():
    def grads(fn):
        torch.manual_seed(1)
        q, k, v = (torch.randn(2, n, 4, requires_grad=True) for n in (6, 8, 8))
        out, weights = fn(q, k, v, 2, True, random_mask(2, 6, 8))
        (out.square().sum() + weights.square().sum()).backward()
        return q.grad, k.grad, v.grad

    for g_ours, g_theirs in zip(grads(sliding_window_attention), grads(windowed_sdpa), strict=False):
        assert torch.isfinite(g_ours).all()
        torch.testing.assert_close(g_ours, g_theirs)


def test_sliding_window_never_multiplies_an_L_by_S_matrix():
    # The banded computation: every matrix product is (L, W)-sized, W = 2r + 1; only the
    # returned weights are (L, S), and they are scattered, not multiplied.
    L = S = 128
    r = 2
    q, k, v = torch.randn(1, L, 8), torch.randn(1, S, 8), torch.randn(1, S, 8)
    with torch.no_grad(), OpOutputs() as ours:
        sliding_window_attention(q, k, v, r)
    with torch.no_grad(), OpOutputs() as full:
        windowed_sdpa(q, k, v, r)
    assert ours.largest("bmm") <= L * 8 * (2 * r + 1) * 4  # float32
    assert full.largest("bmm") >= L * S * 4  # the instrument sees the masked full product


@settings(max_examples=60)
@given(**WINDOW_CASES)
def test_sliding_window_without_weights_gives_the_same_output_and_none(
    seed, batch, l, s, d, dv, window, causal, density
):
    q, k, v, mask = window_inputs(seed, batch, l, s, d, dv, density)
    out, weights = sliding_window_attention(q, k, v, window, causal, mask, return_weights=False)
    assert weights is None
    torch.testing.assert_close(out, windowed_sdpa(q, k, v, window, causal, mask)[0])
    torch.testing.assert_close(out, sliding_window_attention(q, k, v, window, causal, mask)[0], rtol=0, atol=0)


def test_sliding_window_returns_dense_weights_by_default():
    q = torch.randn(2, 6, 4)
    _out, weights = sliding_window_attention(q, q, q, 1)
    assert weights.shape == (2, 6, 6)


def test_sliding_window_without_weights_gradients_match_the_definition():
    def grads(fn):
        torch.manual_seed(2)
        q, k, v = (torch.randn(2, n, 4, requires_grad=True) for n in (6, 8, 8))
        fn(q, k, v, 2, True, random_mask(2, 6, 8))[0].square().sum().backward()
        return q.grad, k.grad, v.grad

    ours = grads(lambda *a: sliding_window_attention(*a, return_weights=False))
    for g_ours, g_theirs in zip(ours, grads(windowed_sdpa), strict=False):
        assert torch.isfinite(g_ours).all()
        torch.testing.assert_close(g_ours, g_theirs)


def test_sliding_window_without_weights_never_creates_an_L_by_S_tensor():
    # With return_weights=False nothing of size L x S is created at all (the weights'
    # scatter included), so time and memory are linear in L for a fixed window.
    L = S = 256
    r = 2
    q, k, v = torch.randn(1, L, 8), torch.randn(1, S, 8), torch.randn(1, S, 8)
    with torch.no_grad(), OpOutputs() as lean:
        sliding_window_attention(q, k, v, r, return_weights=False)
    with torch.no_grad(), OpOutputs() as dense:
        sliding_window_attention(q, k, v, r)
    assert lean.largest() < L * S * 4 // 4  # float32; the largest is the (L, D, W) window copy
    assert dense.largest() >= L * S * 4  # the instrument sees the dense weights


def test_sliding_window_without_weights_scales_linearly_in_L():
    # Count multiply-adds through the ops' output sizes: doubling L doubles the largest
    # tensor created (the windows), it does not quadruple it.
    r, D = 4, 8
    sizes = []
    for L in (256, 512):
        q = torch.randn(1, L, D)
        with torch.no_grad(), OpOutputs() as ops:
            sliding_window_attention(q, q, q, r, return_weights=False)
        sizes.append(ops.largest())
    assert sizes[1] <= 2 * sizes[0] + 64


def test_sliding_window_attention_rejects_bad_arguments_naming_them():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    with pytest.raises(ValueError, match="window"):
        sliding_window_attention(q, k, v, -1)
    with pytest.raises(TypeError, match="window"):
        sliding_window_attention(q, k, v, 1.0)
    with pytest.raises(ValueError, match=r"'k'.*\(2, 5, 3\)"):
        sliding_window_attention(q, k[..., :3], v, 1)
    with pytest.raises(ValueError, match=r"'mask'.*\(2, 3, 5\).*\(3, 4\)"):
        sliding_window_attention(q, k, v, 1, mask=torch.ones(3, 4, dtype=torch.bool))


# ---------------------------------------------------------------------------------------
# cached_attention_step
# ---------------------------------------------------------------------------------------


def causal_attention_of_the_prefix(q, k, v):
    """Causal self-attention over the whole prefix, recomputed: (N, H, T, D) -> (N, H, T, D)."""
    return scaled_dot_product_attention(q, k, v, causal_mask(q.shape[-2]))[0]


def decode(q, k, v):
    """Feed positions 0..T-1 one at a time through cached_attention_step: the outputs
    (N, H, T, D) and the final cache."""
    cache, outputs = None, []
    for t in range(q.shape[-2]):
        position = slice(t, t + 1)
        out, cache = cached_attention_step(q[..., position, :], k[..., position, :], v[..., position, :], cache)
        outputs.append(out)
    return torch.cat(outputs, dim=-2), cache


@pytest.mark.parametrize("N, H, T, D", [(2, 3, 7, 4), (1, 1, 1, 5), (3, 2, 12, 8)])
def test_cached_steps_equal_causal_self_attention_over_the_prefix(N, H, T, D):
    q, k, v = (torch.randn(N, H, T, D) for _ in range(3))
    outputs, (K, V) = decode(q, k, v)
    assert outputs.shape == (N, H, T, D)
    torch.testing.assert_close(outputs, causal_attention_of_the_prefix(q, k, v))
    torch.testing.assert_close(outputs, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    torch.testing.assert_close(K, k, rtol=0, atol=0)
    torch.testing.assert_close(V, v, rtol=0, atol=0)


def test_cached_step_attends_over_the_cache_and_the_new_position():
    N, H, t, D = 2, 3, 5, 4
    K, V = torch.randn(N, H, t, D), torch.randn(N, H, t, D)
    q, k, v = (torch.randn(N, H, 1, D) for _ in range(3))
    out, (K_new, V_new) = cached_attention_step(q, k, v, (K, V))
    assert out.shape == (N, H, 1, D) and K_new.shape == V_new.shape == (N, H, t + 1, D)
    keys, values = torch.cat([K, k], dim=-2), torch.cat([V, v], dim=-2)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, keys, values)[0])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, keys, values))
    torch.testing.assert_close(K_new[..., -1:, :], k, rtol=0, atol=0)  # the new position is last
    torch.testing.assert_close(V_new[..., :-1, :], V, rtol=0, atol=0)


def test_cached_first_step_without_cache_returns_the_value_and_a_cache_of_one_position():
    q, k, v = (torch.randn(2, 3, 1, 4) for _ in range(3))
    out, (K, V) = cached_attention_step(q, k, v)
    torch.testing.assert_close(out, v)  # one position: weight 1
    torch.testing.assert_close(K, k, rtol=0, atol=0)
    torch.testing.assert_close(V, v, rtol=0, atol=0)


def test_cached_step_accepts_an_empty_cache_as_the_first_step():
    q, k, v = (torch.randn(2, 3, 1, 4) for _ in range(3))
    empty = torch.zeros(2, 3, 0, 4)
    out, (K, V) = cached_attention_step(q, k, v, (empty, empty))
    torch.testing.assert_close(out, cached_attention_step(q, k, v)[0])
    assert K.shape == V.shape == (2, 3, 1, 4)


def test_cached_step_returns_new_tensors_and_leaves_its_inputs_unchanged():
    q, k, v = (torch.randn(1, 2, 1, 4) for _ in range(3))
    K, V = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    before = [t.clone() for t in (q, k, v, K, V)]
    _, (K_new, V_new) = cached_attention_step(q, k, v, (K, V))
    for t, old in zip((q, k, v, K, V), before, strict=True):
        assert torch.equal(t, old)
    _first, (K_first, V_first) = cached_attention_step(q, k, v)
    for new in (K_new, V_new, K_first, V_first):
        assert all(new.untyped_storage().data_ptr() != t.untyped_storage().data_ptr() for t in (q, k, v, K, V))


def test_cached_step_with_scores_of_magnitude_1e4_is_finite_and_matches_torch():
    q = torch.full((1, 1, 1, 4), 100.0)
    K = torch.linspace(-100, 100, 24).reshape(1, 1, 6, 4)
    V = torch.randn(1, 1, 6, 4)
    k, v = torch.full((1, 1, 1, 4), 50.0), torch.randn(1, 1, 1, 4)
    out, _ = cached_attention_step(q, k, v, (K, V))
    assert torch.isfinite(out).all()
    keys, values = torch.cat([K, k], dim=-2), torch.cat([V, v], dim=-2)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, keys, values))


def test_cached_step_float64_in_float64_out():
    dt = torch.float64
    q, k, v = (torch.randn(2, 2, 1, 3, dtype=dt) for _ in range(3))
    K, V = torch.randn(2, 2, 4, 3, dtype=dt), torch.randn(2, 2, 4, 3, dtype=dt)
    out, (K_new, V_new) = cached_attention_step(q, k, v, (K, V))
    assert out.dtype == K_new.dtype == V_new.dtype == dt
    keys, values = torch.cat([K, k], dim=-2), torch.cat([V, v], dim=-2)
    torch.testing.assert_close(out, scaled_dot_product_attention(q, keys, values)[0])


def test_cached_step_rejects_bad_shapes_naming_the_argument():
    q, k, v = (torch.randn(2, 3, 1, 4) for _ in range(3))
    K, V = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    with pytest.raises(ValueError, match=r"'q'.*\(N=2, H=3, 1, D\).*\(2, 3, 2, 4\)"):
        cached_attention_step(torch.randn(2, 3, 2, 4), k, v)
    with pytest.raises(ValueError, match=r"'k'.*\(N=2, H=3, 1, D=4\).*\(2, 3, 1, 5\)"):
        cached_attention_step(q, torch.randn(2, 3, 1, 5), v)
    with pytest.raises(ValueError, match=r"'v'.*\(2, 3, 1\)"):
        cached_attention_step(q, k, torch.randn(2, 3, 1))
    with pytest.raises(ValueError, match=r"'cache\[0\]'.*\(N=2, H=3, t, D=4\).*\(2, 4, 5, 4\)"):
        cached_attention_step(q, k, v, (torch.randn(2, 4, 5, 4), V))
    with pytest.raises(ValueError, match=r"'cache\[1\]'.*\(N=2, H=3, t=5, D=4\).*\(2, 3, 6, 4\)"):
        cached_attention_step(q, k, v, (K, torch.randn(2, 3, 6, 4)))
    with pytest.raises(TypeError, match=r"'q'.*floating-point"):
        cached_attention_step(q.long(), k, v)


@pytest.mark.parametrize("cache", [(torch.randn(2, 3, 5, 4),), [torch.randn(2, 3, 5, 4)] * 3, "KV", 5])
def test_cached_step_rejects_a_cache_that_is_not_a_pair(cache):
    q = torch.randn(2, 3, 1, 4)
    with pytest.raises(TypeError, match=r"'cache'.*pair"):
        cached_attention_step(q, q, q, cache)


# ---------------------------------------------------------------------------------------
# package and benchmark
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiled_attention", "sliding_window_mask", "cached_attention_step"])
def test_graded_efficient_functions_are_exported_documented_and_graded_in_chapter_7(name):
    assert name in course_lib.__all__ and name in course_lib.GRADED_FUNCTIONS
    assert name in course_lib.assignments.ASSIGNMENTS["07_efficient_attention"]
    doc = getattr(course_lib, name).__doc__
    assert doc and "Args:" in doc and "Shape:" in doc and "Returns:" in doc


def test_sliding_window_attention_is_exported_documented_and_not_graded():
    assert "sliding_window_attention" in course_lib.__all__
    assert "sliding_window_attention" not in course_lib.GRADED_FUNCTIONS
    assert course_lib.__all__.count("sliding_window_attention") == 1
    doc = sliding_window_attention.__doc__
    assert doc and "Shape:" in doc and "Returns:" in doc


@pytest.mark.slow  # a subprocess that imports torch
def test_bench_memory_runs_each_variant_in_a_subprocess_and_prints_the_table():
    """Not a timed test: the script must run and print positive numbers for every variant."""
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.memory_probe", "--size", "256"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    number = r"(\d+\.\d+) MiB"
    for variant in ["baseline", "naive", "tiled-128", "tiled-512"]:
        row = re.search(rf"^{variant}\s+{number}\s+(-?\d+\.\d+) MiB\s+(\S+)", result.stdout, re.MULTILINE)
        assert row, result.stdout
        assert float(row[1]) > 0
        if variant != "baseline":
            assert float(row[3]) >= 0  # the time in ms
    for variant in ["tiled-128", "tiled-512"]:
        assert re.search(rf"{variant}\s+on total peak RSS \d+\.\d+ .*on extra over baseline", result.stdout)
