"""Sinusoidal positional encoding and its relative-position property (positional encoding chapter)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._validation import check_positive_int, check_shapes

__all__ = ["sinusoidal_positional_encoding", "relative_position_matrix", "SinusoidalPositionalEncoding"]


def _check_d_model(fn: str, d_model: int) -> None:
    check_positive_int(fn, "d_model", d_model)
    if d_model % 2:
        raise ValueError(f"{fn}: argument 'd_model' must be even (sin and cos come in pairs), got {d_model}")


def _frequencies(d_model: int) -> torch.Tensor:
    """omega_i = 1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1, in float64."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    return torch.exp(-math.log(10000.0) * two_i / d_model)


def sinusoidal_positional_encoding(num_positions: int, d_model: int) -> torch.Tensor:
    r"""The sinusoidal table of Vaswani et al. (2017), section 3.5.

    .. math::
        PE_{p, 2i} = \sin(p\,\omega_i), \quad PE_{p, 2i+1} = \cos(p\,\omega_i), \quad
        \omega_i = 10000^{-2i/d_{model}}.

    Columns come in (sin, cos) pairs, interleaved; pair i turns at frequency
    :math:`\omega_i`, from 1 radian per position down to 1/10000. Computed in float64,
    returned in float32.

    Args:
        num_positions: number of positions p = 0 .. num_positions - 1 (0 allowed).
        d_model: width; must be even.

    Shape:
        - output: :math:`(\text{num\_positions}, d_{model})`

    Returns:
        The table, float32, on PyTorch's default device; row p encodes position p.

    Raises:
        ValueError: ``d_model`` is odd or not positive, or ``num_positions`` is negative.
    """
    fn = "sinusoidal_positional_encoding"
    _check_d_model(fn, d_model)
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) or num_positions < 0:
        raise ValueError(f"{fn}: argument 'num_positions' must be a non-negative int, got {num_positions!r}")
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _frequencies(d_model)  # (P, d/2)
    pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (P, d/2, 2)
    return pe.reshape(num_positions, d_model).float()  # (P, d): sin, cos, sin, cos, ...


def relative_position_matrix(offset: int, d_model: int) -> torch.Tensor:
    r"""The matrix M with :math:`PE_{p + k} = PE_p M` for every position p (k = ``offset``).

    Each (sin, cos) pair is a point on a circle; moving k positions on turns it by the
    angle :math:`k\omega_i`, whatever p is. So M is block diagonal with one 2x2 rotation
    per pair (for row vectors):

    .. math::
        M_i = \begin{pmatrix} \cos k\omega_i & -\sin k\omega_i \\
                              \sin k\omega_i & \cos k\omega_i \end{pmatrix}.

    Args:
        offset: k, the shift in positions: an integer (negative moves back), or any real
            number for a fractional shift.
        d_model: width; must be even.

    Shape:
        - output: :math:`(d_{model}, d_{model})`, float32

    Returns:
        M, computed in float64 and returned in float32, on PyTorch's default device.
    """
    fn = "relative_position_matrix"
    _check_d_model(fn, d_model)
    if isinstance(offset, bool) or not isinstance(offset, (int, float)):
        raise TypeError(f"{fn}: argument 'offset' must be a number, got {type(offset).__name__}")
    angle = offset * _frequencies(d_model)  # (d/2,)
    cos, sin = angle.cos(), angle.sin()
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    idx = torch.arange(0, d_model, 2)
    M[idx, idx] = cos  # sin-column from the sin-row
    M[idx + 1, idx] = sin  # sin-column from the cos-row
    M[idx, idx + 1] = -sin  # cos-column from the sin-row
    M[idx + 1, idx + 1] = cos  # cos-column from the cos-row
    return M.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Add the sinusoidal table to a batch of embeddings, then apply dropout.

    Args:
        d_model: width; must be even.
        max_len: the longest sequence supported.
        dropout: dropout probability after the addition (Vaswani et al. use 0.1).

    Shape:
        - x: :math:`(N, L, d_{model})` with L <= max_len
        - output: same as ``x``
    """

    pe: torch.Tensor  # (max_len, d_model), a buffer

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Add positions ``start .. start + L - 1`` (``start`` > 0 when decoding with a cache)."""
        dims = check_shapes("SinusoidalPositionalEncoding", x=(x, f"N L {self.pe.shape[1]}"))
        if start + dims["L"] > self.pe.shape[0]:
            raise ValueError(
                f"SinusoidalPositionalEncoding: positions up to {start + dims['L'] - 1} requested, "
                f"max_len is {self.pe.shape[0]}"
            )
        return self.dropout(x + self.pe[start : start + dims["L"]].to(x.dtype))
