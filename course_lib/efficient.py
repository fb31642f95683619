"""Efficient attention: tiled attention with an online softmax, sliding-window attention, and
one decoding step with a KV cache.

The first two give the same result as :func:`course_lib.scaled_dot_product_attention` (with
the corresponding mask) while avoiding the work or the memory of the full (L, S) score
matrix; the third gives the same result as causal self-attention over the whole prefix while
computing only the newest position.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._validation import check_mask, check_positive_int, check_shapes
from .softmax import _masked_softmax, softmax

__all__ = ["tiled_attention", "sliding_window_mask", "sliding_window_attention", "cached_attention_step"]


def tiled_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    block_size: int = 128,
) -> torch.Tensor:
    r"""Attention computed one block of keys at a time, with an online softmax.

    The forward pass of FlashAttention (Dao et al., 2022) without its GPU kernel. For each
    block of ``block_size`` keys it computes that block's scores only, then folds them
    into three running quantities per query: the maximum score :math:`m`, the softmax
    denominator :math:`\ell = \sum_s e^{x_s - m}` and the unnormalised output
    :math:`a = \sum_s e^{x_s - m} v_s`. When a block raises the maximum from
    :math:`m` to :math:`m'`, the old :math:`\ell` and :math:`a` are rescaled by
    :math:`e^{m - m'}`; at the end the output is :math:`a / \ell`.

    The result equals ``scaled_dot_product_attention(q, k, v, mask)[0]``, but the largest
    temporary is one block of scores, :math:`(*, L, \text{block\_size})`, instead of the
    :math:`(*, L, S)` scores and weights: extra memory grows with
    :math:`L \cdot \text{block\_size}`, not :math:`L \cdot S`. That holds for inference
    (``torch.no_grad()``); under autograd, PyTorch saves every block's probabilities for
    the backward pass, which is :math:`O(L \cdot S)` again (FlashAttention's own backward
    recomputes them instead). The weights are never formed, so only the output is returned.

    Args:
        q: queries.
        k: keys.
        v: values.
        mask: boolean, ``True`` = query l may attend to key s.
        block_size: the number of keys per block, a positive int.

    Shape:
        - q: :math:`(*, L, D)`
        - k: :math:`(*, S, D)`
        - v: :math:`(*, S, D_v)`
        - mask: broadcastable to :math:`(*, L, S)`
        - output: :math:`(*, L, D_v)`

    Returns:
        The attention output. A fully masked row gives a zero output.
    """
    fn = "tiled_attention"
    dims = check_shapes(fn, q=(q, "... L D"), k=(k, "... S D"), v=(v, "... S Dv"))
    batch, L, S = dims["..."], dims["L"], dims["S"]
    check_mask(fn, mask, (*batch, L, S), "(..., L, S)")
    check_positive_int(fn, "block_size", block_size)
    if mask is not None:
        mask = mask.expand(*batch, L, S)  # (*, L, S), a view: no memory, but sliceable by key
    q = q / math.sqrt(dims["D"])
    m = q.new_full((*batch, L, 1), float("-inf"))  # running max of the scores seen so far
    denom = q.new_zeros((*batch, L, 1))  # running sum of exp(score - m)
    acc = q.new_zeros((*batch, L, dims["Dv"]))  # running sum of exp(score - m) * v
    for start in range(0, S, block_size):
        keys = slice(start, start + block_size)
        scores = q @ k[..., keys, :].transpose(-2, -1)  # (*, L, D) @ (*, D, B) -> (*, L, B)
        if mask is not None:
            scores = scores.masked_fill(~mask[..., keys], float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))  # (*, L, 1)
        # A row with no allowed key yet has m_new = -inf; subtracting 0 instead keeps
        # exp(-inf - (-inf)) = NaN out: its terms below are exp(-inf) = 0.
        m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # (*, L, 1)
        p = torch.sub(scores, m_safe).exp_()  # (*, L, B), every exponent <= 0
        rescale = torch.exp(m - m_safe)  # (*, L, 1), 0 while m = -inf
        denom = rescale * denom + p.sum(dim=-1, keepdim=True)
        acc = rescale * acc + p @ v[..., keys, :]  # (*, L, B) @ (*, B, Dv) -> (*, L, Dv)
        m = m_new
    return acc / denom.masked_fill(denom == 0, 1.0)  # fully masked row: 0 / 1 = 0


def _check_window(fn: str, window: object) -> int:
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"{fn}: argument 'window' must be an int, got {type(window).__name__}")
    if window < 0:
        raise ValueError(f"{fn}: argument 'window' must be >= 0, got {window}")
    return window


def sliding_window_mask(
    L: int,
    S: int | None = None,
    *,
    window: int,
    causal: bool = False,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    r"""The sliding-window (local) attention mask: query i may attend to key j iff it is near.

    Without ``causal``, query i may attend to key j iff :math:`|i - j| \le r`, with
    :math:`r` = ``window``; with ``causal``, iff :math:`0 \le i - j \le r` (itself and the
    :math:`r` keys before it). Positions count from 0 in both sequences.

    Args:
        L: the number of queries.
        S: the number of keys (default: ``L``).
        window: :math:`r`, how far a query may look, an int >= 0.
        causal: look only backwards.
        device: where to create the mask.

    Shape:
        - output: :math:`(L, S)`, bool, a band around the diagonal

    Returns:
        A bool tensor on ``device``, ``True`` = may attend.
    """
    fn = "sliding_window_mask"
    check_positive_int(fn, "L", L)
    S = L if S is None else check_positive_int(fn, "S", S)
    _check_window(fn, window)
    offset = torch.arange(L, device=device)[:, None] - torch.arange(S, device=device)  # (L, S), i - j
    if causal:
        return (offset >= 0) & (offset <= window)
    return offset.abs() <= window


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    causal: bool = False,
    mask: torch.Tensor | None = None,
    return_weights: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    r"""Attention in which each query sees only the keys within ``window`` positions.

    The same result as ``scaled_dot_product_attention(q, k, v, band & mask)`` with
    ``band = sliding_window_mask(L, S, window=window, causal=causal)``, computed on the
    band only: the keys of each query's window are gathered into a
    :math:`(*, L, W)` block, :math:`W = 2r + 1` (or :math:`r + 1` if ``causal``), by
    padding ``k`` and ``v`` and taking ``unfold`` windows. Scores, softmax and the
    weighted sum of values then cost :math:`O(L \cdot r \cdot D)` time and memory instead
    of :math:`O(L \cdot S \cdot D)`; window slots that fall on the padding get weight 0.
    Only returning the weights as an :math:`(*, L, S)` matrix (mostly zeros, for plotting
    and for comparison with the masked full attention) costs :math:`O(L \cdot S)` time and
    memory; with ``return_weights=False`` that matrix is never built and the whole call is
    linear in :math:`L` for a fixed window (when ``mask`` is given, its
    :math:`(*, L, S)` view is only read at the window's positions).

    Args:
        q: queries.
        k: keys.
        v: values.
        window: :math:`r`, how far a query may look, an int >= 0 (see
            :func:`sliding_window_mask`).
        causal: look only backwards, at keys :math:`i - r, \dots, i`.
        mask: an extra boolean mask, ``True`` = may attend, combined with the window by
            logical and.
        return_weights: also return the weights as a dense :math:`(*, L, S)` matrix (the
            default). ``False`` returns ``None`` in their place and skips building them.

    Shape:
        - q: :math:`(*, L, D)`
        - k: :math:`(*, S, D)`
        - v: :math:`(*, S, D_v)`
        - mask: broadcastable to :math:`(*, L, S)`
        - output: :math:`(*, L, D_v)`
        - weights: :math:`(*, L, S)`, or ``None`` if ``return_weights`` is ``False``

    Returns:
        ``(output, weights)``. A query with no allowed key gives zero weights and a zero
        output.

    Example::

        >>> q = k = v = torch.randn(1, 4096, 64)
        >>> out, _ = sliding_window_attention(q, k, v, window=32, return_weights=False)
        >>> out.shape
        torch.Size([1, 4096, 64])
    """
    fn = "sliding_window_attention"
    dims = check_shapes(fn, q=(q, "... L D"), k=(k, "... S D"), v=(v, "... S Dv"))
    batch, L, S = dims["..."], dims["L"], dims["S"]
    check_mask(fn, mask, (*batch, L, S), "(..., L, S)")
    r = min(_check_window(fn, window), max(L, S) - 1)  # a wider window changes nothing
    before, after = r, (0 if causal else r)  # the window of query i: keys i - before .. i + after
    W = before + 1 + after
    pad = (before, max(0, L + after - S))  # keys before 0 and after S - 1, as zero vectors
    # Slot w of query i holds key j = i - before + w; padded key index i + w.
    slot = torch.arange(L, device=q.device)[:, None] + torch.arange(W, device=q.device)  # (L, W)
    key = slot - before  # (L, W)
    band = (key >= 0) & (key < S)  # (L, W): the slot falls on a real key
    if mask is not None:
        index = key.clamp(0, S - 1).expand(*batch, L, W)  # (*, L, W)
        band = band & mask.expand(*batch, L, S).gather(-1, index)  # (*, L, W)
    k_win = F.pad(k, (0, 0, *pad)).unfold(-2, W, 1)[..., :L, :, :]  # (*, L, D, W)
    v_win = F.pad(v, (0, 0, *pad)).unfold(-2, W, 1)[..., :L, :, :]  # (*, L, Dv, W)
    q = q.unsqueeze(-2) / math.sqrt(dims["D"])  # (*, L, 1, D)
    scores = (q @ k_win).squeeze(-2)  # (*, L, 1, D) @ (*, L, D, W) -> (*, L, W)
    band_weights = _masked_softmax(scores, band)  # (*, L, W)
    output = (v_win @ band_weights.unsqueeze(-1)).squeeze(-1)  # (*, L, Dv, W) @ (*, L, W, 1) -> (*, L, Dv)
    if not return_weights:
        return output, None
    # Put slot w of query i in padded column i + w, then drop the padding columns.
    padded = q.new_zeros((*batch, L, before + S + pad[1]))  # (*, L, S + padding)
    weights = padded.scatter(-1, slot.expand_as(band_weights), band_weights)  # (*, L, S + padding)
    return output, weights[..., before : before + S]  # (*, L, S)


def cached_attention_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cache: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    r"""One decoding step of causal self-attention with a KV cache.

    At decoding step :math:`t` only the newest position is new: ``q``, ``k`` and ``v`` are
    its query, key and value. The cache holds the keys and values of the :math:`t` earlier
    positions; the step appends the new key and value *last*, along the time axis, and
    attends from the new query over all :math:`t + 1` positions. No mask is needed: the
    newest position may attend to every position, itself included. The output equals the
    last row of causal self-attention over the whole prefix,
    ``scaled_dot_product_attention(Q, K, V, causal_mask(t + 1))[0][..., -1:, :]``, without
    recomputing the earlier positions.

    Args:
        q: the newest position's query.
        k: its key.
        v: its value.
        cache: ``None`` at the first step, else ``(K, V)``, the keys and values of the
            :math:`t` earlier positions (:math:`t \ge 0`). Not modified.

    Shape:
        - q, k, v: :math:`(N, H, 1, D)`
        - cache: ``(K, V)``, each :math:`(N, H, t, D)`
        - output: :math:`(N, H, 1, D)`
        - new cache: ``(K', V')``, each :math:`(N, H, t + 1, D)`

    Returns:
        ``(output, (K', V'))``: the attention of ``q`` over all :math:`t + 1` positions, and
        the updated cache, new tensors with the new position last (``K'[..., -1:, :]`` is
        ``k``). Pass the cache to the next step.

    Example::

        >>> N, H, D = 2, 4, 16
        >>> cache = None
        >>> for step in range(5):
        ...     q, k, v = (torch.randn(N, H, 1, D) for _ in range(3))
        ...     out, cache = cached_attention_step(q, k, v, cache)
        >>> out.shape, cache[0].shape
        (torch.Size([2, 4, 1, 16]), torch.Size([2, 4, 5, 16]))
    """
    fn = "cached_attention_step"
    if cache is None:
        dims = check_shapes(fn, q=(q, "N H 1 D"), k=(k, "N H 1 D"), v=(v, "N H 1 D"))
        keys, values = [k], [v]
    else:
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            got = f"a {type(cache).__name__} of length {len(cache)}" if isinstance(cache, (tuple, list)) else None
            raise TypeError(
                f"{fn}: argument 'cache' must be None or a pair (K, V) of tensors of shape (N, H, t, D), "
                f"got {got or type(cache).__name__}"
            )
        K, V = cache
        dims = check_shapes(
            fn,
            True,  # floating point; positional, so that the cache's names can only be specs
            q=(q, "N H 1 D"),
            k=(k, "N H 1 D"),
            v=(v, "N H 1 D"),
            **{"cache[0]": (K, "N H t D"), "cache[1]": (V, "N H t D")},
        )
        keys, values = [K, k], [V, v]
    K_new = torch.cat(keys, dim=-2)  # (N, H, t + 1, D), the new position last
    V_new = torch.cat(values, dim=-2)  # (N, H, t + 1, D)
    scores = q @ K_new.transpose(-2, -1) / math.sqrt(dims["D"])  # (N, H, 1, D) @ (N, H, D, t + 1) -> (N, H, 1, t + 1)
    weights = softmax(scores, dim=-1)  # (N, H, 1, t + 1), over every position: no mask
    return weights @ V_new, (K_new, V_new)  # (N, H, 1, t + 1) @ (N, H, t + 1, D) -> (N, H, 1, D)
