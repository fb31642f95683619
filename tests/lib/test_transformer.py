"""Specification of course_lib.transformer: encoder/decoder layers and the full Transformer.

The reference is :class:`torch.nn.Transformer` (batch_first=True, ReLU) with copied weights.
PyTorch's masks are the inverse of ours: its ``*_key_padding_mask`` is True at padding.
In eval mode PyTorch's encoder takes a "fast path" that may leave zeros or garbage at
padded positions, so outputs are compared at real (non-padded) positions only.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import DecoderLayer, EncoderLayer, Transformer, causal_mask
from course_lib.transformer import DecoderLayerWeights, TransformerWeights

pytestmark = [
    pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
]

D_MODEL, NHEAD, FF = 16, 4, 32


def randomize_(module: nn.Module) -> nn.Module:
    """Non-trivial LayerNorm gains and biases everywhere (PyTorch initialises them to 1 and 0),
    so that swapping two norms or dropping a bias cannot go unnoticed."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 1:
                base = 1.0 if "norm" in name and name.endswith("weight") else 0.0
                p.copy_(base + 0.3 * torch.randn_like(p))
    return module


def torch_transformer(norm_first: bool, dropout: float = 0.1) -> nn.Transformer:
    m = nn.Transformer(
        d_model=D_MODEL,
        nhead=NHEAD,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=FF,
        dropout=dropout,
        batch_first=True,
        norm_first=norm_first,
    )
    return randomize_(m)


def lengths_to_keep(lengths, size):
    return torch.arange(size)[None, :] < torch.as_tensor(lengths)[:, None]


def inputs(N=3, S=6, L=5, dtype=torch.float32):
    src, tgt = torch.randn(N, S, D_MODEL, dtype=dtype), torch.randn(N, L, D_MODEL, dtype=dtype)
    src_keep = lengths_to_keep([S, S - 2, 1][:N], S)
    tgt_keep = lengths_to_keep([L, 1, L - 2][:N], L)
    return src, tgt, src_keep, tgt_keep


def run_torch(m, src, tgt, src_keep=None, tgt_keep=None):
    L = tgt.shape[1]
    kw = {}
    if src_keep is not None:
        kw.update(src_key_padding_mask=~src_keep, memory_key_padding_mask=~src_keep)
    if tgt_keep is not None:
        kw.update(tgt_key_padding_mask=~tgt_keep)
    mask = nn.Transformer.generate_square_subsequent_mask(L, dtype=tgt.dtype)
    return m(src, tgt, tgt_mask=mask, tgt_is_causal=True, **kw)


# ---------------------------------------------------------------------------------------
# Transformer.from_torch vs nn.Transformer
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_from_torch_matches_nn_transformer_in_eval_mode_with_padding(norm_first):
    m = torch_transformer(norm_first).eval()
    ours = Transformer.from_torch(m)
    assert not ours.training
    src, tgt, src_keep, tgt_keep = inputs()
    with torch.no_grad():
        expected = run_torch(m, src, tgt, src_keep, tgt_keep)
        out = ours(src, tgt, src_keep, tgt_keep)
    assert out.shape == tgt.shape
    torch.testing.assert_close(out[tgt_keep], expected[tgt_keep])


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_from_torch_matches_nn_transformer_without_padding(norm_first):
    m = torch_transformer(norm_first).eval()
    ours = Transformer.from_torch(m)
    src, tgt = torch.randn(2, 7, D_MODEL), torch.randn(2, 4, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt), run_torch(m, src, tgt))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_transformer_from_torch_matches_nn_transformer_in_train_mode_with_zero_dropout(norm_first):
    m = torch_transformer(norm_first, dropout=0.0).train()
    ours = Transformer.from_torch(m)
    assert ours.training
    src, tgt, src_keep, tgt_keep = inputs()
    src1, src2 = src.clone().requires_grad_(True), src.clone().requires_grad_(True)
    out = ours(src1, tgt, src_keep, tgt_keep)
    expected = run_torch(m, src2, tgt, src_keep, tgt_keep)
    torch.testing.assert_close(out[tgt_keep], expected[tgt_keep])
    w = torch.randn_like(out) * tgt_keep[..., None]
    (out * w).sum().backward()
    (expected * w).sum().backward()
    torch.testing.assert_close(src1.grad, src2.grad)


def test_transformer_from_torch_float64_matches_torch():
    m = torch_transformer(False).double().eval()
    ours = Transformer.from_torch(m)
    src, tgt, src_keep, tgt_keep = inputs(dtype=torch.float64)
    with torch.no_grad():
        expected = run_torch(m, src, tgt, src_keep, tgt_keep)
        out = ours(src, tgt, src_keep, tgt_keep)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out[tgt_keep], expected[tgt_keep])


