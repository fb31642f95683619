"""Exercises of ``05_layer_norm``: layer normalisation and the post-LN Add & Norm step."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import add_and_norm, layer_norm
from ..exercise_spec import Exercise
from ..model import Call, Case, Mistake
from ._common import NORMALISATIONS, randn, rng

__all__ = ["EXERCISES"]

_FORBIDDEN = NORMALISATIONS


# --- layer_norm: classic mistakes ------------------------------------------------------------------


def _standardise(x: torch.Tensor, dim: Any = -1, eps: float = 1e-5, correction: int = 0) -> torch.Tensor:
    centred = x - x.mean(dim=dim, keepdim=True)
    var = centred.pow(2).sum(dim=dim, keepdim=True) / (_count(x, dim) - correction)
    return centred / torch.sqrt(var + eps)


def _count(x: torch.Tensor, dim: Any) -> int:
    if dim is None:
        return x.numel()
    if isinstance(dim, tuple):
        return math.prod(x.shape[d] for d in dim)
    return x.shape[dim]


def _ln_unbiased(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=eps, correction=1) * gamma + beta


def _ln_eps_outside(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(dim=-1, keepdim=True)
    std = centred.pow(2).mean(dim=-1, keepdim=True).sqrt()
    return centred / (std + eps) * gamma + beta


def _ln_unbiased_eps_outside(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(centred.pow(2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1))
    return gamma * centred / (std + eps) + beta


def _ln_no_keepdim(x, gamma, beta, eps=1e-5):
    mean = x.mean(dim=-1)  # (*,): lined up with the features, not the rows
    var = ((x - mean) ** 2).mean(dim=-1)
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def _ln_no_keepdim_row_var(x, gamma, beta, eps=1e-5):
    mean, var = x.mean(dim=-1), x.var(dim=-1, unbiased=False)  # (*,): each row's, lined up with the features
    return gamma * (x - mean) / torch.sqrt(var + eps) + beta


def _ln_dim0(x, gamma, beta, eps=1e-5):
    return _standardise(x, dim=0, eps=eps) * gamma + beta


def _ln_all_dims(x, gamma, beta, eps=1e-5):
    centred = x - x.mean()
    return centred / torch.sqrt(centred.pow(2).mean() + eps) * gamma + beta


def _ln_non_batch_dims(x, gamma, beta, eps=1e-5):
    return _standardise(x, dim=tuple(range(1, x.dim())), eps=eps) * gamma + beta


def _ln_no_affine(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=eps)


def _ln_swapped(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=eps) * beta + gamma


def _ln_no_beta(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=eps) * gamma


def _ln_no_gamma(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=eps) + beta


def _ln_beta_first(x, gamma, beta, eps=1e-5):
    return (_standardise(x, eps=eps) + beta) * gamma


def _ln_fixed_eps(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=1e-5) * gamma + beta


def _ln_no_eps(x, gamma, beta, eps=1e-5):
    return _standardise(x, eps=0.0) * gamma + beta


def _ln_by_variance(x, gamma, beta, eps=1e-5):
    centred = x - x.mean(dim=-1, keepdim=True)
    return centred / (centred.pow(2).mean(dim=-1, keepdim=True) + eps) * gamma + beta


def _ln_not_centred(x, gamma, beta, eps=1e-5):
    var = (x - x.mean(dim=-1, keepdim=True)).pow(2).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(var + eps) * gamma + beta


def _ln_one_pass(x, gamma, beta, eps=1e-5):
    mu = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mu * mu
    return (x - mu) / torch.sqrt(var + eps) * gamma + beta


_UNBIASED = (
    "unbiased variance (dividing by E - 1, the default of torch.var / Tensor.std): layer norm "
    "divides by E, so every value comes out too small by sqrt((E-1)/E)"
)
_EPS_OUTSIDE = (
    "eps added outside the square root, (x - mu) / (sqrt(var) + eps): it must go inside, "
    "(x - mu) / sqrt(var + eps); the two differ when the variance is small or eps large"
)
_UNBIASED_EPS_OUTSIDE = (
    "unbiased variance and eps added outside the square root, as in the Annotated Transformer's "
    "(x - mean) / (x.std(-1) + eps): x.std divides by E - 1 (layer norm divides by E, "
    "std(-1, unbiased=False)), and eps must go inside the square root, (x - mu) / sqrt(var + eps)"
)
_NO_KEEPDIM = (
    "the mean and variance are taken without keepdim=True: a (*,) statistic is lined up with the "
    "last dim (the features) instead of the rows, so each feature gets another row's statistics; use "
    "x.mean(dim=-1, keepdim=True)"
)

_LN_MISTAKES = [
    Mistake(_UNBIASED, _ln_unbiased),
    Mistake(_EPS_OUTSIDE, _ln_eps_outside),
    Mistake(_UNBIASED_EPS_OUTSIDE, _ln_unbiased_eps_outside),
    Mistake(_NO_KEEPDIM, _ln_no_keepdim),
    Mistake(_NO_KEEPDIM, _ln_no_keepdim_row_var),
    Mistake(
        "normalising over the batch (dim 0) instead of the features (the last dim): that is "
        "batch normalisation, and each token would depend on the others",
        _ln_dim0,
    ),
    Mistake(
        "normalising over all dims at once: the mean and variance must be computed per token, "
        "over the last dim only (keepdim=True)",
        _ln_all_dims,
    ),
    Mistake(
        "normalising over every dim but the first (dims 1, 2, ..., as for one whole sequence of a "
        "batch): the mean and variance must be computed per token, over the last dim only "
        "(dim=-1, keepdim=True)",
        _ln_non_batch_dims,
    ),
    Mistake("gamma and beta are ignored: after standardising, multiply by gamma and add beta", _ln_no_affine),
    Mistake("gamma and beta swapped: the output is gamma * x_hat + beta (gamma scales, beta shifts)", _ln_swapped),
    Mistake("beta is never added: the output is gamma * x_hat + beta", _ln_no_beta),
    Mistake("gamma is never applied: the output is gamma * x_hat + beta", _ln_no_gamma),
    Mistake(
        "beta added before multiplying by gamma, (x_hat + beta) * gamma: the output is gamma * x_hat + beta",
        _ln_beta_first,
    ),
    Mistake("the eps argument is ignored (a fixed 1e-5 is used): use the eps you are given", _ln_fixed_eps),
    Mistake(
        "no eps at all: a row of equal values (variance 0) divides 0 by 0 and gives NaN; use sqrt(var + eps)",
        _ln_no_eps,
    ),
    Mistake("dividing by the variance instead of its square root, the standard deviation", _ln_by_variance),
    Mistake("the mean is never subtracted from x: the output must be (x - mu) / sqrt(var + eps)", _ln_not_centred),
    Mistake(
        "one-pass variance mean(x^2) - mean(x)^2: for values near 1e4 the two terms are huge and "
        "nearly equal, their difference loses all its digits (catastrophic cancellation); "
        "subtract the mean first, then average the squares",
        _ln_one_pass,
    ),
]


# --- layer_norm: cases -----------------------------------------------------------------------------------


def _affine(g: torch.Generator, E: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A gain far from 1 and a bias far from 0, so that mixing them up shows."""
    return 1.0 + 0.5 * randn(g, E), randn(g, E)


