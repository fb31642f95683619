"""Chapter 3's timing of multi-head attention against the number of heads.

The chapter times the whole layer and its attention core for H = 1, 2, 4, 8, 16 heads at a
fixed width E, on one thread (:func:`one_thread`), with :func:`timing.best_time` (a warm-up,
then the best of several runs); :func:`heads_timing_summary` turns the times into the values
and the sentence its prose glues.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch


@contextmanager
def one_thread() -> Iterator[None]:
    """Run the block with PyTorch on one thread, then restore the previous thread count.

    On a busy machine with few cores, several threads mostly wait for each other and the
    times become noise; one thread measures the work itself.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def heads_timing_summary(head_counts: Sequence[int], full_ms: Sequence[float], core_ms: Sequence[float]) -> dict:
    """The values the chapter glues, and its sentence about where the time goes.

    Args:
        head_counts: the numbers of heads timed; must contain 1, 8 and 16.
        full_ms: time of the whole layer per head count, in ms.
        core_ms: time of the attention core alone per head count, in ms.

    Returns:
        A dict with ``t1``, ``t8`` (ms), ``change_1_8`` (relative change from 1 to 8 heads),
        ``ratio_16`` (time at 16 heads over time at 1), ``core_share_1`` (the core's share of
        the call at H = 1), ``core_t1``, ``core_t16`` (ms) and ``where_sentence``, which says
        whether the projections or the attention core took most of the call at H = 1.
    """
    if not (len(head_counts) == len(full_ms) == len(core_ms)):
        raise ValueError("heads_timing_summary: head_counts, full_ms and core_ms differ in length")
    at = {H: i for i, H in enumerate(head_counts)}
    for needed in (1, 8, 16):
        if needed not in at:
            raise ValueError(f"heads_timing_summary: head_counts must contain {needed}")
    t1, t8, t16 = full_ms[at[1]], full_ms[at[8]], full_ms[at[16]]
    share = core_ms[at[1]] / t1
    if share < 0.5:
        where = (
            "On this machine the time went where the count says: most of it to the projections, which "
            f"do not depend on the number of heads at all (with one head, the attention core took {share:.0%} "
            "of the call)."
        )
    else:
        where = (
            f"On this machine, though, the attention core took {share:.0%} of the call with one head, more "
            "than the projections: its many small steps run slower per multiply–add than the large "
            "products do."
        )
    return {
        "t1": t1,
        "t8": t8,
        "change_1_8": t8 / t1 - 1,
        "ratio_16": t16 / t1,
        "core_share_1": share,
        "core_t1": core_ms[at[1]],
        "core_t16": core_ms[at[16]],
        "where_sentence": where,
    }
