"""Chapter 7's decoding timer (book/ch07_decoding.py): one time per step, the same tokens."""

from __future__ import annotations

import sys

import numpy as np
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "book"))

import ch07_decoding as d  # noqa: E402

from course_lib.models import TransformerSeq2Seq  # noqa: E402


def test_time_per_token_times_every_step_and_the_cache_changes_no_token():
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        7,
        7,
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=1,
        dim_feedforward=32,
        dropout=0.0,
        max_len=12,
    ).eval()
    src = torch.randint(3, 7, (2, 5))  # (N, S)
    seconds, tokens = d.time_per_token(model, src, steps=10, use_cache=True)
    seconds_full, tokens_full = d.time_per_token(model, src, steps=10, use_cache=False)
    assert seconds.shape == seconds_full.shape == (10,)
    assert (seconds > 0).all()
    assert tokens.shape == (2, 10)
    assert torch.equal(tokens, tokens_full)


def test_running_median_uses_the_neighbours_it_has():
    x = [1.0, 100.0, 1.0, 1.0, 1.0]
    assert np.allclose(d.running_median(x, half=1), [50.5, 1.0, 1.0, 1.0, 1.0])
    assert np.allclose(d.running_median(x, half=0), x)
