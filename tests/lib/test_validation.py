"""Specification of the argument checks (course_lib._validation) and of every graded function's errors.

Wrong shapes and non-boolean masks raise ValueError; the message names the function, the
argument, the expected shape (with sizes already bound by earlier arguments, e.g.
``(N=2, S=5, D=4)``) and the actual shape. Non-tensors and non-float tensors raise TypeError
naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib import _validation


def t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def b(*shape):
    return torch.ones(*shape, dtype=torch.bool)


def mha_args(E=8, L=5, S=5):
    return [t(2, L, E), t(2, S, E), t(2, S, E), t(E, E), t(E, E), t(E, E), t(E, E)]


def transformer():
    return cl.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32).eval()


# ---------------------------------------------------------------------------------------
# ValueError for wrong shapes: (call, function name, argument, fragments the message must hold)
# ---------------------------------------------------------------------------------------

SHAPE_ERRORS = [
    # scores
    (
        "dot_score keys D",
        lambda: cl.dot_score(t(2, 4), t(2, 5, 3)),
        "dot_score",
        "keys",
        ["(N=2, S=5, D=4)", "(2, 5, 3)"],
    ),
    (
        "dot_score query ndim",
        lambda: cl.dot_score(t(2, 4, 1), t(2, 5, 4)),
        "dot_score",
        "query",
        ["(N, D)", "(2, 4, 1)"],
    ),
    (
        "scaled_dot_score N",
        lambda: cl.scaled_dot_score(t(2, 4), t(3, 5, 4)),
        "scaled_dot_score",
        "keys",
        ["(N=2, S, D=4)", "(3, 5, 4)"],
    ),
    (
        "cosine_score ndim",
        lambda: cl.cosine_score(t(2, 4), t(2, 5)),
        "cosine_score",
        "keys",
        ["(N=2, S, D=4)", "(2, 5)"],
    ),
    (
        "additive_score W_k",
        lambda: cl.additive_score(t(2, 3), t(2, 5, 4), t(3, 6), t(5, 6), t(6)),
        "additive_score",
        "W_k",
        ["(Dk=4, A=6)", "(5, 6)"],
    ),
    (
        "additive_score v",
        lambda: cl.additive_score(t(2, 3), t(2, 5, 4), t(3, 6), t(4, 6), t(7)),
        "additive_score",
        "v",
        ["(A=6)", "(7)"],
    ),
    (
        "multiplicative_score W",
        lambda: cl.multiplicative_score(t(2, 3), t(2, 5, 4), t(4, 3)),
        "multiplicative_score",
        "W",
        ["(Dq=3, Dk=4)", "(4, 3)"],
    ),
    # pooling
    (
        "attention_pool values",
        lambda: cl.attention_pool(t(2, 5), t(2, 4, 3)),
        "attention_pool",
        "values",
        ["(N=2, S=5, Dv)", "(2, 4, 3)"],
    ),
    (
        "attention_pool mask",
        lambda: cl.attention_pool(t(2, 5), t(2, 5, 3), b(2, 4)),
        "attention_pool",
        "mask",
        ["(2, 5)", "(2, 4)"],
    ),
    (
        "local_attention_weights center",
        lambda: cl.local_attention_weights(t(2, 5), t(3), 2),
        "local_attention_weights",
        "center",
        ["(N=2)", "(3)"],
    ),
    # attention
    (
        "sdpa k D",
        lambda: cl.scaled_dot_product_attention(t(2, 3, 4), t(2, 5, 6), t(2, 5, 4)),
        "scaled_dot_product_attention",
        "k",
        ["(..., S=5, D=4)", "(2, 5, 6)"],
    ),
    (
        "sdpa v S",
        lambda: cl.scaled_dot_product_attention(t(2, 3, 4), t(2, 5, 4), t(2, 6, 4)),
        "scaled_dot_product_attention",
        "v",
        ["(..., S=5, Dv)", "(2, 6, 4)"],
    ),
    (
        "sdpa q ndim",
        lambda: cl.scaled_dot_product_attention(t(4), t(2, 5, 4), t(2, 5, 4)),
        "scaled_dot_product_attention",
        "q",
        ["(..., L, D)", "(4)"],
    ),
    (
        "sdpa batch dims",
        lambda: cl.scaled_dot_product_attention(t(2, 3, 4), t(3, 5, 4), t(3, 5, 4)),
        "scaled_dot_product_attention",
        "k",
        ["(2,)", "(3, 5, 4)"],
    ),
    (
        "sdpa mask",
        lambda: cl.scaled_dot_product_attention(t(2, 3, 4), t(2, 5, 4), t(2, 5, 4), b(3, 4)),
        "scaled_dot_product_attention",
        "mask",
        ["(2, 3, 5)", "(3, 4)"],
    ),
    (
        "self_attention W_k",
        lambda: cl.self_attention(t(2, 5, 6), t(6, 4), t(5, 4), t(6, 3)),
        "self_attention",
        "W_k",
        ["(E=6, Dk=4)", "(5, 4)"],
    ),
    (
        "self_attention mask",
        lambda: cl.self_attention(t(2, 5, 6), t(6, 4), t(6, 4), t(6, 3), b(5, 4)),
        "self_attention",
        "mask",
        ["(2, 5, 5)", "(5, 4)"],
    ),
    # multi-head
    ("split_heads E % H", lambda: cl.split_heads(t(2, 3, 10), 3), "split_heads", "x", ["E=10", "num_heads=3"]),
    ("split_heads ndim", lambda: cl.split_heads(t(2, 10), 2), "split_heads", "x", ["(N, L, E)", "(2, 10)"]),
    ("merge_heads ndim", lambda: cl.merge_heads(t(2, 3, 4)), "merge_heads", "x", ["(N, H, L, D)", "(2, 3, 4)"]),
    (
        "multi_head_attention W_o",
        lambda: cl.multi_head_attention(*mha_args()[:6], t(8, 6), 2),
        "multi_head_attention",
        "W_o",
        ["(E=8, E=8)", "(8, 6)"],
    ),
    (
        "multi_head_attention key",
        lambda: cl.multi_head_attention(t(2, 5, 8), t(2, 5, 6), *mha_args()[2:], 2),
        "multi_head_attention",
        "key",
        ["(N=2, S=5, E=8)", "(2, 5, 6)"],
    ),
    (
        "multi_head_attention mask",
        lambda: cl.multi_head_attention(*mha_args(), 2, b(2, 1, 5, 4)),
        "multi_head_attention",
        "mask",
        ["(2, 2, 5, 5)", "(2, 1, 5, 4)"],
    ),
    (
        "multi_head_attention E % H",
        lambda: cl.multi_head_attention(*mha_args(), 3),
        "multi_head_attention",
        "num_heads",
        ["E=8", "num_heads=3"],
    ),
    (
        "multi_head_attention_sum_form mask",
        lambda: cl.multi_head_attention_sum_form(*mha_args(), 2, b(3, 5, 5)),
        "multi_head_attention_sum_form",
        "mask",
        ["(2, 2, 5, 5)", "(3, 5, 5)"],
    ),
    (
        "MultiHeadAttention module mask",
        lambda: cl.MultiHeadAttention(8, 2)(t(2, 5, 8), t(2, 5, 8), t(2, 5, 8), b(2, 5)),
        "multi_head_attention",
        "mask",
        ["(2, 2, 5, 5)", "(2, 5)"],
    ),
    # layer norm
    ("layer_norm gamma", lambda: cl.layer_norm(t(2, 3, 8), t(7), t(8)), "layer_norm", "gamma", ["(E=8)", "(7)"]),
    ("layer_norm beta", lambda: cl.layer_norm(t(2, 3, 8), t(8), t(8, 1)), "layer_norm", "beta", ["(E=8)", "(8, 1)"]),
    (
        "add_and_norm sublayer E",
        lambda: cl.add_and_norm(t(2, 3, 8), t(2, 3, 7), t(8), t(8)),
        "add_and_norm",
        "sublayer_output",
        ["(..., E=8)", "(2, 3, 7)"],
    ),
    (
        "add_and_norm sublayer batch",
        lambda: cl.add_and_norm(t(2, 3, 8), t(3, 8), t(8), t(8)),
        "add_and_norm",
        "sublayer_output",
        ["(2, 3, 8)", "(3, 8)"],
    ),
    # feed-forward and loss
    (
        "position_wise_feed_forward W_2",
        lambda: cl.position_wise_feed_forward(t(2, 5, 6), t(6, 12), t(12), t(10, 6), t(6)),
        "position_wise_feed_forward",
        "W_2",
        ["(F=12, O)", "(10, 6)"],
    ),
    (
        "position_wise_feed_forward b_1",
        lambda: cl.position_wise_feed_forward(t(2, 5, 6), t(6, 12), t(11), t(12, 6), t(6)),
        "position_wise_feed_forward",
        "b_1",
        ["(F=12)", "(11)"],
    ),
    (
        "label_smoothing_loss target",
        lambda: cl.label_smoothing_loss(t(4, 5), torch.zeros(3, dtype=torch.long), 0.1),
        "label_smoothing_loss",
        "target",
        ["(N=4)", "(3)"],
    ),
    (
        "label_smoothing_loss logits",
        lambda: cl.label_smoothing_loss(t(4, 5, 2), torch.zeros(4, dtype=torch.long), 0.1),
        "label_smoothing_loss",
        "logits",
        ["(N, C)", "(4, 5, 2)"],
    ),
    # masks
    (
        "padding_mask tokens",
        lambda: cl.padding_mask(torch.zeros(5, dtype=torch.long), 0),
        "padding_mask",
        "tokens",
        ["(N, S)", "(5)"],
    ),
    # transformer
    (
        "Transformer src_mask",
        lambda: transformer()(t(2, 5, 16), t(2, 3, 16), b(2, 4)),
        "Transformer",
        "src_mask",
        ["(2, 5)", "(2, 4)"],
    ),
    (
        "Transformer tgt_mask",
        lambda: transformer()(t(2, 5, 16), t(2, 3, 16), b(2, 5), b(2, 4)),
        "Transformer",
        "tgt_mask",
        ["(2, 3)", "(2, 4)"],
    ),
    (
        "Transformer src width",
        lambda: transformer()(t(2, 5, 8), t(2, 3, 16)),
        "Transformer",
        "src",
        ["16", "(2, 5, 8)"],
    ),
    # seq2seq
    (
        "Seq2SeqAttention src_mask",
        lambda: cl.Seq2SeqAttention(5, 5)(
            torch.ones(2, 4, dtype=torch.long), torch.ones(2, 3, dtype=torch.long), b(2, 3)
        ),
        "Seq2SeqAttention",
        "src_mask",
        ["(2, 4)", "(2, 3)"],
    ),
]


@pytest.mark.parametrize("call, fn, arg, fragments", [pytest.param(*c[1:], id=c[0]) for c in SHAPE_ERRORS])
def test_wrong_shape_raises_value_error_naming_function_argument_and_both_shapes(call, fn, arg, fragments):
    with pytest.raises(ValueError) as excinfo:
        call()
    message = str(excinfo.value)
    assert fn in message
    assert f"'{arg}'" in message or f"{arg}=" in message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from {message!r}"


def test_add_and_norm_names_itself_when_gamma_has_the_wrong_shape():
    # The error must name the function the user called (add_and_norm), not a helper it calls.
    with pytest.raises(ValueError) as excinfo:
        cl.add_and_norm(t(2, 4), t(2, 4), t(3), t(4))
    message = str(excinfo.value)
    assert "add_and_norm" in message and "'gamma'" in message
    assert "(3)" in message and "E=4" in message


# ---------------------------------------------------------------------------------------
# masks must be boolean
# ---------------------------------------------------------------------------------------

FLOAT_MASKS = [
    ("attention_pool", lambda m: cl.attention_pool(t(2, 5), t(2, 5, 3), m), (2, 5)),
    (
        "scaled_dot_product_attention",
        lambda m: cl.scaled_dot_product_attention(t(2, 3, 4), t(2, 5, 4), t(2, 5, 4), m),
        (2, 3, 5),
    ),
    ("self_attention", lambda m: cl.self_attention(t(2, 5, 6), t(6, 4), t(6, 4), t(6, 3), m), (5, 5)),
    ("multi_head_attention", lambda m: cl.multi_head_attention(*mha_args(), 2, m), (5, 5)),
    ("multi_head_attention_sum_form", lambda m: cl.multi_head_attention_sum_form(*mha_args(), 2, m), (5, 5)),
    ("masked_softmax", lambda m: cl.masked_softmax(t(2, 5), m), (2, 5)),
    ("Transformer", lambda m: transformer()(t(2, 5, 16), t(2, 3, 16), m), (2, 5)),
]


@pytest.mark.parametrize("fn, call, shape", [pytest.param(*c, id=c[0]) for c in FLOAT_MASKS])
@pytest.mark.parametrize("dtype", [torch.float32, torch.long], ids=["float-mask", "int-mask"])
def test_non_boolean_mask_raises_value_error_mentioning_boolean(fn, call, shape, dtype):
    with pytest.raises(ValueError) as excinfo:
        call(torch.ones(shape, dtype=dtype))
    message = str(excinfo.value)
    assert "boolean" in message and fn in message and str(dtype) in message


@pytest.mark.parametrize("fn, call, shape", [pytest.param(*c, id=c[0]) for c in FLOAT_MASKS])
def test_non_tensor_mask_raises_type_error(fn, call, shape):
    with pytest.raises(TypeError, match="mask"):
        call(np.ones(shape, dtype=bool))


# ---------------------------------------------------------------------------------------
# TypeError for non-tensors and non-float tensors
# ---------------------------------------------------------------------------------------

TYPE_ERRORS = [
    ("dot_score list", lambda: cl.dot_score([[1.0, 2.0]], t(1, 3, 2)), "query", "list"),
    (
        "scaled_dot_score int",
        lambda: cl.scaled_dot_score(t(1, 2), torch.ones(1, 3, 2, dtype=torch.long)),
        "keys",
        "torch.int64",
    ),
    ("cosine_score numpy", lambda: cl.cosine_score(np.ones((1, 2)), t(1, 3, 2)), "query", "ndarray"),
    (
        "additive_score int W_q",
        lambda: cl.additive_score(t(1, 2), t(1, 3, 2), torch.ones(2, 4, dtype=torch.long), t(2, 4), t(4)),
        "W_q",
        "torch.int64",
    ),
    ("multiplicative_score float", lambda: cl.multiplicative_score(t(1, 2), t(1, 3, 2), 1.0), "W", "float"),
    (
        "attention_pool int scores",
        lambda: cl.attention_pool(torch.ones(2, 3, dtype=torch.long), t(2, 3, 4)),
        "scores",
        "torch.int64",
    ),
    (
        "local_attention_weights int center",
        lambda: cl.local_attention_weights(t(2, 5), torch.tensor([1, 2]), 2),
        "center",
        "torch.int64",
    ),
    ("softmax list", lambda: cl.softmax([1.0, 2.0]), "x", "list"),
    (
        "sdpa numpy v",
        lambda: cl.scaled_dot_product_attention(t(2, 3, 4), t(2, 5, 4), np.ones((2, 5, 4))),
        "v",
        "ndarray",
    ),
    (
        "self_attention int x",
        lambda: cl.self_attention(torch.ones(2, 5, 6, dtype=torch.long), t(6, 4), t(6, 4), t(6, 3)),
        "x",
        "torch.int64",
    ),
    ("split_heads list", lambda: cl.split_heads([[1.0]], 1), "x", "list"),
    ("split_heads float num_heads", lambda: cl.split_heads(t(2, 3, 4), 2.0), "num_heads", "float"),
    (
        "multi_head_attention int W_v",
        lambda: cl.multi_head_attention(*mha_args()[:5], torch.ones(8, 8, dtype=torch.long), t(8, 8), 2),
        "W_v",
        "torch.int64",
    ),
    ("multi_head_attention str num_heads", lambda: cl.multi_head_attention(*mha_args(), "2"), "num_heads", "str"),
    ("layer_norm int x", lambda: cl.layer_norm(torch.ones(2, 4, dtype=torch.long), t(4), t(4)), "x", "torch.int64"),
    ("add_and_norm list", lambda: cl.add_and_norm(t(2, 4), [0.0] * 4, t(4), t(4)), "sublayer_output", "list"),
    (
        "position_wise_feed_forward int b_2",
        lambda: cl.position_wise_feed_forward(t(2, 6), t(6, 12), t(12), t(12, 6), torch.ones(6, dtype=torch.long)),
        "b_2",
        "torch.int64",
    ),
    (
        "label_smoothing_loss int logits",
        lambda: cl.label_smoothing_loss(torch.ones(4, 5, dtype=torch.long), torch.zeros(4, dtype=torch.long), 0.1),
        "logits",
        "torch.int64",
    ),
    ("label_smoothing_loss list target", lambda: cl.label_smoothing_loss(t(4, 5), [0, 1, 2, 3], 0.1), "target", "list"),
    ("padding_mask list", lambda: cl.padding_mask([[1, 0]], 0), "tokens", "list"),
    ("causal_mask float size", lambda: cl.causal_mask(3.0), "size", "float"),
    (
        "sinusoidal_positional_encoding float d_model",
        lambda: cl.sinusoidal_positional_encoding(4, 8.0),
        "d_model",
        "float",
    ),
    ("relative_position_matrix str offset", lambda: cl.relative_position_matrix("1", 8), "offset", "str"),
]


@pytest.mark.parametrize("call, arg, got", [pytest.param(*c[1:], id=c[0]) for c in TYPE_ERRORS])
def test_non_tensor_or_non_float_argument_raises_type_error_naming_it(call, arg, got):
    with pytest.raises(TypeError) as excinfo:
        call()
    message = str(excinfo.value)
    assert f"'{arg}'" in message and got in message


# A required tensor argument passed as None (e.g. the result of an unfinished function that
# returns nothing) is a non-tensor too: it must be rejected up front with a TypeError that
# names the argument, not fail later with an AttributeError or an anonymous operator error.
NONE_ARGUMENTS = [
    ("dot_score", lambda: cl.dot_score(None, t(2, 5, 4)), "query"),
    ("scaled_dot_score", lambda: cl.scaled_dot_score(t(2, 4), None), "keys"),
    ("cosine_score", lambda: cl.cosine_score(t(2, 4), None), "keys"),
    ("additive_score", lambda: cl.additive_score(t(2, 3), t(2, 5, 4), t(3, 6), t(4, 6), None), "v"),
    ("multiplicative_score", lambda: cl.multiplicative_score(t(2, 3), t(2, 5, 4), None), "W"),
    ("attention_pool", lambda: cl.attention_pool(t(2, 5), None), "values"),
    ("local_attention_weights", lambda: cl.local_attention_weights(t(2, 5), None, 2), "center"),
    ("softmax", lambda: cl.softmax(None), "x"),
    ("scaled_dot_product_attention", lambda: cl.scaled_dot_product_attention(t(2, 3, 4), None, t(2, 5, 4)), "k"),
    ("self_attention", lambda: cl.self_attention(t(2, 5, 6), t(6, 4), t(6, 4), None), "W_v"),
    ("split_heads", lambda: cl.split_heads(None, 2), "x"),
    ("merge_heads", lambda: cl.merge_heads(None), "x"),
    ("multi_head_attention", lambda: cl.multi_head_attention(*mha_args()[:6], None, 2), "W_o"),
    (
        "multi_head_attention_sum_form",
        lambda: cl.multi_head_attention_sum_form(t(2, 5, 8), None, *mha_args()[2:], 2),
        "key",
    ),
    ("layer_norm", lambda: cl.layer_norm(t(2, 8), None, t(8)), "gamma"),
    ("add_and_norm", lambda: cl.add_and_norm(t(2, 8), None, t(8), t(8)), "sublayer_output"),
    (
        "position_wise_feed_forward",
        lambda: cl.position_wise_feed_forward(t(2, 6), t(6, 12), None, t(12, 6), t(6)),
        "b_1",
    ),
    ("label_smoothing_loss", lambda: cl.label_smoothing_loss(t(4, 5), None, 0.1), "target"),
    ("padding_mask", lambda: cl.padding_mask(None, 0), "tokens"),
]


@pytest.mark.parametrize("call, arg", [pytest.param(*c[1:], id=c[0]) for c in NONE_ARGUMENTS])
def test_none_for_a_required_tensor_raises_type_error_naming_the_argument(call, arg):
    with pytest.raises(TypeError) as excinfo:
        call()
    assert f"'{arg}'" in str(excinfo.value)


def test_optional_biases_may_be_none():
    out, _ = cl.multi_head_attention(*mha_args(), 2, b_q=None, b_k=t(8), b_v=None, b_o=t(8))
    assert out.shape == (2, 5, 8)


# ---------------------------------------------------------------------------------------
# the helpers themselves
# ---------------------------------------------------------------------------------------


def test_check_shapes_binds_letters_and_broadcasts_batch_dims():
    dims = _validation.check_shapes("f", a=(t(2, 1, 3, 4), "... L D"), c=(t(5, 6, 4), "... S D"))
    assert dims == {"...": (2, 5), "L": 3, "D": 4, "S": 6}


def test_check_shapes_fixed_digit_sizes():
    assert _validation.check_shapes("f", x=(t(2, 16), "N 16")) == {"N": 2}
    with pytest.raises(ValueError, match=r"f: argument 'x' must have shape \(N=2, 16\), got shape \(2, 8\)"):
        _validation.check_shapes("f", x=(t(2, 8), "N 16"))


def test_check_shapes_non_floating_allowed_when_asked():
    dims = _validation.check_shapes("f", floating=False, x=(torch.ones(2, 3, dtype=torch.long), "N S"))
    assert dims == {"N": 2, "S": 3}
    with pytest.raises(TypeError, match="floating-point"):
        _validation.check_shapes("f", x=(torch.ones(2, 3, dtype=torch.long), "N S"))


def test_check_shapes_reports_expected_dim_count():
    with pytest.raises(ValueError, match=r"\(3 dims\), got shape \(2, 3\) \(2 dims\)"):
        _validation.check_shapes("f", x=(t(2, 3), "N L E"))
    with pytest.raises(ValueError, match=r"at least 2 dims"):
        _validation.check_shapes("f", x=(t(3), "... L E"))


def test_check_mask_accepts_broadcastable_boolean_masks_and_returns_them_unchanged():
    mask = torch.tensor([True, False, True])
    assert _validation.check_mask("f", mask, (2, 4, 3), "(N, L, S)") is mask
    assert _validation.check_mask("f", None, (2, 4, 3), "(N, L, S)") is None


def test_check_mask_rejects_masks_that_only_broadcast_to_a_bigger_shape():
    # (2, 1, 3) broadcasts with (4, 3) but the result (2, 4, 3) is not the target (4, 3).
    with pytest.raises(ValueError, match=r"must broadcast to \(L, S\) = \(4, 3\), got shape \(2, 1, 3\)"):
        _validation.check_mask("f", b(2, 1, 3), (4, 3), "(L, S)")


@pytest.mark.parametrize(
    "value, error", [(0, ValueError), (-3, ValueError), (True, TypeError), (2.0, TypeError), ("2", TypeError)]
)
def test_check_positive_int_rejects_non_positive_and_non_int(value, error):
    with pytest.raises(error, match="'n'"):
        _validation.check_positive_int("f", "n", value)


def test_check_positive_int_returns_the_value():
    assert _validation.check_positive_int("f", "n", 7) == 7
