"""Encoder and decoder layers and the encoder–decoder transformer (transformer chapter).

Both arrangements of the residual blocks are supported:

- post-LN (``norm_first=False``, Vaswani et al., 2017): ``x = LN(x + Sublayer(x))``;
- pre-LN (``norm_first=True``; used in tensor2tensor, Vaswani et al., 2018, by Wang et al.,
  2019, and in GPT-2, and analysed by Xiong et al., 2020): ``x = x + Sublayer(LN(x))``.

As in :class:`torch.nn.Transformer`, the encoder and decoder stacks each end with one more
LayerNorm, in both arrangements, so that ``from_torch`` reproduces PyTorch exactly.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._checks import check_mask, check_positive_int, check_shapes
from .feedforward import PositionwiseFeedForward
from .layernorm import LayerNorm, add_and_norm
from .masks import causal_mask
from .multihead import MultiHeadAttention

__all__ = ["EncoderLayer", "DecoderLayer", "Transformer"]


class _Residual(nn.Module):
    """One residual block around a sublayer, post-LN or pre-LN, with dropout on its output."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float):
        super().__init__()
        self.norm = LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return add_and_norm(x, self.dropout(sublayer(x)), self.norm.weight, self.norm.bias, self.norm.eps)


def _check_compatible(ours: nn.Module, layer: nn.Module) -> None:
    """Refuse to copy a PyTorch layer whose arrangement our layer would not reproduce."""
    act = getattr(layer, "activation", F.relu)
    if act is not F.relu and not isinstance(act, nn.ReLU):
        raise ValueError(f"load_torch_: only the ReLU activation is supported, got {act}")
    if layer.linear1.bias is None or layer.norm1.bias is None:
        raise ValueError("load_torch_: PyTorch layers built with bias=False are not supported")
    if layer.norm_first != ours.block1.norm_first or layer.norm1.eps != ours.block1.norm.eps:
        raise ValueError(
            f"load_torch_: the PyTorch layer has norm_first={layer.norm_first}, eps={layer.norm1.eps}; "
            f"this layer has norm_first={ours.block1.norm_first}, eps={ours.block1.norm.eps}"
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
        - output: :math:`(N, S, E)`
    """

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, dim_feedforward, dropout)
        self.block1 = _Residual(d_model, dropout, norm_first, eps)
        self.block2 = _Residual(d_model, dropout, norm_first, eps)
        self.attn_weights = None  # (N, H, S, S) of the last forward, for plots

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        def attend(h):
            out, self.attn_weights = self.self_attn(h, h, h, mask)
            return out

        x = self.block1(x, attend)
        return self.block2(x, self.ff)

    def load_torch_(self, layer: nn.TransformerEncoderLayer) -> "EncoderLayer":
        """Copy the weights of a :class:`torch.nn.TransformerEncoderLayer`."""
        _check_compatible(self, layer)
        self.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
        self.ff.load_linear_(layer.linear1, layer.linear2)
        self.block1.norm.load_state_dict(layer.norm1.state_dict())
        self.block2.norm.load_state_dict(layer.norm2.state_dict())
        return self


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder's output, and a feed-forward network.

    Args:
        as :class:`EncoderLayer`.

    Shape:
        - x: :math:`(N, L, E)`; memory: :math:`(N, S, E)`
        - self_mask: broadcastable to :math:`(N, H, L, L)` (causal and target padding)
        - memory_mask: broadcastable to :math:`(N, H, L, S)` (source padding)
        - output: :math:`(N, L, E)`
    """

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, norm_first=False, eps=1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout=dropout)
        self.ff = PositionwiseFeedForward(d_model, dim_feedforward, dropout)
        self.block1 = _Residual(d_model, dropout, norm_first, eps)
        self.block2 = _Residual(d_model, dropout, norm_first, eps)
        self.block3 = _Residual(d_model, dropout, norm_first, eps)
        self.self_attn_weights = None  # (N, H, L, L) of the last forward
        self.cross_attn_weights = None  # (N, H, L, S) of the last forward

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        def self_attend(h):
            out, self.self_attn_weights = self.self_attn(h, h, h, self_mask)
            return out

        def cross_attend(h):
            out, self.cross_attn_weights = self.cross_attn(h, memory, memory, memory_mask)
            return out

        x = self.block1(x, self_attend)
        x = self.block2(x, cross_attend)
        return self.block3(x, self.ff)

    def step(self, x: torch.Tensor, cache: dict, memory_mask=None) -> torch.Tensor:
        """Decode one new position with a KV cache; equals the last row of :meth:`forward`.

        ``cache`` holds this layer's self-attention keys and values of all earlier positions
        (``"k"``, ``"v"``: (N, H, t, D), absent at t = 0; this call appends position t) and
        the projected encoder memory (``"memory_k"``, ``"memory_v"``: (N, H, S, D)), which
        :meth:`Transformer.start_cache` computes once per source batch.

        Shape:
            - x: :math:`(N, 1, E)`, the newest target position
            - memory_mask: broadcastable to :math:`(N, H, 1, S)`
            - output: :math:`(N, 1, E)`
        """

        def self_attend(h):
            k, v = self.self_attn.project_kv(h, h)  # (N, H, 1, D) each
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)  # (N, H, t + 1, D)
                v = torch.cat([cache["v"], v], dim=2)  # (N, H, t + 1, D)
            cache["k"], cache["v"] = k, v
            out, self.self_attn_weights = self.self_attn.attend(h, k, v)  # causal: only the past is cached
            return out

        def cross_attend(h):
            out, self.cross_attn_weights = self.cross_attn.attend(
                h, cache["memory_k"], cache["memory_v"], memory_mask
            )
            return out

        x = self.block1(x, self_attend)
        x = self.block2(x, cross_attend)
        return self.block3(x, self.ff)

    def load_torch_(self, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """Copy the weights of a :class:`torch.nn.TransformerDecoderLayer`."""
        _check_compatible(self, layer)
        self.self_attn.load_state_dict(MultiHeadAttention.from_torch(layer.self_attn).state_dict())
        self.cross_attn.load_state_dict(MultiHeadAttention.from_torch(layer.multihead_attn).state_dict())
        self.ff.load_linear_(layer.linear1, layer.linear2)
        for block, norm in zip(
            (self.block1, self.block2, self.block3), (layer.norm1, layer.norm2, layer.norm3)
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
        - output: :math:`(N, L, E)`
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

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Run the encoder stack. Shapes: src (N, S, E), src_mask (N, S) -> memory (N, S, E)."""
        dims = check_shapes("Transformer.encode", src=(src, f"N S {self.d_model}"))
        check_mask("Transformer.encode", src_mask, (dims["N"], dims["S"]), "(N, S)", name="src_mask")
        N, S = dims["N"], dims["S"]
        key_mask = None if src_mask is None else src_mask.expand(N, S)[:, None, None, :]  # (N, 1, 1, S)
        x = src
        for layer in self.encoder_layers:
            x = layer(x, key_mask)
        return self.encoder_norm(x)

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the decoder stack. Shapes: tgt (N, L, E), memory (N, S, E) -> (N, L, E)."""
        fn = "Transformer.decode"
        dims = check_shapes(fn, tgt=(tgt, f"N L {self.d_model}"), memory=(memory, f"N S {self.d_model}"))
        N, L, S = dims["N"], dims["L"], dims["S"]
        check_mask(fn, src_mask, (N, S), "(N, S)", name="src_mask")
        check_mask(fn, tgt_mask, (N, L), "(N, L)", name="tgt_mask")
        self_mask = causal_mask(L, device=tgt.device)  # (L, L)
        if tgt_mask is not None:
            self_mask = self_mask & tgt_mask.expand(N, L)[:, None, None, :]  # (N, 1, L, L)
        memory_mask = None if src_mask is None else src_mask.expand(N, S)[:, None, None, :]  # (N, 1, 1, S)
        x = tgt
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask)
        return self.decoder_norm(x)

    def start_cache(self, memory: torch.Tensor) -> list[dict]:
        """One KV cache per decoder layer, holding the projected encoder memory."""
        caches = []
        for layer in self.decoder_layers:
            k, v = layer.cross_attn.project_kv(memory, memory)  # (N, H, S, D) each
            caches.append({"memory_k": k, "memory_v": v})
        return caches

    def decode_step(self, tgt: torch.Tensor, caches: list[dict], src_mask=None) -> torch.Tensor:
        """Decode the newest target position with KV caches from :meth:`start_cache`.

        Gives the same result as the last position of :meth:`decode` on the whole prefix,
        at the cost of one position per layer instead of the whole prefix.

        Shape:
            - tgt: :math:`(N, 1, E)`, embedded, its position added
            - src_mask: :math:`(N, S)`, ``True`` at real source tokens
            - output: :math:`(N, 1, E)`
        """
        check_shapes("Transformer.decode_step", tgt=(tgt, f"N 1 {self.d_model}"))
        memory_mask = None if src_mask is None else src_mask[:, None, None, :]  # (N, 1, 1, S)
        x = tgt
        for layer, cache in zip(self.decoder_layers, caches):
            x = layer.step(x, cache, memory_mask)
        return self.decoder_norm(x)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """Encode ``src``, then decode ``tgt`` against it; see the class docstring for shapes."""
        return self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask)

    @classmethod
    def from_torch(cls, m: nn.Transformer) -> "Transformer":
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
        for ours, theirs in zip(new.encoder_layers, enc):
            ours.load_torch_(theirs)
        for ours, theirs in zip(new.decoder_layers, dec):
            ours.load_torch_(theirs)
        new.encoder_norm.load_state_dict(m.encoder.norm.state_dict())
        new.decoder_norm.load_state_dict(m.decoder.norm.state_dict())
        return new.train(m.training)
