"""Specification of the checks of chapter 5 (layer normalisation): what they accept, what they
diagnose, and how they report broken implementations.

The functions below are written the way students write them, named like the graded function
they imitate; each is checked with ``check(fn, name=...)``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import course_lib
from course_lib.grading import check

LN = "layer_norm"
AN = "add_and_norm"


# ---------------------------------------------------------------------------------------
# layer_norm: correct implementations
# ---------------------------------------------------------------------------------------


def ln_var_mean(x, gamma, beta, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def ln_tensor_methods(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, correction=0)
    return gamma * (x - mean) * (var + eps).rsqrt() + beta


def ln_numpy(x, gamma, beta, eps=1e-5):
    a = x.numpy().astype(np.float64)
    mu = a.mean(axis=-1, keepdims=True)
    var = ((a - mu) ** 2).mean(axis=-1, keepdims=True)
    out = (a - mu) / np.sqrt(var + eps) * gamma.numpy() + beta.numpy()
    return torch.from_numpy(out).to(x.dtype)


def ln_loops(x, gamma, beta, eps=1e-5):
    rows = x.reshape(-1, x.shape[-1])  # (tokens, E)
    out = torch.empty_like(rows)
    E = rows.shape[1]
    for r in range(rows.shape[0]):
        mu = sum(rows[r].tolist()) / E
        var = sum((v - mu) ** 2 for v in rows[r].tolist()) / E
        for e in range(E):
            out[r, e] = gamma[e] * (rows[r, e] - mu) / (var + eps) ** 0.5 + beta[e]
    return out.reshape(x.shape)  # (*, E)


# ---------------------------------------------------------------------------------------
# layer_norm: classic mistakes
# ---------------------------------------------------------------------------------------


def ln_unbiased(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True)  # divides by E - 1
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def ln_std_unbiased(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.std(-1, keepdim=True) ** 2 + eps) + beta


def ln_eps_outside(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / (std + eps) + beta


def ln_over_batch(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=0, keepdim=True)
    var = x.var(dim=0, keepdim=True, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def ln_over_everything(x, gamma, beta, eps=1e-5):
    return gamma * (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) + beta


def ln_no_affine(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps)


def ln_swapped(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return beta * (x - mean) / torch.sqrt(var + eps) + gamma


def ln_no_beta(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + eps)


def ln_beta_first(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return ((x - mean) / torch.sqrt(var + eps) + beta) * gamma


def ln_fixed_eps(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + 1e-5) + beta


def ln_no_eps(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    std = x.std(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / std + beta


def ln_by_variance(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return gamma * (x - mean) / (var + eps) + beta


def ln_one_pass(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    var = (x**2).mean(dim=-1, keepdim=True) - mean**2
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def ln_annotated_transformer(x, a_2, b_2, eps=1e-5):
    # the Annotated Transformer's LayerNorm.forward, with its parameters passed in (and the notebook's eps)
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return a_2 * (x - mean) / (std + eps) + b_2


def ln_without_keepdim(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1)
    var = x.var(dim=-1, unbiased=False)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


# ---------------------------------------------------------------------------------------
# add_and_norm: correct implementations
# ---------------------------------------------------------------------------------------


def layer_norm(x, gamma, beta, eps=1e-5):
    """A student's own layer_norm, called by their add_and_norm below."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def an_own_layer_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta, eps)


def an_inline(x, sublayer_output, gamma, beta, eps=1e-5):
    h = x + sublayer_output
    var, mean = torch.var_mean(h, dim=-1, keepdim=True, correction=0)
    return (h - mean) * torch.rsqrt(var + eps) * gamma + beta


def an_numpy(x, sublayer_output, gamma, beta, eps=1e-5):
    h = x.double().numpy() + sublayer_output.double().numpy()
    centred = h - h.mean(axis=-1, keepdims=True)
    out = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
    return torch.from_numpy(out * gamma.double().numpy() + beta.double().numpy()).float()


# ---------------------------------------------------------------------------------------
# add_and_norm: classic mistakes
# ---------------------------------------------------------------------------------------


