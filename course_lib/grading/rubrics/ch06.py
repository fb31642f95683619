"""Exercises of ``06_transformer``: padding and causal masks, the feed-forward network, label smoothing."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ... import causal_mask, label_smoothing_loss, padding_mask, position_wise_feed_forward
from ..compare import compare
from ..exercise_spec import Exercise
from ..model import Call, Case, Judge, Mistake
from ..seeding import current_seed
from ._common import fresh_int, randn, rng

__all__ = ["EXERCISES"]


# --- padding_mask ------------------------------------------------------------------------------


def _pad_inverted(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return tokens == pad_id


def _pad_vs_zero(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return tokens != 0


def _pad_inverted_vs_zero(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return tokens == 0


def _pad_n1s(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, :]


def _pad_n11s(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id)[:, None, None, :]


def _pad_inverted_n1s(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens == pad_id)[:, None, :]


def _pad_inverted_n11s(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens == pad_id)[:, None, None, :]


def _pad_additive_inf(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return torch.zeros(tokens.shape).masked_fill(tokens == pad_id, float("-inf"))


def _pad_extended_attention_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (1.0 - (tokens != pad_id).float())[:, None, None, :] * -10000.0


def _pad_transposed(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id).T


def _pad_float(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id).float()


def _pad_long(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    return (tokens != pad_id).long()


def _pad_from_lengths(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    lengths = (tokens != pad_id).sum(dim=-1)  # (N,)
    return torch.arange(tokens.shape[-1])[None, :] < lengths[:, None]


def _padded_batch(
    g: torch.Generator, lengths: Sequence[int], S: int, pad_id: int, vocab: int, left: bool = False
) -> torch.Tensor:
    """Random token ids (never ``pad_id``, often 0) padded with ``pad_id`` to length ``S``."""
    rows = []
    for n in lengths:
        real = torch.randint(0, vocab - 1, (n,), generator=g)
        real = real + (real >= pad_id).long()  # skip pad_id
        pad = torch.full((S - n,), pad_id, dtype=torch.long)
        rows.append(torch.cat([pad, real] if left else [real, pad]))
    return torch.stack(rows)


def _padding_mask_cases() -> list[Case]:
    g = rng(600)
    fixed = torch.tensor([[4, 7, 2, 0, 0], [9, 0, 0, 0, 0], [3, 5, 6, 8, 1]])
    if current_seed() is not None:  # under --seed: another 3 x 5 batch padded with 0, one row unpadded
        lengths = [int(n) for n in torch.randint(1, 5, (3,), generator=g)]
        lengths[int(torch.randint(3, (), generator=g))] = 5
        fixed = _padded_batch(g, lengths, 5, pad_id=0, vocab=10)
    return [
        Case("fixed small batch", "a batch of 3 sequences of length 5 padded with id 0", [Call((fixed, 0))], points=1),
        Case(
            "other pad ids",
            "pad ids other than 0, with 0 used as a real token id",
            [
                Call((torch.tensor([[0, 5, 3, 1, 1, 1], [2, 0, 0, 4, 1, 1]]), 1)),
                Call((_padded_batch(g, [7, 2, 5, 4], 7, pad_id=12, vocab=13), 12)),
            ],
            points=2,
        ),
        Case(
            "random batches",
            "random batches of varied sizes and pad ids, with and without padding",
            [
                Call((_padded_batch(g, [3, 9, 1, 6], 9, pad_id=2, vocab=20), 2)),
                Call((_padded_batch(g, [3], 3, pad_id=5, vocab=8), 5)),
                Call((_padded_batch(g, [1, 0, 1], 1, pad_id=3, vocab=6), 3)),
            ],
            points=2,
        ),
        Case(
            "left padding",
            "padding at the start of each sequence is marked too (not only at the end)",
            [Call((_padded_batch(g, [2, 6, 4], 6, pad_id=1, vocab=10, left=True), 1))],
            points=1,
        ),
    ]


# --- causal_mask -------------------------------------------------------------------------------


def _causal_no_diagonal(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=-1)


def _causal_one_above(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=1)


def _causal_inverted(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).triu(diagonal=1)


def _causal_upper(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()


def _causal_float(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, device=device).tril()


def _causal_long(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.long, device=device).tril()


def _causal_additive_inf(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.zeros(size, size, device=device).masked_fill(
        ~torch.ones(size, size, dtype=torch.bool, device=device).tril(), float("-inf")
    )


def _causal_additive_big(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.zeros(size, size, device=device).masked_fill(
        ~torch.ones(size, size, dtype=torch.bool, device=device).tril(), -1e9
    )


def _causal_1ll(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


def _causal_11ll(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(1, 1, size, size, dtype=torch.bool, device=device).tril()


def _causal_11ll_float(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, device=device).tril().view(1, 1, size, size)


def _causal_inverted_float(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, device=device).triu(diagonal=1)


def _causal_all_true(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device)


def _causal_ignores_device(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool).tril()


#: The named mistake of a mask made on the default device whatever ``device`` says.
IGNORES_DEVICE = (
    "your causal_mask ignores its `device` argument: the mask is made on the default device (the CPU) "
    "whatever `device` says; pass `device=device` to the torch call that creates the tensor"
)

#: The device the device case asks for: ``meta`` holds shapes and dtypes but no values, so it
#: exists on every machine (no GPU needed) and crosses the autograder's sandbox as it is.
TEST_DEVICE = "meta"


def _asked_device(call: Call) -> Any:
    """The ``device`` a call of causal_mask passes (by keyword or as its second argument)."""
    return call.kwargs.get("device", call.args[1] if len(call.args) > 1 else None)


def _on_device(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """The mask is made on the device the call names (and is the right shape and dtype there)."""
    for call, mask, exp in zip(calls, actual, expected, strict=False):
        if isinstance(mask, torch.Tensor) and mask.device.type != exp.device.type:
            return (
                f"the mask is on the {mask.device.type} device, but this call passed device={_asked_device(call)!r}: "
                "create the mask on `device`"
            )
        problem = compare(mask, exp, what="the mask")
        if problem is not None:
            return problem
    return None


def _future_invariance(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """Attention with the student's mask: changing later tokens leaves earlier outputs unchanged."""
    for call, mask, exp in zip(calls, actual, expected, strict=False):
        L = call.args[0]
        if not isinstance(mask, torch.Tensor) or mask.shape != exp.shape:
            return compare(mask, exp, what="the mask")
        if mask.dtype != torch.bool:
            return f"the mask has dtype {mask.dtype}; it must be bool (True = may attend) to be used with masked_fill"
        if not bool(mask.any(dim=-1).all()):
            return "some query may attend to no key at all: its attention weights would be NaN"
        g = rng(610 + L)
        q, k, v = randn(g, L, 4), randn(g, L, 4), randn(g, L, 3)
        k2, v2 = k.clone(), v.clone()
        k2[-1], v2[-1] = randn(g, 4) * 3, randn(g, 3) * 3  # change the last (future) token only
        outs = []
        for kk, vv in ((k, v), (k2, v2)):
            scores = (q @ kk.T).masked_fill(~mask, float("-inf"))  # (L, L)
            outs.append(torch.softmax(scores, dim=-1) @ vv)  # (L, 3)
        leaks = [l for l in range(L - 1) if not torch.allclose(outs[0][l], outs[1][l], atol=1e-6)]
        if leaks:
            return (
                f"used as an attention mask, it lets query position {leaks[0]} see a later key: "
                "changing the last token changes the outputs at earlier positions"
            )
        if L > 1 and torch.allclose(outs[0][-1], outs[1][-1], atol=1e-6):
            return "used as an attention mask, it stops the last query from seeing its own position"
    return None


