"""Bookkeeping for the layer normalisation chapter's batch-norm measurements, kept off the page.

The chapter asks how much one sequence's normalised output moves when the normaliser is
switched from training to evaluation mode, when the other sequences of its batch change, and
when padding is appended (:func:`sensitivity`); and how far it sits from the output that the
population statistics would give, for growing batch sizes (:func:`mean_deviation`). Both take
the normaliser as a function, so one code path measures batch norm and layer norm alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn as nn

Normaliser = Callable[[torch.Tensor], torch.Tensor]


def sensitivity(
    module: nn.Module, apply: Normaliser, x: torch.Tensor, x_other: torch.Tensor, x_pad: torch.Tensor
) -> list[float]:
    """The largest change in sequence 0's output under three changes of its surroundings.

    Args:
        module: the normalisation module, switched between ``train()`` and ``eval()``.
        apply: maps an ``(N, T, E)`` batch to its normalised ``(N, T, E)`` output using ``module``.
        x: the batch, ``(N, T, E)``; sequence 0 is the one watched.
        x_other: ``x`` with every other sequence replaced, ``(N, T, E)``.
        x_pad: ``x`` with padding positions appended, ``(N, T + P, E)``.

    Returns:
        ``[train vs eval, new batch companions, padding]``: the largest absolute difference
        over the ``T * E`` output values of sequence 0 (its first ``T`` positions for the
        padded batch). ``module`` is left in training mode.
    """
    T = x.shape[1]
    module.train()
    base = apply(x)[0]  # (T, E), training mode
    module.eval()
    evaluated = apply(x)[0]
    module.train()
    return [
        (base - evaluated).abs().max().item(),
        (apply(x_other)[0] - base).abs().max().item(),
        (apply(x_pad)[0, :T] - base).abs().max().item(),
    ]


def mean_deviation(
    apply: Normaliser,
    x0: torch.Tensor,
    target: torch.Tensor,
    batch_sizes: Sequence[int],
    companions: Callable[[int], torch.Tensor],
    draws: int = 20,
) -> list[float]:
    """How far one sequence's output sits from ``target`` when it shares a batch with others.

    Args:
        apply: the normaliser, ``(B, T, E) -> (B, T, E)``.
        x0: the watched sequence, ``(1, T, E)``.
        target: its reference output, ``(T, E)`` (for batch norm: the population statistics').
        batch_sizes: the batch sizes B to try (each at least 1).
        companions: ``companions(B)`` draws the other ``B - 1`` sequences, ``(B - 1, T, E)``.
        draws: random batches per batch size.

    Returns:
        Per batch size, the mean over ``draws`` batches of the largest absolute difference
        between the watched sequence's output and ``target``.
    """
    means = []
    for B in batch_sizes:
        deviations = []
        for _ in range(draws):
            batch = torch.cat([x0, companions(B)])  # (B, T, E)
            deviations.append((apply(batch)[0] - target).abs().max().item())
        means.append(sum(deviations) / len(deviations))
    return means


def markdown_table(header: Sequence[str], rows: Sequence[tuple[str, Sequence[float]]], fmt: str = ".3f") -> str:
    """A Markdown table: one header row, then each ``(name, numbers)`` as a row."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, numbers in rows:
        if len(numbers) != len(header) - 1:
            raise ValueError(f"markdown_table: row {name!r} has {len(numbers)} numbers for {len(header) - 1} columns")
        lines.append(f"| {name} | " + " | ".join(format(v, fmt) for v in numbers) + " |")
    return "\n".join(lines)
