"""Timings for the book's prose: one warm-up, then the best of several runs.

A single cold run of a large attention call pays for page faults and caches that later
calls do not, so a sentence glued from it can flip between builds. Every timing the book
prints or glues comes from :func:`best_time`.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def best_time(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
    """The fastest of ``repeats`` runs of ``fn()``, in seconds, after ``warmup`` untimed runs.

    Args:
        fn: the work to time, called with no arguments.
        repeats: timed runs (at least 1).
        warmup: untimed runs first (0 or more).

    Returns:
        The smallest wall-clock time of the timed runs, in seconds.
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"best_time: repeats must be an int >= 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"best_time: warmup must be an int >= 0, got {warmup!r}")
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best
