"""Checks of the 06_transformer exercises: padding_mask, causal_mask, position_wise_feed_forward,
label_smoothing_loss.

Correct implementations (the reference and independent ones written here) score full marks; a
stub scores 0 as "not implemented"; every classic mistake loses points and is named in the
report; forbidden calls are reported; odd outputs give failed tests with feedback, never a crash.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from conftest import assert_diagnosed, assert_full_marks

import course_lib
from course_lib.assignments import ASSIGNMENTS
from course_lib.grading import check, exercise, exercises_of, judge, run_calls

SLUG = "06_transformer"
NAMES = ASSIGNMENTS[SLUG]


# --- the exercise set as a whole --------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_points_per_function_are_integers_in_a_sensible_range(name):
    ex = next(e for e in exercises_of(SLUG) if e.name == name)
    assert all(float(c.points).is_integer() and c.points >= 1 for c in ex.cases())
    assert 6 <= ex.max_score <= 12


# --- padding_mask -------------------------------------------------------------------------------------


def padding_mask_ne(tokens, pad_id):
    return torch.ne(tokens, pad_id)


def padding_mask_numpy(tokens, pad_id):
    return torch.from_numpy(np.asarray(tokens.numpy()) != pad_id)


def padding_mask_loops(tokens, pad_id):
    N, S = tokens.shape
    mask = torch.zeros(N, S, dtype=torch.bool)
    for n in range(N):
        for s in range(S):
            mask[n, s] = bool(tokens[n, s] != pad_id)
    return mask


@pytest.mark.parametrize("fn", [padding_mask_ne, padding_mask_numpy, padding_mask_loops])
def test_padding_mask_alternative_correct_implementations_score_full_marks(fn):
    assert_full_marks(check(fn, name="padding_mask"))


@pytest.mark.parametrize("seed", [3, 11, 2024])
@pytest.mark.parametrize("fn", [padding_mask_ne, padding_mask_numpy, padding_mask_loops])
def test_padding_mask_alternative_correct_implementations_score_full_marks_on_fresh_batches(fn, seed):
    ex = exercise("padding_mask")
    assert_full_marks(judge(ex, run_calls(fn, ex, seed=seed), seed=seed))


def padding_mask_inverted(tokens, pad_id):
    return tokens == pad_id


def padding_mask_compares_with_zero(tokens, pad_id):
    return tokens != 0


def padding_mask_with_query_dim(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)


def padding_mask_with_head_and_query_dims(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]


def padding_mask_float(tokens, pad_id):
    return (tokens != pad_id).to(torch.float32)


def padding_mask_int(tokens, pad_id):
    return (tokens != pad_id).int()


def padding_mask_from_lengths(tokens, pad_id):
    lengths = (tokens != pad_id).sum(1)
    return torch.arange(tokens.size(1)).expand_as(tokens) < lengths.unsqueeze(1)


def padding_mask_as_in_the_annotated_transformer(tokens, pad_id):
    # Batch.__init__: self.src_mask = (src != pad).unsqueeze(-2)
    return (tokens != pad_id).unsqueeze(-2)


def padding_mask_as_a_key_padding_mask(tokens, pad_id):
    # nn.MultiheadAttention's convention (True = ignore), with the query dim added
    return tokens.eq(pad_id).unsqueeze(1)


def padding_mask_as_a_key_padding_mask_for_heads(tokens, pad_id):
    return (tokens == pad_id).unsqueeze(1).unsqueeze(2)


def padding_mask_additive(tokens, pad_id):
    return torch.zeros_like(tokens, dtype=torch.float).masked_fill(tokens == pad_id, float("-inf"))


def padding_mask_bert_extended(tokens, pad_id):
    attention_mask = (tokens != pad_id).long()
    extended = attention_mask[:, None, None, :].to(torch.float32)
    return (1.0 - extended) * -10000.0


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (padding_mask_as_in_the_annotated_transformer, "(N, 1, S)"),
        (padding_mask_as_a_key_padding_mask, "inverted (True at the padding, as nn.MultiheadAttention's"),
        (padding_mask_as_a_key_padding_mask_for_heads, "has shape (N, 1, 1, S)"),
        (padding_mask_additive, "additive float mask"),
        (padding_mask_bert_extended, "extended attention mask"),
        (padding_mask_inverted, "inverted"),
        (padding_mask_compares_with_zero, "instead of pad_id"),
        (padding_mask_with_query_dim, "(N, 1, S)"),
        (padding_mask_with_head_and_query_dims, "(N, 1, 1, S)"),
        (padding_mask_float, "float tensor"),
        (padding_mask_int, "integer tensor"),
        (padding_mask_from_lengths, "padding sits at the end"),
    ],
)
def test_padding_mask_classic_mistakes_are_diagnosed(fn, phrase):
    assert_diagnosed(check(fn, name="padding_mask"), phrase)


def test_a_key_padding_mask_with_a_query_dim_is_named_with_both_of_its_differences():
    report = check(padding_mask_as_a_key_padding_mask, name="padding_mask")
    assert report.score == 0
    assert_diagnosed(
        report, "is inverted (True at the padding, as nn.MultiheadAttention's key_padding_mask) and has shape (N, 1, S)"
    )


def test_padding_mask_comparing_with_zero_still_passes_when_pad_is_zero():
    report = check(padding_mask_compares_with_zero, name="padding_mask")
    by_name = {r.name: r for r in report.results}
    assert by_name["fixed small batch"].passed
    assert not by_name["other pad ids"].passed


def padding_mask_calls_reference(tokens, pad_id):
    return course_lib.padding_mask(tokens, pad_id)


def test_padding_mask_using_course_lib_is_forbidden():
    report = check(padding_mask_calls_reference, name="padding_mask")
    assert report.status == "forbidden" and report.score == 0
    assert "reference implementation" in report.notes[0]


# --- causal_mask --------------------------------------------------------------------------------------


def causal_mask_arange(size, device=None):
    pos = torch.arange(size, device=device)
    return pos[:, None] >= pos[None, :]  # (L, L)


def causal_mask_numpy(size, device=None):
    return torch.from_numpy(np.tril(np.ones((size, size), dtype=bool))).to(device)


def causal_mask_loops(size, device=None):
    return torch.tensor([[s <= l for s in range(size)] for l in range(size)], dtype=torch.bool, device=device)


def causal_mask_not_triu(size, device=None):
    return ~torch.triu(torch.ones(size, size, dtype=torch.bool, device=device), diagonal=1)


@pytest.mark.parametrize("fn", [causal_mask_arange, causal_mask_numpy, causal_mask_loops, causal_mask_not_triu])
def test_causal_mask_alternative_correct_implementations_score_full_marks(fn):
    assert_full_marks(check(fn, name="causal_mask"))


@pytest.mark.parametrize("seed", [3, 11, 2024])
@pytest.mark.parametrize("fn", [causal_mask_arange, causal_mask_numpy, causal_mask_loops, causal_mask_not_triu])
def test_causal_mask_alternative_correct_implementations_score_full_marks_on_fresh_sizes(fn, seed):
    ex = exercise("causal_mask")
    assert_full_marks(judge(ex, run_calls(fn, ex, seed=seed), seed=seed))


def causal_mask_off_by_one(size, device=None):
    return torch.tril(torch.ones(size, size), diagonal=-1).bool()


def causal_mask_transposed(size, device=None):
    pos = torch.arange(size)
    return pos[:, None] <= pos[None, :]


def causal_mask_inverted(size, device=None):
    # nn.Transformer's convention: True = not allowed
    return torch.ones(size, size, dtype=torch.bool).triu(1)


def causal_mask_float(size, device=None):
    return torch.tril(torch.ones(size, size))


def causal_mask_int(size, device=None):
    return torch.tril(torch.ones(size, size, dtype=torch.int64))


def causal_mask_additive(size, device=None):
    return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)


def causal_mask_additive_large_negative(size, device=None):
    return torch.triu(torch.full((size, size), -1e9), diagonal=1)


def subsequent_mask(size):
    "Mask out subsequent positions (the Annotated Transformer's)."
    attn_shape = (1, size, size)
    subsequent_mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return subsequent_mask == 0


def causal_mask_annotated_transformer(size, device=None):
    return subsequent_mask(size)


def causal_mask_nanogpt_buffer(size, device=None):
    return torch.tril(torch.ones(size, size)).view(1, 1, size, size)


def causal_mask_for_batch_and_heads(size, device=None):
    return torch.tril(torch.ones(size, size, dtype=torch.bool, device=device))[None, None]


def causal_mask_upper_triangle_of_ones(size, device=None):
    return torch.triu(torch.ones(size, size), diagonal=1)


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (causal_mask_annotated_transformer, "shape (1, L, L), as the Annotated Transformer's subsequent_mask"),
        (causal_mask_nanogpt_buffer, "(1, 1, L, L) float tensor"),
        (causal_mask_for_batch_and_heads, "shape (1, 1, L, L), a mask already broadcast"),
        (causal_mask_upper_triangle_of_ones, "1s above the diagonal"),
        (causal_mask_off_by_one, "diagonal is left out"),
        (causal_mask_transposed, "upper triangle"),
        (causal_mask_inverted, "nn.MultiheadAttention"),
        (causal_mask_float, "float tensor"),
        (causal_mask_int, "integer tensor"),
        (causal_mask_additive, "additive mask"),
        (causal_mask_additive_large_negative, "large negative"),
    ],
)
def test_causal_mask_classic_mistakes_are_diagnosed(fn, phrase):
    assert_diagnosed(check(fn, name="causal_mask"), phrase)


def test_annotated_transformer_subsequent_mask_is_named_as_a_1_L_L_mask():
    report = check(causal_mask_annotated_transformer, name="causal_mask")
    assert report.score == 0
    assert_diagnosed(report, "(1, L, L)")
    assert any("has shape (1, 5, 5), expected (5, 5)" in r.feedback for r in report.results)


def test_causal_mask_inverted_is_not_called_off_by_one():
    report = check(causal_mask_inverted, name="causal_mask")
    assert not any("diagonal is left out" in d for d in report.diagnoses), report.diagnoses


def test_causal_mask_future_invariance_explains_a_leaking_mask():
    report = check(causal_mask_transposed, name="causal_mask")
    result = next(r for r in report.results if r.name == "no peeking at the future")
    assert not result.passed and "later key" in result.feedback


def causal_mask_generate_square(size, device=None):
    return nn.Transformer.generate_square_subsequent_mask(size) == 0


def causal_mask_reference(size, device=None):
    return course_lib.causal_mask(size)


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (causal_mask_generate_square, "generate_square_subsequent_mask"),
        (causal_mask_reference, "reference implementation"),
    ],
)
def test_causal_mask_forbidden_calls_are_reported(fn, phrase):
    report = check(fn, name="causal_mask")
    assert report.status == "forbidden" and report.score == 0
    assert phrase in report.notes[0]


def causal_mask_numpy_array(size, device=None):
    return np.tril(np.ones((size, size), dtype=bool))


def causal_mask_batched(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()[None]


def causal_mask_raises(size, device=None):
    return torch.ones(size, size - 1, dtype=torch.bool).tril() @ torch.ones(size, 1)


def test_causal_mask_wrong_type_shape_and_exceptions_are_failed_tests_with_feedback():
    report = check(causal_mask_numpy_array, name="causal_mask")
    assert report.score == 0 and "expected a torch.Tensor" in report.results[0].feedback
    report = check(causal_mask_batched, name="causal_mask")
    assert report.score == 0 and "has shape (1, 5, 5), expected (5, 5)" in str(report)
    report = check(causal_mask_raises, name="causal_mask")
    assert report.score == 0 and "raised RuntimeError" in report.results[0].feedback


# --- position_wise_feed_forward -----------------------------------------------------------------------


def position_wise_feed_forward_einsum(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    hidden = torch.einsum("...e,ef->...f", x, W_1) + b_1
    return torch.einsum("...f,fo->...o", hidden.clamp(min=0), W_2) + b_2


def position_wise_feed_forward_linear(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.linear(F.relu(F.linear(x, W_1.T, b_1)), W_2.T, b_2)


def position_wise_feed_forward_rows(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    rows = x.reshape(-1, x.shape[-1])  # (P, E)
    out = []
    for r in rows:
        h = np.maximum(r.numpy() @ W_1.numpy() + b_1.numpy(), 0.0)
        out.append(torch.from_numpy(h @ W_2.numpy() + b_2.numpy()))
    return torch.stack(out).reshape(*x.shape[:-1], W_2.shape[-1])  # (*, E_out)


@pytest.mark.parametrize(
    "fn", [position_wise_feed_forward_einsum, position_wise_feed_forward_linear, position_wise_feed_forward_rows]
)
def test_position_wise_feed_forward_alternative_correct_implementations_score_full_marks(fn):
    assert_full_marks(check(fn, name="position_wise_feed_forward"))


def position_wise_feed_forward_no_relu(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return (x @ W_1 + b_1) @ W_2 + b_2


def position_wise_feed_forward_relu_last(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.relu((x @ W_1 + b_1) @ W_2 + b_2)


def position_wise_feed_forward_no_biases(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.relu(x @ W_1) @ W_2


def position_wise_feed_forward_no_first_bias(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.relu(x @ W_1) @ W_2 + b_2


def position_wise_feed_forward_no_second_bias(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.relu(x @ W_1 + b_1) @ W_2


def position_wise_feed_forward_swapped_biases(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.relu(x @ W_1 + b_2) @ W_2 + b_1


def position_wise_feed_forward_nn_linear_convention(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.linear(F.relu(F.linear(x, W_1, b_1)), W_2, b_2)


def position_wise_feed_forward_gelu(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return F.gelu(x @ W_1 + b_1) @ W_2 + b_2


def position_wise_feed_forward_with_add_and_norm(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    # as a PositionwiseFeedForward module that ends with `x += residual; x = self.layer_norm(x)`
    residual = x
    x = F.relu(x @ W_1 + b_1) @ W_2 + b_2
    x += residual
    return F.layer_norm(x, x.shape[-1:], eps=1e-6)


def position_wise_feed_forward_with_residual(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return x + F.relu(x @ W_1 + b_1) @ W_2 + b_2


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (position_wise_feed_forward_with_add_and_norm, "returning layer_norm(x + FFN(x))"),
        (position_wise_feed_forward_with_residual, "adding x to the output"),
        (position_wise_feed_forward_no_relu, "ReLU is missing"),
        (position_wise_feed_forward_relu_last, "after the second linear map"),
        (position_wise_feed_forward_no_biases, "both biases are missing"),
        (position_wise_feed_forward_no_first_bias, "b_1 is missing"),
        (position_wise_feed_forward_no_second_bias, "b_2 is missing"),
        (position_wise_feed_forward_swapped_biases, "biases are swapped"),
        (position_wise_feed_forward_nn_linear_convention, "transposed weights"),
        (position_wise_feed_forward_gelu, "GELU"),
    ],
)
def test_position_wise_feed_forward_classic_mistakes_are_diagnosed(fn, phrase):
    assert_diagnosed(check(fn, name="position_wise_feed_forward"), phrase)


def test_a_feed_forward_module_with_its_own_add_and_norm_is_named_where_the_widths_allow_it():
    report = check(position_wise_feed_forward_with_add_and_norm, name="position_wise_feed_forward")
    by_name = {r.name: r for r in report.results}
    assert "raised RuntimeError" in by_name["output width"].feedback  # E_out != E: x + FFN(x) fails
    for name in ("fixed small case", "batch of sequences", "square weights"):
        assert "(Add & Norm)" in by_name[name].diagnosis, name


def test_position_wise_feed_forward_transposed_weights_fail_with_an_error_on_non_square_weights():
    report = check(position_wise_feed_forward_nn_linear_convention, name="position_wise_feed_forward")
    by_name = {r.name: r for r in report.results}
    assert "raised RuntimeError" in by_name["batch of sequences"].feedback
    assert by_name["square weights"].diagnosis


def position_wise_feed_forward_mixes_positions(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    y = F.relu(x @ W_1 + b_1) @ W_2 + b_2
    if x.dim() < 3:
        return y
    return y + 0.1 * y.cumsum(dim=-2)  # each position sees the earlier ones


def test_position_wise_feed_forward_mixing_positions_fails_the_property_test():
    report = check(position_wise_feed_forward_mixes_positions, name="position_wise_feed_forward")
    result = next(r for r in report.results if r.name == "position-wise")
    assert not result.passed and "shuffling the positions" in result.feedback


def position_wise_feed_forward_nan(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return (F.relu(x @ W_1 + b_1) @ W_2 + b_2) * float("nan")


def position_wise_feed_forward_flat(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    return (F.relu(x @ W_1 + b_1) @ W_2 + b_2).reshape(-1)


def position_wise_feed_forward_tuple(x, W_1, b_1, W_2, b_2, *, dropout_p=0.0):
    hidden = F.relu(x @ W_1 + b_1)
    return hidden @ W_2 + b_2, hidden


def test_position_wise_feed_forward_nan_shape_and_tuple_outputs_get_feedback():
    report = check(position_wise_feed_forward_nan, name="position_wise_feed_forward")
    assert report.score == 0 and "contains NaN" in report.results[0].feedback
    report = check(position_wise_feed_forward_flat, name="position_wise_feed_forward")
    assert report.status == "failed" and "has shape" in report.results[1].feedback
    report = check(position_wise_feed_forward_tuple, name="position_wise_feed_forward")
    assert report.score == 0 and "tuple" in report.results[0].feedback


# --- label_smoothing_loss -----------------------------------------------------------------------------


def label_smoothing_loss_explicit_target(logits, target, smoothing, ignore_index=-100):
    N, C = logits.shape
    keep = target != ignore_index
    q = torch.full((N, C), smoothing / C)
    q[keep, target[keep]] += 1 - smoothing  # (N, C), the smoothed target
    per_row = -(q * torch.log_softmax(logits, dim=-1)).sum(dim=-1)  # (N,)
    return per_row[keep].mean()


def label_smoothing_loss_rows(logits, target, smoothing, ignore_index=-100):
    total, count = 0.0, 0
    for row, y in zip(logits.tolist(), target.tolist(), strict=False):
        if y == ignore_index:
            continue
        m = max(row)
        lse = m + math.log(sum(math.exp(v - m) for v in row))
        log_p = [v - lse for v in row]
        total += -(1 - smoothing) * log_p[y] - smoothing * sum(log_p) / len(row)
        count += 1
    return torch.tensor(total / count if count else float("nan"))


def label_smoothing_loss_max_shift(logits, target, smoothing, ignore_index=-100):
    shifted = logits - logits.max(dim=-1, keepdim=True).values  # (N, C)
    log_p = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()  # (N, C)
    keep = target != ignore_index  # (N,)
    safe = torch.where(keep, target, torch.zeros_like(target))  # (N,)
    nll = -log_p[torch.arange(len(target)), safe]  # (N,)
    smooth = -log_p.mean(dim=-1)  # (N,)
    per_row = torch.where(keep, (1 - smoothing) * nll + smoothing * smooth, torch.zeros_like(nll))
    return per_row.sum() / keep.sum().clamp(min=1)  # 0 when every row is ignored


@pytest.mark.parametrize(
    "fn", [label_smoothing_loss_explicit_target, label_smoothing_loss_rows, label_smoothing_loss_max_shift]
)
def test_label_smoothing_loss_alternative_correct_implementations_score_full_marks(fn):
    assert_full_marks(check(fn, name="label_smoothing_loss"))


def _smoothed(logits, target, smoothing, ignore_index, q_true, q_other, reduce="mean", ignore=True, log_p=None):
    if log_p is None:
        log_p = torch.log_softmax(logits, dim=-1)
    N, C = logits.shape
    keep = target != ignore_index if ignore else torch.ones(N, dtype=torch.bool)
    q = torch.full((N, C), q_other)
    q[torch.arange(N)[keep], target[keep]] = q_true
    per_row = -(q * log_p).sum(-1)[keep]
    return per_row.sum() if reduce == "sum" else per_row.mean()


def label_smoothing_loss_over_other_classes(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    return _smoothed(logits, target, smoothing, ignore_index, 1 - smoothing, smoothing / (C - 1))


def label_smoothing_loss_plain_cross_entropy(logits, target, smoothing, ignore_index=-100):
    return _smoothed(logits, target, smoothing, ignore_index, 1.0, 0.0)


def label_smoothing_loss_sum(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    return _smoothed(
        logits, target, smoothing, ignore_index, 1 - smoothing + smoothing / C, smoothing / C, reduce="sum"
    )


def label_smoothing_loss_ignores_nothing(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    return _smoothed(
        logits, target, smoothing, ignore_index, 1 - smoothing + smoothing / C, smoothing / C, ignore=False
    )


def label_smoothing_loss_divides_by_all_rows(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    keep = target != ignore_index
    return _smoothed(
        logits, target, smoothing, ignore_index, 1 - smoothing + smoothing / C, smoothing / C, reduce="sum"
    ) / len(keep)


def label_smoothing_loss_unstable(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    p = logits.exp() / logits.exp().sum(dim=-1, keepdim=True)
    return _smoothed(
        logits, target, smoothing, ignore_index, 1 - smoothing + smoothing / C, smoothing / C, log_p=p.log()
    )


def label_smoothing_loss_log_softmax_of_softmax(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    return _smoothed(
        logits,
        target,
        smoothing,
        ignore_index,
        1 - smoothing + smoothing / C,
        smoothing / C,
        log_p=torch.softmax(logits, dim=-1).log(),
    )


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (label_smoothing_loss_over_other_classes, "C - 1"),
        (label_smoothing_loss_plain_cross_entropy, "no smoothing"),
        (label_smoothing_loss_sum, "sum over the rows"),
        (label_smoothing_loss_ignores_nothing, "ignore_index are not left out"),
        (label_smoothing_loss_divides_by_all_rows, "all N rows"),
        (label_smoothing_loss_unstable, "unstable"),
        (label_smoothing_loss_log_softmax_of_softmax, "log of the softmax"),
    ],
)
def test_label_smoothing_loss_classic_mistakes_are_diagnosed(fn, phrase):
    assert_diagnosed(check(fn, name="label_smoothing_loss"), phrase)


class LabelSmoothing(nn.Module):
    "Implement label smoothing (the Annotated Transformer's)."

    def __init__(self, size, padding_idx, smoothing=0.0):
        super().__init__()
        self.criterion = nn.KLDivLoss(reduction="sum")
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None

    def forward(self, x, target):
        assert x.size(1) == self.size
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        true_dist[:, self.padding_idx] = 0
        mask = torch.nonzero(target.data == self.padding_idx)
        if mask.dim() > 0:
            true_dist.index_fill_(0, mask.squeeze(), 0.0)
        self.true_dist = true_dist
        return self.criterion(x, true_dist.clone().detach())


def label_smoothing_loss_annotated_transformer(logits, target, smoothing, ignore_index=-100):
    # LabelSmoothing on the generator's log_softmax, divided by the number of tokens (SimpleLossCompute)
    criterion = LabelSmoothing(logits.size(-1), ignore_index, smoothing)
    return criterion(torch.log_softmax(logits, dim=-1), target) / (target != ignore_index).sum()


def label_smoothing_loss_smoothing_counts_ignored_rows(logits, target, smoothing, ignore_index=-100):
    lprobs = torch.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    nll_loss = -lprobs[torch.arange(len(target))[keep], target[keep]].mean()
    smooth_loss = -lprobs.mean(dim=-1)
    return (1 - smoothing) * nll_loss + smoothing * smooth_loss.mean()


def label_smoothing_loss_from_pytorch_issue_7455(logits, target, smoothing, ignore_index=-100):
    pred = logits.log_softmax(dim=-1)
    with torch.no_grad():
        true_dist = torch.zeros_like(pred)
        true_dist.fill_(smoothing / (logits.size(-1) - 1))
        true_dist.scatter_(1, target.data.unsqueeze(1), 1.0 - smoothing)
        true_dist.masked_fill_((target == ignore_index).unsqueeze(1), 0)
    return torch.mean(torch.sum(-true_dist * pred, dim=-1))


def label_smoothing_loss_kl_div(logits, target, smoothing, ignore_index=-100):
    N, C = logits.shape
    keep = target != ignore_index
    q = torch.full((N, C), smoothing / C)
    q[keep, target[keep]] += 1 - smoothing
    return F.kl_div(torch.log_softmax(logits, dim=-1)[keep], q[keep], reduction="batchmean")


def test_annotated_transformer_label_smoothing_is_named_where_the_padding_class_is_a_class_id():
    # with ignore_index = -100 its `true_dist[:, padding_idx] = 0` raises; with the pad id 0 it runs
    report = check(label_smoothing_loss_annotated_transformer, name="label_smoothing_loss")
    for name in ("ignore_index = pad id", "pad class in the target"):
        pad = next(r for r in report.results if r.name == name)
        assert not pad.passed and "eps / (C - 2)" in pad.diagnosis and "KLDivLoss" in pad.diagnosis, name
    assert_diagnosed(report, "the Annotated Transformer's LabelSmoothing")


def test_a_padding_class_without_smoothing_mass_fails_even_when_no_row_is_ignored():
    def label_smoothing_loss_pad_column_zeroed(logits, target, smoothing, ignore_index=-100):
        N, C = logits.shape
        q = torch.full((N, C), smoothing / (C - 2))
        q[torch.arange(N), target.clamp(min=0)] = 1 - smoothing
        if 0 <= ignore_index < C:
            q[:, ignore_index] = 0.0
        keep = target != ignore_index
        return -(q * torch.log_softmax(logits, dim=-1)).sum(-1)[keep].mean()

    report = check(label_smoothing_loss_pad_column_zeroed, name="label_smoothing_loss")
    pad = next(r for r in report.results if r.name == "pad class in the target")
    assert not pad.passed and "eps / (C - 2)" in pad.diagnosis


def test_smoothing_that_counts_the_ignored_rows_is_named_on_the_ignored_rows_test():
    report = check(label_smoothing_loss_smoothing_counts_ignored_rows, name="label_smoothing_loss")
    ignored = next(r for r in report.results if r.name == "ignored rows")
    assert not ignored.passed and "out of both terms" in ignored.diagnosis
    assert next(r for r in report.results if r.name == "random batches").passed


def test_the_label_smoothing_loss_of_pytorch_issue_7455_is_named_with_both_of_its_differences():
    report = check(label_smoothing_loss_from_pytorch_issue_7455, name="label_smoothing_loss")
    pad = next(r for r in report.results if r.name == "ignore_index = pad id")
    assert not pad.passed and "eps / (C - 1)" in pad.diagnosis and "all N rows" in pad.diagnosis
    assert_diagnosed(report, "PyTorch issue 7455")


def test_kl_divergence_to_the_smoothed_target_is_named():
    report = check(label_smoothing_loss_kl_div, name="label_smoothing_loss")
    assert_diagnosed(report, "KL divergence to the smoothed target")
    assert next(r for r in report.results if r.name == "smoothing 0 and 1").passed is False


def test_label_smoothing_loss_unstable_version_fails_only_the_large_logits_test():
    report = check(label_smoothing_loss_unstable, name="label_smoothing_loss")
    failed = [r for r in report.results if not r.passed and not r.withheld]
    assert [r.name for r in failed] == ["large logits"]
    assert "NaN" in failed[0].feedback


def label_smoothing_loss_cross_entropy(logits, target, smoothing, ignore_index=-100):
    return F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)


def label_smoothing_loss_module(logits, target, smoothing, ignore_index=-100):
    return nn.CrossEntropyLoss(ignore_index=ignore_index, label_smoothing=smoothing)(logits, target)


def label_smoothing_loss_nll(logits, target, smoothing, ignore_index=-100):
    log_p = torch.log_softmax(logits, dim=-1)
    keep = target != ignore_index
    return (1 - smoothing) * F.nll_loss(log_p, target, ignore_index=ignore_index) + smoothing * (-log_p.mean(-1))[
        keep
    ].mean()


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (label_smoothing_loss_cross_entropy, "torch.nn.functional.cross_entropy"),
        (label_smoothing_loss_module, "torch.nn.CrossEntropyLoss"),
        (label_smoothing_loss_nll, "torch.nn.functional.nll_loss"),
    ],
)
def test_label_smoothing_loss_forbidden_calls_are_reported(fn, phrase):
    report = check(fn, name="label_smoothing_loss")
    assert report.status == "forbidden" and report.score == 0
    assert phrase in report.notes[0]


def label_smoothing_loss_python_float(logits, target, smoothing, ignore_index=-100):
    return label_smoothing_loss_explicit_target(logits, target, smoothing, ignore_index).item()


def label_smoothing_loss_per_row(logits, target, smoothing, ignore_index=-100):
    C = logits.shape[-1]
    q = torch.full_like(logits, smoothing / C)
    q[torch.arange(len(target)), target.clamp(min=0)] += 1 - smoothing
    return -(q * torch.log_softmax(logits, dim=-1)).sum(-1)


def label_smoothing_loss_raises(logits, target, smoothing, ignore_index=-100):
    raise ValueError("smoothing is not supported")


def test_label_smoothing_loss_wrong_type_shape_and_exceptions_are_failed_tests_with_feedback():
    report = check(label_smoothing_loss_python_float, name="label_smoothing_loss")
    assert report.status == "failed" and "expected a torch.Tensor" in report.results[0].feedback
    report = check(label_smoothing_loss_per_row, name="label_smoothing_loss")
    assert report.status == "failed" and "has shape (6), expected ()" in str(report)
    report = check(label_smoothing_loss_raises, name="label_smoothing_loss")
    assert report.score == 0 and "raised ValueError: smoothing is not supported" in report.results[0].error


def test_label_smoothing_loss_all_ignored_accepts_nan_or_zero():
    for fn in (course_lib.label_smoothing_loss, label_smoothing_loss_max_shift):
        report = check(fn, name="label_smoothing_loss")
        assert next(r for r in report.results if r.name == "every row ignored").passed
