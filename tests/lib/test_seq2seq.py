"""Specification of course_lib.seq2seq.Seq2SeqAttention, a GRU encoder-decoder with attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import Seq2SeqAttention, local_attention_weights

SRC_V, TGT_V, EMB, HID, PAD = 11, 13, 8, 12, 0
HALF_WINDOW = 2

VARIANTS = [
    pytest.param(dict(attention="bahdanau"), id="bahdanau-additive"),
    pytest.param(dict(attention="luong", score="dot"), id="luong-dot"),
    pytest.param(dict(attention="luong", score="general"), id="luong-general"),
    pytest.param(dict(attention="luong", score="concat"), id="luong-concat"),
    pytest.param(dict(attention="luong", score="general", local="monotonic"), id="luong-local-monotonic"),
    pytest.param(dict(attention="luong", score="dot", local="predictive"), id="luong-local-predictive"),
    pytest.param(
        dict(attention="luong", score="general", local="monotonic", monotonic_gaussian=True),
        id="luong-local-monotonic-gaussian",
    ),
    pytest.param(dict(attention="bahdanau", fixed_context=True), id="no-attention-fixed-context"),
]
ATTENDING = [v for v in VARIANTS if not v.values[0].get("fixed_context")]
GLOBAL_VARIANTS = [v for v in ATTENDING if "local" not in v.values[0]]
LOCAL_VARIANTS = [v for v in ATTENDING if "local" in v.values[0]]


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


def test_forward_checks_its_arguments_before_encoding():
    model = make_model(dict(attention="bahdanau"))
    with pytest.raises(ValueError, match=r"Seq2SeqAttention\.forward: argument 'src' must have shape \(N, S\)"):
        model(torch.ones(4, dtype=torch.long), torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"Seq2SeqAttention\.forward: argument 'tgt_in'"):
        model(torch.ones(2, 4, dtype=torch.long), torch.ones(3, 3, dtype=torch.long))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(attention="transformer"),
        dict(attention="bahdanau", score="dot"),
        dict(attention="luong", score="additive"),
        dict(attention="bahdanau", local="monotonic"),
        dict(attention="luong", local="sliding"),
        dict(attention="luong", monotonic_gaussian=True),  # global: there is no window
        dict(attention="luong", local="predictive", monotonic_gaussian=True),  # local-p has the Gaussian anyway
        dict(attention="luong", fixed_context=True),  # the no-attention model uses Bahdanau's decoder
    ],
)
def test_invalid_configurations_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        Seq2SeqAttention(SRC_V, TGT_V, **kwargs)


@pytest.mark.parametrize("name", ["monotonic_gaussian", "fixed_context"])
def test_the_switches_must_be_bools(name):
    with pytest.raises(TypeError, match=name):
        Seq2SeqAttention(SRC_V, TGT_V, attention="luong", local="monotonic", **{name: 1})


# ---------------------------------------------------------------------------------------
# Local attention as in Luong et al. (2015): the Gaussian belongs to local-p (eq. 10) only
# ---------------------------------------------------------------------------------------


def _naive_window_softmax(scores, keep, center, r, gaussian):
    """Position by position: softmax of the scores over the real positions with |s - p| <= r,
    zero elsewhere; times exp(-(s - p)^2 / (2 (r/2)^2)) if ``gaussian``."""
    N, S = scores.shape
    out = torch.zeros(N, S, dtype=torch.float64)
    for n in range(N):
        p = float(center[n])
        window = [s for s in range(S) if abs(s - p) <= r and bool(keep[n, s])]
        if not window:
            continue
        m = max(float(scores[n, s]) for s in window)
        z = sum(math.exp(float(scores[n, s]) - m) for s in window)
        for s in window:
            out[n, s] = math.exp(float(scores[n, s]) - m) / z
            if gaussian:
                out[n, s] *= math.exp(-((s - p) ** 2) / (2 * (r / 2) ** 2))
    return out.float()


def _luong_steps(model, src, tgt_in, keep):
    """Run the decoder step by step; yield (t, h_t, weights_t, enc) with h_t the state scored at t."""
    enc, state = model.encode(src, keep)
    for t in range(tgt_in.shape[1]):
        _, state, w = model.step(tgt_in[:, t], state, enc, t)
        yield t, state[0], w, enc


def test_local_m_weights_are_the_softmax_inside_the_window_without_a_gaussian():
    # Luong et al. (2015): local-m sets p_t = t and uses the plain alignment (eq. 7) inside
    # the window [t - r, t + r]; positions outside (and padding) get weight 0.
    model = make_model(dict(attention="luong", score="dot", local="monotonic")).eval()
    src, tgt_in, keep = batch(lengths=(9, 6, 3), S=9, T=8)
    with torch.no_grad():
        for t, h, w, enc in _luong_steps(model, src, tgt_in, keep):
            scores = torch.einsum("nd,nsd->ns", h, enc.memory)  # dot score of h_t with every h̄_s
            center = torch.full((3,), float(t))
            expected = _naive_window_softmax(scores, keep, center, HALF_WINDOW, gaussian=False)
            torch.testing.assert_close(w, expected)
            # where the window holds a real token, the row sums to 1 (no Gaussian pulls it down)
            has_window = keep[:, max(0, t - HALF_WINDOW) : t + HALF_WINDOW + 1].any(-1)
            torch.testing.assert_close(w.sum(-1)[has_window], torch.ones(int(has_window.sum())))


def test_local_p_weights_keep_the_gaussian_around_the_predicted_centre():
    model = make_model(dict(attention="luong", score="dot", local="predictive")).eval()
    src, tgt_in, keep = batch(lengths=(9, 6, 3), S=9, T=6)
    lengths = keep.sum(-1).float()
    with torch.no_grad():
        for _t, h, w, enc in _luong_steps(model, src, tgt_in, keep):
            scores = torch.einsum("nd,nsd->ns", h, enc.memory)
            center = lengths * torch.sigmoid(model.v_p(torch.tanh(model.W_p(h)))).squeeze(-1)  # eq. 9
            expected = _naive_window_softmax(scores, keep, center, HALF_WINDOW, gaussian=True)  # eq. 10
            torch.testing.assert_close(w, expected)


def test_monotonic_gaussian_is_the_lecture_notes_variant_with_the_gaussian_on_local_m():
    paper = make_model(dict(attention="luong", score="dot", local="monotonic")).eval()
    notes = make_model(dict(attention="luong", score="dot", local="monotonic", monotonic_gaussian=True)).eval()
    torch.testing.assert_close(dict(notes.named_parameters()), dict(paper.named_parameters()))
    src, tgt_in, keep = batch(lengths=(9, 6, 3), S=9, T=6)
    with torch.no_grad():
        for t, h, w, enc in _luong_steps(notes, src, tgt_in, keep):
            scores = torch.einsum("nd,nsd->ns", h, enc.memory).masked_fill(~keep, float("-inf"))
            center = torch.full((3,), float(t))
            torch.testing.assert_close(w, local_attention_weights(scores, center, HALF_WINDOW))
            torch.testing.assert_close(w, _naive_window_softmax(scores, keep, center, HALF_WINDOW, gaussian=True))
        _, w_paper = paper(src, tgt_in, keep)
        _, w_notes = notes(src, tgt_in, keep)
    assert not torch.allclose(w_paper, w_notes)
    # At step 0 the states are the same, so the two differ exactly by the Gaussian factor.
    gaussian = torch.exp(-((torch.arange(9.0) - 0) ** 2) / (2 * (HALF_WINDOW / 2) ** 2))
    torch.testing.assert_close(w_notes[:, 0], w_paper[:, 0] * gaussian)


# ---------------------------------------------------------------------------------------
# No attention: a fixed summary of the source (Cho et al. 2014; Bahdanau's RNNenc baseline)
# ---------------------------------------------------------------------------------------


def test_fixed_context_model_has_no_score_parameters_and_returns_zero_weights():
    model = make_model(dict(attention="bahdanau", fixed_context=True)).eval()
    names = {name for name, _ in model.named_parameters()}
    assert not names & {"W_q", "W_k", "v", "W"}
    src, tgt_in, _ = batch()
    logits, weights = model(src, tgt_in)
    assert logits.shape == (3, 5, TGT_V)
    assert weights.shape == (3, 5, 6) and (weights == 0).all()


def test_fixed_context_is_a_summary_of_both_encoder_directions_of_the_real_tokens():
    # c = W [forward state after the last real token; backward state after the first] + b,
    # computed here by running the GRU on each unpadded source alone.
    model = make_model(dict(attention="bahdanau", fixed_context=True)).eval()
    src, _, keep = batch()
    with torch.no_grad():
        enc, _ = model.encode(src)
        assert enc.memory is None and enc.summary.shape == (3, HID)
        for n, length in enumerate(keep.sum(-1).tolist()):
            _, h_n = model.encoder(model.src_embed(src[n : n + 1, :length]))  # (2, 1, HID)
            expected = model.to_memory(torch.cat([h_n[0], h_n[1]], -1))[0]
            torch.testing.assert_close(enc.summary[n], expected)


def test_fixed_context_decoder_sees_the_source_only_through_the_summary():
    model = make_model(dict(attention="bahdanau", fixed_context=True)).eval()
    src, tgt_in, _ = batch(lengths=(6, 6, 6))
    other = src.flip(1)
    with torch.no_grad():
        enc, state = model.encode(src)
        enc_other, _ = model.encode(other)
        enc_other.summary = enc.summary  # another source, the same summary and first state
        for t in range(tgt_in.shape[1]):
            a = model.step(tgt_in[:, t], state, enc, t)
            b = model.step(tgt_in[:, t], state, enc_other, t)
            torch.testing.assert_close(a[0], b[0])
            state = a[1]


def test_fixed_context_passes_through_build_model_for_default_config_model_kwargs():
    from course_lib.models import build_model

    model = build_model("bahdanau", SRC_V, TGT_V, embed_dim=EMB, hidden_dim=HID, fixed_context=True)
    assert model.fixed_context and model.attention == "bahdanau"
