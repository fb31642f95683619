"""Exercises of ``02_self_attention``: softmax, scaled dot-product attention, self-attention.

Every classic mistake listed below fails at least one case, and on that case the mistake's
implementation gives exactly the student's (wrong) outputs, so the report can name it. The
sizes are chosen for that: in the value cases the query width ``D``, the value width ``Dv``,
the key count ``S`` and the query count ``L`` all differ, so scaling by the wrong one of them
gives different numbers; masks give every query at least one allowed and one blocked key, so
an inverted mask still leaves no row fully masked.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import scaled_dot_product_attention, self_attention, softmax
from ..exercise_spec import Exercise
from ..model import Call, Case, Judge, Mistake
from ._common import SOFTMAX_FAMILY, WHOLE_ATTENTION, first_structure_problem, rand_mask, randn, rng, sums_to_one

__all__ = ["EXERCISES"]

_NEG_INF = float("-inf")
_ATTENTION_OUTPUTS = ("output", "weights")


# --- softmax --------------------------------------------------------------------------------


def _softmax_no_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_global_max(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_all_masked_nan(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def _softmax_dim0(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return softmax(x, dim=0)


def _softmax_last(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return softmax(x, dim=-1)


def _softmax_no_norm(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    m = x.amax(dim=dim, keepdim=True)
    return torch.exp(x - m.masked_fill(~torch.isfinite(m), 0.0))


def _softmax_cases() -> list[Case]:
    g = rng(200)
    inf = float("inf")
    return [
        Case(
            "fixed small case",
            "a 2 x 3 input along the last dim",
            [Call((torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),))],
            points=1,
        ),
        Case(
            "random shapes",
            "3-d and 4-d inputs, softmax along the last dim",
            [Call((randn(g, 2, 3, 5),)), Call((randn(g, 2, 2, 4, 7, scale=3.0),))],
            points=1,
        ),
        Case(
            "other dims",
            "softmax along dim=0 and dim=1 (the dim argument is used)",
            [Call((randn(g, 4, 3, 5),), {"dim": 0}), Call((randn(g, 4, 3, 5),), {"dim": 1})],
            points=2,
        ),
        Case(
            "sums to one",
            "outputs are non-negative and sum to 1 along the dim",
            [Call((randn(g, 6, 9, scale=5.0),))],
            points=1,
            judge=sums_to_one(),
        ),
        Case(
            "large inputs",
            "inputs of magnitude 1e4 give finite, correct weights (stability)",
            [Call((torch.tensor([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4 + 2.0, -1e4 + 1.0]]),))],
            points=2,
            atol=1e-3,
            rtol=1e-3,
        ),  # float32 spacing at 1e4 is 1e-3: x - logsumexp(x) is correct too
        Case("single element", "a dim of size 1 gives weight 1", [Call((randn(g, 3, 1),))], points=1),
        Case(
            "-inf entries",
            "entries equal to -inf get weight exactly 0, the others share the weight",
            [Call((torch.tensor([[2.0, -inf, 1.0, 0.5], [-inf, 3.0, -inf, -1.0]]),))],
            points=1,
        ),
        Case(
            "all -inf slice",
            "a slice that is entirely -inf gives all-zero weights, not NaN",
            [Call((torch.tensor([[-inf, -inf, -inf], [1e4, 0.0, -inf], [0.5, -inf, 1.5]]),))],
            points=1,
        ),
    ]


# --- scaled dot-product attention -----------------------------------------------------------
#
# Every mistake is a variant of one computation: scores, a scale, a mask, a softmax, values.


def _attend(
    q,
    k,
    v,
    mask=None,
    *,
    scale="sqrt_d",
    sm_dim=-1,
    mask_mode="-inf",
    fill=-1e9,
    sm="course",
    values="v",
    transpose_weights=False,
    swap_outputs=False,
):
    D, Dv, S = q.shape[-1], v.shape[-1], k.shape[-2]
    scores = q @ k.transpose(-2, -1)  # (*, L, S)
    factor = {
        "sqrt_d": 1 / math.sqrt(D),
        "none": 1.0,
        "d": 1 / D,
        "times_sqrt_d": math.sqrt(D),
        "sqrt_dv": 1 / math.sqrt(Dv),
        "sqrt_s": 1 / math.sqrt(S),
    }[scale]
    scores = scores * factor
    if mask is not None and mask_mode != "ignore":
        if mask_mode == "-inf":
            scores = scores.masked_fill(~mask, _NEG_INF)
        elif mask_mode == "inverted":
            scores = scores.masked_fill(mask, _NEG_INF)
        elif mask_mode == "big_negative":
            scores = scores.masked_fill(~mask, fill)
    if sm == "course":
        weights = softmax(scores, dim=sm_dim)
    elif sm == "nan":  # as torch.softmax: max subtracted, but NaN (0 / 0) for an all -inf row
        e = torch.exp(scores - scores.amax(dim=sm_dim, keepdim=True))
        weights = e / e.sum(dim=sm_dim, keepdim=True)
    else:  # "unstable": no max subtraction
        e = torch.exp(scores)
        weights = e / e.sum(dim=sm_dim, keepdim=True)
    if mask is not None and mask_mode == "after":
        weights = weights * mask
    out = weights @ (v if values == "v" else k)
    if transpose_weights:
        weights = weights.transpose(-2, -1)
    return (weights, out) if swap_outputs else (out, weights)


def _variant(**options):
    def implementation(q, k, v, mask=None):
        return _attend(q, k, v, mask, **options)

    return implementation


def _big_negative_message(fill: str, who: str) -> str:
    return (
        f"filling masked scores with a large negative number ({fill}) instead of -inf: {who} that may "
        f"attend to nothing gets uniform weights (the mean of the values) instead of zero weights, and "
        f"where the real scores are below {fill} the masked keys win the weight; fill with "
        "float('-inf') and use your softmax, which gives zeros for an all -inf row"
    )


_ZERO_FILL = (
    "filling masked scores with 0 (or a tiny number such as 1e-15) instead of -inf: a score of 0 is "
    "an ordinary score, so the masked keys still get weight; fill with float('-inf'), which the "
    "softmax turns into a weight of exactly 0"
)

_SDPA_MISTAKES = [
    Mistake(
        "not scaling the scores: your weights are sqrt(d_k) times too sharp (did you divide "
        "q @ k^T by sqrt(d_k), the width of the queries and keys?)",
        _variant(scale="none"),
    ),
    Mistake("dividing the scores by d_k instead of sqrt(d_k): the weights are too flat", _variant(scale="d")),
    Mistake(
        "multiplying the scores by sqrt(d_k) instead of dividing: the weights are far too sharp",
        _variant(scale="times_sqrt_d"),
    ),
    Mistake(
        "scaling by sqrt(d_v), the width of the values, instead of sqrt(d_k), the width of the "
        "queries and keys (q.shape[-1])",
        _variant(scale="sqrt_dv"),
    ),
    Mistake(
        "scaling by sqrt(S), the number of keys, instead of sqrt(d_k), the width of the queries and keys (q.shape[-1])",
        _variant(scale="sqrt_s"),
    ),
    Mistake(
        "taking the softmax over the queries (dim -2) instead of over the keys (dim -1): each "
        "query's weights must sum to 1 over the keys",
        _variant(sm_dim=-2),
    ),
    Mistake(
        "taking the softmax over dim 1 instead of the last dim: dim 1 is the queries only for "
        "3-d scores (N, L, S), with more batch dims it is a batch dim; use dim=-1, the keys, "
        "whatever the number of batch dims",
        _variant(sm_dim=1),
    ),
    Mistake("ignoring the mask: masked keys still get weight", _variant(mask_mode="ignore")),
    Mistake(
        "applying the mask after the softmax: masked weights are zeroed but the others are not "
        "renormalised, so rows no longer sum to 1 (set masked scores to -inf before the softmax)",
        _variant(mask_mode="after"),
    ),
    Mistake(
        "inverting the mask: True means 'may attend', but your code blocks the True entries",
        _variant(mask_mode="inverted"),
    ),
    Mistake(_ZERO_FILL, _variant(mask_mode="big_negative", fill=0.0)),
    Mistake(_big_negative_message("-1e9", "a query"), _variant(mask_mode="big_negative", fill=-1e9)),
    Mistake(_big_negative_message("-1e4", "a query"), _variant(mask_mode="big_negative", fill=-1e4)),
    Mistake(
        "masking with -inf and a softmax that returns NaN when a whole row is -inf: a query "
        "that may attend to nothing must get zero weights and a zero output (your softmax "
        "should return zeros for an all -inf slice)",
        _variant(sm="nan"),
    ),
    Mistake(
        "exponentiating without subtracting the max first: large scores overflow to inf and "
        "the weights become NaN (unstable softmax)",
        _variant(sm="unstable"),
    ),
    Mistake(
        "returning the weights transposed, (..., S, L) instead of (..., L, S): row l must hold "
        "query l's weights over the keys",
        _variant(transpose_weights=True),
    ),
    Mistake("returning (weights, output) instead of (output, weights)", _variant(swap_outputs=True)),
    Mistake("multiplying the weights by the keys instead of the values", _variant(values="k")),
]


def _mixed_mask(g: torch.Generator, *shape: int) -> torch.Tensor:
    """A random mask in which every row has at least one True and at least one False entry."""
    m = rand_mask(g, *shape, p=0.6)  # key 0 is always allowed
    blocked = torch.randint(1, shape[-1], shape[:-1], generator=g)
    return m.scatter(-1, blocked.unsqueeze(-1), False)


def _padding_mask(g: torch.Generator, N: int, S: int) -> torch.Tensor:
    """(N, 1, S): keys at or after a random length in [1, S - 1] are padding."""
    lengths = torch.randint(1, S, (N,), generator=g)
    return (torch.arange(S) < lengths[:, None]).unsqueeze(1)


def _ranks(g: torch.Generator, N: int, S: int) -> torch.Tensor:
    """(N, S): a random order of the keys of each sequence, as floats 0 .. S - 1."""
    return torch.stack([torch.randperm(S, generator=g) for _ in range(N)]).float()


def _far_below(
    g: torch.Generator, M: float, N: int, L: int, S: int, D: int = 4, Dv: int = 3
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]:
    """Queries, keys and values whose scores q.k / sqrt(D) are all about -M: key s of sequence n
    scores -M (1 + 0.02 r) with r its rank, so the allowed key of lowest rank takes all the
    weight (the scores are M / 50 apart), and a mask gives every query an allowed and a blocked
    key. A masked key filled with a finite number above -M would win the weight instead."""
    root = math.sqrt(M)
    q = randn(g, N, L, D, scale=0.1)
    k = randn(g, N, S, D)
    q[..., 0] = root
    k[..., 0] = -math.sqrt(D) * root * (1 + 0.02 * _ranks(g, N, S))
    return (q, k, randn(g, N, S, Dv)), {"mask": _mixed_mask(g, N, L, S)}


def _causal(T: int) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril()


# --- judges for properties ----------------------------------------------------------------------


def _close(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-4) -> bool:
    return bool(torch.allclose(a.to(torch.float64), b.to(torch.float64), atol=atol, rtol=1e-4))


def _future_invariance(t: int, what: str) -> Judge:
    """Judge: two calls that differ only at positions >= t give the same outputs and weights before t,
    and every weight on a later key is 0."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        problem = first_structure_problem(actual, expected, _ATTENTION_OUTPUTS)
        if problem:
            return problem
        (out1, w1), (out2, w2) = actual
        L, S = w1.shape[-2:]
        future = torch.ones(L, S, dtype=torch.bool).triu(1)
        for w in (w1, w2):
            if bool((w.masked_select(future.expand_as(w)).abs() > 1e-6).any()):
                return "with a causal mask, a query gives weight to later keys (weights above the diagonal must be 0)"
        if not (_close(out1[..., :t, :], out2[..., :t, :]) and _close(w1[..., :t, :], w2[..., :t, :])):
            return f"changing only later {what} changed the outputs of earlier positions: with a causal mask, position l may only use positions 0..l"
        return None

    return judge


