"""Exercises of ``04_positional_encoding``: the sinusoidal table and the relative-position matrix.

The reference requires an even ``d_model`` (sin and cos come in pairs) and raises
``ValueError`` otherwise, so no case uses an odd width.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import relative_position_matrix, sinusoidal_positional_encoding
from ..exercise_spec import Exercise
from ..model import Call, Case, Mistake
from ._common import fresh_int, rng

__all__ = ["EXERCISES"]


# --- shared helpers ---------------------------------------------------------------------------


def _pair_frequencies(d_model: int, power: float = 2.0, base: float = 10000.0) -> torch.Tensor:
    """omega_i = base^(-power * i / d_model) for pairs i = 0 .. d/2 - 1 (power 2, base 10000 are correct)."""
    i = torch.arange(d_model // 2, dtype=torch.float64)
    return torch.exp(-math.log(base) * power * i / d_model)


def _interleave(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Columns a0, b0, a1, b1, ... from two (P, d/2) tables."""
    return torch.stack([a, b], dim=-1).flatten(-2)


def _table(num_positions: int, d_model: int, freqs: torch.Tensor, first: int = 0) -> torch.Tensor:
    angles = torch.arange(first, first + num_positions, dtype=torch.float64)[:, None] * freqs  # (P, d/2)
    return _interleave(angles.sin(), angles.cos()).float()


def _table64(num_positions: int, d_model: int) -> torch.Tensor:
    """The correct table in float64 (for property judges)."""
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _pair_frequencies(d_model)
    return _interleave(angles.sin(), angles.cos())


# --- sinusoidal_positional_encoding: classic mistakes ---------------------------------------------


def _pe_swapped(num_positions: int, d_model: int) -> torch.Tensor:
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _pair_frequencies(d_model)
    return _interleave(angles.cos(), angles.sin()).float()


def _pe_concatenated(num_positions: int, d_model: int) -> torch.Tensor:
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _pair_frequencies(d_model)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float()


def _pe_concatenated_swapped(num_positions: int, d_model: int) -> torch.Tensor:
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _pair_frequencies(d_model)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float()


def _pe_no_factor_two(num_positions: int, d_model: int) -> torch.Tensor:
    return _table(num_positions, d_model, _pair_frequencies(d_model, power=1.0))


def _per_column(num_positions: int, d_model: int, power: float) -> torch.Tensor:
    j = torch.arange(d_model, dtype=torch.float64)
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * torch.exp(
        -math.log(10000.0) * power * j / d_model
    )  # (P, d): one frequency per column
    out = angles.sin()
    out[:, 1::2] = angles[:, 1::2].cos()
    return out.float()


def _pe_column_index_times_two(num_positions: int, d_model: int) -> torch.Tensor:
    return _per_column(num_positions, d_model, power=2.0)


def _pe_column_index(num_positions: int, d_model: int) -> torch.Tensor:
    return _per_column(num_positions, d_model, power=1.0)


def _pe_pairs_power_four(num_positions: int, d_model: int) -> torch.Tensor:
    return _table(num_positions, d_model, _pair_frequencies(d_model, power=4.0))


def _pe_tensor2tensor(num_positions: int, d_model: int) -> torch.Tensor:
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64)
    freqs = torch.exp(-math.log(10000.0) * i / max(half - 1, 1))
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * freqs
    return torch.cat([angles.sin(), angles.cos()], dim=-1).float()


def _pe_batch_dim(num_positions: int, d_model: int) -> torch.Tensor:
    return sinusoidal_positional_encoding(num_positions, d_model).unsqueeze(0)


def _pe_sequence_first(num_positions: int, d_model: int) -> torch.Tensor:
    return sinusoidal_positional_encoding(num_positions, d_model).unsqueeze(1)


def _pe_positive_exponent(num_positions: int, d_model: int) -> torch.Tensor:
    return _table(num_positions, d_model, 1.0 / _pair_frequencies(d_model))


def _pe_from_one(num_positions: int, d_model: int) -> torch.Tensor:
    return _table(num_positions, d_model, _pair_frequencies(d_model), first=1)


def _pe_base_1000(num_positions: int, d_model: int) -> torch.Tensor:
    return _table(num_positions, d_model, _pair_frequencies(d_model, base=1000.0))


