"""A numerically stable softmax that is safe for masked (all ``-inf``) slices."""

from __future__ import annotations

from typing import Protocol

import torch

from ._validation import check_mask, check_shapes

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
    return _Softmax.apply(x, dim)


class _SoftmaxContext(Protocol):
    """What :class:`_Softmax`'s forward keeps for its backward: the output, and ``dim``."""

    dim: int

    @property
    def saved_tensors(self) -> tuple[torch.Tensor, ...]: ...

    def save_for_backward(self, *tensors: torch.Tensor) -> None: ...


class _Softmax(torch.autograd.Function):
    """Softmax with its backward written out (the Jacobian-vector product).

    Letting autograd differentiate ``exp(x - m) / sum`` step by step costs three times the
    time of PyTorch's fused softmax; the closed-form backward costs about the same.
    """

    @staticmethod
    def forward(ctx: _SoftmaxContext, x: torch.Tensor, dim: int) -> torch.Tensor:
        m = x.amax(dim=dim, keepdim=True)  # the max does not change the result
        m.masked_fill_(~torch.isfinite(m), 0.0)  # all -inf slice: avoid (-inf) - (-inf) = NaN
        y = torch.sub(x, m).exp_()  # every exponent <= 0: no overflow
        total = y.sum(dim=dim, keepdim=True)
        total.masked_fill_(total == 0, 1.0)  # all -inf slice: 0 / 1 = 0
        y.div_(total)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx: _SoftmaxContext, grad_y: torch.Tensor) -> tuple[torch.Tensor, None]:
        # dy_i / dx_j = y_i (delta_ij - y_j), so grad_x = y * (grad_y - <grad_y, y>).
        (y,) = ctx.saved_tensors
        grad_x = grad_y * y
        return grad_x.addcmul_(y, grad_x.sum(dim=ctx.dim, keepdim=True), value=-1.0), None


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
    check_shapes("masked_softmax", scores=(scores, "..."))
    check_mask("masked_softmax", mask, tuple(scores.shape), "scores.shape")
    return _masked_softmax(scores, mask)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """:func:`masked_softmax` without the argument checks, for callers that made them already
    (they cost as much as the arithmetic for the small tensors of the toy tasks)."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _Softmax.apply(scores, -1)
