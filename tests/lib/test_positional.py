"""Specification of course_lib.positional: the sinusoidal table and its rotation property."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import SinusoidalPositionalEncoding, relative_position_matrix, sinusoidal_positional_encoding


def formula_table(num_positions: int, d_model: int) -> torch.Tensor:
    """Vaswani et al. (2017) section 3.5 with Python's math, one entry at a time (float64)."""
    pe = torch.zeros(num_positions, d_model, dtype=torch.float64)
    for p in range(num_positions):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe


# ---------------------------------------------------------------------------------------
# sinusoidal_positional_encoding
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_positions, d_model", [(1, 2), (10, 4), (50, 16), (7, 6), (200, 32)])
def test_table_matches_the_formula_computed_with_math_sin_and_cos(num_positions, d_model):
    pe = sinusoidal_positional_encoding(num_positions, d_model)
    assert pe.shape == (num_positions, d_model)
    assert pe.dtype == torch.float32
    torch.testing.assert_close(pe, formula_table(num_positions, d_model).float())


def test_columns_are_interleaved_even_sin_odd_cos():
    P, d = 30, 8
    pe = sinusoidal_positional_encoding(P, d)
    p = torch.arange(P, dtype=torch.float64)[:, None]
    omega = torch.tensor([10000 ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    torch.testing.assert_close(pe[:, 0::2], torch.sin(p * omega).float())
    torch.testing.assert_close(pe[:, 1::2], torch.cos(p * omega).float())


def test_position_zero_is_alternating_zero_and_one():
    pe = sinusoidal_positional_encoding(1, 10)
    assert torch.equal(pe[0], torch.tensor([0.0, 1.0] * 5))


def test_first_pair_turns_one_radian_per_position_and_last_pair_slowest():
    d = 16
    pe = sinusoidal_positional_encoding(5, d)
    for p in range(5):
        assert pe[p, 0].item() == pytest.approx(math.sin(p), abs=1e-6)
    # the last pair's frequency is 10000^{-(d-2)/d}
    assert pe[4, d - 2].item() == pytest.approx(math.sin(4 * 10000 ** (-(d - 2) / d)), abs=1e-7)


def test_each_sin_cos_pair_lies_on_the_unit_circle():
    pe = sinusoidal_positional_encoding(100, 12).double()
    radius = pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2
    torch.testing.assert_close(radius, torch.ones_like(radius), atol=1e-6, rtol=0)


def test_zero_positions_give_an_empty_table():
    pe = sinusoidal_positional_encoding(0, 8)
    assert pe.shape == (0, 8) and pe.dtype == torch.float32


@pytest.mark.parametrize("d_model", [1, 3, 7, 15])
def test_odd_d_model_raises_value_error(d_model):
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_positional_encoding(4, d_model)
    with pytest.raises(ValueError, match="d_model"):
        relative_position_matrix(1, d_model)


def test_non_positive_d_model_and_negative_num_positions_raise_value_error():
    with pytest.raises(ValueError, match="d_model"):
        sinusoidal_positional_encoding(4, 0)
    with pytest.raises(ValueError, match="num_positions"):
        sinusoidal_positional_encoding(-1, 4)


# ---------------------------------------------------------------------------------------
# relative_position_matrix
# ---------------------------------------------------------------------------------------


@settings(max_examples=50)
@given(
    half_d=st.integers(1, 32),
    p=st.integers(0, 1000),
    k=st.integers(-500, 500),
)
def test_shifting_by_k_positions_is_multiplication_by_the_relative_matrix(half_d, p, k):
    d = 2 * half_d
    p = max(p, -k)  # p + k must be a position in the table
    pe = sinusoidal_positional_encoding(p + max(k, 0) + 1, d)
    M = relative_position_matrix(k, d)
    assert M.shape == (d, d) and M.dtype == torch.float32
    torch.testing.assert_close(pe[p] @ M, pe[p + k])


def test_relative_matrix_maps_the_whole_table_at_once():
    d, k = 16, 7
    pe = sinusoidal_positional_encoding(60, d)
    torch.testing.assert_close(pe[:-k] @ relative_position_matrix(k, d), pe[k:])
    torch.testing.assert_close(pe[k:] @ relative_position_matrix(-k, d), pe[:-k])


def test_relative_matrix_for_offset_zero_is_the_identity():
    torch.testing.assert_close(relative_position_matrix(0, 10), torch.eye(10))


@settings(max_examples=30)
@given(half_d=st.integers(1, 16), a=st.integers(-100, 100), b=st.integers(-100, 100))
def test_relative_matrices_compose_like_rotations(half_d, a, b):
    d = 2 * half_d
    Ma, Mb = relative_position_matrix(a, d), relative_position_matrix(b, d)
    torch.testing.assert_close(Ma @ Mb, relative_position_matrix(a + b, d))
    torch.testing.assert_close(Ma @ Ma.T, torch.eye(d))  # orthogonal
    torch.testing.assert_close(Ma @ relative_position_matrix(-a, d), torch.eye(d))


def test_relative_matrix_is_block_diagonal_with_2x2_rotations():
    d, k = 8, 3
    M = relative_position_matrix(k, d).double()
    for i in range(d // 2):
        w = k * 10000 ** (-2 * i / d)
        block = torch.tensor([[math.cos(w), -math.sin(w)], [math.sin(w), math.cos(w)]], dtype=torch.float64)
        torch.testing.assert_close(M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2], block, atol=1e-7, rtol=0)
    off = M.clone()
    for i in range(d // 2):
        off[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = 0
    assert (off == 0).all()


# ---------------------------------------------------------------------------------------
# SinusoidalPositionalEncoding module
# ---------------------------------------------------------------------------------------


def test_module_adds_the_table_rows_for_positions_start_onwards():
    d = 8
    module = SinusoidalPositionalEncoding(d, max_len=20)
    x = torch.randn(2, 5, d)
    table = formula_table(20, d).float()
    torch.testing.assert_close(module(x), x + table[:5])
    torch.testing.assert_close(module(x, start=3), x + table[3:8])


def test_module_keeps_float64_inputs_in_float64():
    module = SinusoidalPositionalEncoding(4, max_len=10)
    x = torch.randn(1, 3, 4, dtype=torch.float64)
    assert module(x).dtype == torch.float64


def test_module_rejects_sequences_longer_than_max_len_and_wrong_width():
    module = SinusoidalPositionalEncoding(4, max_len=6)
    with pytest.raises(ValueError, match="max_len"):
        module(torch.randn(1, 7, 4))
    with pytest.raises(ValueError, match="max_len"):
        module(torch.randn(1, 4, 4), start=3)
    with pytest.raises(ValueError, match="x"):
        module(torch.randn(1, 3, 5))


def test_module_table_is_not_saved_in_the_state_dict():
    assert len(SinusoidalPositionalEncoding(4, max_len=6).state_dict()) == 0
