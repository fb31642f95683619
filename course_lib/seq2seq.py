"""A GRU encoder–decoder with Bahdanau or Luong attention (seq2seq chapter).

The encoder is a bidirectional GRU; its annotations are projected to the decoder's
width and serve as the keys and values of attention. The decoder runs one step per
target token:

- **Bahdanau** (2014): score the *previous* decoder state against the annotations with
  the additive score, pool a context vector, then feed ``[embedding; context]`` to the
  GRU; the output layer sees ``[state; context; embedding]``.
- **Luong** (2015): run the GRU first (with "input feeding" of the previous attentional
  state), score the *new* state with ``dot``, ``general`` or ``concat``, pool a context,
  and form the attentional state :math:`\\tilde h_t = \\tanh(W_c[c_t; h_t])`. Global
  attention pools over all source positions; local attention over a window of
  half-width :math:`r` around a centre :math:`p_t`:

  - local-m (``local="monotonic"``): :math:`p_t = t`, and the weights are the softmax of
    the scores inside the window, zero outside (Luong et al.'s eq. 7 restricted to the
    window). No Gaussian: ``monotonic_gaussian=True`` multiplies by it all the same, a
    variant found in lecture notes, not in the paper.
  - local-p (``local="predictive"``): :math:`p_t = S\\,\\sigma(v_p^\\top \\tanh(W_p h_t))`,
    and the window softmax is multiplied by a Gaussian centred on :math:`p_t` with
    :math:`\\sigma = r/2` (their eq. 10, :func:`course_lib.local_attention_weights`).

- **No attention** (``fixed_context=True``, Bahdanau's decoder only): the decoder sees one
  fixed summary of the source, the same context :math:`c` at every step, computed from the
  final states of the two encoder directions. This is the RNN encoder–decoder of Cho et
  al. (2014), the "RNNenc" baseline that Bahdanau et al. compare attention with.

Our symbols: :math:`d_h` (``hidden_dim``) is the GRU width, :math:`r` (``half_window``) the
window half-width, :math:`S` the source length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._validation import check_mask, check_positive_int, check_shapes
from .pooling import attention_pool, local_attention_weights
from .scores import additive_score_projected, dot_score, multiplicative_score
from .softmax import _masked_softmax

__all__ = ["Seq2SeqAttention"]

_SCORES = {"bahdanau": ("additive",), "luong": ("dot", "general", "concat")}
_DEFAULT_SCORE = {"bahdanau": "additive", "luong": "general"}
_LOCAL = (None, "monotonic", "predictive")

#: The decoder's state between steps: :math:`s_{t-1}` (Bahdanau), or :math:`(h_t, \tilde h_t)` (Luong).
DecoderState: TypeAlias = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


@dataclass
class EncodedSource:
    """What the decoder needs from the encoder, computed once per source batch."""

    memory: torch.Tensor | None  # (N, S, d_h) keys and values of attention (None without attention)
    keys_proj: torch.Tensor | None  # (N, S, d_h) for additive scores, projected once
    mask: torch.Tensor  # (N, S) True at real tokens
    lengths: torch.Tensor  # (N,) number of real tokens
    summary: torch.Tensor | None = None  # (N, d_h) the fixed context, only with fixed_context=True


class Seq2SeqAttention(nn.Module):
    """GRU encoder–decoder with attention.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        embed_dim: width of the token embeddings.
        hidden_dim: :math:`d_h`, the width of the decoder state (the encoder has
            :math:`d_h` per direction).
        attention: ``"bahdanau"`` or ``"luong"``.
        score: ``"additive"`` for Bahdanau; ``"dot"``, ``"general"`` (default) or
            ``"concat"`` for Luong.
        local: ``None`` (global), ``"monotonic"`` (local-m) or ``"predictive"`` (local-p);
            Luong only.
        half_window: :math:`r`, the half-width of the local window.
        monotonic_gaussian: the lecture-notes variant of local-m: multiply its window
            softmax by the Gaussian of local-p too. ``False`` (default) follows Luong et
            al. (2015), where only local-p has the Gaussian. Needs ``local="monotonic"``.
        fixed_context: no attention: the decoder reads the same summary of the source
            at every step (Cho et al.'s RNN encoder–decoder); the returned weights are
            all zero. Needs ``attention="bahdanau"``.
        dropout: dropout on embeddings and on the decoder's output features.
        pad_id: the id of ``<pad>`` in both vocabularies.

    Shape:
        - src: :math:`(N, S)` token ids; tgt_in: :math:`(N, L)` token ids (``<bos>`` first)
        - logits: :math:`(N, L, V_{tgt})`; weights: :math:`(N, L, S)`
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int = 32,
        hidden_dim: int = 64,
        attention: str = "bahdanau",
        score: str | None = None,
        local: str | None = None,
        half_window: int = 2,
        monotonic_gaussian: bool = False,
        fixed_context: bool = False,
        dropout: float = 0.0,
        pad_id: int = 0,
    ):
        super().__init__()
        fn = "Seq2SeqAttention"
        for name, value in (
            ("src_vocab_size", src_vocab_size),
            ("tgt_vocab_size", tgt_vocab_size),
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
            ("half_window", half_window),
        ):
            check_positive_int(fn, name, value)
        if attention not in _SCORES:
            raise ValueError(f"{fn}: argument 'attention' must be one of {list(_SCORES)}, got {attention!r}")
        score = score or _DEFAULT_SCORE[attention]
        if score not in _SCORES[attention]:
            raise ValueError(
                f"{fn}: for attention={attention!r}, 'score' must be one of {list(_SCORES[attention])}, got {score!r}"
            )
        if local not in _LOCAL or (local and attention != "luong"):
            raise ValueError(
                f"{fn}: argument 'local' must be one of {list(_LOCAL)} and needs attention='luong', got {local!r}"
            )
        for name, value in (("monotonic_gaussian", monotonic_gaussian), ("fixed_context", fixed_context)):
            if not isinstance(value, bool):
                raise TypeError(f"{fn}: argument {name!r} must be a bool, got {type(value).__name__}")
        if monotonic_gaussian and local != "monotonic":
            raise ValueError(f"{fn}: monotonic_gaussian=True needs local='monotonic', got local={local!r}")
        if fixed_context and attention != "bahdanau":
            raise ValueError(f"{fn}: fixed_context=True needs attention='bahdanau', got {attention!r}")
        self.attention, self.score, self.local = attention, score, local
        self.half_window, self.pad_id = half_window, pad_id
        self.monotonic_gaussian, self.fixed_context = monotonic_gaussian, fixed_context
        E, H = embed_dim, hidden_dim
        self.src_embed = nn.Embedding(src_vocab_size, E, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, E, padding_idx=pad_id)
        self.encoder = nn.GRU(E, H, batch_first=True, bidirectional=True)
        self.to_memory = nn.Linear(2 * H, H)  # annotations -> keys and values (or both final states -> c)
        self.init_state = nn.Linear(H, H)  # s_0 = tanh(W h_1 backward), as Bahdanau
        self.dropout = nn.Dropout(dropout)
        if fixed_context:
            pass  # no score parameters: nothing is scored
        elif score in ("additive", "concat"):
            self.W_q = nn.Parameter(torch.randn(H, H) / H**0.5)
            self.W_k = nn.Parameter(torch.randn(H, H) / H**0.5)
            self.v = nn.Parameter(torch.randn(H) / H**0.5)
        elif score == "general":
            self.W = nn.Parameter(torch.eye(H) + torch.randn(H, H) / H)
        if attention == "bahdanau":
            self.cell = nn.GRUCell(E + H, H)
            self.out = nn.Linear(H + H + E, tgt_vocab_size)
        else:
            self.cell = nn.GRUCell(E + H, H)  # input feeding: [embedding; previous h~]
            self.combine = nn.Linear(2 * H, H)  # h~_t = tanh(W_c [c_t; h_t])
            self.out = nn.Linear(H, tgt_vocab_size)
            if local == "predictive":
                self.W_p = nn.Linear(H, H, bias=False)
                self.v_p = nn.Linear(H, 1, bias=False)

    # -- encoder -------------------------------------------------------------------------
    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> tuple[EncodedSource, DecoderState]:
        """Encode a batch of source sequences (padding anywhere after the real tokens).

        Returns:
            ``(encoded, state)``: an :class:`EncodedSource` and the decoder's first state.
        """
        dims = check_shapes("Seq2SeqAttention.encode", floating=False, src=(src, "N S"))
        if src_mask is None:
            src_mask = src != self.pad_id
        check_mask("Seq2SeqAttention.encode", src_mask, (dims["N"], dims["S"]), "(N, S)", name="src_mask")
        src_mask = src_mask.expand(dims["N"], dims["S"])
        lengths = src_mask.sum(-1)  # (N,)
        packed = pack_padded_sequence(
            self.dropout(self.src_embed(src)),
            lengths.clamp_min(1).cpu(),
            batch_first=True,
            enforce_sorted=False,
        )
        out, h_n = self.encoder(packed)  # h_n: (2, N, d_h), the last forward and backward states
        state = torch.tanh(self.init_state(h_n[1]))  # (N, d_h)
        if self.fixed_context:  # no attention: one summary of the source, c = W [h_S forward; h_1 backward] + b
            summary = self.to_memory(torch.cat([h_n[0], h_n[1]], -1))  # (N, d_h)
            return EncodedSource(None, None, src_mask, lengths, summary), state
        annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=dims["S"])  # (N, S, 2 d_h)
        memory = self.to_memory(annotations)  # (N, S, d_h)
        keys_proj = memory @ self.W_k if self.score in ("additive", "concat") else None  # (N, S, d_h)
        if self.attention == "luong":
            return EncodedSource(memory, keys_proj, src_mask, lengths), (state, torch.zeros_like(state))  # (h_t, h~_t)
        return EncodedSource(memory, keys_proj, src_mask, lengths), state

    # -- one decoder step ----------------------------------------------------------------
    def _scores(self, h: torch.Tensor, enc: EncodedSource) -> torch.Tensor:
        assert enc.memory is not None, "scores need the encoder's memory (not fixed_context)"
        if self.score in ("additive", "concat"):
            assert enc.keys_proj is not None
            return additive_score_projected(h @ self.W_q, enc.keys_proj, self.v)  # (N, S)
        if self.score == "general":
            return multiplicative_score(h, enc.memory, self.W)  # (N, S)
        return dot_score(h, enc.memory)  # (N, S)

    def _attend(self, h: torch.Tensor, enc: EncodedSource, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.fixed_context:  # the same summary at every step; nothing is scored
            assert enc.summary is not None
            return enc.summary, torch.zeros(enc.mask.shape, dtype=h.dtype, device=h.device)
        assert enc.memory is not None
        scores = self._scores(h, enc)  # (N, S)
        if self.local is None:
            return attention_pool(scores, enc.memory, enc.mask)
        masked_scores = scores.masked_fill(~enc.mask, float("-inf"))  # (N, S)
        if self.local == "monotonic" and not self.monotonic_gaussian:
            # local-m (Luong et al. eq. 7 inside the window): softmax over |s - t| <= r, zero outside
            positions = torch.arange(scores.shape[-1], device=scores.device)  # (S,)
            in_window = (positions - t).abs() <= self.half_window  # (S,)
            weights = _masked_softmax(masked_scores, in_window.expand_as(scores))  # (N, S)
        else:
            if self.local == "monotonic":  # the lecture-notes variant: local-m with the Gaussian
                center = torch.full_like(enc.lengths, t, dtype=h.dtype)  # (N,)
            else:  # local-p, eq. 9
                center = enc.lengths.to(h.dtype) * torch.sigmoid(self.v_p(torch.tanh(self.W_p(h)))).squeeze(-1)
            weights = local_attention_weights(masked_scores, center, self.half_window)  # eq. 10
        context = (weights.unsqueeze(1) @ enc.memory).squeeze(1)  # (N, 1, S) @ (N, S, d_h) -> (N, d_h)
        return context, weights

    def step(
        self, y_prev: torch.Tensor, state: DecoderState, enc: EncodedSource, t: int = 0
    ) -> tuple[torch.Tensor, DecoderState, torch.Tensor]:
        """One decoder step from the previous target token ``y_prev`` (N,).

        Returns:
            ``(logits (N, C), new_state, weights (N, S))``, C the target vocabulary's size.
        """
        e = self.dropout(self.tgt_embed(y_prev))  # (N, E)
        if self.attention == "bahdanau":
            assert isinstance(state, torch.Tensor)  # s_{t-1}
            context, weights = self._attend(state, enc, t)  # score s_{t-1}
            s = self.cell(torch.cat([e, context], -1), state)  # (N, d_h)
            return self.out(self.dropout(torch.cat([s, context, e], -1))), s, weights
        h_prev, h_tilde_prev = state
        h = self.cell(torch.cat([e, h_tilde_prev], -1), h_prev)  # (N, d_h)
        context, weights = self._attend(h, enc, t)  # score h_t
        h_tilde = torch.tanh(self.combine(torch.cat([context, h], -1)))  # (N, d_h)
        return self.out(self.dropout(h_tilde)), (h, h_tilde), weights

    # -- whole sequences -----------------------------------------------------------------
    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced decoding of ``tgt_in``; returns ``(logits, weights)``."""
        check_shapes("Seq2SeqAttention.forward", floating=False, src=(src, "N S"), tgt_in=(tgt_in, "N T"))
        enc, state = self.encode(src, src_mask)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, w = self.step(tgt_in[:, t], state, enc, t)
            logits.append(step_logits)
            weights.append(w)
        return torch.stack(logits, 1), torch.stack(weights, 1)  # (N, T, C), (N, T, S)

    # -- decoding (the protocol of course_lib.decoding.Decodable) -------------------------
    def start(self, src: torch.Tensor, use_cache: bool = True) -> dict:
        """Encode ``src`` for :func:`~course_lib.decoding.greedy_decode` and
        :func:`~course_lib.decoding.beam_search`; ``use_cache`` is ignored (an RNN has no cache).

        Shape:
            - src: :math:`(N, S)`

        Returns:
            The decoder state: the encoded source, the decoder's first state and the step ``t``.
        """
        enc, rnn_state = self.encode(src)  # rnn_state: a tensor, or a (h, h~) tuple for Luong
        return {"enc": enc, "rnn": rnn_state, "t": 0}

    def next_log_probs(self, state: dict, y_prev: torch.Tensor) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """One decoder step from the previous token; see :class:`course_lib.decoding.Decodable`.

        Shape:
            - y_prev: :math:`(N,)`
            - log_probs: :math:`(N, V_{tgt})`; weights: :math:`(N, S)`

        Returns:
            ``(log_probs, new_state, weights)``.
        """
        logits, rnn_state, weights = self.step(y_prev, state["rnn"], state["enc"], state["t"])
        return torch.log_softmax(logits, dim=-1), {**state, "rnn": rnn_state, "t": state["t"] + 1}, weights
