"""Library equivalents of a forbidden call are forbidden too (issue 26, item 3).

``torch._masked_softmax`` is a softmax with its own kernel, and every normalisation layer
computes a layer norm once the rows are reshaped into its axes. A student who writes either is
refused by ``check()`` (static scan) and seen by the exercise's runtime watch; a student who
writes the same computation from building blocks, another way than the reference, gets full
marks.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_forbidden
from honest_code import add_and_norm as an_float64_einsum
from honest_code import layer_norm as ln_float64_einsum
from torch import nn

from course_lib.grading import check
from course_lib.grading.forbidden import violations_in_source, watch_spec
from course_lib.grading.oplists import ATTENTION_OPS, NORMALISATION_OPS, SOFTMAX_OPS
from course_lib.grading.opwatch import OpWatch
from course_lib.grading.registry import exercise

# --- cheaters ----------------------------------------------------------------------------------


def softmax_masked_kernel(x, dim=-1):
    return torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), dim)


def sdpa_masked_kernel(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    blocked = torch.zeros_like(scores, dtype=torch.bool) if mask is None else ~mask.expand_as(scores)
    weights = torch._masked_softmax(scores, blocked, -1).nan_to_num(0.0)
    return weights @ v, weights


def ln_instance_norm(x, gamma, beta, eps=1e-5):
    rows = x.reshape(1, -1, x.shape[-1])  # every row a channel of one instance
    return F.instance_norm(rows, eps=eps).reshape(x.shape) * gamma + beta


def ln_batch_norm(x, gamma, beta, eps=1e-5):
    columns = x.reshape(-1, x.shape[-1]).T  # every row a channel: batch statistics over E
    return F.batch_norm(columns, None, None, training=True, eps=eps).T.reshape(x.shape) * gamma + beta


def ln_rms_norm_of_centred(x, gamma, beta, eps=1e-5):
    return F.rms_norm(x - x.mean(-1, keepdim=True), (x.shape[-1],), gamma, eps) + beta


def ln_instance_norm_module(x, gamma, beta, eps=1e-5):
    norm = nn.InstanceNorm1d(x.reshape(-1, x.shape[-1]).shape[0], eps=eps)
    return norm(x.reshape(1, -1, x.shape[-1])).reshape(x.shape) * gamma + beta


# --- honest students, another way than the reference ----------------------------------------------


def softmax_by_logsumexp(x, dim=-1):
    top = x.amax(dim, keepdim=True).nan_to_num(0.0, neginf=0.0)
    e = torch.exp(x - top)
    total = e.sum(dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def ln_var_mean_rsqrt(x, gamma, beta, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return (x - mean) * torch.rsqrt(var + eps) * gamma + beta


@pytest.mark.parametrize(
    "name, fn, phrase",
    [
        ("softmax", softmax_masked_kernel, "torch._masked_softmax"),
        ("scaled_dot_product_attention", sdpa_masked_kernel, "torch._masked_softmax"),
        ("layer_norm", ln_instance_norm, "torch.nn.functional.instance_norm"),
        ("layer_norm", ln_batch_norm, "torch.nn.functional.batch_norm"),
        ("layer_norm", ln_rms_norm_of_centred, "torch.nn.functional.rms_norm"),
        ("layer_norm", ln_instance_norm_module, "torch.nn.InstanceNorm1d"),
    ],
)
def test_a_library_equivalent_is_refused_by_check(name, fn, phrase):
    assert_forbidden(check(fn, name=name), phrase)


@pytest.mark.parametrize(
    "name, source, phrase",
    [
        (
            "softmax",
            "import torch\ndef softmax(x, dim=-1):\n    return torch._masked_softmax(x, x != x, dim)\n",
            "_masked",
        ),
        (
            "layer_norm",
            "from torch.nn.functional import instance_norm as i\ndef layer_norm(x, g, b, eps=1e-5):\n"
            "    return i(x.reshape(1, -1, x.shape[-1])).reshape(x.shape) * g + b\n",
            "instance_norm",
        ),
        (
            "layer_norm",
            "import torch\nnorm = torch.nn.GroupNorm\ndef layer_norm(x, g, b, eps=1e-5):\n    return norm(1, 1)(x)\n",
            "GroupNorm",
        ),
        (
            "add_and_norm",
            "import torch\ndef add_and_norm(x, s, g, b, eps=1e-5):\n"
            "    return torch.native_batch_norm(x + s, g, b, None, None, True, 0.1, eps)[0]\n",
            "native_batch_norm",
        ),
    ],
)
def test_a_library_equivalent_is_refused_by_the_static_scan(name, source, phrase):
    found = violations_in_source(source, name, exercise(name).forbidden)
    assert any(phrase in f for f in found), found


@pytest.mark.parametrize(
    "name, run",
    [
        ("softmax", lambda: softmax_masked_kernel(torch.randn(3, 4))),
        ("scaled_dot_product_attention", lambda: sdpa_masked_kernel(*torch.randn(3, 2, 4, 8))),
        ("tiled_attention", lambda: torch._masked_softmax(torch.randn(3, 4), torch.rand(3, 4) > 0.5)),
        ("layer_norm", lambda: ln_instance_norm(torch.randn(2, 3, 4), torch.ones(4), torch.zeros(4))),
        ("add_and_norm", lambda: ln_batch_norm(torch.randn(2, 3, 4), torch.ones(4), torch.zeros(4))),
    ],
)
def test_a_library_equivalent_is_seen_at_run_time(name, run):
    watch = OpWatch(**watch_spec(exercise(name).forbidden))
    with watch:
        run()
    assert any(s.startswith("the operator aten::") for s in watch.seen), watch.seen


@pytest.mark.parametrize(
    "name, fn",
    [
        ("softmax", softmax_by_logsumexp),
        ("layer_norm", ln_var_mean_rsqrt),
        ("layer_norm", ln_float64_einsum),
        ("add_and_norm", an_float64_einsum),
    ],
)
def test_an_honest_student_writing_it_another_way_gets_full_marks(name, fn):
    report = check(fn, name=name)
    assert report.status == "passed", report.notes
    assert report.score == report.max_score


def test_an_honest_layer_norm_runs_no_watched_operator():
    """The runtime watch refuses the normalisation kernels, never the mean, var and rsqrt an
    honest layer norm is made of."""
    watch = OpWatch(**watch_spec(exercise("add_and_norm").forbidden))
    with watch:
        an_float64_einsum(torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.ones(4), torch.zeros(4))
        ln_var_mean_rsqrt(torch.randn(2, 3, 4), torch.ones(4), torch.zeros(4))
    assert watch.seen == []


@pytest.mark.parametrize(
    "fn, note",
    [
        (ln_instance_norm, "uses torch.nn.functional.instance_norm (written F.instance_norm)"),
        (ln_batch_norm, "uses torch.nn.functional.batch_norm (written F.batch_norm)"),
        (ln_instance_norm_module, "uses torch.nn.InstanceNorm1d (written nn.InstanceNorm1d)"),
    ],
)
def test_a_refusal_is_said_once_per_function(fn, note):
    """One note for the function: not again on every test, nor once more for another
    spelling of the same call."""
    report = check(fn, name="layer_norm")
    assert report.notes == [f"{note}, which this exercise asks you to write yourself"]
    assert [r.feedback for r in report.results] == [""] * len(report.results)
    assert str(report).count(note) == report._repr_html_().count(note) == 1, str(report)


#: The named siblings of the issue: each exercise that forbids one of a family watches these.
SIBLINGS = {
    SOFTMAX_OPS: ("aten::_softmax", "aten::_log_softmax", "aten::_masked_softmax", "aten::_safe_softmax"),
    NORMALISATION_OPS: (
        "aten::native_layer_norm",
        "aten::native_batch_norm",
        "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training",
        "aten::native_group_norm",
        "aten::instance_norm",
        "aten::_fused_rms_norm",
    ),
    ATTENTION_OPS: (
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_native_multi_head_attention",
    ),
}


@pytest.mark.parametrize(
    "name, family",
    [
        ("softmax", SOFTMAX_OPS),
        ("scaled_dot_product_attention", SOFTMAX_OPS),
        ("self_attention", SOFTMAX_OPS),
        ("tiled_attention", SOFTMAX_OPS),
        ("layer_norm", NORMALISATION_OPS),
        ("add_and_norm", NORMALISATION_OPS),
        ("scaled_dot_product_attention", ATTENTION_OPS),
        ("multi_head_attention", ATTENTION_OPS),
        ("multi_head_attention_sum_form", ATTENTION_OPS),
        ("tiled_attention", ATTENTION_OPS),
        ("cached_attention_step", ATTENTION_OPS),
    ],
)
def test_the_named_siblings_are_watched(name, family):
    watched = set(watch_spec(exercise(name).forbidden)["ops"])
    assert set(SIBLINGS[family]) <= set(family) <= watched
