"""Specification of course_lib.layernorm: layer_norm, add_and_norm and the LayerNorm module."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import LayerNorm, add_and_norm, layer_norm


def torch_layer_norm(E, eps=1e-5, dtype=torch.float32):
    """An nn.LayerNorm with random, non-trivial gain and bias."""
    m = nn.LayerNorm(E, eps=eps).to(dtype)
    with torch.no_grad():
        m.weight.copy_(1 + 0.5 * torch.randn(E, dtype=dtype))
        m.bias.copy_(torch.randn(E, dtype=dtype))
    return m


def naive_layer_norm(x, gamma, beta, eps=1e-5):
    """Per-token statistics with math, biased variance, eps inside the square root."""
    flat = x.double().reshape(-1, x.shape[-1])
    out = torch.zeros_like(flat)
    E = flat.shape[1]
    for r in range(flat.shape[0]):
        row = [float(v) for v in flat[r]]
        mu = sum(row) / E
        var = sum((v - mu) ** 2 for v in row) / E
        for e in range(E):
            out[r, e] = float(gamma[e]) * (row[e] - mu) / math.sqrt(var + eps) + float(beta[e])
    return out.reshape(x.shape)


# ---------------------------------------------------------------------------------------
# layer_norm (functional)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 8), (2, 2, 3, 8), (8,), (1, 1, 8)])
def test_layer_norm_matches_nn_layer_norm(shape):
    m = torch_layer_norm(shape[-1])
    x = 3 * torch.randn(*shape) + 2
    with torch.no_grad():
        expected = m(x)
    torch.testing.assert_close(layer_norm(x, m.weight.detach(), m.bias.detach()), expected)


def test_layer_norm_matches_naive_formula_with_biased_variance():
    x = torch.randn(4, 6)
    gamma, beta = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(layer_norm(x, gamma, beta), naive_layer_norm(x, gamma, beta).float())


@pytest.mark.parametrize("eps", [1e-5, 1e-2, 1.0])
def test_layer_norm_eps_goes_inside_the_square_root_as_in_torch(eps):
    m = torch_layer_norm(4, eps=eps)
    x = 0.1 * torch.randn(3, 4)  # small variance, so eps matters
    with torch.no_grad():
        expected = m(x)
    torch.testing.assert_close(layer_norm(x, m.weight.detach(), m.bias.detach(), eps=eps), expected)


def test_layer_norm_float64_matches_torch():
    m = torch_layer_norm(5, dtype=torch.float64)
    x = torch.randn(3, 5, dtype=torch.float64)
    out = layer_norm(x, m.weight.detach(), m.bias.detach())
    assert out.dtype == torch.float64
    with torch.no_grad():
        torch.testing.assert_close(out, m(x))


def test_layer_norm_gradients_match_nn_layer_norm():
    E = 7
    m = torch_layer_norm(E)
    x = torch.randn(3, 4, E)
    gamma = m.weight.detach().clone().requires_grad_(True)
    beta = m.bias.detach().clone().requires_grad_(True)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    w = torch.randn(3, 4, E)
    (layer_norm(x1, gamma, beta) * w).sum().backward()
    (m(x2) * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(gamma.grad, m.weight.grad)
    torch.testing.assert_close(beta.grad, m.bias.grad)


def test_layer_norm_gradient_is_correct_by_finite_differences():
    dt = torch.float64
    x = torch.randn(2, 5, dtype=dt, requires_grad=True)
    gamma = torch.randn(5, dtype=dt, requires_grad=True)
    beta = torch.randn(5, dtype=dt, requires_grad=True)
    assert torch.autograd.gradcheck(layer_norm, (x, gamma, beta))


@settings(max_examples=40)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 5),
    E=st.integers(2, 16),
    shift=st.floats(-100, 100),
    scale=st.floats(0.5, 20),
)
def test_layer_norm_with_unit_gain_gives_zero_mean_unit_variance_and_ignores_shift_and_scale(
    seed, rows, E, shift, scale
):
    x = torch.randn(rows, E, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ones, zeros = torch.ones(E, dtype=torch.float64), torch.zeros(E, dtype=torch.float64)
    out = layer_norm(x, ones, zeros, eps=0.0)
    torch.testing.assert_close(out.mean(-1), torch.zeros(rows, dtype=torch.float64))
    torch.testing.assert_close(out.var(-1, correction=0), torch.ones(rows, dtype=torch.float64))
    torch.testing.assert_close(layer_norm(scale * x + shift, ones, zeros, eps=0.0), out)


def test_layer_norm_normalises_each_token_independently():
    x = torch.randn(3, 4, 6)
    gamma, beta = torch.randn(6), torch.randn(6)
    out = layer_norm(x, gamma, beta)
    x2 = x.clone()
    x2[1, 2] = 1e3 * torch.randn(6)
    out2 = layer_norm(x2, gamma, beta)
    changed = torch.zeros(3, 4, dtype=torch.bool)
    changed[1, 2] = True
    torch.testing.assert_close(out2[~changed], out[~changed])


def test_layer_norm_of_a_constant_row_is_beta():
    beta = torch.randn(5)
    out = layer_norm(torch.full((2, 5), 3.0), torch.randn(5), beta)
    torch.testing.assert_close(out, beta.expand(2, 5))


# ---------------------------------------------------------------------------------------
# add_and_norm
# ---------------------------------------------------------------------------------------


def test_add_and_norm_is_layer_norm_of_the_residual_sum():
    m = torch_layer_norm(8)
    x, sub = torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    with torch.no_grad():
        expected = m(x + sub)
    torch.testing.assert_close(add_and_norm(x, sub, m.weight.detach(), m.bias.detach()), expected)


def test_add_and_norm_passes_eps_through():
    m = torch_layer_norm(4, eps=0.5)
    x, sub = 0.1 * torch.randn(3, 4), 0.1 * torch.randn(3, 4)
    with torch.no_grad():
        expected = m(x + sub)
    torch.testing.assert_close(add_and_norm(x, sub, m.weight.detach(), m.bias.detach(), eps=0.5), expected)


def test_add_and_norm_gradients_reach_both_inputs():
    m = torch_layer_norm(6)
    x = torch.randn(2, 3, 6, requires_grad=True)
    sub = torch.randn(2, 3, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    w = torch.randn(2, 3, 6)
    (add_and_norm(x, sub, m.weight.detach(), m.bias.detach()) * w).sum().backward()
    (m(x_ref + sub.detach()) * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(sub.grad, x_ref.grad)  # d(x + sub)/dsub = d(x + sub)/dx


# ---------------------------------------------------------------------------------------
# LayerNorm module
# ---------------------------------------------------------------------------------------


def test_module_loads_nn_layer_norm_state_dict_and_matches_it():
    m = torch_layer_norm(6, eps=1e-3)
    ours = LayerNorm(6, eps=1e-3)
    ours.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 6)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out1, out2 = ours(x1), m(x2)
    torch.testing.assert_close(out1, out2)
    w = torch.randn(2, 3, 6)
    (out1 * w).sum().backward()
    (out2 * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.weight.grad, m.weight.grad)
    torch.testing.assert_close(ours.bias.grad, m.bias.grad)


def test_module_starts_as_the_identity_normalisation():
    ours, ref = LayerNorm(5), nn.LayerNorm(5)
    x = torch.randn(4, 5)
    torch.testing.assert_close(ours(x), ref(x))
    assert torch.equal(ours.weight.detach(), torch.ones(5)) and torch.equal(ours.bias.detach(), torch.zeros(5))


def test_the_fused_norm_gives_the_readable_norms_output_and_gradients():
    torch.manual_seed(0)
    ours = LayerNorm(8, eps=1e-3)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5), ours.bias.uniform_(-1, 1)
    x = torch.randn(3, 5, 8) * 4 + 2
    grads = {}
    for fused in (False, True):
        ours.zero_grad()
        xi = x.clone().requires_grad_(True)
        out = ours(xi, fused=fused)
        (out * torch.linspace(-1, 1, 8)).sum().backward()
        grads[fused] = (out.detach(), xi.grad, ours.weight.grad.clone(), ours.bias.grad.clone())
    for readable, fused in zip(grads[False], grads[True], strict=True):
        torch.testing.assert_close(fused, readable)
