"""Chapter 3's statistics of the trained 'reverse' model's cross-attention heads, and the
sentences about them.

For the task ``reverse`` a source of ``n`` digits is followed by ``<eos>``; the decoder, fed
``<bos> y_1 ... y_n`` (teacher forcing), must predict at input position ``t`` the target token
``y_{t+1}``, which is source digit ``n - 1 - t``. A head that reads "the right digit" puts its
weight there. The chapter measures this over many sequences and chooses its sentences from
the numbers, so that no build can print a sentence its own model contradicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class CopyStats:
    """Per decoder layer, one value per head, averaged over all digit-predicting rows.

    Attributes:
        share: mean weight on the source position to copy.
        near: share of rows whose largest weight is within one position of it.
        end: mean weight on the end of the source (its last digit and ``<eos>``).
        uniform: the weight an evenly spread row would put on the position to copy.
    """

    share: list[torch.Tensor]
    near: list[torch.Tensor]
    end: list[torch.Tensor]
    uniform: float


def positions_to_copy(lengths: torch.Tensor, num_queries: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The source position each decoder input position must read, and which rows predict a digit.

    Args:
        lengths: digits per sequence, shape (N,).
        num_queries: L, the decoder's input length (``<bos>`` + the longest target, padded).

    Returns:
        ``(to_copy, is_digit)``, both (N, L): ``to_copy[n, t] = lengths[n] - 1 - t`` (clamped
        at 0), and ``is_digit[n, t]`` = 1.0 where row t predicts a digit (t < lengths[n]), else 0.
    """
    t = torch.arange(num_queries)
    to_copy = (lengths[:, None] - 1 - t).clamp(min=0)
    is_digit = (t[None, :] < lengths[:, None]).float()
    return to_copy, is_digit


def copy_statistics(cross_weights: list[torch.Tensor], lengths: torch.Tensor) -> CopyStats:
    """How much each head of each decoder layer reads the digit its query must copy.

    Args:
        cross_weights: per decoder layer, the cross-attention weights, each (N, H, L, S),
            with S = max(lengths) + 1 (the digits, then ``<eos>``, padded).
        lengths: digits per sequence, shape (N,).

    Returns:
        A :class:`CopyStats`.
    """
    _N, H, L, _S = cross_weights[0].shape
    to_copy, is_digit = positions_to_copy(lengths, L)  # (N, L) each
    rows = is_digit.sum()
    mask = is_digit[:, None]  # (N, 1, L)
    last = torch.stack([lengths - 1, lengths], -1)  # (N, 2): the last digit and <eos>
    share, near, end = [], [], []
    for w in cross_weights:  # (N, H, L, S)
        index = to_copy[:, None, :, None].expand(-1, H, -1, 1)  # (N, H, L, 1)
        on_target = w.gather(-1, index)[..., 0]  # (N, H, L)
        share.append((on_target * mask).sum((0, 2)) / rows)
        close = ((w.argmax(-1) - to_copy[:, None]).abs() <= 1).float()  # (N, H, L)
        near.append((close * mask).sum((0, 2)) / rows)
        on_end = w.gather(-1, last[:, None, None, :].expand(-1, H, L, 2)).sum(-1)  # (N, H, L)
        end.append((on_end * mask).sum((0, 2)) / rows)
    uniform = ((1 / (lengths + 1))[:, None] * is_digit).sum() / rows
    return CopyStats(share, near, end, uniform.item())


def lookup_layer(stats: CopyStats) -> int:
    """The decoder layer whose heads put the most weight, on average, on the position to copy."""
    return max(range(len(stats.share)), key=lambda i: stats.share[i].mean().item())


def heads_sentence(stats: CopyStats) -> str:
    """One sentence on whether the lookup layer's heads do the same thing, chosen from the numbers."""
    i = lookup_layer(stats)
    s, e = stats.share[i], stats.end[i]
    if s.max() - s.min() < 0.25 and s.min() > 2 * stats.uniform:
        return (
            "Its heads have learned much the same lookup: nothing forces heads to specialise, "
            "and a task that needs one kind of lookup may get it several times over."
        )
    if s.max() - s.min() < 0.25:
        return (
            "None of its heads concentrates on that position much more than uniform attention "
            "would, so the model must find the digit in some other way."
        )
    best, worst = int(s.argmax()), int(s.argmin())
    return (
        f"Its heads are not all alike: head {best} puts {s[best]:.2f} on the position to "
        f"copy, head {worst} only {s[worst]:.2f}, and {e[worst]:.0%} of head {worst}'s "
        "weight goes to the end of the source, the last digit and `<eos>`."
    )


def layers_sentence(stats: CopyStats) -> str:
    """One or two sentences comparing the decoder layers, chosen from the numbers."""
    if len(stats.share) == 1:
        return "The model has a single decoder layer, so this layer finds the right digit by itself."
    i = lookup_layer(stats)
    o = min(range(len(stats.share)), key=lambda j: stats.share[j].mean().item())  # reads it least
    text = (
        f"Decoder layer {o} does something else: its heads put only {stats.share[o].min():.2f} to "
        f"{stats.share[o].max():.2f} on the position to copy, and on average {stats.end[o].mean():.0%} of "
        "their weight on the end of the source, the last digit and `<eos>` (against "
        f"{stats.end[i].mean():.0%} in layer {i})."
    )
    if stats.end[o].mean() > stats.end[i].mean() + 0.05:
        text += (
            f" A plausible reading is that layer {o} finds landmarks from which positions "
            f"are counted, and layer {i} uses them to read the right digit."
        )
    return text


def mirror_hits(cross: torch.Tensor, n_digits: int) -> torch.Tensor:
    """Per head, how many of the first ``n_digits`` rows of one sequence peak on the digit to copy.

    Args:
        cross: one sequence's cross-attention weights of one layer, (H, L, S).
        n_digits: the number of source digits n; rows 0 .. n-1 predict digits.

    Returns:
        (H,) integer counts: rows t < n whose largest weight is on source position n - 1 - t.
    """
    mirror = torch.arange(n_digits - 1, -1, -1)  # row t must read n - 1 - t
    return (cross[:, :n_digits].argmax(-1) == mirror).sum(-1)
