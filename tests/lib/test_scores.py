"""Specification of course_lib.scores: one query scored against S keys, shape (N, S)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import additive_score, cosine_score, dot_score, multiplicative_score, scaled_dot_score
from course_lib.scores import additive_score_projected

# ---------------------------------------------------------------------------------------
# Independent naive references (plain Python loops over float64 numpy arrays)
# ---------------------------------------------------------------------------------------


def naive_dot(query, keys):
    q, k = query.double().numpy(), keys.double().numpy()
    N, S, D = k.shape
    out = np.zeros((N, S))
    for n in range(N):
        for s in range(S):
            out[n, s] = sum(q[n, d] * k[n, s, d] for d in range(D))
    return torch.from_numpy(out)


def naive_additive(query, keys, W_q, W_k, v):
    q, k = query.double().numpy(), keys.double().numpy()
    Wq, Wk, vv = W_q.double().numpy(), W_k.double().numpy(), v.double().numpy()
    N, S, Dk = k.shape
    Dq, A = Wq.shape
    out = np.zeros((N, S))
    for n in range(N):
        for s in range(S):
            total = 0.0
            for a in range(A):
                pre = sum(q[n, i] * Wq[i, a] for i in range(Dq)) + sum(k[n, s, j] * Wk[j, a] for j in range(Dk))
                total += vv[a] * math.tanh(pre)
            out[n, s] = total
    return torch.from_numpy(out)


def naive_multiplicative(query, keys, W):
    q, k, w = query.double().numpy(), keys.double().numpy(), W.double().numpy()
    N, S, Dk = k.shape
    Dq = q.shape[1]
    out = np.zeros((N, S))
    for n in range(N):
        for s in range(S):
            out[n, s] = sum(q[n, i] * w[i, j] * k[n, s, j] for i in range(Dq) for j in range(Dk))
    return torch.from_numpy(out)


# ---------------------------------------------------------------------------------------
# dot and scaled dot
# ---------------------------------------------------------------------------------------


def test_dot_score_matches_naive_loop():
    query, keys = torch.randn(3, 5), torch.randn(3, 7, 5)
    out = dot_score(query, keys)
    assert out.shape == (3, 7)
    torch.testing.assert_close(out, naive_dot(query, keys).float())


def test_dot_score_matches_einsum():
    query, keys = torch.randn(4, 6), torch.randn(4, 2, 6)
    torch.testing.assert_close(dot_score(query, keys), torch.einsum("nd,nsd->ns", query, keys))


def test_scaled_dot_score_divides_by_sqrt_of_key_width():
    query, keys = torch.randn(2, 9), torch.randn(2, 4, 9)
    expected = naive_dot(query, keys) / math.sqrt(9)
    torch.testing.assert_close(scaled_dot_score(query, keys), expected.float())


def test_scaled_dot_score_has_unit_variance_for_unit_variance_inputs():
    # The reason for the scaling: the variance of q.k grows like D; q.k / sqrt(D) stays near 1.
    g = torch.Generator().manual_seed(0)
    D = 256
    query, keys = torch.randn(200, D, generator=g), torch.randn(200, 50, D, generator=g)
    var = scaled_dot_score(query, keys).var().item()
    assert 0.85 < var < 1.15


def test_dot_scores_with_a_single_key_have_shape_n_by_1():
    query, keys = torch.randn(3, 4), torch.randn(3, 1, 4)
    assert dot_score(query, keys).shape == (3, 1)
    assert scaled_dot_score(query, keys).shape == (3, 1)


@pytest.mark.parametrize("fn", [dot_score, scaled_dot_score, cosine_score])
def test_float64_inputs_give_float64_scores(fn):
    query, keys = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 4, 3, dtype=torch.float64)
    assert fn(query, keys).dtype == torch.float64


# ---------------------------------------------------------------------------------------
# cosine
# ---------------------------------------------------------------------------------------


def test_cosine_score_matches_torch_cosine_similarity():
    query, keys = torch.randn(3, 8), torch.randn(3, 5, 8)
    expected = F.cosine_similarity(query.unsqueeze(1), keys, dim=-1)
    torch.testing.assert_close(cosine_score(query, keys), expected)


def test_cosine_score_float64_matches_torch():
    query, keys = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    expected = F.cosine_similarity(query.unsqueeze(1), keys, dim=-1)
    torch.testing.assert_close(cosine_score(query, keys), expected)


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    s=st.integers(1, 5),
    d=st.integers(1, 6),
    scale_q=st.floats(0.01, 100.0),
    scale_k=st.floats(0.01, 100.0),
)
def test_cosine_score_lies_in_minus_one_one_and_ignores_vector_lengths(seed, n, s, d, scale_q, scale_k):
    g = torch.Generator().manual_seed(seed)
    query, keys = (
        torch.randn(n, d, generator=g, dtype=torch.float64),
        torch.randn(n, s, d, generator=g, dtype=torch.float64),
    )
    base = cosine_score(query, keys)
    assert (base.abs() <= 1 + 1e-12).all()
    torch.testing.assert_close(cosine_score(scale_q * query, scale_k * keys), base)


def test_cosine_score_of_parallel_and_antiparallel_vectors_is_plus_minus_one():
    query = torch.randn(2, 5)
    keys = torch.stack([3.0 * query, -0.5 * query], dim=1)  # (2, 2, 5)
    torch.testing.assert_close(cosine_score(query, keys), torch.tensor([[1.0, -1.0], [1.0, -1.0]]))


@pytest.mark.parametrize("scale", [1e-3, 1e-5, 1e-7])
def test_cosine_score_of_short_nonzero_vectors_matches_torch_and_depends_on_direction_only(scale):
    # eps only guards (near-)zero vectors: F.cosine_similarity clamps each norm separately,
    # so short but non-zero vectors still get their true cosine.
    query = scale * torch.randn(2, 6)
    keys = scale * torch.randn(2, 3, 6)
    keys[:, 0] = 2 * query  # parallel: cosine exactly 1
    expected = F.cosine_similarity(query.unsqueeze(1), keys, dim=-1)
    out = cosine_score(query, keys)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out[:, 0], torch.ones(2))


def test_cosine_score_with_a_zero_key_is_zero_not_nan():
    query = torch.randn(1, 4)
    keys = torch.stack([torch.zeros(4), torch.randn(4)]).unsqueeze(0)  # (1, 2, 4)
    out = cosine_score(query, keys)
    assert torch.isfinite(out).all()
    assert out[0, 0] == 0


# ---------------------------------------------------------------------------------------
# additive (Bahdanau) and multiplicative (Luong "general")
# ---------------------------------------------------------------------------------------


def test_additive_score_matches_naive_loop_with_different_query_and_key_widths():
    N, S, Dq, Dk, A = 2, 4, 3, 5, 6
    query, keys = torch.randn(N, Dq), torch.randn(N, S, Dk)
    W_q, W_k, v = torch.randn(Dq, A), torch.randn(Dk, A), torch.randn(A)
    out = additive_score(query, keys, W_q, W_k, v)
    assert out.shape == (N, S)
    torch.testing.assert_close(out, naive_additive(query, keys, W_q, W_k, v).float())


def test_additive_score_matches_einsum_in_float64():
    N, S, Dq, Dk, A = 3, 5, 4, 2, 7
    dt = torch.float64
    query, keys = torch.randn(N, Dq, dtype=dt), torch.randn(N, S, Dk, dtype=dt)
    W_q, W_k, v = torch.randn(Dq, A, dtype=dt), torch.randn(Dk, A, dtype=dt), torch.randn(A, dtype=dt)
    hidden = torch.tanh(torch.einsum("ni,ia->na", query, W_q)[:, None, :] + torch.einsum("nsj,ja->nsa", keys, W_k))
    expected = torch.einsum("nsa,a->ns", hidden, v)
    out = additive_score(query, keys, W_q, W_k, v)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected)


def test_additive_score_projected_equals_additive_score_on_projected_inputs():
    query, keys = torch.randn(2, 3), torch.randn(2, 4, 5)
    W_q, W_k, v = torch.randn(3, 6), torch.randn(5, 6), torch.randn(6)
    torch.testing.assert_close(
        additive_score_projected(query @ W_q, keys @ W_k, v), additive_score(query, keys, W_q, W_k, v)
    )


def test_multiplicative_score_matches_naive_bilinear_form():
    query, keys, W = torch.randn(3, 4), torch.randn(3, 5, 6), torch.randn(4, 6)
    out = multiplicative_score(query, keys, W)
    assert out.shape == (3, 5)
    torch.testing.assert_close(out, naive_multiplicative(query, keys, W).float())


def test_multiplicative_score_with_identity_matrix_is_dot_score():
    query, keys = torch.randn(3, 4), torch.randn(3, 5, 4)
    torch.testing.assert_close(multiplicative_score(query, keys, torch.eye(4)), dot_score(query, keys))


# ---------------------------------------------------------------------------------------
# gradients (float64 finite differences)
# ---------------------------------------------------------------------------------------


def test_score_gradients_match_finite_differences():
    dt = torch.float64
    q = torch.randn(2, 3, dtype=dt, requires_grad=True)
    k = torch.randn(2, 4, 3, dtype=dt, requires_grad=True)
    W = torch.randn(3, 3, dtype=dt, requires_grad=True)
    W_q = torch.randn(3, 5, dtype=dt, requires_grad=True)
    W_k = torch.randn(3, 5, dtype=dt, requires_grad=True)
    v = torch.randn(5, dtype=dt, requires_grad=True)
    assert torch.autograd.gradcheck(dot_score, (q, k))
    assert torch.autograd.gradcheck(scaled_dot_score, (q, k))
    assert torch.autograd.gradcheck(cosine_score, (q, k))
    assert torch.autograd.gradcheck(multiplicative_score, (q, k, W))
    assert torch.autograd.gradcheck(additive_score, (q, k, W_q, W_k, v))
