"""A second "Likely mistake" is shown only when it explains the student's outputs as well as the first.

A named mistake explains a failed test when its outputs there equal the student's, dtype kind
included. When one mistake explains every failed test that another explains, and more, the other
is a special case that happens to coincide on some inputs (a mask compared with 0 where
``pad_id`` is 0, eps outside the root where eps is negligible): only the first is named. When two
explain exactly the same failed tests, the outputs cannot tell them apart and the first in the
exercise's order is named (a fill of -1e10 is both "-1e9" and "-1e4" on the tests it fails). Each
student below is written as a student would, with one mistake, and must get exactly one line.
"""

from __future__ import annotations

import math

import torch

from course_lib.grading import check


def layer_norm_with_unbiased_variance(x, gamma, beta, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta


def padding_mask_true_at_the_padding(tokens, pad_id):
    return tokens == pad_id


def padding_mask_as_floats(tokens, pad_id):
    return (tokens != pad_id).float()


def causal_mask_as_floats(size, device=None):
    return torch.ones(size, size, device=device).tril()


def label_smoothing_over_the_other_classes(logits, target, smoothing=0.1, ignore_index=-100):
    C = logits.shape[-1]
    log_p = torch.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    smoothed = torch.full_like(log_p, smoothing / (C - 1))
    smoothed.scatter_(-1, target.clamp_min(0)[:, None], 1 - smoothing)
    return -(smoothed * log_p).sum(dim=-1)[keep].mean()


def test_unbiased_variance_is_not_also_said_to_put_eps_outside_the_root():
    (diagnosis,) = check(layer_norm_with_unbiased_variance, name="layer_norm").diagnoses
    assert diagnosis.startswith("unbiased variance (dividing by E - 1")


def test_a_mask_compared_with_pad_id_is_not_also_said_to_compare_with_0():
    (diagnosis,) = check(padding_mask_true_at_the_padding, name="padding_mask").diagnoses
    assert diagnosis.startswith("the mask is inverted: it is True at the padding")
    assert "instead of pad_id" not in diagnosis


def test_a_float_mask_is_not_also_named_an_integer_one():
    for fn, name in [(padding_mask_as_floats, "padding_mask"), (causal_mask_as_floats, "causal_mask")]:
        (diagnosis,) = check(fn, name=name).diagnoses
        assert diagnosis.startswith("returning a float tensor of 0s and 1s"), diagnosis


def test_smoothing_over_the_other_classes_is_not_also_said_to_average_over_all_rows():
    (diagnosis,) = check(label_smoothing_over_the_other_classes, name="label_smoothing_loss").diagnoses
    assert diagnosis.startswith("the smoothing mass is spread over the C - 1 wrong classes only")


def _softmax(x, dim=-1):  # zeros for a slice of all -inf, as the course's softmax
    m = x.amax(dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)


def _attention_filling_masked_scores_with(fill):
    def scaled_dot_product_attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, fill)
        w = _softmax(scores, dim=-1)
        return w @ v, w

    return scaled_dot_product_attention


def test_one_large_finite_fill_is_one_likely_mistake_not_one_per_constant():
    report = check(_attention_filling_masked_scores_with(-1e10))
    assert not report.passed
    (diagnosis,) = report.diagnoses
    assert diagnosis.startswith("filling masked scores with a large negative number (-1e9) instead of -inf")
    fix = "fill with float('-inf')"
    assert sum(fix in line for line in str(report).splitlines()) == 1


def test_the_honest_minus_inf_fill_keeps_full_marks_and_the_minus_1e9_fill_is_named_once():
    honest = check(_attention_filling_masked_scores_with(float("-inf")))
    assert honest.passed and honest.score == honest.max_score and not honest.diagnoses
    (diagnosis,) = check(_attention_filling_masked_scores_with(-1e9)).diagnoses
    assert "(-1e9) instead of -inf" in diagnosis
