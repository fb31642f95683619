"""Multi-head attention: split, attend per head, merge, project (multi-head attention chapter)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._validation import check_mask, check_positive_int, check_shapes
from .attention import scaled_dot_product_attention

__all__ = [
    "split_heads",
    "merge_heads",
    "multi_head_attention",
    "multi_head_attention_sum_form",
    "MultiHeadAttention",
    "fused_attention",
]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Split the last dim into ``num_heads`` heads of width D = E / H.

    Head h owns columns ``h*D ... (h+1)*D - 1``. The transpose matters: a bare
    ``reshape(N, H, L, D)`` would hand each head a slice of *tokens*, not of features.

    Args:
        x: token vectors, of any dtype.
        num_heads: H; must divide E.

    Shape:
        - x: :math:`(N, L, E)`
        - output: :math:`(N, H, L, D)`

    Returns:
        The heads, same dtype; a view of ``x`` (no copy) when ``x`` is contiguous.
    """
    check_positive_int("split_heads", "num_heads", num_heads)
    dims = check_shapes("split_heads", floating=False, x=(x, "N L E"))
    N, L, E = dims["N"], dims["L"], dims["E"]
    if E % num_heads:
        raise ValueError(f"split_heads: the last dim of 'x' (E={E}) is not divisible by num_heads={num_heads}")
    D = E // num_heads
    return x.reshape(N, L, num_heads, D).transpose(1, 2)  # (N, H, L, D)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """Concatenate heads back into one vector per token; the inverse of :func:`split_heads`.

    Args:
        x: per-head vectors, e.g. from :func:`split_heads`; of any dtype.

    Shape:
        - x: :math:`(N, H, L, D)`
        - output: :math:`(N, L, H \\cdot D)`

    Returns:
        The concatenated heads, same dtype as ``x``; head h fills columns ``h*D ... (h+1)*D - 1``.
    """
    dims = check_shapes("merge_heads", floating=False, x=(x, "N H L D"))
    N, H, L, D = dims["N"], dims["H"], dims["L"], dims["D"]
    return x.transpose(1, 2).reshape(N, L, H * D)  # (N, L, H*D)


def _project_heads(fn, query, key, value, W_q, W_k, W_v, W_o, num_heads, mask, biases):
    """Check arguments, project and split: returns per-head q, k, v of shape (N, H, *, D)."""
    check_positive_int(fn, "num_heads", num_heads)
    bias_specs: dict[str, Any] = {name: (b, "? E") for name, b in biases.items()}
    dims = check_shapes(
        fn,
        query=(query, "N L E"),
        key=(key, "N S E"),
        value=(value, "N S E"),
        W_q=(W_q, "E E"),
        W_k=(W_k, "E E"),
        W_v=(W_v, "E E"),
        W_o=(W_o, "E E"),
        **bias_specs,
    )
    if dims["E"] % num_heads:
        raise ValueError(f"{fn}: embed dim E={dims['E']} is not divisible by num_heads={num_heads}")
    check_mask(fn, mask, (dims["N"], num_heads, dims["L"], dims["S"]), "(N, H, L, S)")

    b_q, b_k, b_v = biases["b_q"], biases["b_k"], biases["b_v"]
    if query is key and key is value and (b_q is None) == (b_k is None) == (b_v is None):
        # Self-attention: one matmul with the three matrices side by side is faster.
        W = torch.cat([W_q, W_k, W_v], dim=1)  # (E, 3E)
        b = None if b_q is None else torch.cat([b_q, b_k, b_v])  # (3E,)
        q, k, v = _linear(query, W, b).chunk(3, dim=-1)  # 3 x (N, L, E)
    else:
        q, k, v = _linear(query, W_q, b_q), _linear(key, W_k, b_k), _linear(value, W_v, b_v)
    return split_heads(q, num_heads), split_heads(k, num_heads), split_heads(v, num_heads)  # (N, H, *, D)


def _linear(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x @ W + b`` for x of shape (N, L, E_in); one fused addmm when there is a bias."""
    if b is None:
        return x @ W
    return torch.addmm(b, x.flatten(0, 1), W).view(*x.shape[:-1], W.shape[1])  # (N, L, E_out)


