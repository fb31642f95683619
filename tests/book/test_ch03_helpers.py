"""Chapter 3's helpers: the heads-timing summary and the trained heads' statistics and sentences."""

from __future__ import annotations

import ch03_heads
import ch03_timing
import pytest
import torch

HEADS = (1, 2, 4, 8, 16)


def test_one_thread_restores_the_thread_count():
    before = torch.get_num_threads()
    with ch03_timing.one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_summary_values_and_projection_sentence():
    full = [10.0, 10.5, 11.0, 12.0, 15.0]
    core = [3.0, 3.2, 3.5, 4.0, 6.0]
    s = ch03_timing.heads_timing_summary(HEADS, full, core)
    assert s["t1"] == 10.0 and s["t8"] == 12.0
    assert s["change_1_8"] == pytest.approx(0.2)
    assert s["ratio_16"] == pytest.approx(1.5)
    assert s["core_share_1"] == pytest.approx(0.3)
    assert "most of it to the projections" in s["where_sentence"] and "30%" in s["where_sentence"]


def test_summary_says_so_when_the_core_dominates():
    s = ch03_timing.heads_timing_summary(HEADS, [10.0] * 5, [6.0] * 5)
    assert "more than the projections" in s["where_sentence"] and "60%" in s["where_sentence"]


def test_summary_needs_1_8_and_16_heads():
    with pytest.raises(ValueError, match="must contain 16"):
        ch03_timing.heads_timing_summary((1, 2, 8), [1.0] * 3, [1.0] * 3)


def _perfect_reverser(lengths, H, wrong_heads=()):
    """Cross-attention weights (N, H, L, S) that put all weight on the digit to copy, except
    in ``wrong_heads``, which put it all on <eos>."""
    N, n_max = len(lengths), int(lengths.max())
    L, S = n_max + 1, n_max + 1
    to_copy, _ = ch03_heads.positions_to_copy(lengths, L)
    w = torch.zeros(N, H, L, S)
    for n in range(N):
        for h in range(H):
            for t in range(L):
                w[n, h, t, lengths[n] if h in wrong_heads else to_copy[n, t]] = 1.0
    return w


def test_positions_to_copy():
    to_copy, is_digit = ch03_heads.positions_to_copy(torch.tensor([3, 1]), 4)
    assert to_copy.tolist() == [[2, 1, 0, 0], [0, 0, 0, 0]]
    assert is_digit.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]


def test_copy_statistics_of_a_perfect_reverser():
    lengths = torch.tensor([4, 2, 3])
    stats = ch03_heads.copy_statistics([_perfect_reverser(lengths, 2)], lengths)
    assert torch.allclose(stats.share[0], torch.ones(2))
    assert torch.allclose(stats.near[0], torch.ones(2))
    # rows 0..n-1 copy digits n-1..0: only row 0 reads the last digit, so end = 1/n per row on average
    rows = lengths.sum().item()
    assert stats.end[0].tolist() == pytest.approx([3 / rows] * 2)
    assert stats.uniform == pytest.approx((4 / 5 + 2 / 3 + 3 / 4) / rows)
    assert "much the same lookup" in ch03_heads.heads_sentence(stats)
    assert "single decoder layer" in ch03_heads.layers_sentence(stats)


def test_sentences_name_the_odd_head_and_the_landmark_layer():
    lengths = torch.tensor([5, 5])
    good = _perfect_reverser(lengths, 4, wrong_heads=(2,))
    landmarks = _perfect_reverser(lengths, 4, wrong_heads=(0, 1, 2, 3))
    stats = ch03_heads.copy_statistics([landmarks, good], lengths)
    assert ch03_heads.lookup_layer(stats) == 1
    heads = ch03_heads.heads_sentence(stats)
    assert "not all alike" in heads and "head 2 only 0.00" in heads and "100% of head 2" in heads
    layers = ch03_heads.layers_sentence(stats)
    assert layers.startswith("Decoder layer 0 does something else")
    assert "landmarks" in layers


def test_heads_sentence_when_no_head_reads_the_digit():
    lengths = torch.tensor([6, 6])
    w = torch.full((2, 2, 7, 7), 1 / 7)
    stats = ch03_heads.copy_statistics([w], lengths)
    assert "None of its heads" in ch03_heads.heads_sentence(stats)


def test_mirror_hits():
    cross = _perfect_reverser(torch.tensor([4]), 3, wrong_heads=(1,))[0]
    assert ch03_heads.mirror_hits(cross, 4).tolist() == [4, 0, 4]  # head 1 reads <eos>, never a digit
