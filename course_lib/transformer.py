"""Encoder and decoder layers and the encoder–decoder transformer (transformer chapter).

Both arrangements of the residual blocks are supported:

- post-LN (``norm_first=False``, Vaswani et al., 2017): ``x = LN(x + Sublayer(x))``;
- pre-LN (``norm_first=True``; used in tensor2tensor, Vaswani et al., 2018, by Wang et al.,
  2019, and in GPT-2, and analysed by Xiong et al., 2020): ``x = x + Sublayer(LN(x))``.

As in :class:`torch.nn.Transformer`, the encoder and decoder stacks each end with one more
LayerNorm, in both arrangements, so that ``from_torch`` reproduces PyTorch exactly.

Attention weights are returned, not kept on the modules: as with ``need_weights`` of
:class:`torch.nn.MultiheadAttention`, every forward method takes ``need_weights=False`` and,
when it is ``True``, returns ``(output, weights)`` instead of the output alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple, cast, overload

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._validation import check_mask, check_positive_int, check_shapes
from .feedforward import PositionwiseFeedForward
from .layernorm import LayerNorm
from .masks import causal_mask
from .multihead import MultiHeadAttention

__all__ = ["EncoderLayer", "DecoderLayer", "Transformer", "DecoderLayerWeights", "TransformerWeights"]


class DecoderLayerWeights(NamedTuple):
    """The attention weights of one decoder layer, per head.

    Shape:
        - self_attn: :math:`(N, H, L, L)` (one row per new position in :meth:`DecoderLayer.step`)
        - cross_attn: :math:`(N, H, L, S)`
    """

    self_attn: torch.Tensor
    cross_attn: torch.Tensor


class TransformerWeights(NamedTuple):
    """The attention weights of every layer of a :class:`Transformer`, first layer first.

    Shape:
        - encoder: one :math:`(N, H, S, S)` tensor per encoder layer
        - decoder: one :class:`DecoderLayerWeights` per decoder layer
    """

    encoder: list[torch.Tensor]
    decoder: list[DecoderLayerWeights]


# The residual blocks were once called block1, block2, block3 (by position); checkpoints saved
# then still load (see _rename_old_block_keys).
_OLD_BLOCK_NAMES = {
    "EncoderLayer": {"block1": "self_attn_block", "block2": "ff_block"},
    "DecoderLayer": {"block1": "self_attn_block", "block2": "cross_attn_block", "block3": "ff_block"},
}


def _rename_old_block_keys(module: nn.Module, state_dict: dict[str, torch.Tensor], prefix: str, *args: object) -> None:
    """A load_state_dict pre-hook: rename ``{prefix}block1.*`` and the like to the role names."""
    renames = _OLD_BLOCK_NAMES[type(module).__name__]
    for key in [k for k in state_dict if k.startswith(prefix)]:
        old, _, rest = key[len(prefix) :].partition(".")
        if old in renames:
            state_dict[f"{prefix}{renames[old]}.{rest}"] = state_dict.pop(key)


class _Residual(nn.Module):
    """One residual block around a sublayer, post-LN or pre-LN, with dropout on its output.

    The sublayer returns ``(output, extra)``, e.g. attention's ``(output, weights)``; the
    block returns ``(x, extra)``, ``x`` being the block's output. With ``fused=True`` (the
    layers' fused path, when no weights are asked for) the norm is PyTorch's fused kernel.
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float):
        super().__init__()
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], tuple[torch.Tensor, Any]], fused: bool = False
    ) -> tuple[torch.Tensor, Any]:
        if self.norm_first:
            out, extra = sublayer(self.norm(x, fused))
            return x + self.dropout(out), extra
        out, extra = sublayer(x)
        return self.norm(x + self.dropout(out), fused), extra  # add_and_norm(x, dropout(out), ...)


def _check_compatible(
    ours: EncoderLayer | DecoderLayer, layer: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
) -> None:
    """Refuse to copy a PyTorch layer whose arrangement our layer would not reproduce."""
    act = getattr(layer, "activation", F.relu)
    if act is not F.relu and not isinstance(act, nn.ReLU):
        raise ValueError(f"load_torch_: only the ReLU activation is supported, got {act}")
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("load_torch_: PyTorch layers built with bias=False are not supported")
    block = ours.self_attn_block
    if layer.norm_first != block.norm_first or layer.norm1.eps != block.norm.eps:
        raise ValueError(
            f"load_torch_: the PyTorch layer has norm_first={layer.norm_first}, eps={layer.norm1.eps}; "
            f"this layer has norm_first={block.norm_first}, eps={block.norm.eps}"
        )