def _sdpa_permutation(pq: torch.Tensor, pk: torch.Tensor) -> Judge:
    """Judge: permuting the queries permutes the output rows; permuting keys and values together
    leaves the output unchanged and permutes the weight columns."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        problem = first_structure_problem(actual, expected, _ATTENTION_OUTPUTS)
        if problem:
            return problem
        (out1, w1), (out2, w2) = actual
        if not _close(out2, out1[..., pq, :]):
            return (
                "permuting the keys and values together (and the queries) should leave each query's output "
                "unchanged (only reordered with the queries); yours changed"
            )
        if not _close(w2, w1[..., pq, :][..., pk]):
            return "the weights should be reordered exactly as the queries (rows) and the keys (columns) were"
        return None

    return judge


def _self_attention_permutation(perm: torch.Tensor) -> Judge:
    """Judge: permuting the tokens permutes the output rows, and the weights along both axes."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        problem = first_structure_problem(actual, expected, _ATTENTION_OUTPUTS)
        if problem:
            return problem
        (out1, w1), (out2, w2) = actual
        if not _close(out2, out1[:, perm]):
            return "permuting the tokens should permute the output rows the same way (and change nothing else)"
        if not _close(w2, w1[:, perm][:, :, perm]):
            return "permuting the tokens should permute the weights along both axes (queries and keys)"
        return None

    return judge


