"""Chapter 7's decoding timer (book/ch07_decoding.py): one time per step, the same tokens."""

from __future__ import annotations

import ch07_decoding as d
import numpy as np
import torch

from course_lib.models import TransformerSeq2Seq


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


def test_best_per_step_keeps_each_steps_fastest_decoding(monkeypatch):
    runs = iter([np.array([3.0, 1.0, 5.0]), np.array([2.0, 4.0, 5.0]), np.array([9.0, 9.0, 0.5])])
    monkeypatch.setattr(d, "time_per_token", lambda *args: (next(runs), None))
    assert np.allclose(d.best_per_step(None, None, 3, use_cache=True, repeats=3), [2.0, 1.0, 0.5])


def test_best_per_step_refuses_a_bad_repeat_count():
    import pytest

    with pytest.raises(ValueError, match="repeats"):
        d.best_per_step(None, None, 3, use_cache=True, repeats=0)
