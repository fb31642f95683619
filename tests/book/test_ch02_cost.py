"""Chapter 2's timing helper: the sentences follow the numbers, and the timing runs."""

from __future__ import annotations

import ch02_cost
import pytest
import torch

LENGTHS = [16, 64, 256, 1024, 4096]
WIDTHS = [32, 256]


def synthetic(att_power_last=2.0, rnn_per_step=(1e-6, 5e-6), overhead=1e-5):
    """Attention: overhead + c T^2 D (with a chosen last-step slope); RNN: linear in T."""
    attention, rnn = {}, {}
    for D, per_step in zip(WIDTHS, rnn_per_step, strict=True):
        for T in LENGTHS:
            attention[D, T] = overhead + 1e-11 * T * T * D  # crossing near 3,100 and 1,950
            rnn[D, T] = per_step * T
        attention[D, 4096] = attention[D, 1024] * 4**att_power_last
    return attention, rnn


def test_slope_of_a_power_law_is_its_exponent():
    times = {(8, T): 3.0 * T**1.5 for T in LENGTHS}
    assert ch02_cost.slope(times, 8, 64, 1024) == pytest.approx(1.5)


def test_crossing_interpolates_and_extrapolates_on_the_log_log_line():
    attention = {(1, 1024): 1.0, (1, 4096): 4.0}
    rnn = {(1, 1024): 2.0, (1, 4096): 2.0}  # ratio 2 -> 1/2: crosses halfway, at 2048
    assert ch02_cost.crossing(attention, rnn, 1, [1024, 4096]) == pytest.approx(2048)
    rnn = {(1, 1024): 8.0, (1, 4096): 8.0}  # ratio 8 -> 2: crosses half a step on, at 2 * 4096
    assert ch02_cost.crossing(attention, rnn, 1, [1024, 4096]) == pytest.approx(8192)
    with pytest.raises(ValueError, match="does not fall"):
        ch02_cost.crossing(attention, attention, 1, [1024, 4096])


@pytest.mark.parametrize(
    ("x", "words"), [(3, "about D"), (8, "about 10 times D"), (31, "about 10 times D"), (32, "about 100 times D")]
)
def test_order_of_magnitude_rounds_on_the_log_scale(x, words):
    assert ch02_cost.order_of_magnitude(x) == words


@pytest.mark.parametrize(
    ("T", "words"), [(999, "in the hundreds"), (1000, "in the thousands"), (9999, "in the thousands")]
)
def test_thousands_counts_digits(T, words):
    assert ch02_cost.thousands(T) == words


def test_crossing_sentence_names_each_width_and_the_narrow_model_is_more_conservative():
    attention, rnn = synthetic()
    sentence = ch02_cost.crossing_sentence(attention, rnn, WIDTHS, LENGTHS)
    assert sentence.startswith("the lines cross at lengths in the thousands")
    assert "about 100 times D at D = 32; about 10 times D at D = 256" in sentence
    assert ch02_cost.narrow_is_more_conservative(attention, rnn, WIDTHS, LENGTHS)


@pytest.mark.parametrize(("power", "words"), [(2.6, "super-quadratic"), (2.0, "close to 2"), (1.5, "still below 2")])
def test_steepest_step_sentence_follows_the_measured_slope(power, words):
    attention, _ = synthetic(att_power_last=power)
    sentence = ch02_cost.steepest_step_sentence(attention, 32, LENGTHS)
    assert f"is {power:.1f}" in sentence and words in sentence
    if power > 2.2:
        assert "64 MiB" in sentence


def test_rnn_slope_sentence_says_close_to_one_only_when_it_is():
    _, rnn = synthetic()
    assert "close to 1" in ch02_cost.rnn_slope_sentence(rnn, WIDTHS, LENGTHS)
    bent = {key: t * (key[1] ** 0.5) for key, t in rnn.items()}
    assert "further from 1" in ch02_cost.rnn_slope_sentence(bent, WIDTHS, LENGTHS)


def test_timing_runs_one_thread_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    seen = []

    def attend(x, W_q, W_k, W_v):
        seen.append((torch.get_num_threads(), tuple(x.shape), tuple(W_q.shape)))
        return x @ W_q

    attention, rnn = ch02_cost.time_attention_and_rnn(attend, [4, 8], [2], repeats=2)
    assert set(attention) == set(rnn) == {(2, 4), (2, 8)}
    assert all(t > 0 for t in [*attention.values(), *rnn.values()])
    assert {s[0] for s in seen} == {1} and (1, 8, 2) in {s[1] for s in seen}
    assert len(seen) == 2 * 3  # per length: one warm-up and two timed runs
    assert torch.get_num_threads() == threads
    table = ch02_cost.table(attention, rnn)
    assert table.splitlines()[0].split()[:2] == ["D", "T"] and len(table.splitlines()) == 3