def test_transformer_encode_matches_torch_encoder_at_real_positions():
    m = torch_transformer(False).eval()
    ours = Transformer.from_torch(m)
    src, _, src_keep, _ = inputs()
    with torch.no_grad():
        expected = m.encoder(src, src_key_padding_mask=~src_keep)
        memory = ours.encode(src, src_keep)
    torch.testing.assert_close(memory[src_keep], expected[src_keep])


def test_transformer_from_torch_rejects_non_relu_activation_and_other_modules():
    m = nn.Transformer(D_MODEL, NHEAD, 1, 1, FF, batch_first=True, activation="gelu")
    with pytest.raises(ValueError, match="ReLU"):
        Transformer.from_torch(m)
    with pytest.raises(TypeError):
        Transformer.from_torch(nn.Linear(2, 2))


def test_source_padding_content_does_not_change_the_output():
    model = Transformer(D_MODEL, NHEAD, 2, 2, FF, dropout=0.0).eval()
    src, tgt, src_keep, tgt_keep = inputs()
    src2 = src.clone()
    src2[~src_keep] = 100 * torch.randn(int((~src_keep).sum()), D_MODEL)
    torch.testing.assert_close(model(src2, tgt, src_keep, tgt_keep), model(src, tgt, src_keep, tgt_keep))


def test_target_padding_content_does_not_change_real_positions():
    model = Transformer(D_MODEL, NHEAD, 2, 2, FF, dropout=0.0).eval()
    src, tgt, src_keep, tgt_keep = inputs()
    tgt2 = tgt.clone()
    tgt2[~tgt_keep] = 100 * torch.randn(int((~tgt_keep).sum()), D_MODEL)
    out, out2 = model(src, tgt, src_keep, tgt_keep), model(src, tgt2, src_keep, tgt_keep)
    torch.testing.assert_close(out2[tgt_keep], out[tgt_keep])


def test_one_dimensional_src_mask_accepted_by_the_check_is_broadcast_or_rejected_with_value_error():
    # Transformer.encode checks that src_mask *broadcasts* to (N, S), so an (S,) mask passes
    # the check; it must then either work like the expanded (N, S) mask or raise a clear
    # ValueError naming src_mask, never fail deep inside with an IndexError.
    model = Transformer(D_MODEL, NHEAD, 1, 1, FF, dropout=0.0).eval()
    src, tgt = torch.randn(2, 5, D_MODEL), torch.randn(2, 3, D_MODEL)
    keep = torch.tensor([True, True, True, False, False])
    try:
        out = model(src, tgt, keep)
    except ValueError as e:
        assert "src_mask" in str(e)
    else:
        torch.testing.assert_close(out, model(src, tgt, keep.expand(2, 5)))


# ---------------------------------------------------------------------------------------
# EncoderLayer / DecoderLayer vs the PyTorch layers
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_load_torch_matches_transformer_encoder_layer(norm_first):
    layer = randomize_(
        nn.TransformerEncoderLayer(D_MODEL, NHEAD, FF, dropout=0.1, batch_first=True, norm_first=norm_first)
    ).eval()
    ours = EncoderLayer(D_MODEL, NHEAD, FF, norm_first=norm_first).load_torch_(layer).eval()
    src, _, keep, _ = inputs()
    with torch.no_grad():
        expected = layer(src, src_key_padding_mask=~keep)
        out = ours(src, keep[:, None, None, :])
    torch.testing.assert_close(out[keep], expected[keep])
    with torch.no_grad():
        torch.testing.assert_close(ours(src), layer(src))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_load_torch_matches_transformer_decoder_layer(norm_first):
    layer = randomize_(
        nn.TransformerDecoderLayer(D_MODEL, NHEAD, FF, dropout=0.1, batch_first=True, norm_first=norm_first)
    ).eval()
    ours = DecoderLayer(D_MODEL, NHEAD, FF, norm_first=norm_first).load_torch_(layer).eval()
    memory, tgt, src_keep, tgt_keep = inputs()
    L = tgt.shape[1]
    with torch.no_grad():
        expected = layer(
            tgt,
            memory,
            tgt_mask=nn.Transformer.generate_square_subsequent_mask(L),
            tgt_is_causal=True,
            tgt_key_padding_mask=~tgt_keep,
            memory_key_padding_mask=~src_keep,
        )
        out = ours(tgt, memory, causal_mask(L) & tgt_keep[:, None, None, :], src_keep[:, None, None, :])
    torch.testing.assert_close(out[tgt_keep], expected[tgt_keep])


