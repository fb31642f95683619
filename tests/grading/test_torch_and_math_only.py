"""Notebook 07's rule "use only torch and math inside the graded functions" holds (issue 29).

The check measures the memory of torch tensors only, so a numpy ``tiled_attention`` could build
the whole (L, S) score matrix unseen. numpy is refused in chapter 7's graded functions instead,
whether imported (under any name, in a helper too) or reached through a tensor's ``.numpy()``,
and the note says why; an honest torch tiled attention keeps full marks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import assert_forbidden, assert_full_marks
from honest_code import tiled_attention as tiled_in_torch
from numpy import exp as np_exp

from course_lib.grading import check
from course_lib.grading.forbidden import violations_in_source, watch_spec
from course_lib.grading.opwatch import OpWatch
from course_lib.grading.registry import exercise

RULE = "uses numpy (imported, or reached through a tensor's .numpy() or np.asarray): this exercise's graded functions may use only torch and math"


def _whole_scores(q, k, mask):
    """The whole (*, L, S) score matrix, the softmax of which the cheaters compute in numpy."""
    scores = q.double().numpy() @ np.swapaxes(k.double().numpy(), -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(np.broadcast_to(mask.numpy(), scores.shape), scores, -np.inf)
    return scores


def _softmax_rows(scores, vv):
    top = np.max(scores, axis=-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = e.sum(axis=-1, keepdims=True)
    return (e / np.where(total == 0, 1.0, total)) @ vv


def tiled_numpy_whole_matrix(q, k, v, mask=None, block_size=128):
    out = _softmax_rows(_whole_scores(q, k, mask), v.double().numpy())
    return torch.from_numpy(out).to(q.dtype)


def tiled_numpy_by_tensor_methods(q, k, v, mask=None, block_size=128):
    """No numpy import: only the tensors' own .numpy() and the arrays' methods."""
    scores = (q.double().numpy() @ k.double().numpy().swapaxes(-1, -2)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores[~mask.expand(*scores.shape).numpy()] = -math.inf
    top = scores.max(axis=-1, keepdims=True).clip(-1e300)
    weights = torch.tensor(scores - top).exp()
    total = weights.sum(-1, keepdim=True)
    return (weights / torch.where(total == 0, 1.0, total) @ v.double()).to(q.dtype)


def tiled_from_numpy_import(q, k, v, mask=None, block_size=128):
    scores = _whole_scores(q, k, mask)
    e = np_exp(scores - scores.max(axis=-1, keepdims=True).clip(-1e300))
    total = e.sum(axis=-1, keepdims=True)
    return torch.from_numpy((e / np.where(total == 0, 1.0, total)) @ v.double().numpy()).to(q.dtype)


@pytest.mark.parametrize("fn", [tiled_numpy_whole_matrix, tiled_numpy_by_tensor_methods, tiled_from_numpy_import])
def test_a_numpy_tiled_attention_is_refused_once_and_told_why(fn):
    report = check(fn, name="tiled_attention")
    assert_forbidden(report, "numpy")
    assert len(report.notes) == 1 and report.notes[0].startswith(RULE), report.notes


def test_a_numpy_tiled_attention_gave_full_marks_before():
    """What the rule closes: the cheater's values are right, so only the rule can refuse it."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 9, 4, generator=g) for _ in range(3))
    mask = torch.rand(2, 9, 9, generator=g) > 0.3
    expected = exercise("tiled_attention").reference(q, k, v, mask, 4)
    assert torch.allclose(tiled_numpy_whole_matrix(q, k, v, mask, 4), expected, atol=1e-6)


@pytest.mark.parametrize("name", ["tiled_attention", "sliding_window_mask", "cached_attention_step"])
def test_the_static_scan_refuses_numpy_in_every_graded_function_of_chapter_7(name):
    source = f"import numpy\nimport torch\ndef {name}(*args, **kwargs):\n    return numpy.zeros(3)\n"
    found = violations_in_source(source, name, exercise(name).forbidden)
    assert found == [found[0]] and found[0].startswith(RULE), found


def test_numpy_reached_at_run_time_through_a_tensor_is_seen():
    watch = OpWatch(**watch_spec(exercise("tiled_attention").forbidden))
    with watch:
        np.asarray(torch.ones(3))
    assert watch.seen == ["the tensor method .__array__()"], "np.asarray(tensor) calls Tensor.__array__"


def test_an_honest_torch_tiled_attention_keeps_full_marks():
    assert_full_marks(check(tiled_in_torch, name="tiled_attention"))


def test_numpy_stays_allowed_where_no_rule_forbids_it():
    def layer_norm(x, gamma, beta, eps=1e-5):
        a = x.double().numpy()
        mean, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
        return torch.from_numpy((a - mean) / np.sqrt(var + eps)).to(x.dtype) * gamma + beta

    assert_full_marks(check(layer_norm))