# --- cases: scaled dot-product attention ---------------------------------------------------------


def _sdpa_cases() -> list[Case]:
    g = rng(210)
    # Sizes in the value cases: D, Dv, S and L all differ, so each wrong scale gives other numbers.
    q0 = torch.tensor([[[1.0, 0.0, 1.0, 0.0], [0.0, 2.0, 0.0, -1.0]]])  # (N=1, L=2, D=4)
    k0 = torch.tensor([[[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 1.0]]])  # (1, S=3, 4)
    v0 = torch.tensor(
        [[[1.0, 0.0, 0.0, 0.0, 2.0], [0.0, 1.0, 0.0, 0.0, -1.0], [0.0, 0.0, 1.0, 1.0, 0.0]]]
    )  # (1, 3, Dv=5)

    def qkv(*batch, L, S, D, Dv, scale=1.0):
        return (randn(g, *batch, L, D, scale=scale), randn(g, *batch, S, D, scale=scale), randn(g, *batch, S, Dv))

    # causal, future-invariance: the second call changes queries, keys and values from position t on
    T, t = 6, 3
    qc, kc, vc = qkv(2, L=T, S=T, D=4, Dv=3)
    qc2, kc2, vc2 = qc.clone(), kc.clone(), vc.clone()
    qc2[:, t:] = randn(g, 2, T - t, 4)
    kc2[:, t:] = randn(g, 2, T - t, 4)
    vc2[:, t:] = randn(g, 2, T - t, 3)

    # permutation: queries by pq, keys and values together by pk
    qp, kp, vp = qkv(2, L=4, S=6, D=8, Dv=3)
    pq, pk = torch.randperm(4, generator=g), torch.randperm(6, generator=g)

    # a fully masked row (batch 1, query 2); every other row mixed
    full = _mixed_mask(g, 2, 4, 5)
    full[1, 2] = False

    return [
        Case("fixed small case", "one batch of 2 queries and 3 keys, D = 4, Dv = 5", [Call((q0, k0, v0))], points=1),
        Case(
            "L != S, Dv != D",
            "random inputs with more keys than queries and the other way round, values wider or narrower than keys",
            [Call(qkv(2, L=3, S=5, D=4, Dv=6)), Call(qkv(2, L=6, S=3, D=8, Dv=5))],
            points=1,
        ),
        Case(
            "extra batch dims",
            "inputs with two batch dims, (2, 3, L, D)",
            [Call(qkv(2, 3, L=5, S=7, D=4, Dv=3))],
            points=1,
        ),
        Case(
            "single key (S = 1)",
            "one key per batch element: every weight is 1 and the output is that value",
            [Call(qkv(2, L=4, S=1, D=4, Dv=3))],
            points=1,
        ),
        Case(
            "mask (L, S)",
            "a boolean (L, S) mask broadcast over two batch dims (True = may attend)",
            [Call(qkv(2, 2, L=3, S=5, D=4, Dv=6), {"mask": _mixed_mask(g, 3, 5)})],
            points=1,
        ),
        Case(
            "masks (N, 1, S) and (N, L, S)",
            "a padding mask (N, 1, S) broadcast over the queries, and a full (N, L, S) mask",
            [
                Call(qkv(3, L=4, S=6, D=4, Dv=5), {"mask": _padding_mask(g, 3, 6)}),
                Call(qkv(2, L=5, S=3, D=4, Dv=6), {"mask": _mixed_mask(g, 2, 5, 3)}),
            ],
            points=1,
        ),
        Case(
            "weights sum to 1",
            "with a mask, the weights are non-negative and each row sums to 1 over the keys",
            [Call(qkv(2, L=4, S=7, D=4, Dv=3), {"mask": _mixed_mask(g, 2, 4, 7)})],
            points=1,
            judge=sums_to_one(index=1, names=_ATTENTION_OUTPUTS),
        ),
        Case(
            "fully masked row",
            "a query that may attend to no key gets zero weights and a zero output, never NaN",
            [Call(qkv(2, L=4, S=5, D=4, Dv=6), {"mask": full})],
            points=2,
        ),
        Case(
            "causal mask",
            "with a causal mask, no weight on later keys, and changing later tokens leaves earlier outputs unchanged",
            [Call((qc, kc, vc), {"mask": _causal(T)}), Call((qc2, kc2, vc2), {"mask": _causal(T)})],
            points=1,
            judge=_future_invariance(t, "queries, keys and values"),
        ),
        Case(
            "permutation",
            "permuting keys and values together leaves the output unchanged; permuting queries reorders it",
            [Call((qp, kp, vp)), Call((qp[:, pq], kp[:, pk], vp[:, pk]))],
            points=1,
            judge=_sdpa_permutation(pq, pk),
        ),
        Case(
            "large magnitudes",
            "queries and keys of magnitude 100 (scores of thousands) give finite, correct results",
            [Call(qkv(2, L=3, S=5, D=4, Dv=6, scale=100.0))],
            points=1,
            atol=1e-3,
            rtol=1e-3,
        ),
        Case(
            "masked keys under very negative scores",
            "when every real score is far below -1e4 (and below -1e9), a masked key still gets weight exactly 0",
            [Call(*_far_below(g, 1e5, 2, 3, 5)), Call(*_far_below(g, 1e10, 2, 4, 3))],
            points=1,
        ),
    ]


