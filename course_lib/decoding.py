"""Greedy and beam-search decoding, and the protocol of the models they decode.

Every model of :mod:`course_lib.models` is :class:`Decodable`: it encodes a batch of
sources once (``start``) and then produces the next token's log-probabilities one step at a
time (``next_log_probs``). :func:`greedy_decode` and :func:`beam_search` are loops around
these two methods and need nothing else from a model.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Protocol, overload, runtime_checkable

import torch

from ._validation import check_positive_int
from .tasks import BOS, EOS, PAD

__all__ = ["Decodable", "greedy_decode", "beam_search"]


@runtime_checkable
class Decodable(Protocol):
    """A model that greedy decoding and beam search can drive, one token at a time.

    The decoder state is the model's own business, with one rule: it is a (nested) dict,
    list, tuple or dataclass whose tensors all have the batch first, so that beam search
    can reorder it (any other value, such as a step counter, is passed along as it is).
    """

    def start(self, src: torch.Tensor, use_cache: bool = True) -> Any:
        """Encode a batch of sources once; returns the first decoder state.

        Args:
            src: source token ids.
            use_cache: for the transformer, decode with a KV cache (same tokens, faster);
                models without a cache ignore it.

        Shape:
            - src: :math:`(N, S)`
        """
        ...

    def next_log_probs(self, state: Any, y_prev: torch.Tensor) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """One decoder step: feed the previous token, get the next one's log-probabilities.

        Args:
            state: the state from :meth:`start` or from the previous step.
            y_prev: the previous token of every sequence (``<bos>`` at the first step).

        Shape:
            - y_prev: :math:`(N,)`
            - log_probs: :math:`(N, V)`; weights: :math:`(N, S)`

        Returns:
            ``(log_probs, new_state, weights)``: the next token's log-probabilities, the
            state after this step, and this step's attention weights over the source.
        """
        ...


def _map_state(state, fn):
    """Apply ``fn`` to every batch-first tensor in a (nested) decoder state."""
    if isinstance(state, torch.Tensor):
        return fn(state)
    if isinstance(state, dict):
        return {k: _map_state(v, fn) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_map_state(v, fn) for v in state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return dataclasses.replace(
            state, **{f.name: _map_state(getattr(state, f.name), fn) for f in dataclasses.fields(state)}
        )
    return state


@overload
def greedy_decode(
    model: Decodable,
    src: torch.Tensor,
    max_len: int,
    use_cache: bool = ...,
    return_weights: Literal[False] = ...,
    stop_at_eos: bool = ...,
) -> torch.Tensor: ...
@overload
def greedy_decode(
    model: Decodable,
    src: torch.Tensor,
    max_len: int,
    use_cache: bool = ...,
    *,
    return_weights: Literal[True],
    stop_at_eos: bool = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@torch.no_grad()
def greedy_decode(
    model: Decodable,
    src: torch.Tensor,
    max_len: int,
    use_cache: bool = True,
    return_weights: bool = False,
    stop_at_eos: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Pick the most likely token at every step until ``<eos>`` or ``max_len`` tokens.

    Args:
        model: a :class:`Decodable` model.
        src: source token ids.
        max_len: the most tokens to produce (``<eos>`` included).
        use_cache: for the transformer, decode with a KV cache (same tokens, faster).
        return_weights: also return the attention weights of every step.
        stop_at_eos: ``True`` (default): after a row's ``<eos>`` its tokens are ``<pad>``,
            and decoding stops once every row has its ``<eos>``. ``False``: make exactly
            ``max_len`` steps, ``<eos>`` being a token like any other (to time decoding, or
            to compare it with teacher forcing).

    Shape:
        - src: :math:`(N, S)`
        - output: :math:`(N, T)` token ids, :math:`T \\le` ``max_len``; weights :math:`(N, T, S)`

    Returns:
        The tokens, or ``(tokens, weights)``.
    """
    check_positive_int("greedy_decode", "max_len", max_len)
    state = model.start(src, use_cache=use_cache)
    y = torch.full((src.shape[0],), BOS, dtype=torch.long, device=src.device)  # (N,)
    done = torch.zeros_like(y, dtype=torch.bool)  # (N,)
    tokens, weights = [], []
    for _ in range(max_len):
        log_probs, state, w = model.next_log_probs(state, y)
        y = log_probs.argmax(-1)  # (N,)
        if stop_at_eos:
            y = y.masked_fill(done, PAD)  # (N,)
            done |= y == EOS
        tokens.append(y)
        weights.append(w)
        if stop_at_eos and done.all():
            break
    out = torch.stack(tokens, dim=1)  # (N, T)
    return (out, torch.stack(weights, dim=1)) if return_weights else out  # (N, T), (N, T, S)


@torch.no_grad()
def beam_search(model: Decodable, src: torch.Tensor, beam_size: int, max_len: int, alpha: float = 1.0) -> list[int]:
    """Beam search for one source sequence, with length normalisation.

    Keeps the ``beam_size`` best partial outputs; a finished hypothesis (ending in
    ``<eos>``) is ranked by :math:`\\log p(y) / |y|^\\alpha`, so that longer outputs are not
    penalised merely for having more factors below 1 (``alpha = 0`` turns it off).

    Args:
        model: a :class:`Decodable` model.
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
    seqs: list[list[int]] = [[]]  # alive hypotheses
    scores = torch.zeros(1, device=src.device)  # their summed log-probabilities
    finished: list[tuple[float, list[int]]] = []
    last = torch.tensor([BOS], device=src.device)
    for _ in range(max_len):
        log_probs, state, _ = model.next_log_probs(state, last)  # (B, V)
        total = (scores[:, None] + log_probs).flatten()  # (B * V,)
        best = total.topk(min(2 * beam_size, total.numel())).indices
        V = log_probs.shape[-1]
        keep: list[int] = []
        new_seqs: list[list[int]] = []
        new_scores: list[float] = []
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
        index = torch.tensor(keep, device=src.device)
        state = _map_state(state, lambda x, index=index: x.index_select(0, index) if x.dim() else x)
        seqs, scores = new_seqs, torch.tensor(new_scores, device=src.device)
        last = torch.tensor([s[-1] for s in new_seqs], device=src.device)
    if not finished:  # nothing ended in time: rank what is alive
        finished = [(s / len(q) ** alpha, q) for s, q in zip(scores.tolist(), seqs, strict=False)]
    return max(finished, key=lambda f: f[0])[1]
