"""Greedy and beam-search decoding for the models of :mod:`course_lib.models`."""

from __future__ import annotations

import dataclasses
import math

import torch

from .tasks import BOS, EOS, PAD

__all__ = ["greedy_decode", "beam_search"]


def _map_state(state, fn):
    """Apply ``fn`` to every batch-first tensor in a (nested) decoder state."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {k: _map_state(v, fn) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_map_state(v, fn) for v in state)
    if dataclasses.is_dataclass(state):
        return dataclasses.replace(state, **{f.name: _map_state(getattr(state, f.name), fn)
                                             for f in dataclasses.fields(state)})
    return state


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, max_len: int, use_cache: bool = True, return_weights: bool = False):
    """Pick the most likely token at every step until ``<eos>`` or ``max_len`` tokens.

    Args:
        model: a model with ``start`` and ``next_log_probs`` (see :mod:`course_lib.models`).
        src: source token ids.
        max_len: the most tokens to produce (``<eos>`` included).
        use_cache: for the transformer, decode with a KV cache (same tokens, faster).
        return_weights: also return the attention weights of every step.

    Shape:
        - src: :math:`(N, S)`
        - output: :math:`(N, T)` token ids, ``<pad>`` after each row's ``<eos>``;
          weights :math:`(N, T, S)`

    Returns:
        The tokens, or ``(tokens, weights)``.
    """
    state = model.start(src, use_cache=use_cache)
    y = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)
    done = torch.zeros_like(y, dtype=torch.bool)
    tokens, weights = [], []
    for _ in range(max_len):
        log_probs, state, w = model.next_log_probs(state, y)
        y = log_probs.argmax(-1).masked_fill(done, PAD)  # (N,)
        tokens.append(y)
        weights.append(w)
        done |= y == EOS
        if done.all():
            break
    out = torch.stack(tokens, dim=1)  # (N, T)
    return (out, torch.stack(weights, dim=1)) if return_weights else out


@torch.no_grad()
def beam_search(model, src: torch.Tensor, beam_size: int, max_len: int, alpha: float = 1.0) -> list[int]:
    """Beam search for one source sequence, with length normalisation.

    Keeps the ``beam_size`` best partial outputs; a finished hypothesis (ending in
    ``<eos>``) is ranked by :math:`\\log p(y) / |y|^\\alpha`, so that longer outputs are not
    penalised merely for having more factors below 1 (``alpha = 0`` turns it off).

    Args:
        model: a model with ``start`` and ``next_log_probs``.
        src: one source sequence, shape (1, S).
        beam_size: K.
        max_len: the most tokens per hypothesis (``<eos>`` included).
        alpha: the length-normalisation exponent.

    Returns:
        The best hypothesis' token ids, ``<eos>`` included if it finished.
    """
    if src.dim() != 2 or src.shape[0] != 1:
        raise ValueError(f"beam_search: argument 'src' must have shape (1, S), got {tuple(src.shape)}")
    if not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_search: argument 'beam_size' must be a positive int, got {beam_size!r}")
    state = model.start(src)
    seqs = [[]]  # alive hypotheses
    scores = torch.zeros(1)  # their summed log-probabilities
    finished: list[tuple[float, list[int]]] = []
    last = torch.tensor([BOS])
    for _ in range(max_len):
        log_probs, state, _ = model.next_log_probs(state, last)  # (B, V)
        total = (scores[:, None] + log_probs).flatten()  # (B * V,)
        best = total.topk(min(2 * beam_size, total.numel())).indices
        V = log_probs.shape[-1]
        keep, new_seqs, new_scores = [], [], []
        for idx in best.tolist():
            beam, token = divmod(idx, V)
            seq, score = seqs[beam] + [token], total[idx].item()
            if token == EOS:
                finished.append((score / len(seq) ** alpha, seq))
            elif len(new_seqs) < beam_size:
                keep.append(beam)
                new_seqs.append(seq)
                new_scores.append(score)
        if not new_seqs:
            break
        # An alive hypothesis can only lose log-probability; the best it can still reach is
        # its score normalised by the longest length allowed. Stop once no one can win.
        best_finished = max((f[0] for f in finished), default=-math.inf)
        if best_finished >= max(new_scores) / max_len**alpha:
            break
        index = torch.tensor(keep)
        state = _map_state(state, lambda x: x.index_select(0, index) if x.dim() else x)
        seqs, scores, last = new_seqs, torch.tensor(new_scores), torch.tensor([s[-1] for s in new_seqs])
    if not finished:  # nothing ended in time: rank what is alive
        finished = [(s / len(q) ** alpha, q) for s, q in zip(scores.tolist(), seqs)]
    return max(finished, key=lambda f: f[0])[1]
