"""Chapter 2's race between self-attention and an RNN loop: the timings and the sentences.

The chapter's visible cell only says what is timed; this module runs the timings with
:func:`timing.best_time` (one warm-up, then the best of several runs, so that a cold first
call does not decide a sentence) and turns them into the sentences the prose glues. Every
sentence is chosen from the numbers, and the crossing point is given as the pair of measured
lengths around it, not as an interpolated number that moves from build to build.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from timing import best_time

#: (D, T) -> seconds
Times = dict[tuple[int, int], float]


def time_attention_and_rnn(
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], object],
    lengths: Sequence[int],
    widths: Sequence[int],
    repeats: int = 3,
    seed: int = 0,
) -> tuple[Times, Times]:
    """Time ``attend(x, W_q, W_k, W_v)`` and a ``torch.nn.RNNCell`` loop on one thread.

    For every width ``D`` and length ``T``: ``x`` of shape ``(1, T, D)``, square projections
    ``(D, D)``, and an RNN cell of width ``D`` run over the ``T`` tokens one after another.
    No gradients. Returns two dictionaries ``(D, T) -> seconds``: attention and RNN.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    attention: Times = {}
    rnn: Times = {}
    try:
        torch.manual_seed(seed)
        with torch.no_grad():
            for D in widths:
                W_q, W_k, W_v = (torch.randn(D, D) / math.sqrt(D) for _ in range(3))
                cell = torch.nn.RNNCell(D, D)
                for T in lengths:
                    x = torch.randn(1, T, D)

                    def recur(x=x, T=T, cell=cell, D=D):
                        h = torch.zeros(1, D)
                        for t in range(T):
                            h = cell(x[:, t], h)

                    def project_and_attend(x=x, W_q=W_q, W_k=W_k, W_v=W_v):
                        attend(x, W_q, W_k, W_v)

                    attention[D, T] = best_time(project_and_attend, repeats=repeats)
                    rnn[D, T] = best_time(recur, repeats=repeats)
    finally:
        torch.set_num_threads(threads)
    return attention, rnn


def slope(times: Times, D: int, T0: int, T1: int) -> float:
    """Slope of log(time) against log(T) between lengths ``T0`` and ``T1`` at width ``D``."""
    return math.log(times[D, T1] / times[D, T0]) / math.log(T1 / T0)


def table(attention: Times, rnn: Times) -> str:
    """The printed table: one line per (D, T) with both times and their ratio."""
    lines = ["   D      T   attention (ms)   RNN (ms)   RNN / attention"]
    for D, T in attention:
        a, r = attention[D, T], rnn[D, T]
        lines.append(f"{D:4d} {T:6,d}   {1e3 * a:14.2f}   {1e3 * r:8.2f}   {r / a:15.1f}")
    return "\n".join(lines)


def crossing(attention: Times, rnn: Times, D: int, lengths: Sequence[int]) -> float:
    """The length at which the RNN catches up with self-attention at width ``D``, roughly.

    The ratio RNN / attention is followed on the log-log plot along the straight line through
    the two longest lengths: interpolation when the ratio crosses 1 between them,
    extrapolation when it crosses just before or after. Only its order of magnitude is quoted.
    """
    T0, T1 = lengths[-2], lengths[-1]
    r0, r1 = rnn[D, T0] / attention[D, T0], rnn[D, T1] / attention[D, T1]
    if r1 >= r0:
        raise ValueError(f"crossing: the ratio RNN / attention does not fall at D = {D} ({r0:.2f} -> {r1:.2f})")
    return T0 * (T1 / T0) ** (math.log(r0) / (math.log(r0) - math.log(r1)))


def order_of_magnitude(x: float) -> str:
    """``x`` times D, rounded to a power of ten on the log scale: 8 -> "about 10 times D"."""
    k = round(math.log10(x))
    return "about D" if k == 0 else f"about {10**k:,} times D"


def thousands(T: float) -> str:
    """How many digits ``T`` has, in words: 3,200 -> "in the thousands"."""
    k = math.floor(math.log10(T))
    return {2: "in the hundreds", 3: "in the thousands", 4: "in the tens of thousands"}.get(k, f"near 10^{k}")


def crossing_sentence(attention: Times, rnn: Times, widths: Sequence[int], lengths: Sequence[int]) -> str:
    """Where the lines cross, as orders of magnitude: of T, and of T / D for every width."""
    crossings = {D: crossing(attention, rnn, D, lengths) for D in widths}
    places = sorted({thousands(T) for T in crossings.values()})
    where = " and ".join(places)
    per_width = "; ".join(f"{order_of_magnitude(T / D)} at D = {D}" for D, T in crossings.items())
    return f"the lines cross at lengths {where}: {per_width}"


def narrow_is_more_conservative(attention: Times, rnn: Times, widths: Sequence[int], lengths: Sequence[int]) -> bool:
    """True when, in units of D, the narrowest width's crossing is at least 3 times the widest's."""
    narrow, wide = min(widths), max(widths)
    ratio_narrow = crossing(attention, rnn, narrow, lengths) / narrow
    ratio_wide = crossing(attention, rnn, wide, lengths) / wide
    return ratio_narrow >= 3 * ratio_wide


def rnn_slope_sentence(rnn: Times, widths: Sequence[int], lengths: Sequence[int]) -> str:
    """The RNN lines' slopes over the measured lengths, and whether they are close to 1."""
    T0, T1 = lengths[1], lengths[-1]
    slopes = [slope(rnn, D, T0, T1) for D in widths]
    listed = " and ".join(f"{s:.1f}" for s in slopes)
    near = all(0.75 <= s <= 1.25 for s in slopes)
    verdict = (
        "close to 1: twice the tokens, twice the time"
        if near
        else "further from 1 than the count of steps alone predicts"
    )
    return f"from T = {T0:,} to T = {T1:,} their slopes are {listed}, {verdict}"


def steepest_step_sentence(attention: Times, D: int, lengths: Sequence[int]) -> str:
    """What the attention line does on its last step (between the two largest lengths).

    A slope above 2.2 is called super-quadratic and explained by the caches; between 1.8 and
    2.2 it is "close to 2"; below, "still below 2".
    """
    T0, T1 = lengths[-2], lengths[-1]
    s = slope(attention, D, T0, T1)
    step = f"from T = {T0:,} to T = {T1:,} the slope at D = {D} is {s:.1f}"
    if s > 2.2:
        mib = 4 * T1 * T1 / 2**20
        return (
            f"{step}, steeper than 2. That last step is super-quadratic on this machine: at "
            f"T = {T1:,} each (T, T) matrix of float32 numbers takes {mib:,.0f} MiB, far more "
            "than the processor's caches hold, so every pass over the scores and the weights "
            "goes out to main memory, and each call must first be given fresh memory pages "
            "for them"
        )
    if s >= 1.8:
        return f"{step}, close to 2"
    return f"{step}, still below 2: the quadratic term has not yet taken over"
