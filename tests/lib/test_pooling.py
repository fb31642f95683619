"""Specification of course_lib.pooling: attention_pool and Luong's local-p weights (eq. 10)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import attention_pool, local_attention_weights

# ---------------------------------------------------------------------------------------
# Independent naive references
# ---------------------------------------------------------------------------------------


def naive_pool(scores, values, mask=None):
    """softmax over allowed keys (math.exp loops), then the weighted sum of values."""
    N, S = scores.shape
    Dv = values.shape[-1]
    weights = torch.zeros(N, S, dtype=torch.float64)
    context = torch.zeros(N, Dv, dtype=torch.float64)
    for n in range(N):
        allowed = [s for s in range(S) if mask is None or bool(mask[n, s])]
        if not allowed:
            continue
        m = max(float(scores[n, s]) for s in allowed)
        z = sum(math.exp(float(scores[n, s]) - m) for s in allowed)
        for s in allowed:
            weights[n, s] = math.exp(float(scores[n, s]) - m) / z
            context[n] += weights[n, s] * values[n, s].double()
    return context, weights


def naive_local(scores, center, half_window):
    """Luong et al. (2015) eq. 10, written out position by position.

    softmax over the window |s - p| <= D only (skipping -inf scores), times a Gaussian
    with sigma = D / 2; zero outside the window; no renormalisation.
    """
    N, S = scores.shape
    sigma = half_window / 2
    out = torch.zeros(N, S, dtype=torch.float64)
    for n in range(N):
        p = float(center[n])
        window = [s for s in range(S) if abs(s - p) <= half_window and float(scores[n, s]) != -math.inf]
        if not window:
            continue
        m = max(float(scores[n, s]) for s in window)
        z = sum(math.exp(float(scores[n, s]) - m) for s in window)
        for s in window:
            align = math.exp(float(scores[n, s]) - m) / z
            out[n, s] = align * math.exp(-((s - p) ** 2) / (2 * sigma**2))
    return out


# ---------------------------------------------------------------------------------------
# attention_pool
# ---------------------------------------------------------------------------------------


def test_attention_pool_matches_naive_softmax_and_weighted_sum():
    scores, values = torch.randn(3, 6), torch.randn(3, 6, 4)
    context, weights = attention_pool(scores, values)
    ref_context, ref_weights = naive_pool(scores, values)
    assert context.shape == (3, 4) and weights.shape == (3, 6)
    torch.testing.assert_close(weights, ref_weights.float())
    torch.testing.assert_close(context, ref_context.float())


def test_attention_pool_with_mask_matches_naive_and_ignores_masked_keys():
    scores, values = torch.randn(2, 5), torch.randn(2, 5, 3)
    mask = torch.tensor([[True, True, False, True, False], [False, True, True, True, True]])
    context, weights = attention_pool(scores, values, mask)
    ref_context, ref_weights = naive_pool(scores, values, mask)
    torch.testing.assert_close(weights, ref_weights.float())
    torch.testing.assert_close(context, ref_context.float())
    assert (weights[~mask] == 0).all()


def test_attention_pool_masked_values_do_not_change_the_context():
    scores, values = torch.randn(2, 5), torch.randn(2, 5, 3)
    mask = torch.tensor([[True, True, True, False, False], [True, False, True, True, True]])
    changed = values.clone()
    changed[~mask] = 1e3 * torch.randn(int((~mask).sum()), 3)
    changed_scores = scores.masked_fill(~mask, 50.0)
    torch.testing.assert_close(
        attention_pool(changed_scores, changed, mask)[0], attention_pool(scores, values, mask)[0]
    )


def test_attention_pool_fully_masked_row_gives_zero_weights_and_zero_context():
    scores = torch.randn(2, 4, requires_grad=True)
    values = torch.randn(2, 4, 3, requires_grad=True)
    mask = torch.tensor([[False] * 4, [True, False, True, True]])
    context, weights = attention_pool(scores, values, mask)
    assert (weights[0] == 0).all() and (context[0] == 0).all()
    torch.testing.assert_close(weights[1].sum(), torch.tensor(1.0))
    (context.sum() + weights.sum()).backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(values.grad).all()


def test_attention_pool_accepts_a_mask_broadcast_over_the_batch():
    scores, values = torch.randn(3, 4), torch.randn(3, 4, 2)
    mask = torch.tensor([True, False, True, True])
    broadcast = attention_pool(scores, values, mask)
    expanded = attention_pool(scores, values, mask.expand(3, 4))
    torch.testing.assert_close(broadcast, expanded)


@settings(max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), s=st.integers(1, 8), dv=st.integers(1, 5))
def test_attention_pool_weights_sum_to_one_wherever_any_key_is_allowed(seed, n, s, dv):
    g = torch.Generator().manual_seed(seed)
    scores = 5 * torch.randn(n, s, generator=g)
    values = torch.randn(n, s, dv, generator=g)
    mask = torch.rand(n, s, generator=g) < 0.6
    context, weights = attention_pool(scores, values, mask)
    allowed = mask.any(-1)
    torch.testing.assert_close(weights.sum(-1)[allowed], torch.ones(int(allowed.sum())))
    assert (weights[~allowed] == 0).all() and (context[~allowed] == 0).all()
    assert (weights >= 0).all()


# ---------------------------------------------------------------------------------------
# local_attention_weights (Luong eq. 10)
# ---------------------------------------------------------------------------------------


def test_local_weights_match_eq_10_for_an_integer_center():
    scores = torch.randn(1, 9)
    out = local_attention_weights(scores, torch.tensor([4.0]), 2)
    torch.testing.assert_close(out, naive_local(scores, [4.0], 2).float())
    assert (out[0, :2] == 0).all() and (out[0, 7:] == 0).all()


def test_local_weights_at_the_center_equal_the_window_softmax():
    # The Gaussian is exp(0) = 1 at s = p, so the weight there is the in-window softmax itself.
    scores = torch.randn(1, 10)
    out = local_attention_weights(scores, torch.tensor([5.0]), 3)
    window = scores[0, 2:9]
    expected = torch.softmax(window, -1)[3]
    torch.testing.assert_close(out[0, 5], expected)


def test_local_weights_use_sigma_equal_to_half_the_half_window():
    # Equal scores make the softmax uniform over the 2D+1 window; the ratio of the weight
    # at distance d to the weight at the centre is then exactly the Gaussian exp(-d^2 / (2 (D/2)^2)).
    D = 4
    out = local_attention_weights(torch.zeros(1, 21), torch.tensor([10.0]), D)
    for d in range(1, D + 1):
        ratio = (out[0, 10 + d] / out[0, 10]).item()
        assert ratio == pytest.approx(math.exp(-(d**2) / (2 * (D / 2) ** 2)), rel=1e-5)


def test_local_weights_are_not_renormalised():
    scores = torch.zeros(1, 11)
    out = local_attention_weights(scores, torch.tensor([5.0]), 2)
    # Uniform softmax over 5 positions times a Gaussian < 1 away from the centre.
    expected_sum = sum(math.exp(-(d**2) / 2) for d in (-2, -1, 0, 1, 2)) / 5
    assert out.sum().item() == pytest.approx(expected_sum, rel=1e-5)
    assert out.sum().item() < 1


def test_local_weights_near_the_edges_softmax_over_the_clipped_window():
    scores = torch.randn(2, 6)
    center = torch.tensor([0.0, 5.0])
    out = local_attention_weights(scores, center, 3)
    torch.testing.assert_close(out, naive_local(scores, center, 3).float())
    assert (out[0, 4:] == 0).all() and (out[1, :2] == 0).all()


def test_local_weights_give_zero_weight_to_minus_inf_scores():
    scores = torch.randn(1, 7)
    scores[0, 3] = float("-inf")
    out = local_attention_weights(scores, torch.tensor([3.0]), 2)
    assert out[0, 3] == 0
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, naive_local(scores, [3.0], 2).float())


def test_local_weights_with_only_padding_in_the_window_are_all_zero():
    scores = torch.tensor([[0.3, -0.2, float("-inf"), float("-inf"), float("-inf"), float("-inf")]])
    out = local_attention_weights(scores, torch.tensor([4.0]), 1)
    assert (out == 0).all()


def test_local_weights_with_a_center_outside_the_sequence_are_all_zero():
    out = local_attention_weights(torch.randn(1, 5), torch.tensor([20.0]), 2)
    assert (out == 0).all()


@settings(max_examples=50)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    s=st.integers(1, 12),
    half_window=st.integers(1, 4),
    data=st.data(),
)
def test_local_weights_match_naive_eq_10_for_fractional_centers(seed, n, s, half_window, data):
    g = torch.Generator().manual_seed(seed)
    scores = 3 * torch.randn(n, s, generator=g)
    scores[torch.rand(n, s, generator=g) < 0.2] = float("-inf")
    # Centres on a 1/16 grid: fractional, exactly representable, from beyond the left
    # edge to beyond the right edge.
    sixteenths = data.draw(st.lists(st.integers(-2 * 16, (s + 1) * 16), min_size=n, max_size=n))
    center = torch.tensor(sixteenths, dtype=torch.float32) / 16
    out = local_attention_weights(scores, center, half_window)
    torch.testing.assert_close(out, naive_local(scores, center, half_window).float())
    assert (out >= 0).all() and (out.sum(-1) <= 1 + 1e-6).all()


def test_local_weights_float64_in_float64_out():
    scores = torch.randn(2, 7, dtype=torch.float64)
    center = torch.tensor([1.25, 4.5], dtype=torch.float64)
    out = local_attention_weights(scores, center, 2)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, naive_local(scores, center, 2))


@pytest.mark.parametrize("half_window", [0, -1])
def test_local_weights_reject_a_non_positive_half_window(half_window):
    with pytest.raises(ValueError, match="half_window"):
        local_attention_weights(torch.randn(1, 5), torch.tensor([2.0]), half_window)


@pytest.mark.parametrize("half_window", ["2", None, True, torch.tensor(2)])
def test_local_weights_reject_a_half_window_that_is_not_a_number_with_a_type_error(half_window):
    with pytest.raises(TypeError, match=r"half_window.*must be a number"):
        local_attention_weights(torch.zeros(1, 4), torch.zeros(1), half_window)


def test_local_weights_reject_a_nan_half_window():
    with pytest.raises(ValueError, match=r"half_window.*positive"):
        local_attention_weights(torch.zeros(1, 4), torch.zeros(1), float("nan"))