def _standardised(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """With gamma = 1 and beta = 0, every row has mean 0 and (biased) variance var / (var + eps)."""
    for call, y in zip(calls, actual, strict=False):
        x = call.args[0].to(torch.float64)
        if not isinstance(y, torch.Tensor) or not y.is_floating_point():
            return "the output should be a floating-point tensor"
        if y.shape != x.shape:
            return f"the output has shape {tuple(y.shape)}, expected the input's {tuple(x.shape)}"
        if not bool(torch.isfinite(y).all()):
            return "the output contains NaN or inf"
        y = y.to(torch.float64)
        mean = y.mean(dim=-1)
        if float(mean.abs().max()) > 1e-4:
            worst = float(mean.abs().max())
            return f"with gamma = 1 and beta = 0 the rows should have mean 0 (largest |mean| {worst:.3g})"
        var_x = x.var(dim=-1, unbiased=False)
        target = var_x / (var_x + 1e-5)
        var_y = y.var(dim=-1, unbiased=False)
        err = float((var_y - target).abs().max())
        if err > 1e-3:
            return (
                "with gamma = 1 and beta = 0 the rows should have variance 1 (biased, over the last dim); "
                f"off by up to {err:.3g}"
            )
    return None


def _ln_cases() -> list[Case]:
    g = rng(500)
    E = 6
    gamma, beta = _affine(g, E)
    g3, b3 = _affine(g, 5)
    g10, b10 = _affine(g, 10)
    g4, b4 = _affine(g, 4)
    x_small = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 9.0], [-2.0, 0.0, 0.5, 0.5, 3.0, -1.0]])
    tiny = randn(g, 3, 5, scale=1e-3) + 0.5  # variance ~1e-6, below eps
    const = torch.tensor([[2.5, 2.5, 2.5, 2.5], [0.0, 0.0, 0.0, 0.0], [1.0, -1.0, 1.0, -1.0]])
    big = 1e4 + randn(g, 3, 10, scale=3.0)
    return [
        Case("fixed small case", "a 2 x 6 input with a gain and a bias", [Call((x_small, gamma, beta))], points=1),
        Case(
            "random shapes",
            "2-d and 3-d inputs (tokens x features, batch x tokens x features)",
            [Call((randn(g, 4, 5, scale=3.0) + 2.0, g3, b3)), Call((randn(g, 2, 3, 10, scale=2.0) - 1.0, g10, b10))],
            points=2,
        ),
        Case(
            "extra batch dims",
            "a 4-d input: statistics over the last dim only",
            [Call((randn(g, 2, 3, 2, 4, scale=2.0), g4, b4))],
            points=1,
        ),
        Case(
            "eps argument",
            "a large eps passed explicitly (eps=0.5 and eps=1e-2)",
            [Call((randn(g, 3, 5) * 0.5, g3, b3), {"eps": 0.5}), Call((randn(g, 4, 10), g10, b10), {"eps": 1e-2})],
            points=2,
        ),
        Case(
            "small variance",
            "rows whose variance is far below eps (the default eps=1e-5)",
            [Call((tiny, g3, b3))],
            points=1,
        ),
        Case(
            "constant rows",
            "a row of equal values has variance 0: its output is beta, not NaN",
            [Call((const, g4, b4))],
            points=1,
        ),
        Case(
            "large magnitudes",
            "values near 1e4 with a spread of a few units (centre before squaring)",
            [Call((big, g10, b10))],
            points=1,
            atol=5e-3,
        ),
        Case(
            "standardised rows",
            "with gamma = 1 and beta = 0, every row has mean 0 and variance 1",
            [
                Call((randn(g, 5, 4, scale=4.0) + 3.0, torch.ones(4), torch.zeros(4))),
                Call((randn(g, 2, 3, 7), torch.ones(7), torch.zeros(7))),
            ],
            points=1,
            judge=_standardised,
        ),
        Case(
            "short rows",
            "rows of 2 and 3 features (where dividing by E - 1 instead of E changes the most)",
            [
                Call((randn(g, 4, 2, scale=2.0), *_affine(g, 2))),
                Call((randn(g, 2, 3, 3, scale=2.0) + 1.0, *_affine(g, 3))),
            ],
            points=1,
        ),
        Case(
            "square input",
            "as many rows as features, where statistics without keepdim still broadcast",
            [Call((randn(g, 5, 5, scale=2.0) + 1.0, *_affine(g, 5)))],
            points=1,
        ),
    ]


