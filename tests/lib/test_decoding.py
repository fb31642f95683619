"""Specification of decoding: the Decodable protocol, KV cache, greedy and beam search.

The GRU models are those of ``test_seq2seq`` (``make_model``, ``VARIANTS``, ``batch``).
"""

import pytest
import torch
from test_seq2seq import VARIANTS, batch, make_model

from course_lib import Seq2SeqAttention
from course_lib.decoding import Decodable, beam_search, greedy_decode
from course_lib.models import MODELS, build_model
from course_lib.tasks import BOS, EOS, PAD, get_task


def transformer(norm_first=True, seed=0, **kwargs):
    torch.manual_seed(seed)
    cfg = dict(
        d_model=32,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=64,
        dropout=0.0,
        norm_first=norm_first,
        max_len=300,
    )
    return build_model("transformer", 13, 13, **{**cfg, **kwargs}).eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_kv_cache_step_equals_last_row_of_full_decoder(norm_first):
    model = transformer(norm_first)
    src = torch.randint(3, 13, (3, 7))
    src[1, 4:] = PAD
    prefix = torch.randint(3, 13, (3, 6))
    prefix[:, 0] = BOS
    state = model.start(src, use_cache=True)
    full = model.start(src, use_cache=False)
    for t in range(prefix.shape[1]):
        cached, state, w_cached = model.next_log_probs(state, prefix[:, t])
        recomputed, full, w_full = model.next_log_probs(full, prefix[:, t])
        torch.testing.assert_close(cached, recomputed)
        torch.testing.assert_close(w_cached, w_full)
        assert (w_cached[1, 4:] == 0).all()  # padding gets no attention


@pytest.mark.parametrize("seed", range(3))
def test_kv_cache_decoding_gives_exactly_the_tokens_of_full_recomputation(seed):
    model = transformer(seed=seed)
    src = torch.randint(3, 13, (4, 9), generator=torch.Generator().manual_seed(seed))
    cached = greedy_decode(model, src, max_len=64, use_cache=True)
    recomputed = greedy_decode(model, src, max_len=64, use_cache=False)
    assert torch.equal(cached, recomputed)


def test_greedy_decode_pads_after_eos_and_returns_weights():
    model = transformer()
    with torch.no_grad():  # make <eos> the best token after two steps for row 0 only
        model.generator.bias.zero_()
    src = torch.randint(3, 13, (2, 5))
    tokens, weights = greedy_decode(model, src, max_len=10, return_weights=True)
    assert tokens.shape[0] == 2 and tokens.shape[1] <= 10
    assert weights.shape == (2, tokens.shape[1], 5)
    for row in tokens.tolist():
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1 :])


@pytest.mark.parametrize("name", MODELS)
def test_every_model_is_decodable(name):
    model = build_model(name, 13, 13)
    assert isinstance(model, Decodable)
    assert isinstance(model, Seq2SeqAttention) == (name != "transformer")  # one GRU model class


@pytest.mark.parametrize("config", VARIANTS)
def test_greedy_decode_of_seq2seq_attention_is_the_argmax_of_teacher_forcing_on_its_own_output(config):
    model = make_model(config).eval()
    src, _, _ = batch()
    tokens, weights = greedy_decode(model, src, max_len=6, return_weights=True, stop_at_eos=False)
    assert tokens.shape == (3, 6) and tokens.dtype == torch.long
    assert weights.shape == (3, 6, 6)
    tgt_in = torch.cat([torch.full((3, 1), BOS), tokens[:, :-1]], dim=1)  # (N, T)
    with torch.no_grad():
        logits, tf_weights = model(src, tgt_in)
    assert torch.equal(logits.argmax(-1), tokens)
    torch.testing.assert_close(weights, tf_weights)


@pytest.mark.parametrize("config", VARIANTS)
def test_greedy_decode_stops_when_every_sequence_has_emitted_eos(config):
    model = make_model(config).eval()
    with torch.no_grad():
        model.out.bias[EOS] = 1e4  # <eos> wins every argmax
    src, _, _ = batch()
    tokens, weights = greedy_decode(model, src, max_len=10, return_weights=True)
    assert tokens.shape == (3, 1) and weights.shape == (3, 1, 6)
    assert (tokens == EOS).all()


@pytest.mark.parametrize("name", MODELS)
def test_stopping_at_eos_pads_after_each_rows_eos_and_changes_nothing_before_it(name):
    torch.manual_seed(0)
    model = build_model(name, 13, 13).eval()
    src = torch.randint(3, 13, (6, 7))
    output_layer = model.generator if name == "transformer" else model.out
    rows_ending_early = 0
    for eos_bias in (0.0, 1.0, 2.0, 3.0, 5.0):
        with torch.no_grad():  # more and more rows end early
            output_layer.bias[EOS] = eos_bias
        free = greedy_decode(model, src, max_len=8, stop_at_eos=False)
        stopped = greedy_decode(model, src, max_len=8)
        after_eos = (free == EOS).long().cumsum(1) - (free == EOS).long() > 0  # (N, 8): past the first <eos>
        expected = free.masked_fill(after_eos, PAD)  # (N, 8)
        finished = (free == EOS).any(1)
        T = 8 if not finished.all() else int(((free == EOS).long().argmax(1)).max()) + 1
        assert torch.equal(stopped, expected[:, :T])
        rows_ending_early += int(((free == EOS).long().argmax(1) < 7)[finished].sum())
    assert rows_ending_early > 0


