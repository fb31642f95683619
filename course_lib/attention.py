"""Scaled dot-product attention and self-attention (self-attention chapter)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import check_mask, check_shapes
from .softmax import _masked_softmax

__all__ = ["scaled_dot_product_attention", "self_attention"]


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Scaled dot-product attention, :math:`\mathrm{softmax}(QK^\top/\sqrt{D})\,V`.

    The book's equation ``sdpa`` (self-attention chapter; Vaswani et al., 2017, eq. 1).

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, ``True`` = query l may attend to key s. Masked scores become
            ``-inf`` before the softmax.
        dropout_p: dropout on the weights before they multiply ``v`` (training only;
            pass 0 at evaluation). The returned weights are those before dropout.

    Shape:
        - q: :math:`(*, L, D)`
        - k: :math:`(*, S, D)`
        - v: :math:`(*, S, D_v)`
        - mask: broadcastable to :math:`(*, L, S)`
        - output: :math:`(*, L, D_v)`
        - weights: :math:`(*, L, S)`

    Returns:
        ``(output, weights)``. A fully masked row gives zero weights and a zero output.
    """
    fn = "scaled_dot_product_attention"
    dims = check_shapes(fn, q=(q, "... L D"), k=(k, "... S D"), v=(v, "... S Dv"))
    check_mask(fn, mask, (*dims["..."], dims["L"], dims["S"]), "(..., L, S)")
    scores = (q / math.sqrt(dims["D"])) @ k.transpose(-2, -1)  # (*, L, D) @ (*, D, S) -> (*, L, S)
    weights = _masked_softmax(scores, mask)  # (*, L, S)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return dropped @ v, weights  # (*, L, S) @ (*, S, Dv) -> (*, L, Dv)


def self_attention(
    x: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    W_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Single-head self-attention: queries, keys and values all come from ``x``.

    :math:`Q = XW_q,\ K = XW_k,\ V = XW_v`, then :func:`scaled_dot_product_attention`.
    Without positional information the result is permutation-equivariant: permuting
    the T tokens of ``x`` permutes the output rows the same way.

    Args:
        x: token vectors.
        W_q: query projection.
        W_k: key projection.
        W_v: value projection.
        mask: boolean, ``True`` = may attend, e.g. :func:`course_lib.causal_mask`.

    Shape:
        - x: :math:`(N, T, E_{in})`
        - W_q, W_k: :math:`(E_{in}, D_k)`
        - W_v: :math:`(E_{in}, D_v)`
        - mask: broadcastable to :math:`(N, T, T)`
        - output: :math:`(N, T, D_v)`
        - weights: :math:`(N, T, T)`

    Returns:
        ``(output, weights)``.
    """
    fn = "self_attention"
    dims = check_shapes(fn, x=(x, "N T E"), W_q=(W_q, "E Dk"), W_k=(W_k, "E Dk"), W_v=(W_v, "E Dv"))
    check_mask(fn, mask, (dims["N"], dims["T"], dims["T"]), "(N, T, T)")
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
