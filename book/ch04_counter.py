"""The binary-counter comparison of the positional encoding chapter, kept off the page.

The chapter compares the sign of each sine column of a sinusoidal table with the complement
of a bit of the position: pair i of a table of width 26 turns about twice as slowly as pair
i - 1, so its sign flips about as often as bit i + 2 of p, but a little early every time.
This module computes that comparison and writes it as a Markdown table; the chapter glues
both into a "Going further" box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from course_lib import sinusoidal_positional_encoding


@dataclass
class CounterComparison:
    """Sine signs of a sinusoidal table beside the complements of the bits of p.

    Attributes:
        complement: ``(P, pairs)`` int, ``1 - bit (i + 2)`` of position p in column i.
        signs: ``(P, pairs)`` float, the sign (-1, 0 or 1) of ``sin(p * omega_i)``.
        agree: ``(P, pairs)`` bool, sign positive exactly where the complement is 1
            (row p = 0, where the sine is 0, never agrees).
        first_miss: per pair, the first position p >= 1 where the two disagree
            (``None`` if they agree on every position computed).
        half_period: per pair, the number of positions between sign flips, ``pi / omega_i``.
    """

    complement: torch.Tensor
    signs: torch.Tensor
    agree: torch.Tensor
    first_miss: list[int | None]
    half_period: list[float]


def compare_with_counter(num_positions: int = 64, d_model: int = 26, pairs: int = 6) -> CounterComparison:
    """Compare the signs of the first ``pairs`` sine columns with the bits of p.

    Args:
        num_positions: positions p = 0 .. num_positions - 1.
        d_model: width of the table (even); 26 makes each pair about twice as slow as the last.
        pairs: how many pairs to compare, from the fastest.

    Returns:
        A :class:`CounterComparison`.
    """
    if pairs > d_model // 2:
        raise ValueError(f"compare_with_counter: {pairs} pairs asked for, a width of {d_model} has {d_model // 2}")
    table = sinusoidal_positional_encoding(num_positions, d_model)  # (P, E)
    positions = torch.arange(num_positions)
    complement = torch.stack([1 - ((positions >> (i + 2)) & 1) for i in range(pairs)], 1)  # (P, pairs)
    signs = torch.sign(table[:, 0::2][:, :pairs])  # (P, pairs): sign of sin(p w_i)
    agree = (signs > 0) == (complement == 1)
    agree[0] = False  # sin 0 = 0 has no sign
    first_miss = []
    for i in range(pairs):
        misses = (~agree[1:, i]).nonzero()
        first_miss.append(int(misses[0]) + 1 if len(misses) else None)
    half_period = [math.pi * 10000 ** (2 * i / d_model) for i in range(pairs)]
    return CounterComparison(complement, signs, agree, first_miss, half_period)


def counter_markdown(comparison: CounterComparison, rows: int = 16, pairs: int = 4) -> str:
    """The first ``rows`` positions as a Markdown table: p, p in binary, then per pair the
    complement of bit i + 2 and the sign of the sine, marked ✗ where they disagree.

    The header is plain text (glued Markdown is not typeset as math): ``1 − b₂`` and so on.
    """
    subscript = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
    header = ["p", "binary"]
    for i in range(pairs):
        header += [f"1 − b{str(i + 2).translate(subscript)}", f"sign, pair {i}"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for p in range(rows):
        cells = [str(p), f"`{p:06b}`"]
        for i in range(pairs):
            s = comparison.signs[p, i].item()
            sign = "+" if s > 0 else "−" if s < 0 else "0"
            miss = p > 0 and not comparison.agree[p, i].item()
            cells += [str(comparison.complement[p, i].item()), sign + (" ✗" if miss else "")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