# --- self-attention ---------------------------------------------------------------------------------


def _project_then(attend):
    def implementation(x, W_q, W_k, W_v, mask=None):
        return attend(x @ W_q, x @ W_k, x @ W_v, mask)

    return implementation


def _sa_transposed(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q.T, x @ W_k.T, x @ W_v.T, mask)


def _sa_x_as_values(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x, mask)


def _sa_swapped_qk(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_k, x @ W_q, x @ W_v, mask)


def _sa_sqrt_e(x, W_q, W_k, W_v, mask=None):
    # sqrt(E) instead of sqrt(D): rescale q so that the reference's 1/sqrt(D) becomes 1/sqrt(E)
    q = x @ W_q * math.sqrt(W_q.shape[-1] / x.shape[-1])
    return scaled_dot_product_attention(q, x @ W_k, x @ W_v, mask)


def _sa_no_mask(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)


_SELF_ATTENTION_MISTAKES = [
    Mistake(
        "projecting with the transposed weights (x @ W.T): the book's convention is Q = x @ W_q, "
        "with W_q of shape (E, D)",
        _sa_transposed,
    ),
    Mistake("using x itself as the values instead of V = x @ W_v", _sa_x_as_values),
    Mistake(
        "swapping W_q and W_k: the queries must be x @ W_q and the keys x @ W_k (the weights come out transposed)",
        _sa_swapped_qk,
    ),
    Mistake(
        "not scaling the scores: your weights are sqrt(d_k) times too sharp (divide by "
        "sqrt(d_k), the width of the queries and keys)",
        _project_then(_variant(scale="none")),
    ),
    Mistake(
        "scaling by sqrt(E), the width of x (d_model), instead of sqrt(d_k), the width of the queries and keys",
        _sa_sqrt_e,
    ),
    Mistake(
        "dividing the scores by d_k instead of sqrt(d_k): the weights are too flat", _project_then(_variant(scale="d"))
    ),
    Mistake(
        "scaling by sqrt(d_v), the width of the values, instead of sqrt(d_k)", _project_then(_variant(scale="sqrt_dv"))
    ),
    Mistake("not passing the mask on: masked tokens still get weight", _sa_no_mask),
    Mistake(
        "taking the softmax over the queries (dim -2) instead of over the keys (dim -1)",
        _project_then(_variant(sm_dim=-2)),
    ),
    Mistake(
        "returning the weights transposed: row t must hold token t's weights over the keys",
        _project_then(_variant(transpose_weights=True)),
    ),
    Mistake(_ZERO_FILL, _project_then(_variant(mask_mode="big_negative", fill=0.0))),
    Mistake(_big_negative_message("-1e9", "a token"), _project_then(_variant(mask_mode="big_negative", fill=-1e9))),
    Mistake(_big_negative_message("-1e4", "a token"), _project_then(_variant(mask_mode="big_negative", fill=-1e4))),
    Mistake(
        "a softmax that returns NaN when a whole row is masked: a token that may attend to "
        "nothing must get zero weights and a zero output",
        _project_then(_variant(sm="nan")),
    ),
]