# --- add_and_norm: classic mistakes ----------------------------------------------------------------------


def _an_norm_first(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + layer_norm(sublayer_output, gamma, beta, eps)


def _an_norm_input(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps) + sublayer_output


def _an_no_residual(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(sublayer_output, gamma, beta, eps)


def _an_no_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + sublayer_output


def _an_only_x(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps)


def _an_fixed_eps(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta)


def _an_swapped(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, beta, gamma, eps)


def _an_residual_twice(x, sublayer_output, gamma, beta, eps=1e-5):
    return x + layer_norm(x + sublayer_output, gamma, beta, eps)


def _an_norm_both(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x, gamma, beta, eps) + layer_norm(sublayer_output, gamma, beta, eps)


def _an_inline(correction: int, eps_inside: bool) -> Callable[..., torch.Tensor]:
    """Add & Norm with a layer norm written inline, its variance and eps as given."""

    def implementation(x, sublayer_output, gamma, beta, eps=1e-5):
        y = x + sublayer_output
        centred = y - y.mean(dim=-1, keepdim=True)
        var = centred.pow(2).sum(dim=-1, keepdim=True) / (y.shape[-1] - correction)
        scale = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
        return gamma * centred / scale + beta

    return implementation


def _an_cases() -> list[Case]:
    g = rng(510)
    g6, b6 = _affine(g, 6)
    g8, b8 = _affine(g, 8)
    g4, b4 = _affine(g, 4)
    x_fixed = torch.tensor([[1.0, -2.0, 0.5, 3.0, 0.0, 1.5], [4.0, 4.0, -1.0, 2.0, 0.0, -3.0]])
    s_fixed = torch.tensor([[0.5, 0.5, -1.0, 2.0, 1.0, 0.0], [-2.0, 1.0, 3.0, 0.0, 0.5, 1.0]])
    x_cancel = randn(g, 3, 4)
    return [
        Case(
            "fixed small case",
            "a 2 x 6 input and sublayer output with a gain and a bias",
            [Call((x_fixed, s_fixed, g6, b6))],
            points=2,
        ),
        Case(
            "random shapes",
            "(N, T, E) and 4-d inputs of different scales",
            [
                Call((randn(g, 2, 5, 8, scale=2.0), randn(g, 2, 5, 8, scale=0.5) + 1.0, g8, b8)),
                Call((randn(g, 2, 2, 3, 6), randn(g, 2, 2, 3, 6, scale=3.0), g6, b6)),
            ],
            points=2,
        ),
        Case(
            "residual matters",
            "a sublayer output much smaller than x (x must be added before normalising)",
            [Call((randn(g, 3, 7, 8, scale=2.0), randn(g, 3, 7, 8, scale=0.01), g8, b8))],
            points=1,
        ),
        Case(
            "eps argument",
            "eps=0.1 passed explicitly",
            [Call((randn(g, 4, 6), randn(g, 4, 6), g6, b6), {"eps": 0.1})],
            points=1,
        ),
        Case(
            "cancelling sum",
            "a sublayer output equal to -x: the sum is 0 and the output is beta, not NaN",
            [Call((x_cancel, -x_cancel, g4, b4))],
            points=1,
        ),
    ]


# --- exercises ---------------------------------------------------------------------------------------

EXERCISES = [
    Exercise(
        name="layer_norm",
        reference=layer_norm,
        make_cases=_ln_cases,
        mistakes=_LN_MISTAKES,
        forbidden=_FORBIDDEN,
    ),
    Exercise(
        name="add_and_norm",
        reference=add_and_norm,
        make_cases=_an_cases,
        mistakes=[
            Mistake(
                "normalising before the addition, x + layer_norm(sublayer_output): post-LN adds first, "
                "layer_norm(x + sublayer_output)",
                _an_norm_first,
            ),
            Mistake(
                "normalising x before the addition, layer_norm(x) + sublayer_output: post-LN adds first, "
                "layer_norm(x + sublayer_output)",
                _an_norm_input,
            ),
            Mistake(
                "the residual connection is missing: x must be added to the sublayer output before normalising",
                _an_no_residual,
            ),
            Mistake("the layer norm is missing: the sum x + sublayer_output must be normalised", _an_no_norm),
            Mistake("the sublayer output is never used: normalise x + sublayer_output", _an_only_x),
            Mistake("the eps argument is not passed on to layer_norm", _an_fixed_eps),
            Mistake("gamma and beta swapped when calling layer_norm", _an_swapped),
            Mistake(
                "x and the sublayer output are normalised separately and then added: add first, "
                "then normalise the sum once",
                _an_norm_both,
            ),
            Mistake(
                "the residual is added twice, x + layer_norm(x + sublayer_output): post-LN returns "
                "layer_norm(x + sublayer_output) itself, the residual inside the norm",
                _an_residual_twice,
            ),
            Mistake(_UNBIASED, _an_inline(correction=1, eps_inside=True)),
            Mistake(_EPS_OUTSIDE, _an_inline(correction=0, eps_inside=False)),
            Mistake(_UNBIASED_EPS_OUTSIDE, _an_inline(correction=1, eps_inside=False)),
        ],
        forbidden=_FORBIDDEN,
    ),
]