def test_greedy_decode_rejects_a_max_len_that_is_not_positive():
    model = transformer()
    with pytest.raises(ValueError, match="'max_len' must be positive"):
        greedy_decode(model, torch.ones(1, 3, dtype=torch.long), max_len=0)


def sequence_log_prob(model, src, tokens):
    """log p(tokens | src) by feeding the tokens one at a time."""
    state, y, total = model.start(src), torch.tensor([BOS]), 0.0
    for token in tokens:
        log_probs, state, _ = model.next_log_probs(state, y)
        total += log_probs[0, token].item()
        y = torch.tensor([token])
    return total


@pytest.mark.parametrize("name", ["transformer", "bahdanau", "luong"])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_beam_search_never_finds_a_less_likely_output_than_greedy(name, beam_size):
    torch.manual_seed(1)
    task = get_task("dates")
    model = build_model(name, len(task.src_vocab), len(task.tgt_vocab)).eval()
    with torch.no_grad():  # nudge <eos> so that the untrained model finishes some outputs
        (model.generator if name == "transformer" else model.out).bias[EOS] += 2.0
    src, _, _ = task.batch(task.examples("test", 4, seed=0))
    greedy = greedy_decode(model, src, max_len=11)
    compared = 0
    for i in range(4):
        row = greedy[i].tolist()
        if EOS not in row:
            continue  # an unfinished greedy output is not a candidate of beam search
        row, compared = row[: row.index(EOS) + 1], compared + 1
        beam = beam_search(model, src[i : i + 1], beam_size=beam_size, max_len=11, alpha=0.0)
        with torch.no_grad():
            assert (
                sequence_log_prob(model, src[i : i + 1], beam) >= sequence_log_prob(model, src[i : i + 1], row) - 1e-5
            )
    assert compared > 0


class _Table(torch.nn.Module):
    """A fake model whose next-token distribution depends only on the prefix, from a table."""

    def __init__(self, table, default=None):
        super().__init__()
        self.table, self.default = table, default or {EOS: 1.0}

    def start(self, src, use_cache=True):
        return {"prefix": torch.zeros(src.shape[0], 0, dtype=torch.long)}

    def next_log_probs(self, state, y_prev):
        prefix = torch.cat([state["prefix"], y_prev[:, None]], 1)
        rows = [self.table.get(tuple(p.tolist()), self.default) for p in prefix]
        probs = torch.full((len(rows), 5), 1e-9)
        for i, row in enumerate(rows):
            for token, p in row.items():
                probs[i, token] = p
        return probs.log(), {"prefix": prefix}, torch.zeros(len(rows), 1)


def test_beam_search_finds_a_better_sequence_than_greedy():
    # Greedy takes 3 (p=0.6) and then can only end badly; beam search finds 4, 4, <eos>.
    table = {
        (BOS,): {3: 0.6, 4: 0.4},
        (BOS, 3): {3: 0.34, 4: 0.33, EOS: 0.33},
        (BOS, 4): {4: 1.0},
        (BOS, 4, 4): {EOS: 1.0},
        (BOS, 3, 3): {EOS: 0.5, 3: 0.5},
    }
    model, src = _Table(table), torch.zeros(1, 1, dtype=torch.long)
    assert greedy_decode(model, src, max_len=5)[0].tolist()[:2] == [3, 3]
    assert beam_search(model, src, beam_size=2, max_len=5, alpha=0.0) == [4, 4, EOS]


def test_length_normalisation_can_prefer_a_longer_output():
    # [<eos>] has p = 0.3; [3, 3, 3, <eos>] has p = 0.25 overall but 0.25 ** (1/4) per token.
    # Unknown prefixes continue uniformly over the 5 tokens, so no other output comes close.
    uniform = {t: 0.2 for t in range(5)}
    table = {
        (BOS,): {EOS: 0.3, 3: 0.25, 4: 0.25, 0: 0.2},
        (BOS, 3): {3: 1.0},
        (BOS, 3, 3): {3: 1.0},
        (BOS, 3, 3, 3): {EOS: 1.0},
    }
    model, src = _Table(table, default=uniform), torch.zeros(1, 1, dtype=torch.long)
    assert beam_search(model, src, beam_size=3, max_len=8, alpha=0.0) == [EOS]
    assert beam_search(model, src, beam_size=3, max_len=8, alpha=1.0) == [3, 3, 3, EOS]


def test_beam_search_rejects_a_batch_and_a_bad_beam_size():
    model = transformer()
    with pytest.raises(ValueError, match=r"'src' must have shape \(1, S\)"):
        beam_search(model, torch.ones(2, 3, dtype=torch.long), 2, 5)
    with pytest.raises(ValueError, match="'beam_size' must be a positive int"):
        beam_search(model, torch.ones(1, 3, dtype=torch.long), 0, 5)