# ---------------------------------------------------------------------------------------
# attention weights: returned with need_weights=True, never kept on the modules
# ---------------------------------------------------------------------------------------


def test_encoder_layer_returns_its_self_attention_weights_when_asked():
    layer = EncoderLayer(D_MODEL, NHEAD, FF, dropout=0.0).eval()
    src, _, keep, _ = inputs()
    mask = keep[:, None, None, :]
    with torch.no_grad():
        out, weights = layer(src, mask, need_weights=True)
        _, expected = layer.self_attn(src, src, src, mask)  # post-LN: attention sees the input itself
    torch.testing.assert_close(out, layer(src, mask))
    torch.testing.assert_close(weights, expected)
    assert weights.shape == (3, NHEAD, 6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, NHEAD, 6))
    assert (weights[~keep[:, None, None, :].expand_as(weights)] == 0).all()  # padding gets no attention


def test_decoder_layer_returns_self_and_cross_attention_weights_when_asked():
    layer = DecoderLayer(D_MODEL, NHEAD, FF, dropout=0.0).eval()
    memory, tgt, src_keep, _ = inputs()
    L = tgt.shape[1]
    with torch.no_grad():
        out, weights = layer(tgt, memory, causal_mask(L), src_keep[:, None, None, :], need_weights=True)
        plain = layer(tgt, memory, causal_mask(L), src_keep[:, None, None, :])
    torch.testing.assert_close(out, plain)
    assert isinstance(weights, DecoderLayerWeights)
    assert weights.self_attn.shape == (3, NHEAD, L, L) and weights.cross_attn.shape == (3, NHEAD, L, 6)
    torch.testing.assert_close(weights.self_attn.triu(1), torch.zeros(3, NHEAD, L, L))  # causal
    torch.testing.assert_close(weights.cross_attn.sum(-1), torch.ones(3, NHEAD, L))


def test_transformer_returns_the_weights_of_every_layer_when_asked():
    model = Transformer(D_MODEL, NHEAD, 2, 3, FF, dropout=0.0).eval()
    src, tgt, src_keep, tgt_keep = inputs()
    with torch.no_grad():
        out, weights = model(src, tgt, src_keep, tgt_keep, need_weights=True)
        memory, encoder_weights = model.encode(src, src_keep, need_weights=True)
        decoded, decoder_weights = model.decode(tgt, memory, src_keep, tgt_keep, need_weights=True)
        plain = model(src, tgt, src_keep, tgt_keep)
    torch.testing.assert_close(out, plain)
    torch.testing.assert_close(decoded, plain)
    assert isinstance(weights, TransformerWeights)
    assert len(weights.encoder) == 2 and len(weights.decoder) == 3
    assert all(w.shape == (3, NHEAD, 6, 6) for w in weights.encoder)
    assert all(w.self_attn.shape == (3, NHEAD, 5, 5) for w in weights.decoder)
    assert all(w.cross_attn.shape == (3, NHEAD, 5, 6) for w in weights.decoder)
    for ours, again in zip(weights.encoder, encoder_weights, strict=True):
        torch.testing.assert_close(ours, again)
    for ours, again in zip(weights.decoder, decoder_weights, strict=True):
        torch.testing.assert_close(ours.cross_attn, again.cross_attn)


def test_decode_step_weights_equal_the_last_row_of_the_full_decoder_weights():
    model = Transformer(D_MODEL, NHEAD, 1, 2, FF, dropout=0.0).eval()
    src, tgt, src_keep, _ = inputs()
    with torch.no_grad():
        memory = model.encode(src, src_keep)
        caches = model.start_cache(memory)
        for t in range(tgt.shape[1]):
            _, step_weights = model.decode_step(tgt[:, t : t + 1], caches, src_keep, need_weights=True)
            _, full_weights = model.decode(tgt[:, : t + 1], memory, src_keep, need_weights=True)
            for step, full in zip(step_weights, full_weights, strict=True):
                torch.testing.assert_close(step.self_attn, full.self_attn[:, :, -1:])  # (N, H, 1, t + 1)
                torch.testing.assert_close(step.cross_attn, full.cross_attn[:, :, -1:])  # (N, H, 1, S)


def test_layers_keep_no_attention_weights_after_a_forward():
    model = Transformer(D_MODEL, NHEAD, 1, 1, FF, dropout=0.0).eval()
    src, tgt, _, _ = inputs()
    with torch.no_grad():
        model(src, tgt)
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        assert not [name for name in vars(layer) if "weights" in name]


# ---------------------------------------------------------------------------------------
# the residual blocks are named by role; checkpoints with the old names still load
# ---------------------------------------------------------------------------------------


