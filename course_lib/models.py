"""Complete token-to-token models for the toy tasks.

Both models are :class:`course_lib.decoding.Decodable`, the protocol that greedy decoding
and beam search use:

- ``start(src) -> state``: encode a batch of sources once;
- ``next_log_probs(state, y_prev) -> (log_probs (N, V), state, weights)``: one decoder step;
- the state is a dict of tensors with the batch first, so beam search can reorder it.

:class:`TransformerSeq2Seq` is defined here; the GRU models are
:class:`course_lib.seq2seq.Seq2SeqAttention`, built by :func:`build_model` as ``"bahdanau"``
or ``"luong"``.
"""

from __future__ import annotations

import math
from typing import Any, TypeAlias

import torch
import torch.nn as nn

from ._validation import check_shapes
from .positional import SinusoidalPositionalEncoding
from .seq2seq import Seq2SeqAttention
from .tasks import PAD
from .transformer import Transformer, TransformerWeights

__all__ = ["TransformerSeq2Seq", "Seq2SeqModel", "build_model", "MODELS"]


class TransformerSeq2Seq(nn.Module):
    """Token embeddings (scaled by sqrt(d_model)), sinusoidal positions, a :class:`Transformer`,
    and a linear layer to target-vocabulary logits.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout,
            norm_first: as :class:`Transformer`.
        max_len: the longest sequence (source or target, ``<bos>`` included).
        pad_id: the id of ``<pad>``.

    Shape:
        - src: :math:`(N, S)`; tgt_in: :math:`(N, T)`; output: :math:`(N, T, V_{tgt})`
        - weights (with ``need_weights=True``): a :class:`~course_lib.transformer.TransformerWeights`
    """

    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        d_model=64,
        nhead=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=256,
        dropout=0.1,
        norm_first=True,
        max_len=256,
        pad_id=PAD,
    ):
        super().__init__()
        self.pad_id, self.d_model = pad_id, d_model
        self.src_embed = nn.Embedding(src_vocab_size, d_model, padding_idx=pad_id)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d_model, padding_idx=pad_id)
        self.pos = SinusoidalPositionalEncoding(d_model, max_len=max_len, dropout=dropout)
        self.transformer = Transformer(
            d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout, norm_first
        )
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        for embedding in (self.src_embed, self.tgt_embed):
            # std d^-1/2, so that after the sqrt(d) scaling tokens and positions have the same
            # scale (nn.Embedding's N(0, 1) would drown the positions 8-fold at d = 64).
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
            with torch.no_grad():
                embedding.weight[pad_id].zero_()

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        return self.pos(embedding(tokens) * math.sqrt(self.d_model), start=start)  # (N, T, E)

    def forward(
        self, src: torch.Tensor, tgt_in: torch.Tensor, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, TransformerWeights]:
        """Teacher-forced logits for every target position; with ``need_weights=True``,
        ``(logits, weights)``, the attention weights of every layer."""
        check_shapes("TransformerSeq2Seq", floating=False, src=(src, "N S"), tgt_in=(tgt_in, "N T"))
        src_mask, tgt_mask = src != self.pad_id, tgt_in != self.pad_id
        src_x, tgt_x = self._embed(self.src_embed, src), self._embed(self.tgt_embed, tgt_in)
        if not need_weights:  # training: the fused attention path, no weights formed
            return self.generator(self.transformer(src_x, tgt_x, src_mask, tgt_mask))  # (N, T, V)
        out, weights = self.transformer(src_x, tgt_x, src_mask, tgt_mask, need_weights=True)
        return self.generator(out), weights

    def start(self, src: torch.Tensor, use_cache: bool = True) -> dict:
        """Encode ``src``; with ``use_cache`` the decoder keeps keys and values (a KV cache),
        otherwise it recomputes the whole prefix at every step."""
        src_mask = src != self.pad_id
        memory = self.transformer.encode(self._embed(self.src_embed, src), src_mask)
        state = {"src_mask": src_mask, "t": 0}
        if use_cache:
            state["caches"] = self.transformer.start_cache(memory)
        else:
            state["memory"] = memory
            state["prefix"] = src.new_zeros(src.shape[0], 0)
        return state

    def next_log_probs(self, state: dict, y_prev: torch.Tensor) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Feed the previous token; returns ``(log_probs (N, V), new_state, weights (N, S))``,
        the weights being the last decoder layer's cross-attention, averaged over the heads."""
        t = state["t"]
        if "caches" in state:
            x = self._embed(self.tgt_embed, y_prev[:, None], start=t)  # (N, 1, E)
            out, weights = self.transformer.decode_step(x, state["caches"], state["src_mask"], need_weights=True)
            state = {**state, "t": t + 1}
        else:
            prefix = torch.cat([state["prefix"], y_prev[:, None]], dim=1)  # (N, t + 1)
            out, weights = self.transformer.decode(
                self._embed(self.tgt_embed, prefix), state["memory"], state["src_mask"], need_weights=True
            )
            state = {**state, "prefix": prefix, "t": t + 1}
        h = out[:, -1]  # (N, E), the newest position
        cross = weights[-1].cross_attn[:, :, -1]  # (N, H, S), the newest query
        return torch.log_softmax(self.generator(h), dim=-1), state, cross.mean(1)  # (N, V), ..., (N, S)


MODELS = ("transformer", "bahdanau", "luong")
#: A model :func:`build_model` builds: a module that :mod:`course_lib.decoding` can decode.
Seq2SeqModel: TypeAlias = TransformerSeq2Seq | Seq2SeqAttention


def build_model(name: str, src_vocab_size: int, tgt_vocab_size: int, **kwargs: Any) -> Seq2SeqModel:
    """Build ``transformer``, ``bahdanau`` or ``luong`` with the given vocabulary sizes; ``kwargs``
    go to the model's constructor (:class:`TransformerSeq2Seq` or :class:`~course_lib.seq2seq.Seq2SeqAttention`)."""
    if name == "transformer":
        return TransformerSeq2Seq(src_vocab_size, tgt_vocab_size, **kwargs)
    if name in ("bahdanau", "luong"):
        return Seq2SeqAttention(src_vocab_size, tgt_vocab_size, attention=name, **kwargs)
    raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