def _causal_mask_cases() -> list[Case]:
    # Sizes are the self-check's, or drawn anew under --seed off every size the self-check uses
    # (1 to 7 and 64: a mask of a public size could be looked up); size 1 stays, as it must.
    g = rng(640)
    tiny, small, odd = fresh_int(g, 2, range(8, 11)), fresh_int(g, 5, range(11, 15)), fresh_int(g, 7, range(15, 20))
    little, large = fresh_int(g, 3, range(8, 21)), fresh_int(g, 64, range(48, 81))
    future = [fresh_int(g, 4, range(8, 13)), fresh_int(g, 6, range(13, 18))]
    on_device = [fresh_int(g, 3, range(8, 13)), fresh_int(g, 5, range(13, 18))]
    smallest = "the smallest masks" if tiny == 2 else f"sizes 1 and {tiny}"
    return [
        Case(f"sizes 1 and {tiny}", f"{smallest} (a token always sees itself)", [Call((1,)), Call((tiny,))], points=1),
        Case(
            f"size {small}",
            f"a {small} x {small} mask: True on and below the diagonal, bool",
            [Call((small,))],
            points=2,
        ),
        Case(f"size {odd}", f"a {odd} x {odd} mask", [Call((odd,))], points=2),
        Case("larger sizes", f"masks of sizes {little} and {large}", [Call((little,)), Call((large,))], points=1),
        Case(
            "no peeking at the future",
            "used in attention, later tokens do not change earlier outputs",
            [Call((n,)) for n in future],
            points=1,
            judge=_future_invariance,
        ),
        Case(
            "on the given device",
            f"the mask is made on the device passed as `device` (here {TEST_DEVICE!r}, which holds no values)",
            [Call((on_device[0],), {"device": TEST_DEVICE}), Call((on_device[1], TEST_DEVICE))],
            points=1,
            judge=_on_device,
        ),
    ]


