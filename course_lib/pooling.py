"""From scores to a context vector: softmax pooling and Luong's local attention (seq2seq chapter)."""

from __future__ import annotations

import torch

from ._validation import check_mask, check_shapes
from .softmax import _masked_softmax

__all__ = ["attention_pool", "local_attention_weights"]


def attention_pool(
    scores: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention pooling: :math:`\alpha = \mathrm{softmax}(e)`, :math:`c = \sum_s \alpha_s v_s`.

    Args:
        scores: one score per key, e.g. from :func:`course_lib.additive_score`.
        values: the vectors to average (the encoder's annotations).
        mask: boolean, ``True`` = may attend (a real, non-padding source token).

    Shape:
        - scores: :math:`(N, S)`
        - values: :math:`(N, S, D_v)`
        - mask: :math:`(N, S)`, or anything broadcastable to it
        - context: :math:`(N, D_v)`
        - weights: :math:`(N, S)`

    Returns:
        ``(context, weights)``. A fully masked row gives zero weights and a zero context.
    """
    dims = check_shapes("attention_pool", scores=(scores, "N S"), values=(values, "N S Dv"))
    check_mask("attention_pool", mask, (dims["N"], dims["S"]), "(N, S)")
    weights = _masked_softmax(scores, mask)  # (N, S)
    context = (weights.unsqueeze(1) @ values).squeeze(1)  # (N, 1, S) @ (N, S, Dv) -> (N, Dv)
    return context, weights


def local_attention_weights(scores: torch.Tensor, center: torch.Tensor, half_window: int) -> torch.Tensor:
    r"""Luong et al. (2015) local-p weights (their eq. 10).

    .. math::
        a_t(s) = \mathrm{softmax}_{|s - p_t| \le r}(e_s)\,
                 \exp\!\left(-\frac{(s - p_t)^2}{2\sigma^2}\right), \qquad \sigma = r / 2.

    The softmax runs over the positions inside the window :math:`[p_t - r, p_t + r]` only;
    positions outside get weight 0. The Gaussian favours positions near the (possibly
    fractional) centre :math:`p_t`. As in the paper, the result is not renormalised, so a
    row sums to less than 1. Scores of ``-inf`` (padding) get weight 0.

    The Gaussian belongs to local-p, whose centre is predicted. Local-m (:math:`p_t = t`)
    uses the window softmax alone, without this factor; see
    :class:`course_lib.Seq2SeqAttention`, whose ``monotonic_gaussian=True`` applies this
    function to local-m as well (a lecture-notes variant, not the paper's).

    Args:
        scores: alignment scores :math:`e_s` for every source position.
        center: the window centre :math:`p_t` per batch element, a real number.
        half_window: :math:`r`, the window's half-width, a positive number
            (:math:`D` in Luong et al.).

    Shape:
        - scores: :math:`(N, S)`
        - center: :math:`(N)`
        - output: :math:`(N, S)`

    Returns:
        The local attention weights.
    """
    dims = check_shapes("local_attention_weights", scores=(scores, "N S"), center=(center, "N"))
    if isinstance(half_window, bool) or not isinstance(half_window, (int, float)):
        raise TypeError(
            f"local_attention_weights: argument 'half_window' must be a number, got {type(half_window).__name__}"
        )
    if not half_window > 0:
        raise ValueError(
            f"local_attention_weights: argument 'half_window' must be a positive number, got {half_window!r}"
        )
    positions = torch.arange(dims["S"], device=scores.device, dtype=scores.dtype)  # (S,)
    distance = positions - center.to(scores.dtype).unsqueeze(-1)  # (N, S)
    in_window = distance.abs() <= half_window  # (N, S)
    sigma = half_window / 2
    gaussian = torch.exp(-(distance**2) / (2 * sigma**2))  # (N, S)
    return _masked_softmax(scores, in_window) * gaussian
