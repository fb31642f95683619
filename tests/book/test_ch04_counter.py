"""The positional encoding chapter's binary-counter comparison (book/ch04_counter.py)."""

from __future__ import annotations

import math

import ch04_counter
import pytest
import torch


def test_signs_follow_the_complement_of_bit_i_plus_2_until_they_drift():
    c = ch04_counter.compare_with_counter(64, 26, pairs=4)
    assert c.complement.shape == c.signs.shape == c.agree.shape == (64, 4)
    # p = 1 .. 3: every sine is positive and every complement is 1.
    assert c.agree[1:4].all()
    assert not c.agree[0].any()  # sin 0 = 0 has no sign
    # The sine of pair 0 turns negative after pi = 3.14 positions, bit 2 turns on at p = 4:
    # they agree at 4 .. 6 and the sine flips back first, at p = 7.
    assert c.first_miss[0] == 7
    assert c.first_miss == sorted(c.first_miss)  # slower pairs drift later
    assert c.half_period[0] == pytest.approx(math.pi)
    assert c.half_period[1] == pytest.approx(math.pi * 10000 ** (2 / 26))


def test_a_pair_that_never_disagrees_reports_none():
    c = ch04_counter.compare_with_counter(8, 26, pairs=6)
    assert c.first_miss[5] is None


def test_too_many_pairs_are_refused():
    with pytest.raises(ValueError, match="pairs"):
        ch04_counter.compare_with_counter(8, 4, pairs=3)


def test_markdown_table_marks_each_disagreement():
    c = ch04_counter.compare_with_counter(16, 26, pairs=4)
    table = ch04_counter.counter_markdown(c, rows=16, pairs=4).splitlines()
    assert len(table) == 2 + 16
    assert table[0].count("|") == 2 + 2 * 4 + 1
    marks = sum(line.count("✗") for line in table)
    assert marks == int((~c.agree[1:16]).sum())
    assert "`000111`" in table[2 + 7] and "✗" in table[2 + 7]
    assert "1 − b₂" in table[0] and "$" not in table[0]
    assert isinstance(c.signs, torch.Tensor)
