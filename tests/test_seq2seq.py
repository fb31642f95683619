"""Specification of course_lib.seq2seq.Seq2SeqAttention, a GRU encoder-decoder with attention."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib import Seq2SeqAttention

SRC_V, TGT_V, EMB, HID, PAD = 11, 13, 8, 12, 0
HALF_WINDOW = 2

VARIANTS = [
    pytest.param(dict(attention="bahdanau"), id="bahdanau-additive"),
    pytest.param(dict(attention="luong", score="dot"), id="luong-dot"),
    pytest.param(dict(attention="luong", score="general"), id="luong-general"),
    pytest.param(dict(attention="luong", score="concat"), id="luong-concat"),
    pytest.param(dict(attention="luong", score="general", local="monotonic"), id="luong-local-monotonic"),
    pytest.param(dict(attention="luong", score="dot", local="predictive"), id="luong-local-predictive"),
]
GLOBAL_VARIANTS = [v for v in VARIANTS if "local" not in v.values[0]]
LOCAL_VARIANTS = [v for v in VARIANTS if "local" in v.values[0]]


def make_model(config, seed=0):
    torch.manual_seed(seed)
    return Seq2SeqAttention(SRC_V, TGT_V, embed_dim=EMB, hidden_dim=HID, half_window=HALF_WINDOW, pad_id=PAD, **config)


def batch(lengths=(6, 4, 1), S=6, T=5, seed=1):
    """Right-padded source ids (real ids in 1..SRC_V-1) and target input ids."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, SRC_V, (len(lengths), S), generator=g)
    keep = torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]
    src = src.masked_fill(~keep, PAD)
    tgt_in = torch.randint(1, TGT_V, (len(lengths), T), generator=g)
    return src, tgt_in, keep


@pytest.mark.parametrize("config", VARIANTS)
def test_forward_returns_logits_n_t_v_and_weights_n_t_s(config):
    model = make_model(config)
    src, tgt_in, _ = batch()
    logits, weights = model(src, tgt_in)
    assert logits.shape == (3, 5, TGT_V)
    assert weights.shape == (3, 5, 6)
    assert torch.isfinite(logits).all() and torch.isfinite(weights).all()


@pytest.mark.parametrize("config", GLOBAL_VARIANTS)
def test_global_weights_sum_to_one_over_real_source_tokens_and_are_zero_at_padding(config):
    model = make_model(config)
    src, tgt_in, keep = batch()
    _, weights = model(src, tgt_in)
    pad = ~keep[:, None, :].expand_as(weights)
    assert (weights[pad] == 0).all()
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 5))


@pytest.mark.parametrize("config", LOCAL_VARIANTS)
def test_local_weights_are_zero_at_padding_and_sum_to_at_most_one(config):
    model = make_model(config)
    src, tgt_in, keep = batch()
    _, weights = model(src, tgt_in)
    assert (weights[~keep[:, None, :].expand_as(weights)] == 0).all()
    assert (weights >= 0).all() and (weights.sum(-1) <= 1 + 1e-6).all()


def test_local_monotonic_window_is_centred_on_the_target_step():
    model = make_model(dict(attention="luong", local="monotonic"))
    src, tgt_in, _ = batch(lengths=(9, 9), S=9, T=7)
    _, weights = model(src, tgt_in)
    for t in range(7):
        for s in range(9):
            if abs(s - t) > HALF_WINDOW:
                assert (weights[:, t, s] == 0).all()
            else:
                assert (weights[:, t, s] > 0).all()


