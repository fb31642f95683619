"""Chapter 7's measuring plumbing: slopes of timings, peak tensor memory, page faults.

The chapter shows the ideas (what is timed, what is compared); the bookkeeping that turns
measurements into numbers and sentences lives here, where it is tested
(tests/book/test_ch07_measure.py).
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch

__all__ = [
    "loglog_slope",
    "doubling_slopes",
    "slope_words",
    "segments_sentence",
    "quiet_c_stderr",
    "peak_tensor_mib",
    "process_mib",
    "page_faults",
]


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of log(y) against log(x): 2 for y proportional to x**2."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"loglog_slope: need two or more (x, y) pairs, got {len(xs)} and {len(ys)}")
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def doubling_slopes(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """The slope of each segment between neighbouring points: log(y2 / y1) / log(x2 / x1)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError(f"doubling_slopes: need two or more (x, y) pairs, got {len(xs)} and {len(ys)}")
    return [math.log(y2 / y1) / math.log(x2 / x1) for x1, x2, y1, y2 in zip(xs, xs[1:], ys, ys[1:], strict=False)]


def slope_words(slope: float, target: float, tolerance: float = 0.25) -> str:
    """``"close to 2"``, ``"above 2"`` or ``"below 2"``: how ``slope`` compares with ``target``.

    ``tolerance`` is relative: within ``tolerance * target`` of the target counts as close.
    """
    if abs(slope - target) <= tolerance * target:
        return f"close to {target:g}"
    return f"above {target:g}" if slope > target else f"below {target:g}"


def segments_sentence(xs: Sequence[int], ys: Sequence[float], target: float = 2.0) -> str:
    """One sentence on the segment-by-segment slopes, naming the one furthest from ``target``.

    For example: "Segment by segment the slopes are 1.71, 2.05, 2.77 and 2.12; the step from
    T = 1024 to 2048 is furthest from 2."
    """
    slopes = doubling_slopes(xs, ys)
    worst = max(range(len(slopes)), key=lambda i: abs(slopes[i] - target))
    listed = [f"{s:.2f}" for s in slopes]
    listed = listed[0] if len(listed) == 1 else ", ".join(listed[:-1]) + " and " + listed[-1]
    return (
        f"Segment by segment the slopes are {listed}; the step from T = {xs[worst]} to "
        f"{xs[worst + 1]} is furthest from {target:g}"
    )


@contextlib.contextmanager
def quiet_c_stderr() -> Iterator[None]:
    """Drop what C code writes to file descriptor 2 (the profiler's start/stop lines)."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def peak_tensor_mib(fn: Callable[[], object]) -> float:
    """The most tensor memory live at once while ``fn()`` runs, in MiB.

    PyTorch's profiler records every allocation (+ bytes) and free (- bytes) of its CPU
    allocator; summing them in time order gives the live total, and its largest value is
    the extra memory the call needed, without the interpreter or earlier work. Runs under
    ``torch.no_grad()``, as at inference.
    """
    from torch.autograd import profiler

    with quiet_c_stderr(), torch.no_grad(), profiler.profile(profile_memory=True) as prof:
        fn()
    live = peak = 0
    for event in sorted(prof.function_events, key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage  # bytes allocated (+) or freed (-) by this event itself
        peak = max(peak, live)
    return peak / 2**20


def process_mib() -> float:
    """This process's resident size now, in MiB (Linux: the VmRSS line of /proc/self/status)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def page_faults(fn: Callable[[], object]) -> int:
    """Minor page faults (first touches of fresh memory pages) during one call of ``fn()``."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    with torch.no_grad():
        fn()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