# --- position_wise_feed_forward ----------------------------------------------------------------


def _ffn_no_relu(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return (x @ W_1 + b_1) @ W_2 + b_2


def _ffn_relu_after_second(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu((x @ W_1 + b_1) @ W_2 + b_2)


def _ffn_relu_both(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(torch.relu(x @ W_1 + b_1) @ W_2 + b_2)


def _ffn_relu_before_bias(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return (torch.relu(x @ W_1) + b_1) @ W_2 + b_2


def _ffn_gelu(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.nn.functional.gelu(x @ W_1 + b_1) @ W_2 + b_2


def _ffn_no_biases(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_1) @ W_2


def _ffn_no_b1(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_1) @ W_2 + b_2


def _ffn_no_b2(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_1 + b_1) @ W_2


def _ffn_biases_swapped(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_1 + b_2) @ W_2 + b_1


def _ffn_transposed(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_1.T + b_1) @ W_2.T + b_2


def _ffn_weights_swapped(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return torch.relu(x @ W_2 + b_1) @ W_1 + b_2


def _ffn_residual(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return x + torch.relu(x @ W_1 + b_1) @ W_2 + b_2


def _ffn_residual_norm(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    y = x + torch.relu(x @ W_1 + b_1) @ W_2 + b_2
    centred = y - y.mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + 1e-5)


def _position_wise(perm: torch.Tensor, pos: int) -> Judge:
    """A judge: permuting the positions permutes the outputs; one position alone gives the same."""

    def judge_(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        for a, e in zip(actual, expected, strict=False):
            if not isinstance(a, torch.Tensor) or a.shape != e.shape:
                return compare(a, e)
            if not a.is_floating_point() or not bool(torch.isfinite(a).all()):
                return "the output should be a finite floating-point tensor"
        y, y_perm, y_one = actual
        if not torch.allclose(y_perm, y[:, perm], atol=1e-5, rtol=1e-4):
            return "shuffling the positions of x does not just shuffle the outputs: positions influence each other"
        if not torch.allclose(y_one, y[:, pos : pos + 1], atol=1e-5, rtol=1e-4):
            return "one position passed alone gives a different output than inside the sequence"
        return None

    return judge_


def _ffn_args(g: torch.Generator, x_shape: Sequence[int], F: int, E_out: int | None = None) -> tuple:
    E = x_shape[-1]
    E_out = E if E_out is None else E_out
    return (
        randn(g, *x_shape),
        randn(g, E, F, scale=E**-0.5),
        randn(g, F, scale=0.5),
        randn(g, F, E_out, scale=F**-0.5),
        randn(g, E_out, scale=0.5),
    )


def _ffn_cases() -> list[Case]:
    g = rng(620)
    fixed = (
        torch.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, -1.0]]),  # x: (2, 3)
        torch.tensor([[1.0, 0.0, -1.0, 2.0], [0.5, -1.0, 0.0, 1.0], [-1.0, 2.0, 1.0, 0.0]]),  # W_1: (3, 4)
        torch.tensor([0.1, -0.2, 0.3, -0.4]),  # b_1: (4,)
        torch.tensor([[1.0, -1.0, 0.0], [0.0, 2.0, 1.0], [-1.0, 0.5, 1.0], [0.5, 0.0, -2.0]]),  # W_2: (4, 3)
        torch.tensor([0.5, 0.0, -0.5]),
    )  # b_2: (3,)
    x, W_1, b_1, W_2, b_2 = _ffn_args(g, (2, 5, 4), F=6)
    perm = torch.tensor([3, 0, 4, 1, 2])
    return [
        Case("fixed small case", "2 positions, E = 3, F = 4", [Call(fixed)], points=1),
        Case(
            "batch of sequences",
            "x of shape (N, S, E) with a hidden width F != E",
            [Call(_ffn_args(g, (2, 5, 4), F=12)), Call(_ffn_args(g, (3, 2, 8), F=32))],
            points=2,
        ),
        Case(
            "extra batch dims",
            "x with two leading batch dims and a single position x of shape (E,)",
            [Call(_ffn_args(g, (2, 3, 4, 6), F=10)), Call(_ffn_args(g, (5,), F=7))],
            points=2,
        ),
        Case(
            "output width",
            "W_2 maps to a width different from the input's (E_out != E)",
            [Call(_ffn_args(g, (3, 4, 5), F=8, E_out=2))],
            points=1,
        ),
        Case(
            "square weights",
            "E = F = E_out, where a transposed or swapped weight still runs",
            [Call(_ffn_args(g, (2, 4, 6), F=6))],
            points=2,
        ),
        Case(
            "position-wise",
            "shuffling positions shuffles the outputs; one position alone gives the same",
            [
                Call((x, W_1, b_1, W_2, b_2)),
                Call((x[:, perm], W_1, b_1, W_2, b_2)),
                Call((x[:, 2:3], W_1, b_1, W_2, b_2)),
            ],
            points=1,
            judge=_position_wise(perm, 2),
        ),
    ]


# --- label_smoothing_loss ----------------------------------------------------------------------


def _ls_parts(logits, target, ignore_index, log_probs=None):
    if log_probs is None:
        log_probs = logits - logits.logsumexp(dim=-1, keepdim=True)  # (N, C)
    valid = target != ignore_index  # (N,)
    nll = -log_probs.gather(-1, target.masked_fill(~valid, 0)[:, None])[:, 0]  # (N,)
    return log_probs, valid, nll


def _ls_over_others(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    C = logits.shape[-1]
    others = -log_probs.sum(dim=-1) - nll  # (N,)
    per_row = (1 - smoothing) * nll + smoothing / (C - 1) * others
    return per_row[valid].sum() / valid.sum()


def _ls_true_loses_share(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    C = logits.shape[-1]
    others = -log_probs.sum(dim=-1) - nll  # (N,)
    per_row = (1 - smoothing) * nll + smoothing / C * others
    return per_row[valid].sum() / valid.sum()


def _ls_sum_over_classes(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.sum(dim=-1)
    return per_row[valid].sum() / valid.sum()


def _ls_no_one_minus(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    per_row = nll + smoothing * -log_probs.mean(dim=-1)
    return per_row[valid].sum() / valid.sum()


def _ls_no_smoothing(logits, target, smoothing, ignore_index=-100):
    return label_smoothing_loss(logits, target, 0.0, ignore_index)


def _ls_not_ignored(logits, target, smoothing, ignore_index=-100):
    return label_smoothing_loss(logits, target, smoothing, ignore_index=-12345)


def _ls_mean_over_all_rows(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return (per_row * valid).sum() / target.shape[0]


def _ls_sum(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return per_row[valid].sum()


def _ls_log_of_exp(logits, target, smoothing, ignore_index=-100):
    e = torch.exp(logits)
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index, torch.log(e / e.sum(dim=-1, keepdim=True)))
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return per_row[valid].sum() / valid.sum()


def _ls_log_of_softmax(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index, torch.log(torch.softmax(logits, dim=-1)))
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return per_row[valid].sum() / valid.sum()


def _ls_softmax_dim0(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index, torch.log_softmax(logits, dim=0))
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    return per_row[valid].sum() / valid.sum()


def _ls_annotated_target(logits, target, smoothing, ignore_index):
    """The Annotated Transformer's true_dist: eps / (C - 2) on every class but the true one (1 - eps)
    and the padding class ignore_index (0), and rows whose target is the padding all 0. An
    ignore_index that is no class id (-100) raises IndexError, as there."""
    N, C = logits.shape
    true_dist = torch.full((N, C), smoothing / (C - 2), dtype=logits.dtype)
    true_dist.scatter_(1, target.clamp(min=0)[:, None], 1 - smoothing)
    true_dist[:, ignore_index] = 0
    true_dist[target == ignore_index] = 0
    return true_dist


def _ls_annotated_kl(logits, target, smoothing, ignore_index=-100):
    t = _ls_annotated_target(logits, target, smoothing, ignore_index)
    log_probs = logits - logits.logsumexp(dim=-1, keepdim=True)
    kl = torch.where(t > 0, t * (torch.log(t.clamp(min=1e-30)) - log_probs), torch.zeros_like(t))
    return kl.sum() / (target != ignore_index).sum()


def _ls_annotated_cross_entropy(logits, target, smoothing, ignore_index=-100):
    t = _ls_annotated_target(logits, target, smoothing, ignore_index)
    log_probs = logits - logits.logsumexp(dim=-1, keepdim=True)
    return -(t * log_probs).sum() / (target != ignore_index).sum()


def _ls_kl_divergence(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    C = logits.shape[-1]
    per_row = (1 - smoothing) * nll + smoothing * -log_probs.mean(dim=-1)
    q_true, q_other = 1 - smoothing + smoothing / C, smoothing / C
    entropy = -(q_true * math.log(q_true) if q_true > 0 else 0.0) - (
        (C - 1) * q_other * math.log(q_other) if q_other > 0 else 0.0
    )
    return (per_row[valid] - entropy).sum() / valid.sum()


def _ls_over_others_all_rows(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    C = logits.shape[-1]
    if ((target < 0) | (target >= C)).any():  # scatter_ of the target, ignored rows included
        raise IndexError("index out of bounds")
    others = -log_probs.sum(dim=-1) - nll
    per_row = (1 - smoothing) * nll + smoothing / (C - 1) * others
    return (per_row * valid).sum() / target.shape[0]


def _ls_smoothing_over_all_rows(logits, target, smoothing, ignore_index=-100):
    log_probs, valid, nll = _ls_parts(logits, target, ignore_index)
    return (1 - smoothing) * nll[valid].sum() / valid.sum() + smoothing * -log_probs.mean(dim=-1).mean()


def _nan_or_zero(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
    """Every row ignored: a 0-d tensor that is NaN (as F.cross_entropy) or 0; no error."""
    for a in actual:
        if not isinstance(a, torch.Tensor):
            return f"the output is {type(a).__name__}, expected a 0-dim torch.Tensor"
        if a.dim() != 0:
            return f"the output has shape {tuple(a.shape)}, expected a 0-dim tensor (a scalar)"
        if not a.is_floating_point():
            return f"the output has dtype {a.dtype}, expected a floating-point tensor"
        v = float(a)
        if not (math.isnan(v) or v == 0.0):
            return f"the loss is {v:.6g} although every target is ignored; expected NaN (0 / 0) or 0"
    return None


def _targets(
    g: torch.Generator, N: int, C: int, ignored: Sequence[int] = (), ignore_index: int = -100, avoid: int | None = None
) -> torch.Tensor:
    t = torch.randint(0, C, (N,), generator=g)
    if avoid is not None:
        t = torch.where(t == avoid, (avoid + 1) % C, t)
    t[list(ignored)] = ignore_index
    return t


def _label_smoothing_cases() -> list[Case]:
    g = rng(630)
    big = torch.tensor(
        [[1e4, 1e4 - 1.0, -1e4, 0.0, 5e3], [-1e4, -1e4 + 2.0, -1e4 + 1.0, -1e4, -1e4], [2e4, 0.0, -2e4, 1e4, 3.0]]
    )
    return [
        Case(
            "fixed small case",
            "one row with 4 classes and smoothing 0.1",
            [Call((torch.tensor([[1.0, 0.5, 2.5, -1.0]]), torch.tensor([2]), 0.1))],
            points=1,
        ),
        Case(
            "random batches",
            "random logits of varied sizes (C = 2 included) and smoothing values",
            [
                Call((randn(g, 6, 5, scale=2.0), _targets(g, 6, 5), 0.1)),
                Call((randn(g, 9, 13, scale=3.0), _targets(g, 9, 13), 0.25)),
                Call((randn(g, 4, 2), _targets(g, 4, 2), 0.3)),
            ],
            points=2,
        ),
        Case(
            "smoothing 0 and 1",
            "smoothing 0 (plain cross-entropy) and 1 (uniform target)",
            [
                Call((randn(g, 5, 7, scale=2.0), _targets(g, 5, 7), 0.0)),
                Call((randn(g, 5, 7, scale=2.0), _targets(g, 5, 7), 1.0)),
            ],
            points=1,
        ),
        Case(
            "ignored rows",
            "rows whose target is the default ignore_index -100 are left out of the mean",
            [
                Call((randn(g, 8, 6, scale=2.0), _targets(g, 8, 6, ignored=[1, 5, 6]), 0.1)),
                Call((randn(g, 3, 4), _targets(g, 3, 4, ignored=[0]), 0.2)),
            ],
            points=2,
        ),
        Case(
            "ignore_index = pad id",
            "an ignore_index that is a real class id (<pad> = 0) is left out",
            [
                Call(
                    (randn(g, 7, 5, scale=2.0), _targets(g, 7, 5, ignored=[2, 3, 6], ignore_index=0, avoid=0), 0.1),
                    {"ignore_index": 0},
                ),
                Call((randn(g, 6, 9, scale=2.0), _targets(g, 6, 9, ignored=[0, 4], ignore_index=8, avoid=8), 0.2, 8)),
            ],
            points=2,
        ),
        Case(
            "large logits",
            "logits of magnitude 1e4 give a finite, correct loss (stable log-softmax)",
            [Call((big, torch.tensor([0, 1, 3]), 0.1))],
            points=2,
            atol=1e-3,
        ),
        Case(
            "every row ignored",
            "a batch whose targets are all ignored gives NaN (like F.cross_entropy) or 0, not an error",
            [Call((randn(g, 3, 4), torch.full((3,), -100), 0.1))],
            points=1,
            judge=_nan_or_zero,
        ),
        Case(
            "pad class in the target",
            "with the pad id 0 as ignore_index and no row ignored, class 0 still gets its share eps / C",
            [Call((randn(g, 4, 6, scale=2.0), _targets(g, 4, 6, avoid=0), 0.2), {"ignore_index": 0})],
            points=1,
        ),
    ]


# --- exercises ---------------------------------------------------------------------------------

EXERCISES = [
    Exercise(
        name="padding_mask",
        reference=padding_mask,
        make_cases=_padding_mask_cases,
        mistakes=[
            Mistake(
                "the mask is inverted: it is True at the padding. Here True = may attend, so the real "
                "tokens are True (nn.MultiheadAttention's key_padding_mask uses the opposite convention)",
                _pad_inverted,
            ),
            Mistake(
                "comparing the tokens with 0 instead of pad_id: the mask is only right when the padding "
                "id happens to be 0",
                _pad_vs_zero,
            ),
            Mistake(
                "the mask is inverted (True at the padding) and compares with 0 instead of pad_id",
                _pad_inverted_vs_zero,
            ),
            Mistake(
                "returning shape (N, 1, S): the function returns the (N, S) mask; add the broadcast dims "
                "where the mask is used (mask[:, None, None, :])",
                _pad_n1s,
            ),
            Mistake(
                "returning shape (N, 1, 1, S): the function returns the (N, S) mask; add the broadcast "
                "dims where the mask is used (mask[:, None, None, :])",
                _pad_n11s,
            ),
            Mistake(
                "the mask is inverted (True at the padding, as nn.MultiheadAttention's key_padding_mask) and "
                "has shape (N, 1, S): return the (N, S) mask, True at the real tokens (tokens != pad_id)",
                _pad_inverted_n1s,
            ),
            Mistake(
                "the mask is inverted (True at the padding, as nn.MultiheadAttention's key_padding_mask) and "
                "has shape (N, 1, 1, S): return the (N, S) mask, True at the real tokens (tokens != pad_id)",
                _pad_inverted_n11s,
            ),
            Mistake(
                "returning an additive float mask (0 at the real tokens, -inf at the padding) instead of the "
                "bool mask: return tokens != pad_id; the -inf comes later, from masked_fill on the scores",
                _pad_additive_inf,
            ),
            Mistake(
                "returning BERT's extended attention mask, (1 - mask)[:, None, None, :] * -10000.0, a float "
                "(N, 1, 1, S) to add to the scores: return the (N, S) bool mask, True at the real tokens",
                _pad_extended_attention_mask,
            ),
            Mistake("the mask is transposed: shape (S, N) instead of (N, S)", _pad_transposed),
            Mistake(
                "returning a float tensor of 0s and 1s instead of a bool mask (masked_fill and ~ need bool)", _pad_float
            ),
            Mistake(
                "returning an integer tensor of 0s and 1s instead of a bool mask (masked_fill and ~ need bool)",
                _pad_long,
            ),
            Mistake(
                "computing lengths and assuming all padding sits at the end: padding at the start (left "
                "padding) is marked wrongly; compare every token with pad_id instead",
                _pad_from_lengths,
            ),
        ],
    ),
    Exercise(
        name="causal_mask",
        reference=causal_mask,
        make_cases=_causal_mask_cases,
        mistakes=[
            Mistake(
                "the diagonal is left out (tril with diagonal=-1): a token must be allowed to attend to "
                "itself, and the first query would see no key at all",
                _causal_no_diagonal,
            ),
            Mistake(
                "the diagonal just above the main one is True too (tril with diagonal=1): query l may also "
                "attend to key l + 1, one step into the future. Use tril() with the default diagonal=0: key s "
                "is allowed when s <= l",
                _causal_one_above,
            ),
            Mistake(
                "the mask is inverted: True marks the future keys to block. That is the convention of "
                "nn.MultiheadAttention / nn.Transformer (True = not allowed); here True = may attend",
                _causal_inverted,
            ),
            Mistake(
                "the upper triangle is True (the mask is transposed): query l may attend to keys s >= l, "
                "i.e. to the future, and not to the past",
                _causal_upper,
            ),
            Mistake("returning a float tensor of 0s and 1s instead of a bool mask (True = may attend)", _causal_float),
            Mistake(
                "returning an integer tensor of 0s and 1s instead of a bool mask (True = may attend)", _causal_long
            ),
            Mistake(
                "returning the additive mask (0 where allowed, -inf above the diagonal) instead of the bool "
                "mask; the additive form comes from it with masked_fill(~mask, float('-inf'))",
                _causal_additive_inf,
            ),
            Mistake(
                "returning an additive mask (0 where allowed, a large negative number above the diagonal) "
                "instead of the bool mask (True = may attend)",
                _causal_additive_big,
            ),
            Mistake(
                "returning shape (1, L, L), as the Annotated Transformer's subsequent_mask: the values are "
                "right, but the function returns the (L, L) mask; the batch dim broadcasts where it is used",
                _causal_1ll,
            ),
            Mistake(
                "returning shape (1, 1, L, L), a mask already broadcast over batch and heads: the function "
                "returns the (L, L) bool mask; add the dims where it is used",
                _causal_11ll,
            ),
            Mistake(
                "returning a (1, 1, L, L) float tensor of 1s and 0s (torch.tril(torch.ones(L, L)).view(1, 1, L, L), "
                "as nanoGPT's buffer) instead of the (L, L) bool mask (True = may attend)",
                _causal_11ll_float,
            ),
            Mistake(
                "returning torch.triu(torch.ones(L, L), diagonal=1), a float tensor with 1s above the diagonal: "
                "that marks the future keys to block, as a float; here the mask is bool and True = may attend, "
                "so return its complement, True on and below the diagonal",
                _causal_inverted_float,
            ),
            Mistake("every entry is True: nothing is masked, so every query sees the future", _causal_all_true),
            Mistake(IGNORES_DEVICE, _causal_ignores_device),
        ],
        forbidden=(
            "torch.nn.Transformer.generate_square_subsequent_mask",
            "torch.nn.modules.transformer._generate_square_subsequent_mask",
        ),
    ),
    Exercise(
        name="position_wise_feed_forward",
        reference=position_wise_feed_forward,
        make_cases=_ffn_cases,
        mistakes=[
            Mistake("the ReLU is missing: the two linear maps collapse into one linear map", _ffn_no_relu),
            Mistake(
                "the ReLU is applied after the second linear map instead of between the two: the output "
                "can never be negative",
                _ffn_relu_after_second,
            ),
            Mistake(
                "a ReLU after both linear maps: the ReLU belongs only between them (the output can be negative)",
                _ffn_relu_both,
            ),
            Mistake("the ReLU is applied before adding b_1: it must act on x @ W_1 + b_1", _ffn_relu_before_bias),
            Mistake("GELU instead of ReLU: this exercise (like the original transformer) uses ReLU", _ffn_gelu),
            Mistake("both biases are missing: add b_1 after x @ W_1 and b_2 after the second product", _ffn_no_biases),
            Mistake("the first bias b_1 is missing: the hidden layer is relu(x @ W_1 + b_1)", _ffn_no_b1),
            Mistake("the second bias b_2 is missing: the output is hidden @ W_2 + b_2", _ffn_no_b2),
            Mistake(
                "the biases are swapped: b_1 belongs to the first layer (width F), b_2 to the second",
                _ffn_biases_swapped,
            ),
            Mistake(
                "multiplying by the transposed weights (x @ W.T, as F.linear / nn.Linear do with their "
                "(out, in) weights): here W_1 has shape (E, F) and the layer is x @ W_1",
                _ffn_transposed,
            ),
            Mistake(
                "the weights are swapped: x is multiplied by W_1 first, then the hidden layer by W_2",
                _ffn_weights_swapped,
            ),
            Mistake(
                "returning layer_norm(x + FFN(x)): the residual connection and the layer norm belong to the "
                "transformer layer around the feed-forward block (Add & Norm), not inside it; return "
                "relu(x @ W_1 + b_1) @ W_2 + b_2 itself",
                _ffn_residual_norm,
            ),
            Mistake(
                "adding x to the output (a residual connection): the residual belongs to the transformer layer "
                "around the feed-forward block, not inside it; return relu(x @ W_1 + b_1) @ W_2 + b_2 itself",
                _ffn_residual,
            ),
        ],
    ),
    Exercise(
        name="label_smoothing_loss",
        reference=label_smoothing_loss,
        make_cases=_label_smoothing_cases,
        mistakes=[
            Mistake(
                "the smoothing mass is spread over the C - 1 wrong classes only (eps / (C - 1) each); here, as "
                "in F.cross_entropy, every one of the C classes gets eps / C, the true class included",
                _ls_over_others,
            ),
            Mistake(
                "the true class gets only 1 - eps, without its own share eps / C: the smoothed target then "
                "sums to 1 - eps / C, not 1",
                _ls_true_loses_share,
            ),
            Mistake(
                "eps multiplies the sum of -log p_c over all classes instead of their mean: each class "
                "gets eps / C, not eps",
                _ls_sum_over_classes,
            ),
            Mistake(
                "the true-class term is not multiplied by (1 - eps): the smoothed target puts 1 - eps + "
                "eps / C on the true class",
                _ls_no_one_minus,
            ),
            Mistake(
                "no smoothing at all: this is plain cross-entropy, the smoothing argument is ignored", _ls_no_smoothing
            ),
            Mistake(
                "the rows whose target is ignore_index are not left out: they must count neither in the "
                "sum nor in the number of rows the mean divides by",
                _ls_not_ignored,
            ),
            Mistake(
                "two differences, as in the LabelSmoothingLoss of PyTorch issue 7455: the smoothing mass is "
                "spread over the C - 1 wrong classes only (eps / (C - 1) each), and the mean is over all N rows, "
                "the ignored ones (zeroed) included. Here every one of the C classes gets eps / C, and the "
                "mean is over the rows not ignored",
                _ls_over_others_all_rows,
            ),
            Mistake(
                "the smoothing term is averaged over all rows, the ignored ones included (only the "
                "cross-entropy term skips them, e.g. F.nll_loss(..., ignore_index=...) plus eps * "
                "smooth_loss.mean()): leave the rows whose target is ignore_index out of both terms",
                _ls_smoothing_over_all_rows,
            ),
            Mistake(
                "dividing by all N rows instead of the number of rows not ignored: the ignored rows still "
                "count in the mean",
                _ls_mean_over_all_rows,
            ),
            Mistake("returning the sum over the rows instead of the mean", _ls_sum),
            Mistake(
                "log(exp(x) / sum exp(x)) is unstable: exp overflows to inf for large logits and the loss "
                "becomes NaN; subtract the max first, or use log_softmax / logsumexp",
                _ls_log_of_exp,
            ),
            Mistake(
                "taking the log of the softmax: tiny probabilities underflow to 0 and log(0) = -inf; "
                "compute the log-probabilities directly as logits - logsumexp(logits)",
                _ls_log_of_softmax,
            ),
            Mistake(
                "normalising over the batch dim (dim 0) instead of over the classes (the last dim)", _ls_softmax_dim0
            ),
            Mistake(
                "the Annotated Transformer's LabelSmoothing with KLDivLoss: it spreads eps / (C - 2) over the "
                "classes other than the true one and the padding class (which takes no mass), and KL divergence "
                "is the cross-entropy minus the target's entropy. Here every one of the C classes gets eps / C "
                "(the true class 1 - eps + eps / C, the padding class too), and the loss is the cross-entropy",
                _ls_annotated_kl,
            ),
            Mistake(
                "the smoothing mass is spread as eps / (C - 2) over the classes other than the true one and the "
                "padding class (the Annotated Transformer's target): here every one of the C classes gets "
                "eps / C, the padding class included, and the true class 1 - eps + eps / C",
                _ls_annotated_cross_entropy,
            ),
            Mistake(
                "computing the KL divergence to the smoothed target (as nn.KLDivLoss) instead of the "
                "cross-entropy: the two differ by the target's entropy, a constant that is not 0 when eps > 0; "
                "return -sum_c q_c log p_c",
                _ls_kl_divergence,
            ),
        ],
        forbidden=(
            "torch.nn.functional.cross_entropy",
            "torch.nn.CrossEntropyLoss",
            "torch.nn.functional.nll_loss",
            "torch.nn.NLLLoss",
        ),
    ),
]