@pytest.mark.parametrize("config", VARIANTS)
def test_gradients_reach_every_parameter(config):
    model = make_model(config)
    src, tgt_in, _ = batch()
    logits, _ = model(src, tgt_in)
    target = torch.randint(0, TGT_V, (3, 5))
    F.cross_entropy(logits.reshape(-1, TGT_V), target.reshape(-1)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"no gradient reached {name}"
        assert torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"zero gradient for {name}"


@pytest.mark.parametrize("config", VARIANTS)
def test_extra_padding_beyond_the_real_tokens_does_not_change_the_outputs(config):
    model = make_model(config).eval()
    src, tgt_in, _ = batch()
    padded = torch.cat([src, torch.full((3, 4), PAD)], dim=1)
    logits, weights = model(src, tgt_in)
    logits_p, weights_p = model(padded, tgt_in)
    torch.testing.assert_close(logits_p, logits)
    torch.testing.assert_close(weights_p[..., :6], weights)
    assert (weights_p[..., 6:] == 0).all()


@pytest.mark.parametrize("config", VARIANTS)
def test_an_explicit_src_mask_equal_to_the_padding_mask_changes_nothing(config):
    model = make_model(config).eval()
    src, tgt_in, keep = batch()
    torch.testing.assert_close(model(src, tgt_in, keep), model(src, tgt_in))


def test_a_src_mask_accepted_by_the_check_is_broadcast_or_rejected_with_value_error():
    # encode checks that src_mask *broadcasts* to (N, S); a mask that passes the check must
    # then work like its expansion, or be rejected up front with a ValueError naming it.
    model = make_model(dict(attention="luong")).eval()
    src, tgt_in, _ = batch(lengths=(4, 4, 4), S=6)
    keep = torch.tensor([True, True, True, True, False, False])
    for mask in (keep, keep[None, :]):
        try:
            out = model(src, tgt_in, mask)
        except ValueError as e:
            assert "src_mask" in str(e)
        else:
            torch.testing.assert_close(out, model(src, tgt_in, keep.expand(3, 6)))


@pytest.mark.parametrize("config", VARIANTS)
def test_logits_at_step_t_do_not_depend_on_later_target_inputs(config):
    model = make_model(config).eval()
    src, tgt_in, _ = batch()
    changed = tgt_in.clone()
    changed[:, 3:] = (changed[:, 3:] % (TGT_V - 1)) + 1  # different real ids
    assert not torch.equal(changed, tgt_in)
    logits, weights = model(src, tgt_in)
    logits2, weights2 = model(src, changed)
    torch.testing.assert_close(logits2[:, :3], logits[:, :3])
    torch.testing.assert_close(weights2[:, :3], weights[:, :3])
    assert not torch.allclose(logits2[:, 3:], logits[:, 3:])


def test_bahdanau_scores_the_previous_state_so_first_weights_ignore_the_first_input():
    src, tgt_in, _ = batch()
    changed = tgt_in.clone()
    changed[:, 0] = (changed[:, 0] % (TGT_V - 1)) + 1
    bahdanau = make_model(dict(attention="bahdanau")).eval()
    torch.testing.assert_close(bahdanau(src, changed)[1][:, 0], bahdanau(src, tgt_in)[1][:, 0])
    luong = make_model(dict(attention="luong")).eval()  # Luong scores the *new* state
    assert not torch.allclose(luong(src, changed)[1][:, 0], luong(src, tgt_in)[1][:, 0])


@pytest.mark.parametrize("config", VARIANTS)
def test_greedy_decode_returns_tokens_and_weights_consistent_with_teacher_forcing(config):
    model = make_model(config).eval()
    src, _, _ = batch()
    bos = 1
    tokens, weights = model.greedy_decode(src, bos_id=bos, eos_id=-1, max_len=6)  # eos never produced
    assert tokens.shape == (3, 6) and tokens.dtype == torch.long
    assert weights.shape == (3, 6, 6)
    tgt_in = torch.cat([torch.full((3, 1), bos), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logits, tf_weights = model(src, tgt_in)
    assert torch.equal(logits.argmax(-1), tokens)
    torch.testing.assert_close(weights, tf_weights)


@pytest.mark.parametrize("config", VARIANTS)
def test_greedy_decode_stops_when_every_sequence_has_emitted_eos(config):
    model = make_model(config).eval()
    eos = 2
    with torch.no_grad():
        model.out.bias[eos] = 1e4  # eos wins every argmax
    src, _, _ = batch()
    tokens, weights = model.greedy_decode(src, bos_id=1, eos_id=eos, max_len=10)
    assert tokens.shape == (3, 1) and weights.shape == (3, 1, 6)
    assert (tokens == eos).all()


def test_greedy_decode_pads_sequences_after_their_eos():
    model = make_model(dict(attention="luong")).eval()
    src, _, _ = batch()
    tokens, _ = model.greedy_decode(src, bos_id=1, eos_id=-1, max_len=5)
    eos = int(tokens[0, 0])  # make the first sequence's first token the eos
    tokens, _ = model.greedy_decode(src, bos_id=1, eos_id=eos, max_len=5)
    for row in tokens:
        hits = (row == eos).nonzero()
        if len(hits):
            assert (row[int(hits[0]) + 1 :] == PAD).all()
    assert tokens[0, 0] == eos


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(attention="transformer"),
        dict(attention="bahdanau", score="dot"),
        dict(attention="luong", score="additive"),
        dict(attention="bahdanau", local="monotonic"),
        dict(attention="luong", local="sliding"),
    ],
)
def test_invalid_configurations_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        Seq2SeqAttention(SRC_V, TGT_V, **kwargs)
