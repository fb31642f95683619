"""Chapter 7's measuring helpers (book/ch07_measure.py): slopes, sentences, memory, faults."""

from __future__ import annotations

import os

import ch07_measure as m
import pytest
import torch


def test_loglog_slope_of_a_power_law_is_its_exponent():
    xs = [256, 512, 1024, 2048]
    assert m.loglog_slope(xs, [3e-9 * x**2 for x in xs]) == pytest.approx(2.0)
    assert m.loglog_slope(xs, [5.0 * x for x in xs]) == pytest.approx(1.0)


def test_doubling_slopes_are_the_slopes_of_each_segment():
    slopes = m.doubling_slopes([1, 2, 4, 8], [1.0, 4.0, 8.0, 64.0])
    assert slopes == pytest.approx([2.0, 1.0, 3.0])


@pytest.mark.parametrize("fn", [m.loglog_slope, m.doubling_slopes])
def test_slopes_need_two_matching_points(fn):
    with pytest.raises(ValueError):
        fn([1], [1.0])
    with pytest.raises(ValueError):
        fn([1, 2], [1.0])


def test_slope_words():
    assert m.slope_words(2.2, 2) == "close to 2"
    assert m.slope_words(2.6, 2) == "above 2"
    assert m.slope_words(0.7, 1) == "below 1"
    assert m.slope_words(0.8, 1) == "close to 1"


def test_segments_sentence_names_the_segment_furthest_from_the_target():
    xs = [256, 512, 1024, 2048, 4096]
    ys = [1.0, 4.0, 16.0, 16.0 * 2**2.8, 16.0 * 2**2.8 * 4]
    sentence = m.segments_sentence(xs, ys)
    assert sentence.startswith("Segment by segment the slopes are 2.00, 2.00, 2.80 and 2.00;")
    assert sentence.endswith("the step from T = 1024 to 2048 is furthest from 2")
    assert "slopes are 1.00" in m.segments_sentence([1, 2], [1.0, 2.0])


def test_peak_tensor_mib_counts_the_tensors_a_call_allocates():
    x = torch.zeros(256, 1024)  # 1 MiB, allocated before the call: not counted

    def work():
        a = torch.ones(1024, 1024)  # 4 MiB
        b = a * 2  # 4 MiB more, both live at once
        return (b + x[0]).sum()

    peak = m.peak_tensor_mib(work)
    assert 8.0 <= peak < 13.0


def test_quiet_c_stderr_restores_file_descriptor_2():
    before = os.fstat(2)
    with m.quiet_c_stderr():
        os.write(2, b"dropped\n")
    assert os.fstat(2).st_ino == before.st_ino


def test_process_mib_is_a_plausible_size():  # reads /proc: the book builds on Linux
    assert 10 < m.process_mib() < 1e6


def test_page_faults_counts_first_touches_of_fresh_memory():
    faults = m.page_faults(lambda: torch.ones(64, 2**20 // 4).sum())  # 64 MiB, fresh from the OS
    assert faults >= 1000
