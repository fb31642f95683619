"""A numerically stable softmax that is safe for masked (all ``-inf``) slices."""

from __future__ import annotations

import torch

from ._checks import check_mask, check_shapes

__all__ = ["softmax", "masked_softmax"]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    r"""Softmax along ``dim``, stable for large inputs and safe for all ``-inf`` slices.

    Implements the book's softmax (self-attention chapter, equation ``softmax``)
    with the max-subtraction trick:
    :math:`\mathrm{softmax}(x)_i = e^{x_i - m} / \sum_j e^{x_j - m}`, :math:`m = \max_j x_j`.
    Subtracting :math:`m` changes nothing mathematically but keeps every exponent
    :math:`\le 0`, so inputs of magnitude 1e4 give finite results.

    Entries equal to ``-inf`` get weight 0. A slice that is entirely ``-inf`` (a query that
    may attend to nothing) gets all-zero weights instead of ``NaN``.

    Args:
        x: scores, any floating-point tensor.
        dim: the dimension to normalise over.

    Shape:
        - x: :math:`(*)`
        - output: :math:`(*)`, same as ``x``

    Returns:
        Weights that are non-negative and sum to 1 along ``dim`` (or to 0 for all ``-inf``
        slices).
    """
    check_shapes("softmax", x=(x, "..."))
    # The max does not change the result, so no gradient needs to flow through it.
    m = x.amax(dim=dim, keepdim=True).detach()
    m = m.masked_fill(~torch.isfinite(m), 0.0)  # all -inf slice: avoid (-inf) - (-inf) = NaN
    e = torch.exp(x - m)
    total = e.sum(dim=dim, keepdim=True)
    return e / total.masked_fill(total == 0, 1.0)  # all -inf slice: 0 / 1 = 0


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim, with ``mask == False`` entries set to ``-inf`` first.

    Masking must happen *before* the softmax: zeroing weights afterwards leaves rows that
    no longer sum to 1.

    Args:
        scores: attention scores.
        mask: boolean, ``True`` = may attend, broadcastable to ``scores``.

    Shape:
        - scores: :math:`(*, S)`
        - mask: broadcastable to :math:`(*, S)`
        - output: :math:`(*, S)`

    Returns:
        Attention weights; a fully masked row is all zeros.
    """
    if mask is None:
        return softmax(scores, dim=-1)
    check_mask("masked_softmax", mask, tuple(scores.shape), "scores.shape")
    return softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
