"""The book's timings: a warm-up that is not timed, then the best of several runs."""

from __future__ import annotations

import pytest
import timing


def test_warm_up_runs_are_not_timed_and_the_best_run_is_returned():
    calls = []
    slow_first = iter([0.05, 0.0, 0.0, 0.0])

    def work():
        import time

        calls.append(1)
        time.sleep(next(slow_first))

    best = timing.best_time(work, repeats=3, warmup=1)
    assert len(calls) == 4
    assert best < 0.05  # the slow first call was the warm-up


@pytest.mark.parametrize(("repeats", "warmup"), [(0, 1), (1.5, 1), (3, -1)])
def test_bad_counts_are_refused_with_the_argument_named(repeats, warmup):
    with pytest.raises(ValueError, match=r"repeats|warmup"):
        timing.best_time(lambda: None, repeats=repeats, warmup=warmup)
