"""The layer normalisation chapter's measurement of gradient norms at initialisation.

Kept in a module so that the page shows the experiment's design and its results, and the
reader can open the code (the chapter includes :func:`gradient_norms` from this file).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from course_lib import EncoderLayer, LayerNorm


def gradient_norms(
    norm_first: bool, seed: int, depths: Sequence[int], d_model: int = 64
) -> tuple[dict[int, torch.Tensor], list[float]]:
    """Per-layer gradient norms for stacks of every depth in ``depths``, and the stream's std.

    The stacks share their layers: the stack of depth d is the first d layers of the deepest,
    with its own final norm and output layer, so one forward pass serves every depth.

    Returns:
        ``norms[d]``, shape ``(d,)``: the gradient norm of each layer's parameters for the
        stack of depth d; and the residual stream's standard deviation after each layer.
    """
    torch.manual_seed(seed)
    layers = [EncoderLayer(d_model, 4, 4 * d_model, dropout=0.0, norm_first=norm_first) for _ in range(max(depths))]
    for layer in layers:
        for p in layer.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)  # as torch.nn.Transformer initialises
    final_norm, head = LayerNorm(d_model), nn.Linear(d_model, 10)
    x = torch.randn(16, 16, d_model)  # (N, T, E), random "embedded tokens"
    labels = torch.randint(0, 10, (16 * 16,))  # one label per token
    h, outputs, stds = x, {}, []
    for depth, layer in enumerate(layers, start=1):
        h = layer(h)
        stds.append(h.std().item())  # size of the residual stream after the layer
        if depth in depths:
            outputs[depth] = h
    norms = {}
    for depth in depths:  # the stack of the first `depth` layers
        logits = head(final_norm(outputs[depth])).reshape(-1, 10)
        params = [list(layer.parameters()) for layer in layers[:depth]]
        loss = nn.functional.cross_entropy(logits, labels)
        grads = iter(torch.autograd.grad(loss, [p for ps in params for p in ps], retain_graph=True))
        norms[depth] = torch.stack([torch.sqrt(sum((next(grads) ** 2).sum() for _ in ps)) for ps in params])
    return norms, stds