def an_norm_before_add(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + layer_norm(sublayer_output, gamma, beta, eps)


def an_pre_ln(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps) + sublayer_output


def an_no_residual(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(sublayer_output, gamma, beta, eps)


def an_no_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + sublayer_output


def an_drops_eps(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta)


def an_swapped(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, beta, gamma, eps)


def an_normalise_both(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps) + layer_norm(sublayer_output, gamma, beta, eps)


def an_with_the_annotated_transformer_layer_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return ln_annotated_transformer(x + sublayer_output, gamma, beta, eps)


def an_unbiased_inline(x, sublayer_output, gamma, beta, eps=1e-5):
    h = x + sublayer_output
    return gamma * (h - h.mean(-1, keepdim=True)) / torch.sqrt(h.var(-1, keepdim=True) + eps) + beta


def an_eps_outside_inline(x, sublayer_output, gamma, beta, eps=1e-5):
    h = x + sublayer_output
    return gamma * (h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True, unbiased=False) + eps) + beta


# ---------------------------------------------------------------------------------------
# forbidden calls and broken implementations
# ---------------------------------------------------------------------------------------


def ln_functional(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def ln_module(x, gamma, beta, eps=1e-5):
    norm = nn.LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(gamma)
        norm.bias.copy_(beta)
    return norm(x).detach()


def ln_torch_layer_norm(x, gamma, beta, eps=1e-5):
    return torch.layer_norm(x, [x.shape[-1]], gamma, beta, eps)


def ln_group_norm(x, gamma, beta, eps=1e-5):
    rows = x.reshape(-1, 1, x.shape[-1])  # (tokens, 1 group, E)
    return F.group_norm(rows, 1, eps=eps).reshape(x.shape) * gamma + beta  # (*, E)


def ln_reference(x, gamma, beta, eps=1e-5):
    return course_lib.layer_norm(x, gamma, beta, eps)


def an_functional(x, sublayer_output, gamma, beta, eps=1e-5):
    return F.layer_norm(x + sublayer_output, (x.shape[-1],), gamma, beta, eps)


def an_reference(x, sublayer_output, gamma, beta, eps=1e-5):
    return course_lib.add_and_norm(x, sublayer_output, gamma, beta, eps)


def ln_crashes(x, gamma, beta, eps=1e-5):
    return x @ gamma[:-1]


def ln_nan(x, gamma, beta, eps=1e-5):
    return ln_no_eps(x, gamma, beta, eps) * float("nan")


def ln_keeps_dim_wrong(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1)  # no keepdim: (*,) broadcasts against the wrong axis or fails
    return (x - mean) * gamma + beta


def ln_returns_tuple(x, gamma, beta, eps=1e-5):
    return ln_var_mean(x, gamma, beta, eps), x.mean(-1)


def ln_returns_numpy(x, gamma, beta, eps=1e-5):
    return ln_var_mean(x, gamma, beta, eps).numpy()


def ln_reduced(x, gamma, beta, eps=1e-5):
    return ln_var_mean(x, gamma, beta, eps).mean(-1)


# ---------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------


def test_points_per_function():
    assert check(course_lib.layer_norm).max_score == 12
    assert check(course_lib.add_and_norm).max_score == 7


@pytest.mark.parametrize("fn", [ln_var_mean, ln_tensor_methods, ln_numpy, ln_loops, layer_norm])
def test_other_correct_layer_norms_score_full_marks(fn):
    report = check(fn, name=LN)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score


@pytest.mark.parametrize("fn", [an_own_layer_norm, an_inline, an_numpy])
def test_other_correct_add_and_norms_score_full_marks(fn):
    report = check(fn, name=AN)
    assert report.status == "passed", str(report)
    assert report.score == report.max_score


def test_add_and_norm_may_call_the_students_own_layer_norm():
    assert check(an_own_layer_norm, name=AN).status == "passed"


LN_MISTAKES = [
    (ln_unbiased, "unbiased variance"),
    (ln_std_unbiased, "unbiased variance"),
    (ln_eps_outside, "eps added outside the square root"),
    (ln_over_batch, "normalising over the batch (dim 0)"),
    (ln_over_everything, "normalising over all dims"),
    (ln_no_affine, "gamma and beta are ignored"),
    (ln_swapped, "gamma and beta swapped"),
    (ln_no_beta, "beta is never added"),
    (ln_beta_first, "beta added before multiplying by gamma"),
    (ln_fixed_eps, "the eps argument is ignored"),
    (ln_no_eps, "no eps at all"),
    (ln_by_variance, "dividing by the variance instead of its square root"),
    (ln_one_pass, "one-pass variance"),
    (ln_annotated_transformer, "unbiased variance"),  # and, where eps matters, eps outside too
    (ln_without_keepdim, "without keepdim=True"),
]


@pytest.mark.parametrize("fn, phrase", LN_MISTAKES, ids=[f.__name__ for f, _ in LN_MISTAKES])
def test_classic_layer_norm_mistakes_lose_points_and_are_diagnosed(fn, phrase):
    report = check(fn, name=LN)
    assert report.status == "failed"
    assert report.score < report.max_score
    assert report.diagnoses and all(phrase in d for d in report.diagnoses), report.diagnoses


def test_eps_outside_the_root_fails_only_where_eps_matters():
    failed = {r.name for r in check(ln_eps_outside, name=LN).results if not r.passed and not r.withheld}
    assert failed == {"eps argument", "small variance"}


def test_annotated_transformer_layer_norm_is_named_with_both_of_its_differences():
    report = check(ln_annotated_transformer, name=LN)
    eps_case = next(r for r in report.results if r.name == "eps argument")
    assert not eps_case.passed
    assert "x.std divides by E - 1" in eps_case.diagnosis and "inside the square root" in eps_case.diagnosis


def test_bessel_and_eps_placement_are_told_apart_by_the_cases():
    # eps outside alone: only where eps matters; Bessel's E - 1 alone: everywhere, most on short rows;
    # both together: the eps cases name both, as no single mistake gives those outputs
    by_name = {r.name: r for r in check(ln_unbiased, name=LN).results}
    assert not by_name["short rows"].passed and not by_name["eps argument"].passed
    assert "x.std" not in by_name["eps argument"].diagnosis
    assert by_name["eps argument"].diagnosis.startswith("unbiased variance (dividing by E - 1")
    by_name = {r.name: r for r in check(ln_eps_outside, name=LN).results}
    assert by_name["short rows"].passed and "eps added outside" in by_name["small variance"].diagnosis
    by_name = {r.name: r for r in check(ln_annotated_transformer, name=LN).results}
    assert "x.std divides by E - 1" in by_name["small variance"].diagnosis


def test_statistics_without_keepdim_are_named_on_a_square_input():
    report = check(ln_without_keepdim, name=LN)
    by_name = {r.name: r for r in report.results}
    assert not by_name["square input"].passed and "without keepdim=True" in by_name["square input"].diagnosis
    assert "raised RuntimeError" in by_name["fixed small case"].feedback  # elsewhere the shapes do not broadcast


def test_ignoring_the_eps_argument_fails_only_the_eps_case():
    failed = {r.name for r in check(ln_fixed_eps, name=LN).results if not r.passed and not r.withheld}
    assert failed == {"eps argument"}


def test_the_standardisation_property_reports_a_wrong_variance():
    report = check(ln_unbiased, name=LN)
    result = next(r for r in report.results if r.name == "standardised rows")
    assert not result.passed
    assert "variance 1" in result.feedback


AN_MISTAKES = [
    (an_norm_before_add, "normalising before the addition"),
    (an_pre_ln, "normalising x before the addition"),
    (an_no_residual, "residual connection is missing"),
    (an_no_norm, "the layer norm is missing"),
    (an_drops_eps, "eps argument is not passed on"),
    (an_swapped, "gamma and beta swapped"),
    (an_normalise_both, "normalised separately"),
    (an_with_the_annotated_transformer_layer_norm, "unbiased variance"),  # and eps outside where it matters
    (an_unbiased_inline, "unbiased variance"),
    (an_eps_outside_inline, "eps added outside the square root"),
]


@pytest.mark.parametrize("fn, phrase", AN_MISTAKES, ids=[f.__name__ for f, _ in AN_MISTAKES])
def test_classic_add_and_norm_mistakes_lose_points_and_are_diagnosed(fn, phrase):
    report = check(fn, name=AN)
    assert report.status == "failed"
    assert report.score < report.max_score
    assert report.diagnoses and all(phrase in d for d in report.diagnoses), report.diagnoses


def test_add_and_norm_inherits_a_wrong_layer_norm():
    def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
        return ln_unbiased(x + sublayer_output, gamma, beta, eps)

    assert check(add_and_norm).status == "failed"


@pytest.mark.parametrize(
    "name, fn, fragment",
    [
        (LN, ln_functional, "torch.nn.functional.layer_norm"),
        (LN, ln_module, "torch.nn.LayerNorm"),
        (LN, ln_torch_layer_norm, "torch.layer_norm"),
        (LN, ln_group_norm, "torch.nn.functional.group_norm"),
        (LN, ln_reference, "reference implementation"),
        (AN, an_functional, "torch.nn.functional.layer_norm"),
        (AN, an_reference, "reference implementation"),
    ],
)
def test_forbidden_calls_are_reported(name, fn, fragment):
    report = check(fn, name=name)
    assert report.status == "forbidden"
    assert report.score == 0
    assert fragment in report.notes[0]


@pytest.mark.parametrize(
    "fn, fragment",
    [
        (ln_crashes, "raised RuntimeError"),
        (ln_nan, "NaN"),
        (ln_keeps_dim_wrong, "raised RuntimeError"),
        (ln_returns_tuple, "returned a tuple of 2 values, expected a single tensor"),
        (ln_returns_numpy, "expected a torch.Tensor"),
        (ln_reduced, "has shape"),
    ],
)
def test_broken_layer_norms_fail_with_feedback(fn, fragment):
    report = check(fn, name=LN)
    assert report.status == "failed"
    assert report.score == 0
    assert any(fragment in r.feedback for r in report.results), str(report)