def _sa_far_below(
    g: torch.Generator, M: float, N: int, T: int, E: int = 5, D: int = 4, Dv: int = 3
) -> tuple[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]:
    """Self-attention inputs whose scores are all about -M (as :func:`_far_below`): feature 0 of
    every token is 1 and feature 1 its rank; W_q turns feature 0 into a large query component,
    W_k turns features 0 and 1 into a large negative key component that falls with the rank."""
    root = math.sqrt(M)
    x = randn(g, N, T, E)
    x[..., 0] = 1.0
    x[..., 1] = _ranks(g, N, T)
    W_q, W_k = randn(g, E, D, scale=0.1), randn(g, E, D, scale=0.1)
    W_q[:, 0] = 0.0
    W_q[0, 0] = root
    W_k[:, 0] = 0.0
    W_k[0, 0] = -math.sqrt(D) * root
    W_k[1, 0] = -0.02 * math.sqrt(D) * root
    return (x, W_q, W_k, randn(g, E, Dv)), {"mask": _mixed_mask(g, N, T, T)}


def _self_attention_cases() -> list[Case]:
    g = rng(220)
    x0 = torch.tensor([[[1.0, 0.0, 2.0, -1.0], [0.0, 1.0, -1.0, 1.0], [2.0, 1.0, 0.0, 0.0]]])  # (1, T=3, E=4)
    base = torch.arange(16.0).view(4, 4)
    W_q0 = ((base * 3) % 7 - 3) / 4  # (E=4, D=4), not symmetric, distinct rows
    W_k0 = ((base * 5) % 9 - 4) / 5
    W_v0 = ((base * 2) % 5 - 2) / 3

    def inputs(N, T, E, D, Dv):
        return (randn(g, N, T, E), randn(g, E, D, scale=0.5), randn(g, E, D, scale=0.5), randn(g, E, Dv, scale=0.5))

    # future invariance under a causal mask: tokens from position t on differ
    T, t = 6, 4
    xc, Wq, Wk, Wv = inputs(2, T, 5, 4, 3)
    xc2 = xc.clone()
    xc2[:, t:] = randn(g, 2, T - t, 5)

    # permutation of the tokens
    xp, Wqp, Wkp, Wvp = inputs(2, 5, 6, 4, 3)
    perm = torch.randperm(5, generator=g)

    full = _mixed_mask(g, 2, 4, 4)
    full[0, 1] = False

    return [
        Case(
            "fixed small case",
            "3 tokens of width 4 and square 4 x 4 projections",
            [Call((x0, W_q0, W_k0, W_v0))],
            points=1,
        ),
        Case(
            "non-square projections",
            "random inputs where the token width, the query/key width and the value width all differ",
            [Call(inputs(2, 5, 6, 4, 3)), Call(inputs(1, 7, 3, 5, 2))],
            points=2,
        ),
        Case(
            "square projections",
            "random square projection matrices (token width = query width = value width)",
            [Call(inputs(2, 4, 5, 5, 5))],
            points=1,
        ),
        Case(
            "single token",
            "a sequence of one token: its weight is 1 and its output is its value",
            [Call(inputs(3, 1, 4, 3, 5))],
            points=1,
        ),
        Case(
            "causal mask (T, T)",
            "a causal (T, T) mask broadcast over the batch",
            [Call(inputs(2, 6, 4, 3, 5), {"mask": _causal(6)})],
            points=1,
        ),
        Case(
            "masks (N, 1, T) and (N, T, T)",
            "a padding mask (N, 1, T) and a full (N, T, T) mask",
            [
                Call(inputs(3, 5, 4, 6, 3), {"mask": _padding_mask(g, 3, 5)}),
                Call(inputs(2, 4, 6, 3, 5), {"mask": _mixed_mask(g, 2, 4, 4)}),
            ],
            points=1,
        ),
        Case(
            "fully masked row",
            "a token that may attend to nothing gets zero weights and a zero output, never NaN",
            [Call(inputs(2, 4, 5, 3, 6), {"mask": full})],
            points=1,
        ),
        Case(
            "causal: future invariance",
            "with a causal mask, changing later tokens leaves the outputs of earlier tokens unchanged",
            [Call((xc, Wq, Wk, Wv), {"mask": _causal(T)}), Call((xc2, Wq, Wk, Wv), {"mask": _causal(T)})],
            points=1,
            judge=_future_invariance(t, "tokens"),
        ),
        Case(
            "permutation equivariance",
            "permuting the tokens permutes the outputs, and the weights along both axes",
            [Call((xp, Wqp, Wkp, Wvp)), Call((xp[:, perm], Wqp, Wkp, Wvp))],
            points=1,
            judge=_self_attention_permutation(perm),
        ),
        Case(
            "masked tokens under very negative scores",
            "when every real score is far below -1e4 (and below -1e9), a masked token still gets weight exactly 0",
            [Call(*_sa_far_below(g, 2e5, 2, 5)), Call(*_sa_far_below(g, 2e10, 2, 4))],
            points=1,
        ),
    ]