def _pe_sin_twice(num_positions: int, d_model: int) -> torch.Tensor:
    angles = torch.arange(num_positions, dtype=torch.float64)[:, None] * _pair_frequencies(d_model)
    return _interleave(angles.sin(), angles.sin()).float()


def _pe_transposed(num_positions: int, d_model: int) -> torch.Tensor:
    return sinusoidal_positional_encoding(num_positions, d_model).T.contiguous()


# --- sinusoidal_positional_encoding: cases -----------------------------------------------------------


def _pe_properties(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """Entries in [-1, 1]; every (sin, cos) column pair lies on the unit circle."""
    for a in actual:
        if not isinstance(a, torch.Tensor) or not a.is_floating_point() or a.dim() != 2:
            return "the table should be a 2-d floating-point tensor (positions, d_model)"
        if a.shape[1] % 2:
            return f"the table has {a.shape[1]} columns; it needs an even number (sin, cos pairs)"
        if not bool(torch.isfinite(a).all()):
            return "the table contains NaN or inf"
        a = a.to(torch.float64)
        if bool((a.abs() > 1 + 1e-5).any()):
            return f"some entries lie outside [-1, 1] (largest |value| {float(a.abs().max()):.3g})"
        radius = a[:, 0::2] ** 2 + a[:, 1::2] ** 2  # (P, d/2)
        if not bool(torch.allclose(radius, torch.ones_like(radius), atol=1e-4)):
            return (
                "columns 2i and 2i+1 are not a (sin, cos) pair of the same angle: "
                "PE[p, 2i]^2 + PE[p, 2i+1]^2 should be 1 for every p and i"
            )
    return None


def _pe_cases() -> list[Case]:
    # Sizes are the self-check's, or drawn anew under --seed within what each case tests
    # (widths stay even; a single position stays a single position; d_model = 2 stays 2).
    g = rng(400)
    P0, d0 = fresh_int(g, 3, range(2, 7)), fresh_int(g, 4, (4, 6))
    w1, w2 = fresh_int(g, 2, (2, 4)), fresh_int(g, 8, range(6, 14, 2))
    P2 = fresh_int(g, 10, range(6, 17))
    P3, d3 = fresh_int(g, 50, range(40, 61)), fresh_int(g, 16, range(12, 22, 2))
    P4, d4 = fresh_int(g, 40, range(30, 51)), fresh_int(g, 128, range(96, 162, 2))
    P5, d5 = fresh_int(g, 300, range(250, 351)), fresh_int(g, 32, range(24, 42, 2))
    P6, d6 = fresh_int(g, 64, range(48, 81)), fresh_int(g, 24, range(18, 34, 2))
    return [
        Case("fixed small case", f"a table of {P0} positions and width {d0}", [Call((P0, d0))], points=1),
        Case(
            "position 0",
            "a single position: the row is sin 0, cos 0, sin 0, ... = 0, 1, 0, 1, ...",
            [Call((1, w1)), Call((1, w2))],
            points=1,
        ),
        Case("d_model = 2", "the narrowest table: one (sin, cos) pair at frequency 1", [Call((P2, 2))], points=1),
        Case(
            "standard table",
            f"{P3} positions, width {d3}: interleaving and every pair's frequency",
            [Call((P3, d3))],
            points=2,
        ),
        Case("wide table", f"a width of {d4} (the slow pairs at the right of the table)", [Call((P4, d4))], points=2),
        Case("long table", f"{P5} positions, width {d5} (large angles)", [Call((P5, d5))], points=1, atol=1e-3),
        Case(
            "bounded pairs",
            "every entry is in [-1, 1] and columns (2i, 2i+1) are the sine and cosine of one angle",
            [Call((P6, d6))],
            points=1,
            judge=_pe_properties,
        ),
    ]


# --- relative_position_matrix: classic mistakes -------------------------------------------------------


def _rotation(
    offset: float,
    d_model: int,
    freqs: torch.Tensor,
    sign: float = 1.0,
    pairs: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Block rotation in the reference's convention (sign=-1: blocks transposed)."""
    angle = offset * freqs
    cos, sin = angle.cos(), sign * angle.sin()
    a, b = pairs if pairs is not None else (torch.arange(0, d_model, 2), torch.arange(1, d_model, 2))
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[a, a] = cos
    M[b, a] = sin
    M[a, b] = -sin
    M[b, b] = cos
    return M.float()


def _rpm_sin_cos_swapped(offset: int, d_model: int) -> torch.Tensor:
    angle = offset * _pair_frequencies(d_model)
    a, b = torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[a, a], M[b, a], M[a, b], M[b, b] = angle.sin(), angle.cos(), -angle.cos(), angle.sin()
    return M.float()


def _rpm_rows_up(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll(-1, dims=0)  # rows 2i - 1, 2i (row -1 is the last)


def _rpm_rows_down(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll(1, dims=0)  # rows 2i + 1, (2i + 2) % d_model


def _rpm_columns_left(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll(-1, dims=1)  # columns 2i - 1, 2i (column -1 is the last)


def _rpm_columns_right(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll(1, dims=1)  # columns 2i + 1, (2i + 2) % d_model


def _rpm_diagonal_up(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll((-1, -1), dims=(0, 1))  # rows and columns 2i - 1, 2i


def _rpm_diagonal_down(offset: int, d_model: int) -> torch.Tensor:
    return relative_position_matrix(offset, d_model).roll((1, 1), dims=(0, 1))  # rows and columns 2i + 1, 2i + 2


def _rpm_transposed(offset: int, d_model: int) -> torch.Tensor:
    return _rotation(offset, d_model, _pair_frequencies(d_model), sign=-1.0)


def _rpm_abs_offset(offset: int, d_model: int) -> torch.Tensor:
    return _rotation(abs(offset), d_model, _pair_frequencies(d_model))


def _rpm_no_factor_two(offset: int, d_model: int) -> torch.Tensor:
    return _rotation(offset, d_model, _pair_frequencies(d_model, power=1.0))


def _rpm_column_index(offset: int, d_model: int) -> torch.Tensor:
    return _rotation(offset, d_model, _pair_frequencies(d_model, power=4.0))


def _rpm_no_frequency(offset: int, d_model: int) -> torch.Tensor:
    return _rotation(offset, d_model, torch.ones(d_model // 2, dtype=torch.float64))


def _rpm_concatenated(offset: int, d_model: int) -> torch.Tensor:
    half = torch.arange(d_model // 2)
    return _rotation(offset, d_model, _pair_frequencies(d_model), pairs=(half, half + d_model // 2))


def _moves_rows(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """PE[p] @ M == PE[p + offset] for every p with both rows in a table of 40 positions."""
    for call, M in zip(calls, actual, strict=False):
        offset, d_model = call.args
        if not isinstance(M, torch.Tensor) or not M.is_floating_point():
            return "M should be a floating-point tensor"
        if M.shape != (d_model, d_model):
            return f"M has shape {tuple(M.shape)}, expected ({d_model}, {d_model})"
        if not bool(torch.isfinite(M).all()):
            return "M contains NaN or inf"
        pe = _table64(40, d_model)  # (40, d)
        p = torch.arange(max(0, -offset), min(40, 40 - offset))
        moved = pe[p] @ M.to(torch.float64)  # (len(p), d)
        err = float((moved - pe[p + offset]).abs().max())
        if err > 1e-4:
            hint = ""
            if float((pe[p] @ M.to(torch.float64).T - pe[p + offset]).abs().max()) <= 1e-4:
                hint = " (M.T would do it: M is built for column vectors, M @ PE[p], not PE[p] @ M)"
            return (
                f"PE[p] @ M does not give PE[p + offset] for an offset of {offset:+d} (largest error {err:.3g}){hint}"
            )
    return None


def _rpm_cases() -> list[Case]:
    # Offsets and widths are the self-check's, or drawn anew under --seed with the same sign
    # and size (offset 0 stays 0; widths stay even; |offset| < 40 for the moving-table judge).
    g = rng(410)
    d0 = fresh_int(g, 6, range(4, 12, 2))
    o1, o2, d2 = fresh_int(g, 1, (1, 2, 3)), fresh_int(g, 2, (1, 2, 3)), fresh_int(g, 4, (4, 6))
    pos = [fresh_int(g, o, r) for o, r in ((5, range(3, 9)), (12, range(9, 16)), (1, (1, 2)))]
    pos_d = [fresh_int(g, d, r) for d, r in ((16, range(12, 22, 2)), (32, range(28, 38, 2)), (10, (8, 10, 12)))]
    neg = [fresh_int(g, o, r) for o, r in ((-3, range(-5, -1)), (4, range(2, 7)), (-7, range(-9, -5)))]
    neg_d = [fresh_int(g, 8, (6, 8, 10)), fresh_int(g, 12, (10, 12, 14))]
    moves = [fresh_int(g, 3, range(2, 7)), fresh_int(g, -5, range(-8, -2))]
    moves_d = [fresh_int(g, 16, range(12, 22, 2)), fresh_int(g, 10, (8, 10, 12))]
    return [
        Case("offset 0", "offset 0 gives the identity matrix", [Call((0, d0))], points=1),
        Case(
            "fixed small case",
            f"offsets {o1} and {o2} at widths 2 and {d2}",
            [Call((o1, 2)), Call((o2, d2))],
            points=2,
        ),
        Case(
            "positive offsets",
            f"positive offsets at widths {pos_d[0]} and {pos_d[1]} (every block's frequency)",
            [Call((o, d)) for o, d in zip(pos, pos_d, strict=True)],
            points=2,
        ),
        Case(
            "negative offsets",
            "negative offsets move back (checked together with a positive one)",
            [Call((neg[0], neg_d[0])), Call((neg[1], neg_d[0])), Call((neg[2], neg_d[1]))],
            points=2,
        ),
        Case(
            "moves the table",
            "PE[p] @ M equals PE[p + offset] for every position p, offsets of both signs",
            [Call((o, d)) for o, d in zip(moves, moves_d, strict=True)],
            points=2,
            judge=_moves_rows,
        ),
    ]


_RPM_ROW_OFF = (
    "the blocks sit one row off (rows 2i - 1 and 2i, or 2i + 1 and 2i + 2, where a row index of -1 is "
    "the last row): block i fills rows 2i and 2i + 1 and columns 2i and 2i + 1 of M"
)
_RPM_COLUMN_OFF = (
    "the blocks sit one column off (columns 2i - 1 and 2i, or 2i + 1 and 2i + 2, where a column index of "
    "-1 is the last column): block i fills rows 2i and 2i + 1 and columns 2i and 2i + 1 of M"
)
_RPM_DIAGONAL_OFF = (
    "the blocks sit one row and one column off, at rows and columns 2i - 1 and 2i (or 2i + 1 and 2i + 2), "
    "as when the pairs are counted from 1 in a loop over i from 0 (an index of -1 is the last row or "
    "column): block i fills rows 2i and 2i + 1 and columns 2i and 2i + 1 of M"
)


# --- exercises ---------------------------------------------------------------------------------------

EXERCISES = [
    Exercise(
        name="sinusoidal_positional_encoding",
        reference=sinusoidal_positional_encoding,
        make_cases=_pe_cases,
        mistakes=[
            Mistake(
                "sin and cos swapped: even columns must hold the sines, odd columns the cosines "
                "(PE[p, 2i] = sin, PE[p, 2i+1] = cos)",
                _pe_swapped,
            ),
            Mistake(
                "sines and cosines not interleaved: all sines in the first half and all cosines in the "
                "second; pair i must sit in columns 2i (sin) and 2i+1 (cos)",
                _pe_concatenated,
            ),
            Mistake(
                "sines and cosines not interleaved (and swapped): cosines first, then sines; "
                "pair i must sit in columns 2i (sin) and 2i+1 (cos)",
                _pe_concatenated_swapped,
            ),
            Mistake(
                "wrong exponent: omega_i = 10000^(-i/d_model) with the pair index i; the exponent is "
                "2i/d_model, so the frequencies fall too slowly",
                _pe_no_factor_two,
            ),
            Mistake(
                "wrong exponent: 10000^(2j/d_model) with j the column index instead of the pair index i "
                "= j // 2; the two columns of a pair must share one frequency",
                _pe_column_index_times_two,
            ),
            Mistake(
                "one frequency per column, 10000^(-j/d_model) with j the column index: the cosine "
                "column 2i+1 must use the same frequency as the sine column 2i",
                _pe_column_index,
            ),
            Mistake(
                "wrong exponent: omega_i = 10000^(-4i/d_model) for pair i, twice the right one: with the "
                "even column index j = 2i (arange(0, d_model, 2)) the exponent is j/d_model; 2 * j counts "
                "the 2 twice",
                _pe_pairs_power_four,
            ),
            Mistake(
                "sines and cosines concatenated ([sin | cos]) with frequencies 10000^(-i/(d_model/2 - 1)), the "
                "tensor2tensor / fairseq layout: here pair i sits in columns 2i (sin) and 2i+1 (cos), with "
                "omega_i = 10000^(-2i/d_model)",
                _pe_tensor2tensor,
            ),
            Mistake(
                "returning shape (1, num_positions, d_model), with a batch dim (as the Annotated Transformer's "
                "pe.unsqueeze(0) buffer): return the (num_positions, d_model) table and add the batch dim "
                "where the table is added to the embeddings",
                _pe_batch_dim,
            ),
            Mistake(
                "returning shape (num_positions, 1, d_model), the sequence-first buffer of PyTorch's "
                "nn.Transformer tutorial (pe.unsqueeze(0).transpose(0, 1)): return the (num_positions, "
                "d_model) table; the batch dim is added where the table is used",
                _pe_sequence_first,
            ),
            Mistake(
                "positive exponent: multiplying the position by 10000^(2i/d_model) instead of dividing "
                "by it; the frequencies must fall from 1 to about 1/10000",
                _pe_positive_exponent,
            ),
            Mistake(
                "positions start at 1 instead of 0: row p must encode position p, so row 0 is 0, 1, 0, 1, ...",
                _pe_from_one,
            ),
            Mistake(
                "the table is transposed: it must have one row per position, shape (num_positions, d_model)",
                _pe_transposed,
            ),
            Mistake(
                "base 1000 instead of 10000: omega_i = 1 / 10000^(2i/d_model), so that the wavelengths grow "
                "from 2 pi to about 10000 * 2 pi; with 1000 the slow pairs turn ten times too fast",
                _pe_base_1000,
            ),
            Mistake(
                "the sine written twice: the odd columns must hold the cosines, PE[p, 2i+1] = cos(p omega_i), "
                "so that each pair (sin, cos) lies on the unit circle",
                _pe_sin_twice,
            ),
        ],
        forbidden=(),
    ),
    Exercise(
        name="relative_position_matrix",
        reference=relative_position_matrix,
        make_cases=_rpm_cases,
        mistakes=[
            Mistake(
                "rotation blocks transposed (the sine has the wrong sign): this M satisfies "
                "M @ PE[p] = PE[p + offset] for column vectors, but the course uses rows, "
                "PE[p] @ M = PE[p + offset]; it moves by -offset instead",
                _rpm_transposed,
            ),
            Mistake(
                "the sign of the offset is ignored: a negative offset must move back, M(-k) = M(k).T", _rpm_abs_offset
            ),
            Mistake(
                "wrong frequency per block: omega_i = 10000^(-i/d_model); block i must turn by "
                "offset * 10000^(-2i/d_model)",
                _rpm_no_factor_two,
            ),
            Mistake(
                "wrong frequency per block: 10000^(-2j/d_model) with j = 2i the column index; block i "
                "must turn by offset * 10000^(-2i/d_model)",
                _rpm_column_index,
            ),
            Mistake("every block turns by the angle offset, without the block's frequency omega_i", _rpm_no_frequency),
            Mistake(
                "blocks pair column i with column i + d_model/2 (the non-interleaved layout); "
                "pair i of the table is columns 2i and 2i+1",
                _rpm_concatenated,
            ),
            Mistake(
                "sin and cos swapped inside each block: the diagonal of block i holds cos(offset * omega_i) "
                "and the off-diagonal the sines, [[cos, -sin], [sin, cos]] in rows (2i, 2i+1) and columns "
                "(2i, 2i+1) of M",
                _rpm_sin_cos_swapped,
            ),
            Mistake(_RPM_ROW_OFF, _rpm_rows_up),
            Mistake(_RPM_ROW_OFF, _rpm_rows_down),
            Mistake(_RPM_COLUMN_OFF, _rpm_columns_left),
            Mistake(_RPM_COLUMN_OFF, _rpm_columns_right),
            Mistake(_RPM_DIAGONAL_OFF, _rpm_diagonal_up),
            Mistake(_RPM_DIAGONAL_OFF, _rpm_diagonal_down),
        ],
        forbidden=(),
    ),
]