class EncoderLayer(nn.Module):
    """Self-attention then a feed-forward network, each in a residual block.

    Args:
        d_model: E.
        nhead: H.
        dim_feedforward: hidden width of the feed-forward network.
        dropout: dropout in attention weights, after the ReLU and on each sublayer output.
        norm_first: pre-LN if True, post-LN if False.
        eps: LayerNorm epsilon.

    Shape:
        - x: :math:`(N, S, E)`
        - mask: broadcastable to :math:`(N, H, S, S)`, e.g. a padding mask ``m[:, None, None, :]``
        - output: :math:`(N, S, E)`; weights (with ``need_weights=True``): :math:`(N, H, S, S)`
    """

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, dim_feedforward, dropout)
        self.self_attn_block = _Residual(d_model, dropout, norm_first, eps)
        self.ff_block = _Residual(d_model, dropout, norm_first, eps)
        self.register_load_state_dict_pre_hook(_rename_old_block_keys)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Returns the output, or ``(output, weights)`` with ``need_weights=True``."""
        fused = not need_weights  # no weights asked for: the fused kernels
        x, weights = self.self_attn_block(x, lambda h: self.self_attn(h, h, h, mask, need_weights), fused)
        x, _ = self.ff_block(x, lambda h: (self.ff(h), None), fused)
        return (x, weights) if need_weights else x

    def load_torch_(self, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy the weights of a :class:`torch.nn.TransformerEncoderLayer`."""
        _check_compatible(self, layer)
        self.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
        self.ff.load_linear_(layer.linear1, layer.linear2)
        self.self_attn_block.norm.load_state_dict(layer.norm1.state_dict())
        self.ff_block.norm.load_state_dict(layer.norm2.state_dict())
        return self


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder's output, and a feed-forward network.

    Args:
        as :class:`EncoderLayer`.

    Shape:
        - x: :math:`(N, L, E)`; memory: :math:`(N, S, E)`
        - self_mask: broadcastable to :math:`(N, H, L, L)` (causal and target padding)
        - memory_mask: broadcastable to :math:`(N, H, L, S)` (source padding)
        - output: :math:`(N, L, E)`; weights (with ``need_weights=True``): a :class:`DecoderLayerWeights`
    """

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, dim_feedforward, dropout)
        self.self_attn_block = _Residual(d_model, dropout, norm_first, eps)
        self.cross_attn_block = _Residual(d_model, dropout, norm_first, eps)
        self.ff_block = _Residual(d_model, dropout, norm_first, eps)
        self.register_load_state_dict_pre_hook(_rename_old_block_keys)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, DecoderLayerWeights]:
        """Returns the output, or ``(output, weights)`` with ``need_weights=True``."""
        fused = not need_weights  # no weights asked for: the fused kernels
        x, self_weights = self.self_attn_block(x, lambda h: self.self_attn(h, h, h, self_mask, need_weights), fused)
        x, cross_weights = self.cross_attn_block(
            x, lambda h: self.cross_attn(h, memory, memory, memory_mask, need_weights), fused
        )
        x, _ = self.ff_block(x, lambda h: (self.ff(h), None), fused)
        return (x, DecoderLayerWeights(self_weights, cross_weights)) if need_weights else x

    def step(
        self, x: torch.Tensor, cache: dict, memory_mask: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, DecoderLayerWeights]:
        """Decode one new position with a KV cache; equals the last row of :meth:`forward`.

        ``cache`` holds this layer's self-attention keys and values of all earlier positions
        (``"k"``, ``"v"``: (N, H, t, D), absent at t = 0; this call appends position t) and
        the projected encoder memory (``"memory_k"``, ``"memory_v"``: (N, H, S, D)), which
        :meth:`Transformer.start_cache` computes once per source batch.

        Shape:
            - x: :math:`(N, 1, E)`, the newest target position
            - memory_mask: broadcastable to :math:`(N, H, 1, S)`
            - output: :math:`(N, 1, E)`; weights (with ``need_weights=True``): a
              :class:`DecoderLayerWeights` of :math:`(N, H, 1, t + 1)` and :math:`(N, H, 1, S)`
        """

        def self_attend(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            k, v = self.self_attn.project_kv(h, h)  # (N, H, 1, D) each
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)  # (N, H, t + 1, D)
                v = torch.cat([cache["v"], v], dim=2)  # (N, H, t + 1, D)
            cache["k"], cache["v"] = k, v
            return self.self_attn.attend(h, k, v, need_weights=need_weights)  # causal: only the past is cached

        fused = not need_weights  # no weights asked for: the fused kernels
        x, self_weights = self.self_attn_block(x, self_attend, fused)
        x, cross_weights = self.cross_attn_block(
            x,
            lambda h: self.cross_attn.attend(h, cache["memory_k"], cache["memory_v"], memory_mask, need_weights),
            fused,
        )
        x, _ = self.ff_block(x, lambda h: (self.ff(h), None), fused)
        return (x, DecoderLayerWeights(self_weights, cross_weights)) if need_weights else x

    def load_torch_(self, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Copy the weights of a :class:`torch.nn.TransformerDecoderLayer`."""
        _check_compatible(self, layer)
        self.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
        self.cross_attn.load_state_dict(MultiHeadAttention.from_torch(layer.multihead_attn).state_dict())
        self.ff.load_linear_(layer.linear1, layer.linear2)
        for block, norm in zip(
            (self.self_attn_block, self.cross_attn_block, self.ff_block),
            (layer.norm1, layer.norm2, layer.norm3),
            strict=False,
        ):
            block.norm.load_state_dict(norm.state_dict())
        return self