def fused_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None, dropout_p: float = 0.0
) -> torch.Tensor:
    r"""The output of :func:`~course_lib.scaled_dot_product_attention`, without its weights,
    from PyTorch's fused kernel (:func:`torch.nn.functional.scaled_dot_product_attention`).

    The same formula, :math:`\mathrm{softmax}(QK^\top/\sqrt{D})\,V` (the book's equation
    ``sdpa``), computed block by block as the efficient-attention chapter's
    ``tiled_attention`` is: the (L, S) weights are never stored, which saves their memory
    and, on a GPU, most of the time. The masks and the fully-masked-row rule are ours: a
    query that may attend to no key gets a zero output on every device and backend (not all of
    PyTorch's kernels promise that).

    Args:
        q, k, v, mask: as :func:`~course_lib.scaled_dot_product_attention` (boolean mask,
            ``True`` = may attend).
        dropout_p: dropout on the weights (training only).

    Shape:
        - q: :math:`(N, H, L, D)`; k: :math:`(N, H, S, D)`; v: :math:`(N, H, S, D_v)`
        - mask: broadcastable to :math:`(N, H, L, S)`
        - output: :math:`(N, H, L, D_v)`
    """
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    live = mask.any(dim=-1, keepdim=True)  # (..., L, 1): queries with at least one key
    # A fully masked row may attend everywhere inside the kernel (finite values and gradients),
    # then its output is zeroed.
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | ~live, dropout_p=dropout_p)  # (N, H, L, Dv)
    return out.masked_fill(~live, 0.0)


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout_p: float, need_weights: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention step on per-head tensors: the readable path with its weights, or the fused one."""
    if need_weights:
        return scaled_dot_product_attention(q, k, v, mask, dropout_p=dropout_p)  # (N, H, L, D), (N, H, L, S)
    return fused_attention(q, k, v, mask, dropout_p), None


def multi_head_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None = None,
    *,
    b_q: torch.Tensor | None = None,
    b_k: torch.Tensor | None = None,
    b_v: torch.Tensor | None = None,
    b_o: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Multi-head attention, concatenation form: :math:`\mathrm{Concat}(head_1..head_H)\,W_o`.

    :math:`head_h = \mathrm{Attention}(Q W_q^{(h)}, K W_k^{(h)}, V W_v^{(h)})`, where
    :math:`W^{(h)}` are columns :math:`hD \ldots (h+1)D - 1` of the full (E, E) matrices
    (Vaswani et al., 2017, section 3.2.2). Projecting once with the full matrix and
    splitting is the same as H separate per-head projections, and faster.

    Args:
        query, key, value: inputs; key and value usually the same tensor.
        W_q, W_k, W_v: input projections (``x @ W``).
        W_o: output projection applied to the concatenated heads.
        num_heads: H; must divide E.
        mask: boolean, ``True`` = may attend. The caller shapes it: a key-padding mask
            ``keep`` (N, S) is passed as ``keep[:, None, None, :]``, (N, 1, 1, S), and a
            causal mask (L, S) as it is; this function only checks that it broadcasts to
            (N, H, L, S) and passes it on unchanged to ``scaled_dot_product_attention``.
            A query whose keys are all masked gets zero weights in every head and the
            output ``b_o`` (zero without biases).
        b_q, b_k, b_v, b_o: optional biases (keyword only; the graded form has none).
        dropout_p: dropout on the attention weights (training only).
        need_weights: return the weights (the readable path, as the chapter derives it); with
            ``False``, the weights are never formed: the attention step is
            :func:`fused_attention` and the weights returned are ``None`` (as with
            :class:`torch.nn.MultiheadAttention`'s ``need_weights=False``).

    Shape:
        - query: :math:`(N, L, E)`
        - key, value: :math:`(N, S, E)`
        - W_q, W_k, W_v, W_o: :math:`(E, E)`
        - mask: broadcastable to :math:`(N, H, L, S)`
        - output: :math:`(N, L, E)`
        - weights: :math:`(N, H, L, S)`

    Returns:
        ``(output, weights)``, the weights per head (``None`` with ``need_weights=False``).
    """
    biases = {"b_q": b_q, "b_k": b_k, "b_v": b_v, "b_o": b_o}
    q, k, v = _project_heads("multi_head_attention", query, key, value, W_q, W_k, W_v, W_o, num_heads, mask, biases)
    heads, weights = _attend(q, k, v, mask, dropout_p, need_weights)  # (N, H, L, D)
    concat = merge_heads(heads)  # (N, L, E)
    return _linear(concat, W_o, b_o), weights