# --- exercises ---------------------------------------------------------------------------------------


EXERCISES = [
    Exercise(
        name="softmax",
        reference=softmax,
        make_cases=_softmax_cases,
        mistakes=[
            Mistake(
                "exponentiating without subtracting the max first: large scores overflow to inf "
                "and the weights become NaN (unstable softmax)",
                _softmax_no_max,
            ),
            Mistake(
                "subtracting the max of the whole tensor instead of the max along `dim`: a slice "
                "far below the global max underflows to 0 / 0 = NaN",
                _softmax_global_max,
            ),
            Mistake(
                "a slice that is entirely -inf gives NaN (0 / 0): return zeros there, e.g. by "
                "subtracting 0 instead of an infinite max and dividing by 1 where the sum is 0",
                _softmax_all_masked_nan,
            ),
            Mistake("normalising over dim 0 instead of the `dim` argument", _softmax_dim0),
            Mistake("always normalising over the last dim, ignoring the `dim` argument", _softmax_last),
            Mistake("forgetting to divide by the sum: the weights do not sum to 1", _softmax_no_norm),
        ],
        forbidden=SOFTMAX_FAMILY,
    ),
    Exercise(
        name="scaled_dot_product_attention",
        reference=scaled_dot_product_attention,
        make_cases=_sdpa_cases,
        mistakes=_SDPA_MISTAKES,
        forbidden=WHOLE_ATTENTION + SOFTMAX_FAMILY,
        output_names=_ATTENTION_OUTPUTS,
    ),
    Exercise(
        name="self_attention",
        reference=self_attention,
        make_cases=_self_attention_cases,
        mistakes=_SELF_ATTENTION_MISTAKES,
        forbidden=WHOLE_ATTENTION + SOFTMAX_FAMILY,
        output_names=_ATTENTION_OUTPUTS,
    ),
]
