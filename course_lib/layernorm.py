"""Layer normalisation and the Add & Norm step (LayerNorm chapter)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._validation import check_positive_int, check_shapes

__all__ = ["layer_norm", "add_and_norm", "LayerNorm"]


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    r"""Layer normalisation over the last dim (Ba et al., 2016).

    .. math::
        \mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \epsilon}} + \beta, \quad
        \mu = \frac1E \sum_e x_e, \quad \sigma^2 = \frac1E \sum_e (x_e - \mu)^2.

    The statistics are per token (biased variance, ``eps`` inside the square root), so
    training and inference compute exactly the same thing, unlike BatchNorm.

    Args:
        x: inputs.
        gamma: gain (the book's alpha), initialised to ones.
        beta: bias, initialised to zeros.
        eps: added to the variance.

    Shape:
        - x: :math:`(*, E)`
        - gamma, beta: :math:`(E)`
        - output: :math:`(*, E)`

    Returns:
        The normalised ``x``, in its dtype when ``gamma`` and ``beta`` share it.
    """
    check_shapes("layer_norm", x=(x, "... E"), gamma=(gamma, "E"), beta=(beta, "E"))
    centred = x - x.mean(dim=-1, keepdim=True)  # (*, E)
    var = (centred * centred).mean(dim=-1, keepdim=True)  # (*, 1), biased: divide by E
    # (torch.var_mean would read better but runs ~10x slower on CPU for small last dims.)
    return centred * torch.rsqrt(var + eps) * gamma + beta


def add_and_norm(
    x: torch.Tensor,
    sublayer_output: torch.Tensor,
    gamma: torch.Tensor,
    beta: torch.Tensor,
    eps: float = 1e-5,
) -> torch.Tensor:
    r"""Residual connection followed by layer norm: :math:`\mathrm{LN}(x + \mathrm{Sublayer}(x))`.

    This is the post-LN arrangement of the original transformer.

    Args:
        x: the sublayer's input, carried by the residual connection.
        sublayer_output: ``Sublayer(x)``; must have exactly the shape of ``x``.
        gamma, beta: gain and bias of the layer norm, as in :func:`layer_norm`.
        eps: added to the variance.

    Shape:
        - x, sublayer_output: :math:`(*, E)`
        - gamma, beta: :math:`(E)`
        - output: :math:`(*, E)`

    Returns:
        ``layer_norm(x + sublayer_output, gamma, beta, eps)``.
    """
    check_shapes(
        "add_and_norm",
        x=(x, "... E"),
        sublayer_output=(sublayer_output, "... E"),
        gamma=(gamma, "E"),
        beta=(beta, "E"),
    )
    if x.shape != sublayer_output.shape:
        raise ValueError(
            f"add_and_norm: 'sublayer_output' must have the shape of 'x' {tuple(x.shape)}, "
            f"got {tuple(sublayer_output.shape)}"
        )
    return layer_norm(x + sublayer_output, gamma, beta, eps)


class LayerNorm(nn.Module):
    """Layer norm with learnable ``weight`` (gamma) and ``bias`` (beta); wraps :func:`layer_norm`.

    Parameter names match :class:`torch.nn.LayerNorm`, so its state dict loads directly.
    ``forward(x, fused=True)`` computes the same formula with PyTorch's fused kernel
    (:func:`torch.nn.functional.layer_norm`): one operation instead of six, forward and
    backward, which the transformer's layers use whenever they take the fused attention path.

    Shape:
        - x: :math:`(*, E)`; output: same
    """

    def __init__(self, normalized_shape: int, eps: float = 1e-5):
        super().__init__()
        check_positive_int("LayerNorm", "normalized_shape", normalized_shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(normalized_shape))
        self.bias = nn.Parameter(torch.zeros(normalized_shape))

    def forward(self, x: torch.Tensor, fused: bool = False) -> torch.Tensor:
        if fused:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
