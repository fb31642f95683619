"""A function that changes its caller's tensors in place is named, and loses the tests where it
does (issue 29, item 3); a function that changes only tensors it made itself is not.

Every student below returns the right values: the caller's tensors are what is wrong.
"""

from __future__ import annotations

import math

import torch
from conftest import assert_full_marks

from course_lib.grading import check
from course_lib.grading.inplace import inplace_message
from course_lib.grading.model import Call
from course_lib.grading.run import call_once

# -- students who change the caller's tensors ---------------------------------------------------


def layer_norm_sub_(x, gamma, beta, eps=1e-5):
    x.sub_(x.mean(dim=-1, keepdim=True))  # the caller's x is centred
    var = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(var + eps) * gamma + beta


def softmax_minus_equals(scores, dim=-1):
    m = scores.amax(dim=dim, keepdim=True)
    scores -= torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores)
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def masked_softmax_fill_(scores, dim=-1):
    """Masks the -inf scores with the largest finite float in the caller's own tensor."""
    scores.masked_fill_(scores == float("-inf"), torch.finfo(scores.dtype).min)
    e = torch.exp(scores - scores.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def attention_scaling_q_in_place(q, k, v, mask=None):
    q *= 1 / math.sqrt(q.shape[-1])  # the caller's queries are scaled
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total == 0, torch.ones_like(total), total)
    return w @ v, w


# -- honest students who change only their own tensors ------------------------------------------


def layer_norm_clone_then_sub_(x, gamma, beta, eps=1e-5):
    out = x.clone()
    out.sub_(out.mean(dim=-1, keepdim=True))
    var = (out * out).mean(dim=-1, keepdim=True)
    out.div_(torch.sqrt(var + eps))
    return out * gamma + beta


def softmax_into_empty(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=dim, keepdim=True)
    y = torch.empty(x.shape, dtype=x.dtype)
    y[...] = e / torch.where(total == 0, torch.ones_like(total), total)
    return y


def attention_masking_its_own_scores(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))  # scores is its own tensor
    m = scores.amax(dim=-1, keepdim=True)
    e = torch.exp(scores - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total == 0, torch.ones_like(total), total)
    return w @ v, w


def _inplace_lines(report) -> list[str]:
    return [d for d in report.diagnoses if "in place" in d]


def test_a_layer_norm_that_centres_its_input_in_place_is_named_with_the_method():
    report = check(layer_norm_sub_, name="layer_norm")
    assert report.status == "failed" and report.score == 0, str(report)
    (line,) = _inplace_lines(report)
    assert line.startswith("your layer_norm changed its argument `x` in place (`x.sub_(...)`)"), line
    assert "`x = x.sub(...)`" in line and "clone" in line
    assert all(
        r.feedback == "the correct values, but the call changed its argument `x` in place" for r in report.results
    )


def test_a_softmax_that_subtracts_the_max_with_minus_equals_is_named_with_the_students_own_name():
    report = check(softmax_minus_equals, name="softmax")
    (line,) = _inplace_lines(report)
    assert "argument `scores` in place (`scores -= ...`)" in line, line
    assert "`scores = scores - ...`" in line
    assert report.score == 0


def test_a_masked_softmax_that_fills_the_callers_scores_is_named_beside_its_wrong_values():
    report = check(masked_softmax_fill_, name="softmax")
    (line,) = _inplace_lines(report)
    assert "(`scores.masked_fill_(...)`)" in line and "out-of-place `masked_fill`" in line, line
    all_inf = next(r for r in report.results if r.name == "all -inf slice")
    assert not all_inf.passed and "differs" in all_inf.feedback  # its wrong values are still said
    assert line in all_inf.diagnoses


def test_attention_that_scales_the_callers_queries_is_named():
    report = check(attention_scaling_q_in_place, name="scaled_dot_product_attention")
    (line,) = _inplace_lines(report)
    assert "argument `q` in place (`q *= ...`)" in line, line
    assert report.score < report.max_score


def test_changing_an_input_in_place_costs_the_points_of_the_tests_where_it_happens_only():
    def softmax_in_place_along_dim_0(x, dim=-1):
        if dim == 0:
            x.sub_(x.amax(dim=0, keepdim=True))
        return softmax_into_empty(x, dim)

    report = check(softmax_in_place_along_dim_0, name="softmax")
    (line,) = [m for m in report.diagnoses if "in place" in m]
    assert "(`x.sub_(...)`)" in line
    in_place = [r.name for r in report.results if line in r.diagnoses]
    assert in_place == ["other dims"], str(report)
    value_tests = [r for r in report.results if not r.withheld]  # properties wait for the value tests
    assert [r.name for r in value_tests if not r.passed] == ["other dims"], str(report)


def test_honest_students_who_change_only_tensors_they_made_get_full_marks_and_no_line():
    for fn, name in (
        (layer_norm_clone_then_sub_, "layer_norm"),
        (softmax_into_empty, "softmax"),
        (attention_masking_its_own_scores, "scaled_dot_product_attention"),
    ):
        report = check(fn, name=name)
        assert_full_marks(report)
        assert _inplace_lines(report) == [] and "in place" not in str(report)


def test_a_function_that_returns_its_input_unchanged_is_not_flagged():
    x = torch.tensor([[1.0, float("nan"), -0.0], [float("-inf"), 2.0, 3.0]])
    assert call_once(lambda x: x, Call((x,))).changed == []
    assert call_once(lambda x, dim=-1: x.view(-1), Call((x,), {"dim": 0})).changed == []
    report = check(lambda x, dim=-1: x, name="softmax")  # wrong values, but nothing changed
    assert report.status == "failed" and _inplace_lines(report) == []


def test_the_change_is_found_by_position_keyword_and_inside_a_tuple_bit_for_bit():
    q, k, v = (torch.randn(1, 1, 1, 2) for _ in range(3))
    cache = (torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))

    def writes_into_the_cache(q, k, v, cache=None):
        cache[0][..., 0, :] = 0.0
        return q

    assert call_once(writes_into_the_cache, Call((q, k, v, cache))).changed == [(3, 0)]
    assert call_once(writes_into_the_cache, Call((q, k, v), {"cache": cache})).changed == [("cache", 0)]
    nan = torch.tensor([float("nan"), 1.0])
    assert call_once(lambda x: x.nan_to_num_(), Call((nan,))).changed == [(0,)]
    assert call_once(lambda x: x.neg_().neg_(), Call((nan,))).changed == []  # back as it was, NaN and all
    zero = torch.tensor([0.0])
    assert call_once(lambda x: x.mul_(-1), Call((zero,))).changed == [(0,)]  # -0.0 is other bits


def test_without_the_source_the_references_parameter_names_are_used():
    from course_lib import layer_norm

    line = inplace_message("layer_norm", [(0,), (2,)], layer_norm)
    assert line.startswith("your layer_norm changed its arguments `x` and `beta` in place, so"), line