def test_residual_blocks_are_named_by_their_sublayer():
    model = Transformer(D_MODEL, NHEAD, 1, 1, FF)
    blocks = {key.split(".")[2] for key in model.state_dict() if "_block." in key}
    assert blocks == {"self_attn_block", "cross_attn_block", "ff_block"}


def test_a_state_dict_with_the_old_block_names_still_loads():
    old_names = {"self_attn_block": "block1", "cross_attn_block": "block2", "ff_block": "block3"}
    torch.manual_seed(0)
    source = randomize_(Transformer(D_MODEL, NHEAD, 1, 2, FF, dropout=0.0)).eval()
    old = {}
    for key, value in source.state_dict().items():
        stack, index, name, rest = key.split(".", 3) if "_block." in key else (key, "", "", "")
        if name:
            name = "block2" if stack == "encoder_layers" and name == "ff_block" else old_names[name]
            key = f"{stack}.{index}.{name}.{rest}"
        old[key] = value
    assert "encoder_layers.0.block2.norm.weight" in old and "decoder_layers.1.block3.norm.bias" in old
    loaded = Transformer(D_MODEL, NHEAD, 1, 2, FF, dropout=0.0).eval()
    loaded.load_state_dict(old)  # strict: every key must find its parameter
    src, tgt, _, _ = inputs()
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt), source(src, tgt))


def test_load_torch_rejects_a_gelu_layer():
    layer = nn.TransformerEncoderLayer(D_MODEL, NHEAD, FF, activation="gelu", batch_first=True)
    with pytest.raises(ValueError, match="ReLU"):
        EncoderLayer(D_MODEL, NHEAD, FF).load_torch_(layer)


# ---------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------


@settings(max_examples=25)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    S=st.integers(1, 5),
    L=st.integers(2, 6),
    norm_first=st.booleans(),
    data=st.data(),
)
def test_decoder_output_at_t_does_not_depend_on_later_targets(seed, n, S, L, norm_first, data):
    t = data.draw(st.integers(0, L - 2))
    torch.manual_seed(seed)
    model = Transformer(D_MODEL, NHEAD, 1, 2, FF, dropout=0.0, norm_first=norm_first).eval()
    src, tgt = torch.randn(n, S, D_MODEL), torch.randn(n, L, D_MODEL)
    tgt2 = tgt.clone()
    tgt2[:, t + 1 :] = 10 * torch.randn(n, L - t - 1, D_MODEL)
    with torch.no_grad():
        out, out2 = model(src, tgt), model(src, tgt2)
    torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1])
    assert not torch.allclose(out2[:, t + 1 :], out[:, t + 1 :])


@settings(max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 3), S=st.integers(1, 6), norm_first=st.booleans())
def test_encoder_layer_without_positions_is_permutation_equivariant(seed, n, S, norm_first):
    torch.manual_seed(seed)
    layer = EncoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, norm_first=norm_first).eval()
    x = torch.randn(n, S, D_MODEL)
    keep = torch.rand(n, S) < 0.7
    keep[:, 0] = True
    perm = torch.randperm(S)
    with torch.no_grad():
        out = layer(x, keep[:, None, None, :])
        out_p = layer(x[:, perm], keep[:, perm][:, None, None, :])
    torch.testing.assert_close(out_p, out[:, perm])


@pytest.mark.parametrize("norm_first", [False, True])
def test_load_torch_refuses_a_layer_with_the_other_norm_arrangement(norm_first):
    theirs = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=not norm_first)
    ours = EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first)
    with pytest.raises(ValueError, match="norm_first"):
        ours.load_torch_(theirs)


def test_load_torch_refuses_a_layer_without_biases():
    theirs = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True, bias=False)
    with pytest.raises(ValueError, match="bias=False"):
        DecoderLayer(16, 4, 32, dropout=0.0).load_torch_(theirs)


def test_without_weights_the_transformer_takes_the_fused_path_and_gives_the_same_output(monkeypatch):
    from test_decoding import transformer

    m = transformer()  # the decoding tests' small seq2seq transformer, two layers each side
    src, tgt = torch.randint(3, 13, (4, 7)), torch.randint(3, 13, (4, 6))
    src[0, 5:], tgt[1, 4:] = 0, 0  # padding in both
    slow, _ = m(src, tgt, need_weights=True)

    def formed(*args, **kwargs):
        raise AssertionError("the weights were formed")

    monkeypatch.setattr("course_lib.multihead.scaled_dot_product_attention", formed)
    monkeypatch.setattr("course_lib.layernorm.layer_norm", formed)  # the fused norm too
    fast = m(src, tgt)
    torch.testing.assert_close(fast, slow)
