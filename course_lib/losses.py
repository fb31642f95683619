"""Cross-entropy with label smoothing (transformer chapter)."""

from __future__ import annotations

import torch

from ._validation import check_shapes

__all__ = ["label_smoothing_loss"]


def label_smoothing_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float, ignore_index: int = -100
) -> torch.Tensor:
    r"""Mean cross-entropy against a smoothed target distribution (Szegedy et al., 2016).

    The target puts :math:`1 - \varepsilon + \varepsilon / C` on the true class and
    :math:`\varepsilon / C` on every class, so

    .. math::
        \ell = (1 - \varepsilon)\,(-\log p_y) + \varepsilon\,\frac1C \sum_c (-\log p_c).

    Rows whose target is ``ignore_index`` (padding) are left out of the mean. Equals
    ``F.cross_entropy(logits, target, label_smoothing=smoothing, ignore_index=ignore_index)``,
    including its ``NaN`` when every row is ignored.

    Args:
        logits: unnormalised class scores.
        target: class indices.
        smoothing: :math:`\varepsilon` in [0, 1].
        ignore_index: a target value to skip.

    Shape:
        - logits: :math:`(N, C)`
        - target: :math:`(N)`, integer
        - output: scalar

    Returns:
        A 0-dim tensor in the dtype of ``logits``: the mean loss over the rows not ignored
        (``NaN`` when every row is ignored).
    """
    fn = "label_smoothing_loss"
    check_shapes(fn, logits=(logits, "N C"))
    check_shapes(fn, floating=False, logits=(logits, "N C"), target=(target, "N"))
    if target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"{fn}: argument 'target' must hold integer class indices, got dtype {target.dtype}")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"{fn}: argument 'smoothing' must be in [0, 1], got {smoothing}")
    log_probs = logits - logits.logsumexp(dim=-1, keepdim=True)  # (N, C)
    valid = target != ignore_index  # (N,)
    C = logits.shape[-1]
    if ((target[valid] < 0) | (target[valid] >= C)).any():
        raise ValueError(f"{fn}: argument 'target' must hold class indices in [0, {C}) or ignore_index")
    nll = -log_probs.gather(-1, target.masked_fill(~valid, 0).unsqueeze(-1)).squeeze(-1)  # (N,)
    uniform = -log_probs.mean(dim=-1)  # (N,)
    per_row = (1 - smoothing) * nll + smoothing * uniform  # (N,)
    return per_row[valid].sum() / valid.sum()