def multi_head_attention_sum_form(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    W_o: torch.Tensor,
    num_heads: int,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""Multi-head attention as a sum over heads (Zhu et al., 2020, Deformable DETR, eq. 1).

    In the book's row-vector notation (queries from ``query`` = X, keys and values from
    ``key``/``value`` = the memory Z), the output for query l is

    .. math::
        \mathrm{MHA}(X, Z)_l = \sum_{h=0}^{H-1} \Big[\sum_s A_{hls}\, z_s W_v^{(h)}\Big] W_o^{(h)},

    where :math:`W_v^{(h)}` = columns and :math:`W_o^{(h)}` = rows :math:`hD \ldots (h+1)D - 1`
    of ``W_v`` and ``W_o`` (the rows that multiply head h's slice of the concatenation).
    Concatenating and then multiplying by ``W_o`` is a block matrix product, so this sum
    equals :func:`multi_head_attention`. (The paper writes column vectors, with its
    :math:`z_q` for a query's input and :math:`x_k` for a key's: the letters are swapped
    with the book's X and Z, and its :math:`W'_m, W_m` are our blocks transposed.)

    Args:
        query, key, value: inputs, as in :func:`multi_head_attention`.
        W_q, W_k, W_v: input projections (``x @ W``).
        W_o: output projection; its row blocks :math:`W_o^{(h)}` weight each head.
        num_heads: H; must divide E.
        mask: boolean, ``True`` = may attend. No biases and no dropout in this form.

    Shape:
        as :func:`multi_head_attention`; output :math:`(N, L, E)`.

    Returns:
        The output only.
    """
    biases = {"b_q": None, "b_k": None, "b_v": None, "b_o": None}
    q, k, v = _project_heads(
        "multi_head_attention_sum_form", query, key, value, W_q, W_k, W_v, W_o, num_heads, mask, biases
    )
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (N, H, L, D)
    D = heads.shape[-1]
    out = torch.zeros_like(query)
    for h in range(num_heads):
        out = out + heads[:, h] @ W_o[h * D : (h + 1) * D, :]  # (N, L, D) @ (D, E) -> (N, L, E)
    return out


class MultiHeadAttention(nn.Module):
    """Multi-head attention with biases and dropout; a thin wrapper over :func:`multi_head_attention`.

    Batch-first, boolean masks with ``True`` = may attend (the opposite of
    :class:`torch.nn.MultiheadAttention`'s ``key_padding_mask`` and boolean ``attn_mask``,
    where ``True`` means *blocked*: pass ``~mask`` there). A fully masked query gets zero
    weights and the output ``b_o``, the output projection's bias, not zero.

    Args:
        embed_dim: E.
        num_heads: H; must divide E.
        bias: learn biases for the four projections.
        dropout: dropout probability on the attention weights.

    Shape:
        - query: :math:`(N, L, E)`; key, value: :math:`(N, S, E)`
        - mask: broadcastable to :math:`(N, H, L, S)`
        - output: :math:`(N, L, E)`; weights: :math:`(N, H, L, S)`
    """

    # Registered in __init__'s loop (the order fixes the initialisation's random draws).
    W_q: torch.Tensor
    W_k: torch.Tensor
    W_v: torch.Tensor
    W_o: torch.Tensor
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None
    b_o: torch.Tensor | None

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        check_positive_int("MultiHeadAttention", "embed_dim", embed_dim)
        check_positive_int("MultiHeadAttention", "num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"MultiHeadAttention: embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        names = ("q", "k", "v", "o")
        for n in names:
            W = torch.empty(embed_dim, embed_dim)
            nn.init.xavier_uniform_(W)
            self.register_parameter(f"W_{n}", nn.Parameter(W))
            self.register_parameter(f"b_{n}", nn.Parameter(torch.zeros(embed_dim)) if bias else None)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Returns ``(output, weights)``; the weights are ``None`` with ``need_weights=False``
        (the fused path, :func:`fused_attention`). See the class docstring for shapes."""
        return multi_head_attention(
            query,
            key,
            value,
            self.W_q,
            self.W_k,
            self.W_v,
            self.W_o,
            self.num_heads,
            mask,
            b_q=self.b_q,
            b_k=self.b_k,
            b_v=self.b_v,
            b_o=self.b_o,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )

    def project_kv(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project and split keys and values into heads, for a KV cache.

        Shape:
            - key, value: :math:`(N, S, E)`
            - output: two tensors of shape :math:`(N, H, S, D)`
        """
        k = split_heads(_linear(key, self.W_k, self.b_k), self.num_heads)  # (N, H, S, D)
        v = split_heads(_linear(value, self.W_v, self.b_v), self.num_heads)  # (N, H, S, D)
        return k, v

    def attend(
        self,
        query: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of new queries over already projected keys and values (from :meth:`project_kv`).

        With the keys and values of every earlier position cached, a decoder step
        projects only its own token: the cost of one step no longer grows with the
        number of layers times the prefix length.

        Shape:
            - query: :math:`(N, L, E)`; k, v: :math:`(N, H, S, D)`
            - mask: broadcastable to :math:`(N, H, L, S)`
            - output: :math:`(N, L, E)`; weights: :math:`(N, H, L, S)` (``None`` with
              ``need_weights=False``)
        """
        q = split_heads(_linear(query, self.W_q, self.b_q), self.num_heads)  # (N, H, L, D)
        p = self.dropout if self.training else 0.0
        heads, weights = _attend(q, k, v, mask, p, need_weights)  # (N, H, L, D)
        return _linear(merge_heads(heads), self.W_o, self.b_o), weights

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of a :class:`torch.nn.MultiheadAttention` (either ``batch_first``).

        PyTorch stores ``in_proj_weight`` (3E, E) for ``x @ W.T``; we store each (E, E)
        block transposed, for ``x @ W``.
        """
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"from_torch: expected nn.MultiheadAttention, got {type(m).__name__}")
        if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
            raise ValueError("from_torch: kdim/vdim != embed_dim, add_bias_kv and add_zero_attn are not supported")
        E = m.embed_dim
        new = cls(E, m.num_heads, bias=m.in_proj_bias is not None, dropout=m.dropout)
        new = new.to(dtype=m.in_proj_weight.dtype, device=m.in_proj_weight.device)
        with torch.no_grad():
            for i, n in enumerate("qkv"):
                getattr(new, f"W_{n}").copy_(m.in_proj_weight[i * E : (i + 1) * E].T)
                if m.in_proj_bias is not None:
                    getattr(new, f"b_{n}").copy_(m.in_proj_bias[i * E : (i + 1) * E])
            new.W_o.copy_(m.out_proj.weight.T)
            if m.out_proj.bias is not None and new.b_o is not None:
                new.b_o.copy_(m.out_proj.bias)
        return new.train(m.training)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}"
