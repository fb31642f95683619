"""Padding and causal masks (transformer chapter). ``True`` = may attend."""

from __future__ import annotations

import torch

from ._validation import check_positive_int, check_shapes

__all__ = ["padding_mask", "causal_mask"]


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mark the real (non-padding) tokens of a batch.

    Use as a key mask: ``mask[:, None, None, :]`` broadcasts over heads and queries.

    Args:
        tokens: integer token ids.
        pad_id: the id of ``<pad>``.

    Shape:
        - tokens: :math:`(N, S)`
        - output: :math:`(N, S)`, bool, ``True`` at real tokens

    Returns:
        A new bool tensor on the device of ``tokens``, ``False`` where ``tokens == pad_id``.
    """
    check_shapes("padding_mask", floating=False, tokens=(tokens, "N S"))
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise TypeError(f"padding_mask: argument 'tokens' must hold integer ids, got dtype {tokens.dtype}")
    return tokens != pad_id


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """The decoder's causal mask: query l may attend to key s only when s <= l.

    The diagonal is included: a token may attend to itself.

    Args:
        size: the sequence length L.
        device: where to create the mask.

    Shape:
        - output: :math:`(L, L)`, bool, lower triangular

    Returns:
        A bool tensor on ``device`` (default: PyTorch's default device), ``True`` on and
        below the diagonal.
    """
    check_positive_int("causal_mask", "size", size)
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
