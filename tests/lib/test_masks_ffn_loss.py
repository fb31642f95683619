"""Specification of course_lib.masks, course_lib.feedforward and course_lib.losses."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    PositionwiseFeedForward,
    causal_mask,
    label_smoothing_loss,
    padding_mask,
    position_wise_feed_forward,
)

# ---------------------------------------------------------------------------------------
# causal_mask
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("L", [1, 2, 5, 9])
def test_causal_mask_lets_query_l_attend_to_keys_up_to_and_including_l(L):
    mask = causal_mask(L)
    assert mask.shape == (L, L) and mask.dtype == torch.bool
    for l in range(L):
        for s in range(L):
            assert bool(mask[l, s]) == (s <= l)


def test_causal_mask_includes_the_diagonal_and_is_lower_triangular():
    mask = causal_mask(6)
    assert mask.diagonal().all()
    assert not mask.triu(1).any()
    assert mask[torch.ones(6, 6, dtype=torch.bool).tril()].all()  # everything on or below it


def test_causal_mask_is_the_inverse_of_torchs_square_subsequent_mask():
    L = 7
    torch_mask = nn.Transformer.generate_square_subsequent_mask(L)  # -inf = blocked
    assert torch.equal(causal_mask(L), torch_mask == 0)


def test_causal_mask_on_a_device():
    assert causal_mask(3, device="cpu").device.type == "cpu"


@pytest.mark.parametrize("size", [0, -2])
def test_causal_mask_rejects_a_non_positive_size(size):
    with pytest.raises(ValueError, match="size"):
        causal_mask(size)


# ---------------------------------------------------------------------------------------
# padding_mask
# ---------------------------------------------------------------------------------------


def test_padding_mask_is_true_at_real_tokens_and_false_at_padding():
    tokens = torch.tensor([[5, 3, 9, 0, 0], [7, 0, 2, 0, 4]])
    expected = torch.tensor([[True, True, True, False, False], [True, False, True, False, True]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool
    assert torch.equal(mask, expected)


def test_padding_mask_uses_the_given_pad_id():
    tokens = torch.tensor([[1, 2, 1], [0, 1, 3]])
    assert torch.equal(padding_mask(tokens, pad_id=1), torch.tensor([[False, True, False], [True, False, True]]))


def test_padding_mask_works_as_a_key_mask_for_every_head_and_query():
    tokens = torch.tensor([[4, 4, 0], [4, 0, 0]])
    mask = padding_mask(tokens, 0)[:, None, None, :]
    assert mask.expand(2, 3, 5, 3)[:, :, :, 2].logical_not().all()


def test_padding_mask_rejects_float_or_bool_tokens():
    with pytest.raises(TypeError, match="tokens"):
        padding_mask(torch.zeros(2, 3), 0)
    with pytest.raises(TypeError, match="tokens"):
        padding_mask(torch.zeros(2, 3, dtype=torch.bool), 0)


# ---------------------------------------------------------------------------------------
# position_wise_feed_forward / PositionwiseFeedForward
# ---------------------------------------------------------------------------------------


def torch_ffn(E, F_, E_out=None):
    return nn.Sequential(nn.Linear(E, F_), nn.ReLU(), nn.Linear(F_, E if E_out is None else E_out))


@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 6), (2, 3, 4, 6)])
def test_feed_forward_matches_linear_relu_linear_with_copied_weights(shape):
    net = torch_ffn(6, 24)
    x = torch.randn(*shape)
    lin1, lin2 = net[0], net[2]
    out = position_wise_feed_forward(
        x, lin1.weight.detach().T, lin1.bias.detach(), lin2.weight.detach().T, lin2.bias.detach()
    )
    with torch.no_grad():
        torch.testing.assert_close(out, net(x))


def test_feed_forward_output_width_may_differ_from_input_width():
    net = torch_ffn(4, 8, E_out=3)
    x = torch.randn(2, 5, 4)
    out = position_wise_feed_forward(x, net[0].weight.T, net[0].bias, net[2].weight.T, net[2].bias)
    assert out.shape == (2, 5, 3)
    torch.testing.assert_close(out, net(x))


def test_feed_forward_matches_the_formula_max_0_xw1_plus_b1_w2_plus_b2():
    x = torch.randn(3, 4, dtype=torch.float64)
    W_1, b_1 = torch.randn(4, 5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    W_2, b_2 = torch.randn(5, 2, dtype=torch.float64), torch.randn(2, dtype=torch.float64)
    expected = torch.zeros(3, 2, dtype=torch.float64)
    for n in range(3):
        hidden = [max(0.0, sum(float(x[n, e] * W_1[e, f]) for e in range(4)) + float(b_1[f])) for f in range(5)]
        for o in range(2):
            expected[n, o] = sum(hidden[f] * float(W_2[f, o]) for f in range(5)) + float(b_2[o])
    torch.testing.assert_close(position_wise_feed_forward(x, W_1, b_1, W_2, b_2), expected)


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 3), L=st.integers(1, 6))
def test_feed_forward_acts_on_each_position_alone(seed, n, L):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, L, 4, generator=g)
    params = (
        torch.randn(4, 8, generator=g),
        torch.randn(8, generator=g),
        torch.randn(8, 4, generator=g),
        torch.randn(4, generator=g),
    )
    perm = torch.randperm(L, generator=g)
    out = position_wise_feed_forward(x, *params)
    torch.testing.assert_close(position_wise_feed_forward(x[:, perm], *params), out[:, perm])
    torch.testing.assert_close(position_wise_feed_forward(x[:, :1], *params), out[:, :1])


def test_feed_forward_module_load_linear_matches_torch_forward_and_gradients():
    net = torch_ffn(6, 12)
    ours = PositionwiseFeedForward(6, 12).load_linear_(net[0], net[2])
    x = torch.randn(2, 3, 6)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    out1, out2 = ours(x1), net(x2)
    torch.testing.assert_close(out1, out2)
    w = torch.randn(2, 3, 6)
    (out1 * w).sum().backward()
    (out2 * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.W_1.grad, net[0].weight.grad.T)
    torch.testing.assert_close(ours.b_1.grad, net[0].bias.grad)
    torch.testing.assert_close(ours.W_2.grad, net[2].weight.grad.T)
    torch.testing.assert_close(ours.b_2.grad, net[2].bias.grad)


def test_feed_forward_module_in_eval_mode_ignores_dropout():
    ours = PositionwiseFeedForward(4, 8, dropout=0.9).eval()
    x = torch.randn(3, 4)
    expected = position_wise_feed_forward(x, ours.W_1, ours.b_1, ours.W_2, ours.b_2)
    torch.testing.assert_close(ours(x), expected)


def test_feed_forward_dropout_zeroes_hidden_units_and_rescales_the_rest():
    # With W_2 = I and b_2 = 0 the output is the dropped hidden layer: 0 or relu(.) / (1 - p).
    x = torch.randn(50, 4)
    W_1, b_1 = torch.randn(4, 6), torch.randn(6)
    hidden = torch.relu(x @ W_1 + b_1)
    out = position_wise_feed_forward(x, W_1, b_1, torch.eye(6), torch.zeros(6), dropout_p=0.5)
    kept = out != 0
    torch.testing.assert_close(out[kept], hidden[kept] / 0.5)
    assert (~kept & (hidden > 0)).any()  # some active hidden units were dropped


# ---------------------------------------------------------------------------------------
# label_smoothing_loss
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("ignore", [False, True], ids=["all-targets", "some-ignored"])
def test_label_smoothing_loss_matches_torch_cross_entropy(smoothing, ignore):
    N, C = 12, 7
    logits = 3 * torch.randn(N, C)
    target = torch.randint(0, C, (N,))
    if ignore:
        target[[1, 4, 5, 11]] = -100
    expected = F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=-100)
    torch.testing.assert_close(label_smoothing_loss(logits, target, smoothing), expected)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
def test_label_smoothing_loss_gradient_matches_torch_cross_entropy(smoothing):
    N, C = 10, 5
    logits = torch.randn(N, C)
    target = torch.randint(0, C, (N,))
    target[[0, 3]] = 2  # a real class index doubles as ignore_index here
    ours_logits, ref_logits = logits.clone().requires_grad_(True), logits.clone().requires_grad_(True)
    label_smoothing_loss(ours_logits, target, smoothing, ignore_index=2).backward()
    F.cross_entropy(ref_logits, target, label_smoothing=smoothing, ignore_index=2).backward()
    torch.testing.assert_close(ours_logits.grad, ref_logits.grad)
    assert (ours_logits.grad[target == 2] == 0).all()


def test_label_smoothing_loss_matches_the_smoothed_target_formula():
    N, C, eps = 4, 6, 0.2
    logits = torch.randn(N, C, dtype=torch.float64)
    target = torch.tensor([0, 5, 2, 2])
    total = 0.0
    for n in range(N):
        z = math.log(sum(math.exp(float(v)) for v in logits[n]))
        log_p = [float(v) - z for v in logits[n]]
        q = [eps / C + (1 - eps if c == int(target[n]) else 0.0) for c in range(C)]
        total += -sum(qc * lp for qc, lp in zip(q, log_p, strict=False))
    torch.testing.assert_close(label_smoothing_loss(logits, target, eps), torch.tensor(total / N, dtype=torch.float64))


def test_label_smoothing_loss_with_zero_smoothing_is_cross_entropy_and_ignored_rows_do_not_count():
    logits = torch.randn(5, 4)
    target = torch.tensor([1, -100, 3, -100, 0])
    keep = target != -100
    expected = F.cross_entropy(logits[keep], target[keep])
    torch.testing.assert_close(label_smoothing_loss(logits, target, 0.0), expected)


def test_label_smoothing_loss_is_nan_like_torch_when_every_target_is_ignored():
    logits, target = torch.randn(3, 4), torch.full((3,), -100)
    assert torch.isnan(F.cross_entropy(logits, target, label_smoothing=0.1))
    assert torch.isnan(label_smoothing_loss(logits, target, 0.1))


def test_label_smoothing_loss_is_finite_for_huge_logits():
    logits = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 5e3]])
    target = torch.tensor([0, 2])
    out = label_smoothing_loss(logits, target, 0.1)
    assert torch.isfinite(out)
    torch.testing.assert_close(out, F.cross_entropy(logits, target, label_smoothing=0.1))


@pytest.mark.parametrize("smoothing", [-0.1, 1.5])
def test_label_smoothing_loss_rejects_smoothing_outside_0_1(smoothing):
    with pytest.raises(ValueError, match="smoothing"):
        label_smoothing_loss(torch.randn(2, 3), torch.tensor([0, 1]), smoothing)


def test_label_smoothing_loss_rejects_out_of_range_targets_and_float_targets():
    with pytest.raises(ValueError, match="target"):
        label_smoothing_loss(torch.randn(2, 3), torch.tensor([0, 3]), 0.1)
    with pytest.raises(ValueError, match="target"):
        label_smoothing_loss(torch.randn(2, 3), torch.tensor([0, -1]), 0.1)
    with pytest.raises(TypeError, match="target"):
        label_smoothing_loss(torch.randn(2, 3), torch.tensor([0.0, 1.0]), 0.1)
