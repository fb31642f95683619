"""The layer normalisation chapter's gradient measurement (book/ch05_gradients.py)."""

from __future__ import annotations

import ch05_gradients
import torch


def test_one_norm_per_layer_for_every_depth_and_one_std_per_layer():
    torch.set_num_threads(1)
    norms, stds = ch05_gradients.gradient_norms(norm_first=True, seed=0, depths=[1, 3], d_model=8)
    assert sorted(norms) == [1, 3]
    assert norms[1].shape == (1,) and norms[3].shape == (3,)
    assert all(torch.isfinite(n).all() and (n > 0).all() for n in norms.values())
    assert len(stds) == 3


def test_post_ln_stream_is_normalised_after_every_layer():
    _norms, stds = ch05_gradients.gradient_norms(norm_first=False, seed=1, depths=[2], d_model=8)
    assert all(abs(s - 1.0) < 0.05 for s in stds)  # the last step of every post-LN layer is a layer norm


def test_same_seed_same_numbers():
    a, _ = ch05_gradients.gradient_norms(norm_first=True, seed=3, depths=[2], d_model=8)
    b, _ = ch05_gradients.gradient_norms(norm_first=True, seed=3, depths=[2], d_model=8)
    assert torch.equal(a[2], b[2])