class Transformer(nn.Module):
    """The encoder–decoder transformer on embedded inputs (no embeddings, no output layer).

    Args:
        d_model: E.
        nhead: H.
        num_encoder_layers, num_decoder_layers: depth of each stack.
        dim_feedforward: hidden width of every feed-forward network.
        dropout: dropout probability throughout.
        norm_first: pre-LN if True, post-LN (the original) if False.
        eps: LayerNorm epsilon.

    Shape:
        - src: :math:`(N, S, E)`; tgt: :math:`(N, L, E)`, both embedded, positions added
        - src_mask: :math:`(N, S)`, ``True`` at real source tokens
        - tgt_mask: :math:`(N, L)`, ``True`` at real target tokens; the causal mask is
          always applied on top
        - output: :math:`(N, L, E)`; weights (with ``need_weights=True``): a :class:`TransformerWeights`
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        norm_first: bool = False,
        eps: float = 1e-5,
    ):
        super().__init__()
        for name, value in (
            ("num_encoder_layers", num_encoder_layers),
            ("num_decoder_layers", num_decoder_layers),
        ):
            check_positive_int("Transformer", name, value)
        self.d_model, self.nhead, self.norm_first = d_model, nhead, norm_first
        args = (d_model, nhead, dim_feedforward, dropout, norm_first, eps)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*args) for _ in range(num_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*args) for _ in range(num_decoder_layers))
        self.encoder_norm = LayerNorm(d_model, eps=eps)
        self.decoder_norm = LayerNorm(d_model, eps=eps)

    def _encoders(self) -> list[EncoderLayer]:
        return [cast(EncoderLayer, layer) for layer in self.encoder_layers]

    def _decoders(self) -> list[DecoderLayer]:
        return [cast(DecoderLayer, layer) for layer in self.decoder_layers]

    @overload
    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = ..., *, need_weights: Literal[False] = ...
    ) -> torch.Tensor: ...
    @overload
    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = ..., *, need_weights: Literal[True]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]: ...

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None, *, need_weights: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, list[torch.Tensor]]:
        """Run the encoder stack. Shapes: src (N, S, E), src_mask (N, S) -> memory (N, S, E).

        With ``need_weights=True``, returns ``(memory, weights)``: one (N, H, S, S) tensor per layer.
        """
        dims = check_shapes("Transformer.encode", src=(src, f"N S {self.d_model}"))
        check_mask("Transformer.encode", src_mask, (dims["N"], dims["S"]), "(N, S)", name="src_mask")
        N, S = dims["N"], dims["S"]
        key_mask = None if src_mask is None else src_mask.expand(N, S)[:, None, None, :]  # (N, 1, 1, S)
        x, weights = src, []
        for layer in self.encoder_layers:
            if need_weights:
                x, w = layer(x, key_mask, need_weights=True)
                weights.append(w)
            else:
                x = layer(x, key_mask)  # the fused attention path: no weights formed
        memory = self.encoder_norm(x, fused=not need_weights)
        return (memory, weights) if need_weights else memory

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[DecoderLayerWeights]]:
        """Run the decoder stack. Shapes: tgt (N, L, E), memory (N, S, E) -> (N, L, E).

        With ``need_weights=True``, returns ``(output, weights)``: one :class:`DecoderLayerWeights` per layer.
        """
        fn = "Transformer.decode"
        dims = check_shapes(fn, tgt=(tgt, f"N L {self.d_model}"), memory=(memory, f"N S {self.d_model}"))
        N, L, S = dims["N"], dims["L"], dims["S"]
        check_mask(fn, src_mask, (N, S), "(N, S)", name="src_mask")
        check_mask(fn, tgt_mask, (N, L), "(N, L)", name="tgt_mask")
        self_mask = causal_mask(L, device=tgt.device)  # (L, L)
        if tgt_mask is not None:
            self_mask = self_mask & tgt_mask.expand(N, L)[:, None, None, :]  # (N, 1, L, L)
        memory_mask = None if src_mask is None else src_mask.expand(N, S)[:, None, None, :]  # (N, 1, 1, S)
        x, weights = tgt, []
        for layer in self.decoder_layers:
            if need_weights:
                x, w = layer(x, memory, self_mask, memory_mask, need_weights=True)
                weights.append(w)
            else:
                x = layer(x, memory, self_mask, memory_mask)
        out = self.decoder_norm(x, fused=not need_weights)
        return (out, weights) if need_weights else out

    def start_cache(self, memory: torch.Tensor) -> list[dict]:
        """One KV cache per decoder layer, holding the projected encoder memory."""
        caches = []
        for layer in self._decoders():
            k, v = layer.cross_attn.project_kv(memory, memory)  # (N, H, S, D) each
            caches.append({"memory_k": k, "memory_v": v})
        return caches

    def decode_step(
        self,
        tgt: torch.Tensor,
        caches: list[dict],
        src_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[DecoderLayerWeights]]:
        """Decode the newest target position with KV caches from :meth:`start_cache`.

        Gives the same result as the last position of :meth:`decode` on the whole prefix,
        at the cost of one position per layer instead of the whole prefix.

        Shape:
            - tgt: :math:`(N, 1, E)`, embedded, its position added
            - src_mask: :math:`(N, S)`, ``True`` at real source tokens
            - output: :math:`(N, 1, E)`; weights (with ``need_weights=True``): one
              :class:`DecoderLayerWeights` per layer, :math:`(N, H, 1, t + 1)` and :math:`(N, H, 1, S)`
        """
        check_shapes("Transformer.decode_step", tgt=(tgt, f"N 1 {self.d_model}"))
        memory_mask = None if src_mask is None else src_mask[:, None, None, :]  # (N, 1, 1, S)
        x, weights = tgt, []
        for layer, cache in zip(self._decoders(), caches, strict=True):
            if need_weights:
                x, w = layer.step(x, cache, memory_mask, need_weights=True)
                weights.append(w)
            else:
                x = cast(torch.Tensor, layer.step(x, cache, memory_mask))
        out = self.decoder_norm(x, fused=not need_weights)
        return (out, weights) if need_weights else out

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
        *,
        need_weights: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, TransformerWeights]:
        """Encode ``src``, then decode ``tgt`` against it; see the class docstring for shapes.

        Returns the output, or ``(output, weights)`` with ``need_weights=True``.
        """
        if not need_weights:
            return cast(torch.Tensor, self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))
        memory, encoder_weights = self.encode(src, src_mask, need_weights=True)
        out, decoder_weights = self.decode(tgt, memory, src_mask, tgt_mask, need_weights=True)
        return out, TransformerWeights(encoder_weights, decoder_weights)

    @classmethod
    def from_torch(cls, m: nn.Transformer) -> Transformer:
        """Build a copy of a :class:`torch.nn.Transformer` (ReLU activation, any ``batch_first``).

        Our masks are ``True`` at real tokens; PyTorch's ``*_key_padding_mask`` are ``True``
        at padding. Pass ``~src_mask`` to PyTorch, ``src_mask`` to this model.
        """
        if not isinstance(m, nn.Transformer):
            raise TypeError(f"from_torch: expected nn.Transformer, got {type(m).__name__}")
        enc, dec = m.encoder.layers, m.decoder.layers
        first = enc[0]
        new = cls(
            d_model=m.d_model,
            nhead=m.nhead,
            num_encoder_layers=len(enc),
            num_decoder_layers=len(dec),
            dim_feedforward=first.linear1.out_features,
            dropout=first.dropout.p,
            norm_first=first.norm_first,
            eps=first.norm1.eps,
        ).to(dtype=first.linear1.weight.dtype, device=first.linear1.weight.device)
        for ours, theirs in zip(new._encoders(), enc, strict=True):
            ours.load_torch_(theirs)
        for ours_dec, theirs_dec in zip(new._decoders(), dec, strict=True):
            ours_dec.load_torch_(theirs_dec)
        new.encoder_norm.load_state_dict(m.encoder.norm.state_dict())
        new.decoder_norm.load_state_dict(m.decoder.norm.state_dict())
        return new.train(m.training)
