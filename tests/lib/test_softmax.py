"""Specification of course_lib.softmax: a stable softmax that is safe for all -inf slices."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import masked_softmax, softmax

NEG_INF = float("-inf")


# ---------------------------------------------------------------------------------------
# softmax
# ---------------------------------------------------------------------------------------


def test_softmax_matches_naive_exp_over_sum_of_exps():
    x = torch.randn(3, 5)
    expected = torch.tensor(
        [[math.exp(x[i, j]) / sum(math.exp(x[i, k]) for k in range(5)) for j in range(5)] for i in range(3)]
    )
    torch.testing.assert_close(softmax(x), expected)


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    data=st.data(),
)
def test_softmax_matches_torch_softmax_along_any_dim(seed, shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = 4 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    out = softmax(x, dim=dim)
    assert out.shape == x.shape
    torch.testing.assert_close(out, torch.softmax(x, dim=dim))


def test_softmax_default_dim_is_the_last():
    x = torch.randn(4, 3)
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31 - 1), shift=st.floats(-1e3, 1e3))
def test_softmax_is_invariant_to_adding_a_constant(seed, shift):
    x = torch.randn(3, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(softmax(x + shift), softmax(x))


def test_softmax_of_scores_of_magnitude_1e4_is_finite_and_matches_torch():
    x = torch.tensor([[1e4, 0.0, -1e4], [1e4, 1e4 - 1.0, 1e4 - 2.0], [-1e4, -1e4 + 3.0, -1e4]])
    out = softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    torch.testing.assert_close(out.sum(-1), torch.ones(3))


def test_softmax_of_an_all_minus_inf_slice_is_zero_not_nan():
    x = torch.tensor([[NEG_INF, NEG_INF, NEG_INF], [0.0, 1.0, 2.0]])
    out = softmax(x)
    assert (out[0] == 0).all()
    torch.testing.assert_close(out[1], torch.softmax(x[1], dim=-1))


def test_softmax_of_an_all_minus_inf_slice_has_finite_gradients():
    x = torch.tensor([[NEG_INF, NEG_INF], [0.5, -0.5]], requires_grad=True)
    (softmax(x) * torch.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[0] == 0).all()


def test_softmax_gives_minus_inf_entries_weight_zero_and_renormalises_the_rest():
    x = torch.tensor([[1.0, NEG_INF, 2.0, NEG_INF, 0.5]])
    out = softmax(x)
    assert out[0, 1] == 0 and out[0, 3] == 0
    torch.testing.assert_close(out[0, [0, 2, 4]], torch.softmax(x[0, [0, 2, 4]], dim=-1))


def test_softmax_gradient_matches_torch_softmax_gradient():
    x = torch.randn(4, 7, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    w = torch.randn(4, 7)
    (softmax(x) * w).sum().backward()
    (torch.softmax(y, -1) * w).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_softmax_gradient_is_correct_by_finite_differences():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: softmax(t, dim=0), (x,))


def test_softmax_second_derivatives_are_correct_by_finite_differences():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: softmax(t, dim=0), (x,))


def test_masked_softmax_gradients_are_correct_with_a_fully_masked_row():
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[False] * 5, [True, False, True, True, False], [True] * 5])
    assert torch.autograd.gradcheck(lambda t: masked_softmax(t, mask), (x,))
    assert torch.autograd.gradgradcheck(lambda t: masked_softmax(t, mask), (x,))


def test_softmax_float64_in_float64_out_matching_torch():
    x = torch.randn(2, 5, dtype=torch.float64)
    out = softmax(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.softmax(x, -1))


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 5), s=st.integers(1, 8))
def test_softmax_outputs_are_probabilities(seed, n, s):
    x = 10 * torch.randn(n, s, generator=torch.Generator().manual_seed(seed))
    out = softmax(x)
    assert (out >= 0).all() and (out <= 1).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(n))


# ---------------------------------------------------------------------------------------
# masked_softmax
# ---------------------------------------------------------------------------------------


def test_masked_softmax_without_a_mask_is_softmax():
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(masked_softmax(x), torch.softmax(x, -1))


def test_masked_softmax_masks_before_normalising_so_rows_sum_to_one():
    x = torch.randn(3, 5)
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 1], [1, 1, 1, 1, 1]], dtype=torch.bool)
    out = masked_softmax(x, mask)
    assert (out[~mask] == 0).all()
    torch.testing.assert_close(out.sum(-1), torch.ones(3))
    torch.testing.assert_close(out, torch.softmax(x.masked_fill(~mask, NEG_INF), -1))


def test_masked_softmax_fully_masked_row_gives_zeros_and_finite_gradients():
    x = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[False] * 4, [True, True, False, True]])
    out = masked_softmax(x, mask)
    assert (out[0] == 0).all()
    (out * torch.randn(2, 4)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert (x.grad[~mask] == 0).all()


def test_masked_softmax_broadcasts_the_mask():
    x = torch.randn(2, 3, 4)
    mask = torch.tensor([True, False, True, True])
    torch.testing.assert_close(masked_softmax(x, mask), masked_softmax(x, mask.expand(2, 3, 4)))


@settings(max_examples=40)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 4), l=st.integers(1, 4), s=st.integers(1, 6))
def test_masked_softmax_rows_sum_to_one_wherever_any_key_is_allowed(seed, n, l, s):
    g = torch.Generator().manual_seed(seed)
    x = 5 * torch.randn(n, l, s, generator=g)
    mask = torch.rand(n, l, s, generator=g) < 0.5
    out = masked_softmax(x, mask)
    allowed = mask.any(-1)
    torch.testing.assert_close(out.sum(-1)[allowed], torch.ones(int(allowed.sum())))
    assert (out.sum(-1)[~allowed] == 0).all()
    assert (out[~mask] == 0).all()


def test_masked_softmax_rejects_a_float_mask():
    with pytest.raises(ValueError, match="boolean"):
        masked_softmax(torch.randn(2, 3), torch.ones(2, 3))
