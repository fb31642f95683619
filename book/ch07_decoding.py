"""Chapter 7's timing of greedy decoding, step by step, with and without the KV cache.

:class:`Timed` wraps a model that ``course_lib.decoding`` can drive (its ``start`` and
``next_log_probs`` methods) and clocks every ``next_log_probs`` call, that is, every
decoding step. Tested in tests/book/test_ch07_decoding.py.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from course_lib.decoding import greedy_decode

__all__ = ["Timed", "time_per_token", "best_per_step", "running_median"]


class Timed:
    """The model's ``start`` and ``next_log_probs``, with the seconds of every step."""

    def __init__(self, model):
        self.model, self.seconds = model, []

    def start(self, src, use_cache=True):
        return self.model.start(src, use_cache=use_cache)

    def next_log_probs(self, state, y_prev):
        t0 = time.perf_counter()
        out = self.model.next_log_probs(state, y_prev)  # (log_probs (N, C), state, weights)
        self.seconds.append(time.perf_counter() - t0)
        return out


def time_per_token(model, src: torch.Tensor, steps: int, use_cache: bool) -> tuple[np.ndarray, torch.Tensor]:
    """Greedy decoding of exactly ``steps`` tokens: the seconds of each step, (steps,), and the tokens, (N, steps)."""
    timed = Timed(model)
    tokens = greedy_decode(timed, src, max_len=steps, use_cache=use_cache, stop_at_eos=False)
    return np.array(timed.seconds), tokens


def best_per_step(model, src: torch.Tensor, steps: int, use_cache: bool, repeats: int = 3) -> np.ndarray:
    """The fastest of ``repeats`` greedy decodings, step by step: (steps,) seconds.

    One decoding's step times are noisy on a shared machine (another process takes the core
    for a step or two); the minimum over a few decodings of the same tokens keeps each step's
    own cost, so a sentence about how the steps grow does not flip between builds.
    """
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"best_per_step: repeats must be an int >= 1, got {repeats!r}")
    runs = [time_per_token(model, src, steps, use_cache)[0] for _ in range(repeats)]
    return np.min(np.stack(runs), axis=0)


def running_median(x, half: int = 4) -> np.ndarray:
    """The median of each point and its ``half`` neighbours on either side (fewer at the ends)."""
    x = np.asarray(x)
    return np.array([np.median(x[max(0, i - half) : i + half + 1]) for i in range(len(x))])
