"""Exercises of ``07_efficient_attention``: tiled attention, the sliding-window mask, one KV-cache step.

Every classic mistake listed below fails at least one case, and on that case the mistake's
implementation gives exactly the student's (wrong) outputs, so the report can name it. The
sizes are chosen for that:

- ``tiled_attention``: in most value cases the key count ``S`` is several blocks long and the
  query count ``L`` is larger than the widths ``D`` and ``D_v``, so the full ``(L, S)`` score
  matrix is several times larger than what a tiled implementation needs (the exercise's
  ``temporary_limit``: one block of scores, or a copy of an input, with room to spare); the
  running maximum grows from block to block, so a sum that is not rescaled is wrong; some
  queries have their first blocks fully masked and a later block not (``-inf - -inf``), and
  some queries may attend to no key at all. One case has ``S`` far above 128 and small blocks,
  so that a fixed block width instead of ``block_size`` is seen as a temporary that is too large.
- ``sliding_window_mask``: the lengths exceed the window by at least two on each side, so a
  window one too narrow or one too wide gives other entries; ``L != S`` in some cases.
- ``cached_attention_step``: one case has a single head, a single batch element and one
  cached position, where concatenating on the batch or head axis runs without an error (and
  gives a wrongly shaped output); every other case has several of each, where it raises.
  Its cases compare the output and the two tensors of the new cache separately (a judge), so
  that feedback names the item that differs (``the new cache's keys K'``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ... import cached_attention_step, sliding_window_mask, softmax, tiled_attention
from ..._validation import _broadcast
from ..compare import compare
from ..exercise_spec import Exercise
from ..forbidden.rules import NUMPY_BRIDGES
from ..model import Call, Case, ErrorHint, Mistake
from ._common import SOFTMAX_FAMILY, WHOLE_ATTENTION, rand_mask, randn, rng

__all__ = ["EXERCISES"]

#: The notebook's rule "use only torch and math inside the graded functions": numpy (imported,
#: or reached through a tensor's .numpy() or np.asarray) would build arrays the memory check
#: never sees.
TORCH_AND_MATH_ONLY = ("module:numpy", *(f"method:{m}" for m in NUMPY_BRIDGES))

_NEG_INF = float("-inf")


# --- tiled_attention ------------------------------------------------------------------------
#
# Every mistake is a variant of one loop over blocks of keys with an online softmax.


def _tiled(
    q,
    k,
    v,
    mask=None,
    block_size=128,
    *,
    rescale_acc=True,
    rescale_denom=True,
    scale=True,
    guard_block=True,
    guard_row=True,
    fill=_NEG_INF,
    use_mask=True,
    drop_partial=False,
    running_max=True,
    divide=True,
    flip_rescale=False,
    block_max=False,
    scale_width="D",
    m_start=_NEG_INF,
):
    *_, L, D = q.shape
    S = k.shape[-2]
    batch = _batch(q, k, v)
    if use_mask and mask is not None:
        mask = mask.expand(*batch, L, S)  # (*, L, S), a view
    if scale:
        q = q / math.sqrt(S if scale_width == "S" else D)
    m = q.new_full((*batch, L, 1), m_start)  # (*, L, 1)
    denom = q.new_zeros((*batch, L, 1))  # (*, L, 1)
    acc = q.new_zeros((*batch, L, v.shape[-1]))  # (*, L, Dv)
    end = S - S % block_size if drop_partial else S
    for start in range(0, end, block_size):
        keys = slice(start, start + block_size)
        scores = q @ k[..., keys, :].transpose(-2, -1)  # (*, L, B)
        if use_mask and mask is not None:
            scores = scores.masked_fill(~mask[..., keys], fill)
        if not running_max:  # no maximum at all: e^x overflows for large scores
            p = scores.exp()  # (*, L, B)
            denom = denom + p.sum(dim=-1, keepdim=True)
            acc = acc + p @ v[..., keys, :]
            continue
        m_block = scores.amax(dim=-1, keepdim=True)  # (*, L, 1)
        m_new = m_block if block_max else torch.maximum(m, m_block)  # (*, L, 1)
        m_safe = m_new.masked_fill(m_new == _NEG_INF, 0.0) if guard_block else m_new  # (*, L, 1)
        p = (scores - m_safe).exp()  # (*, L, B)
        rescale = torch.exp(m_safe - m) if flip_rescale else torch.exp(m - m_safe)  # (*, L, 1)
        denom = (rescale * denom if rescale_denom else denom) + p.sum(dim=-1, keepdim=True)
        acc = (rescale * acc if rescale_acc else acc) + p @ v[..., keys, :]  # (*, L, Dv)
        m = m_new
    if not divide:
        return acc
    return acc / (denom.masked_fill(denom == 0, 1.0) if guard_row else denom)


def _batch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[int, ...]:
    """The broadcast batch dims of the queries, keys and values."""
    return _broadcast(_broadcast(tuple(q.shape[:-2]), tuple(k.shape[:-2])), tuple(v.shape[:-2]))


def _tiled_variant(**options):
    def implementation(q, k, v, mask=None, block_size=128):
        return _tiled(q, k, v, mask, block_size, **options)

    return implementation


def _tiled_full_scores(q, k, v, mask=None, block_size=128):
    """Correct values, but the whole (*, L, S) score matrix at once: tiling in name only."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (*, L, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, _NEG_INF)
    return softmax(scores, dim=-1) @ v  # (*, L, Dv)


#: The diagnosis of a case in which a call created a temporary above the exercise's limit.
#: The error of a mask not sliced per block (a realistic first attempt): the block's scores
#: are block_size keys wide, the mask is S wide.
_TILED_HINTS = (
    ErrorHint(
        ("must match the size of tensor b",),
        "the scores of one block cover only that block's keys, (*, L, block_size), but the mask covers all S "
        "keys: mask each block with its own columns, `mask[..., start:start + block_size]` (when the mask's "
        "last dim is S; a mask of size 1 there broadcasts as it is)",
        line="mask",
    ),
)

#: The error of a cache grown along the wrong dim.
_CACHE_HINTS = (
    ErrorHint(
        ("Sizes of tensors must match except in dimension", "Tensors must have same number of dimensions"),
        "the cache grows along its time axis, the second-to-last: `torch.cat([K, k], dim=-2)` joins the "
        "(N, H, t, D) cache and the new (N, H, 1, D) key into (N, H, t + 1, D); the same for V",
    ),
)

TEMPORARY_MESSAGE = (
    "computing the scores of all S keys at once (or of more keys than block_size): tiling in name only. "
    "Compute one block at a time, q @ k[..., start:start + block_size, :].transpose(-2, -1) of shape "
    "(*, L, block_size), fold it into the running maximum, denominator and accumulator, then move to the "
    "next block. Take the block width from block_size (not a fixed number), and build no (L, S) float "
    "tensor, an additive mask included"
)


def temporary_limit(call: Call) -> int:
    """The largest new floating-point tensor (in elements) a tiled implementation may create in
    this call: twice the largest of one block of scores ``(*, L, min(block_size, S))``, the
    output or the queries ``(*, L, max(D, D_v))``, and a copy of the keys or the values
    ``(*, S, max(D, D_v))`` (for a student who scales or pads them; the grader's own copies of
    the inputs and of the output count too), plus 64. The batch ``*`` is the broadcast of the
    batch dims of ``q``, ``k`` and ``v``."""
    args, kwargs = call.args, call.kwargs
    q, k, v = args[:3]
    block_size = args[4] if len(args) > 4 else kwargs.get("block_size", 128)
    batch = math.prod(_batch(q, k, v))
    L, D, S, Dv = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    width = max(D, Dv)
    return 2 * batch * max(L * min(int(block_size), S), L * width, S * width) + 64


_TILED_MISTAKES = [
    Mistake(TEMPORARY_MESSAGE, _tiled_full_scores),
    Mistake(
        "neither the accumulator nor the denominator is rescaled when the running maximum grows: both "
        "hold terms e^(x - m) measured from the old maximum m. Multiply each by e^(m - m_new) before adding "
        "the new block's terms",
        _tiled_variant(rescale_acc=False, rescale_denom=False),
    ),
    Mistake(
        "the accumulator is not rescaled when the running maximum grows (the denominator is): multiply the "
        "old accumulator by e^(m - m_new) before adding the new block's p @ v",
        _tiled_variant(rescale_acc=False),
    ),
    Mistake(
        "the denominator is not rescaled when the running maximum grows (the accumulator is): multiply the "
        "old denominator by e^(m - m_new) before adding the new block's sum of p",
        _tiled_variant(rescale_denom=False),
    ),
    Mistake(
        "not scaling the scores: divide q @ k^T by sqrt(D), the width of the queries and keys "
        "(q.shape[-1]), in every block",
        _tiled_variant(scale=False),
    ),
    Mistake(
        "the rescale factor is upside down, e^(m_new - m) instead of e^(m - m_new): when the running "
        "maximum grows, the old denominator and accumulator must shrink (a factor of at most 1), and with m "
        "starting at -inf, e^(m_new - m) is inf on the first block, so inf * 0 gives NaN. Multiply by "
        "torch.exp(m - m_new)",
        _tiled_variant(flip_rescale=True),
    ),
    Mistake(
        "the rescale factor is upside down, e^(m_new - m) instead of e^(m - m_new): when the running "
        "maximum grows, the old denominator and accumulator must shrink (a factor of at most 1), not grow, "
        "and large scores overflow it to inf. Multiply by torch.exp(m - m_new) (starting m at 0 instead of "
        "-inf only hides the NaN the upside-down factor gives on the first block)",
        _tiled_variant(flip_rescale=True, m_start=0.0),
    ),
    Mistake(
        "the running maximum is replaced by each block's own maximum: it must be the maximum over every key "
        "seen so far, m_new = torch.maximum(m, the block's maximum). With the block's maximum alone, a "
        "fully masked block (maximum -inf) makes the next block rescale everything before it by e^(-inf) = 0",
        _tiled_variant(block_max=True),
    ),
    Mistake(
        "scaling by sqrt(S), the number of keys: divide q @ k^T by sqrt(D), the width of the queries and "
        "keys (q.shape[-1]), in every block",
        _tiled_variant(scale_width="S"),
    ),
    Mistake(
        "a block in which a query may attend to no key gives NaN: its running maximum is still -inf, and "
        "exp(-inf - (-inf)) is NaN, which then spoils every later block. Subtract 0 where the new maximum "
        "is -inf (m_safe = m_new.masked_fill(m_new == float('-inf'), 0.0)), in the block's exponentials "
        "and in the rescale factor e^(m - m_safe)",
        _tiled_variant(guard_block=False),
    ),
    Mistake(
        "a query that may attend to no key gives NaN (0 / 0): its denominator is 0 at the end. Divide by "
        "1 where the denominator is 0, so that its output is 0",
        _tiled_variant(guard_row=False),
    ),
    Mistake(
        "masking with a large negative number instead of -inf: a query that may attend to no key then "
        "averages all the values instead of giving a zero output. Use float('-inf') and guard the -inf "
        "maximum",
        _tiled_variant(fill=-1e9),
    ),
    Mistake(
        "masking with 0 instead of -inf (masked_fill(~mask, 0.0)): a score of 0 is an ordinary score, so "
        "masked keys still get weight e^(0 - m). Fill the block's masked scores with float('-inf'), and "
        "guard the -inf maximum",
        _tiled_variant(fill=0.0),
    ),
    Mistake(
        "ignoring the mask: masked keys still get weight. Set the block's masked scores to -inf, with the "
        "mask's columns of that block (mask[..., start:start + block_size])",
        _tiled_variant(use_mask=False),
    ),
    Mistake(
        "the last, partial block is skipped: when block_size does not divide S, the keys after the last "
        "full block must be processed too (loop over range(0, S, block_size); a slice past the end is fine)",
        _tiled_variant(drop_partial=True),
    ),
    Mistake(
        "exponentiating the scores without a running maximum: large scores overflow to inf and the output "
        "becomes NaN. Keep the running maximum m and use e^(x - m)",
        _tiled_variant(running_max=False),
    ),
    Mistake(
        "returning the accumulator without dividing by the denominator: the output is acc / l (the "
        "weights must sum to 1)",
        _tiled_variant(divide=False),
    ),
]


def _early_blocks_masked(g: torch.Generator, L: int, S: int, block: int) -> torch.Tensor:
    """(L, S): a random mask in which query i % (S // block) may attend to no key of its first
    i % (S // block) blocks, and every query to at least one key."""
    mask = rand_mask(g, L, S, p=0.6, keep_first=False)
    blocks = S // block
    for i in range(L):
        hidden = i % blocks
        mask[i, : hidden * block] = False
        mask[i, min(S - 1, hidden * block + int(torch.randint(0, block, (), generator=g)))] = True
    return mask


def _tiled_cases() -> list[Case]:
    g = rng(700)

    def qkv(*batch, L, S, D, Dv, scale=1.0):
        return (randn(g, *batch, L, D, scale=scale), randn(g, *batch, S, D, scale=scale), randn(g, *batch, S, Dv))

    # Some queries may attend to no key of their first blocks (the running maximum stays -inf
    # there) but to a later key; the others to random keys.
    early = _early_blocks_masked(g, 24, 40, 8)

    # Rows 0 and 5 may attend to nothing; row 3 only to keys of the last block.
    full = _early_blocks_masked(g, 24, 40, 8)
    full[0] = full[5] = False
    full[3] = False
    full[3, 35] = full[3, 38] = True

    # Large magnitudes: the scores (thousands) grow from block to block for some queries and
    # shrink for others, so the rescale factors underflow to 0.
    q_big = randn(g, 2, 16, 4, scale=30.0)
    k_big = randn(g, 2, 40, 4, scale=30.0) * torch.linspace(0.2, 1.0, 40)[:, None]

    return [
        Case(
            "one block",
            "S smaller than block_size: the loop runs once (L != S, D != Dv)",
            [Call(qkv(2, L=3, S=5, D=4, Dv=6), {"block_size": 8})],
            points=1,
        ),
        Case(
            "several blocks",
            "S a multiple of block_size: 8 blocks, whose maxima differ",
            [Call(qkv(2, L=32, S=64, D=4, Dv=3), {"block_size": 8})],
            points=2,
        ),
        Case(
            "last block partial",
            "S not a multiple of block_size: the last block is shorter",
            [Call(qkv(2, L=24, S=45, D=3, Dv=5), {"block_size": 8})],
            points=1,
        ),
        Case(
            "extra batch dims",
            "queries (2, 1, L, D) with keys and values (1, 3, S, D): the batch dims broadcast",
            [
                Call(
                    (randn(g, 2, 1, 16, 4), randn(g, 1, 3, 40, 4), randn(g, 1, 3, 40, 2)),
                    {"block_size": 8},
                )
            ],
            points=1,
        ),
        Case(
            "masks (L, S) and (N, 1, S)",
            "a random (L, S) mask broadcast over the batch, and a padding mask (N, 1, S)",
            [
                Call(qkv(2, L=16, S=48, D=4, Dv=3), {"mask": rand_mask(g, 16, 48, p=0.6), "block_size": 8}),
                Call(
                    qkv(3, L=16, S=40, D=3, Dv=4),
                    {"mask": (torch.arange(40) < torch.tensor([40, 23, 9])[:, None]).unsqueeze(1), "block_size": 8},
                ),
            ],
            points=1,
        ),
        Case(
            "early blocks fully masked",
            "queries that may attend to no key of their first blocks, but to later keys, get finite, correct outputs",
            [Call(qkv(2, L=24, S=40, D=4, Dv=3), {"mask": early, "block_size": 8})],
            points=2,
        ),
        Case(
            "fully masked rows",
            "a query that may attend to no key gets a zero output, never NaN",
            [Call(qkv(2, L=24, S=40, D=4, Dv=3), {"mask": full, "block_size": 8})],
            points=2,
        ),
        Case(
            "large magnitudes",
            "scores of magnitude in the thousands, rising and falling from block to block, give finite, correct outputs",
            [Call((q_big, k_big, randn(g, 2, 40, 3)), {"block_size": 8})],
            points=1,
            atol=1e-3,
            rtol=1e-3,
        ),
        Case(
            "blocks of one key",
            "block_size = 1: every key is its own block",
            [Call(qkv(2, L=20, S=24, D=2, Dv=2), {"block_size": 1})],
            points=1,
        ),
        Case(
            "small blocks, long sequence",
            "S = 256 keys in blocks of 16: the block width comes from block_size, and no temporary holds all the scores",
            [Call(qkv(1, L=64, S=256, D=4, Dv=4), {"block_size": 16})],
            points=1,
        ),
    ]


# --- sliding_window_mask -----------------------------------------------------------------------


def _band(L, S, window, causal, *, lo=0, hi=0, reverse=False, abs_causal=False):
    """The mask with i - j in [lo, window + hi] (causal) or |i - j| <= window + hi."""
    i = torch.arange(L)[:, None]
    j = torch.arange(S)[None, :]
    offset = (j - i) if reverse else (i - j)  # (L, S)
    if causal and not abs_causal:
        return (offset >= lo) & (offset <= window + hi) if lo is not None else offset <= window + hi
    return offset.abs() <= window + hi


def _swm_variant(**options):
    def implementation(L, S=None, *, window, causal=False):
        return _band(L, L if S is None else S, window, causal, **options)

    return implementation


def _swm_square(L, S=None, *, window, causal=False):
    return sliding_window_mask(L, window=window, causal=causal)


def _swm_long(L, S=None, *, window, causal=False):
    return sliding_window_mask(L, S, window=window, causal=causal).long()


def _swm_float(L, S=None, *, window, causal=False):
    return sliding_window_mask(L, S, window=window, causal=causal).float()


_SWM_NOT_BOOL = (
    "returning a float or integer tensor of 0s and 1s instead of a bool mask (True = may attend): "
    "return the result of the comparisons itself, a bool tensor"
)


_SWM_MISTAKES = [
    Mistake(
        "the window is one too narrow: query i may attend to key j when |i - j| <= window (with causal, "
        "0 <= i - j <= window); use <=, not <",
        _swm_variant(hi=-1),
    ),
    Mistake(
        "the window is one too wide: allow |i - j| <= window, not window + 1 (window counts the keys on "
        "each side; the query's own position is extra)",
        _swm_variant(hi=1),
    ),
    Mistake(
        "the causal window looks forwards: with causal=True query i may attend to itself and the window "
        "keys before it, 0 <= i - j <= window, not 0 <= j - i <= window",
        _swm_variant(reverse=True),
    ),
    Mistake(
        "ignoring causal: with causal=True a query may not attend to later keys (require 0 <= i - j <= window)",
        _swm_variant(abs_causal=True),
    ),
    Mistake(
        "the causal window has no lower bound: with causal=True keys after the query (i - j < 0) must be "
        "blocked too; require 0 <= i - j <= window, not only i - j <= window",
        _swm_variant(lo=None),
    ),
    Mistake(
        "the causal window leaves out the query's own position: require 0 <= i - j (j = i allowed), not 0 < i - j",
        _swm_variant(lo=1),
    ),
    Mistake(
        "ignoring S: the mask has shape (L, S), L queries by S keys; S is L only when it is None",
        _swm_square,
    ),
    Mistake(_SWM_NOT_BOOL, _swm_long),
    Mistake(_SWM_NOT_BOOL, _swm_float),  # a diagnosis matches the dtype's kind too
]


def _swm_cases() -> list[Case]:
    g = rng(710)

    def draw(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (), generator=g))

    # Every size is drawn (fresh under --seed), and every length exceeds the window by at least
    # 2, so that a window one too narrow or one too wide changes some entries.
    r1, r2 = draw(1, 3), draw(1, 3)
    L1 = draw(r1 + 3, 11)
    S1 = L1 + draw(1, 4)
    L2 = draw(r2 + 4, 12)
    S2 = L2 - draw(1, L2 - r2 - 3)
    L_wide = draw(3, 6)
    return [
        Case(
            "two-sided",
            "windows 1 and 2, two-sided, L = S",
            [Call((draw(4, 8),), {"window": 1}), Call((draw(5, 9),), {"window": 2})],
            points=1,
        ),
        Case(
            "causal",
            "windows 2 and 1, causal: each query sees itself and the window keys before it",
            [Call((draw(5, 10),), {"window": 2, "causal": True}), Call((draw(4, 9),), {"window": 1, "causal": True})],
            points=2,
        ),
        Case(
            "L != S",
            "more keys than queries and fewer, two-sided and causal",
            [
                Call((draw(4, 6), draw(8, 10)), {"window": 2}),
                Call((draw(7, 9), draw(4, 5)), {"window": 1}),
                Call((draw(5, 6), draw(8, 10)), {"window": 2, "causal": True}),
                Call((draw(8, 10), draw(4, 6)), {"window": 1, "causal": True}),
            ],
            points=2,
        ),
        Case(
            "random windows",
            "random lengths and windows, two-sided and causal",
            [
                Call((L1, S1), {"window": r1}),
                Call((L2, S2), {"window": r2, "causal": True}),
                Call((L1,), {"window": r2, "causal": True}),
            ],
            points=2,
        ),
        Case(
            "window 0",
            "window = 0: each query sees only its own position",
            [Call((draw(3, 7),), {"window": 0}), Call((draw(3, 7),), {"window": 0, "causal": True})],
            points=1,
        ),
        Case(
            "wide window",
            "a window wider than the sequence: every key (causal: every earlier key) is allowed",
            [Call((L_wide,), {"window": 10}), Call((L_wide, L_wide + draw(1, 3)), {"window": 10, "causal": True})],
            points=1,
        ),
    ]


# --- cached_attention_step -------------------------------------------------------------------------


def _kv_step(
    q,
    k,
    v,
    cache=None,
    *,
    dim=-2,
    new_first=False,
    old_cache=False,
    cache_only=False,
    scale=True,
    tril=False,
    swap=False,
    stable=True,
    softmax_dim=-1,
):
    if cache is None:
        K, V = k, v
        keys_seen, values_seen = k, v
    else:
        K_old, V_old = cache
        parts_k, parts_v = ([k, K_old], [v, V_old]) if new_first else ([K_old, k], [V_old, v])
        K, V = torch.cat(parts_k, dim=dim), torch.cat(parts_v, dim=dim)
        keys_seen, values_seen = (K_old, V_old) if cache_only else (K, V)
    scores = q @ keys_seen.transpose(-2, -1)  # (N, H, 1, t + 1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if tril:  # a causal mask for a square score matrix, cut to the (1, t + 1) scores: only key 0
        scores = scores.masked_fill(~torch.ones(scores.shape[-2:], dtype=torch.bool).tril(), _NEG_INF)
    if stable:
        weights = softmax(scores, dim=softmax_dim)
    else:
        e = scores.exp()
        weights = e / e.sum(dim=-1, keepdim=True)
    out = weights @ values_seen  # (N, H, 1, D)
    if old_cache:
        return out, cache
    return out, ((V, K) if swap else (K, V))


def _kv_variant(**options):
    def implementation(q, k, v, cache=None):
        return _kv_step(q, k, v, cache, **options)

    return implementation


_KV_MISTAKES = [
    Mistake(
        "the softmax runs over dim -2, the single query (size 1): every weight is then 1 and the output is "
        "the sum of all the values. Take the softmax over the last dim, the t + 1 cached and new keys "
        "(dim=-1)",
        _kv_variant(softmax_dim=-2),
    ),
    Mistake(
        "concatenating the cache on the head axis (dim 1) instead of the time axis: the keys and values "
        "are (N, H, t, D), and the new position goes at the end of dim -2 (torch.cat([K, k], dim=-2))",
        _kv_variant(dim=1),
    ),
    Mistake(
        "concatenating the cache on the batch axis (dim 0) instead of the time axis: the keys and values "
        "are (N, H, t, D), and the new position goes at the end of dim -2 (torch.cat([K, k], dim=-2))",
        _kv_variant(dim=0),
    ),
    Mistake(
        "returning the old cache: return the cache with the new key and value appended, (K', V') of "
        "length t + 1, so that the next step sees this position",
        _kv_variant(old_cache=True),
    ),
    Mistake(
        "attending over the cached positions only: the new query must also attend to its own position, "
        "so score it against the keys with the new key appended (t + 1 of them)",
        _kv_variant(cache_only=True),
    ),
    Mistake(
        "putting the new position first: it is the latest, so it goes last, torch.cat([K, k], dim=-2), "
        "not torch.cat([k, K], dim=-2) (the output is the same, but the cache's order is wrong)",
        _kv_variant(new_first=True),
    ),
    Mistake(
        "returning the cache as (V', K') instead of (K', V')",
        _kv_variant(swap=True),
    ),
    Mistake(
        "not scaling the scores: divide q @ K'^T by sqrt(D), the width of the queries and keys",
        _kv_variant(scale=False),
    ),
    Mistake(
        "a causal mask built for a square score matrix (tril) and applied to the (1, t + 1) scores keeps "
        "only position 0. The newest query may attend to every position, itself included: no mask is needed",
        _kv_variant(tril=True),
    ),
    Mistake(
        "exponentiating without subtracting the max first: large scores overflow to inf and the output "
        "becomes NaN (unstable softmax)",
        _kv_variant(stable=False),
    ),
]

_KV_NAMES = ("output", "new cache's keys K'", "new cache's values V'")


def _flat(value: Any) -> tuple[Any, ...] | None:
    """(output, K', V') from (output, (K', V')), or None if the value is not shaped like that."""
    if not isinstance(value, tuple) or len(value) != 2:
        return None
    out, cache = value
    if not isinstance(cache, tuple) or len(cache) != 2:
        return None
    return (out, *cache)


def _kv_compare(atol: float = 1e-4, rtol: float = 1e-4) -> Callable[..., str | None]:
    """A judge that compares with the reference like the default one, naming the item that
    differs: the output, the new cache's keys K' or its values V'."""

    def judge(calls: Sequence[Call], actual: Sequence[Any], expected: Sequence[Any]) -> str | None:
        for a, e in zip(actual, expected, strict=False):
            flat = _flat(a)
            if flat is None:
                if not isinstance(a, tuple) or len(a) != 2:
                    return compare(a, e, names=("output", "new cache (K', V')"))
                return "the new cache is not a pair (K', V') of tensors"
            for item, want, name in zip(flat, _flat(e) or (), _KV_NAMES, strict=False):
                msg = compare(item, want, atol, rtol, what=f"the {name}", nested=True)
                if msg:
                    return msg
        return None

    return judge


def _kv_cases() -> list[Case]:
    g = rng(720)

    def step(N, H, t, D, scale=1.0):
        q, k, v = (randn(g, N, H, 1, D, scale=scale) for _ in range(3))
        cache = (randn(g, N, H, t, D, scale=scale), randn(g, N, H, t, D))
        return q, k, v, cache

    # successive steps of one sequence: step t sees positions 0..t-1 in the cache
    N, H, T, D = 2, 2, 5, 4
    Q, K, V = (randn(g, N, H, T, D) for _ in range(3))
    steps = [Call((Q[..., :1, :], K[..., :1, :], V[..., :1, :]))] + [
        Call(
            (Q[..., t : t + 1, :], K[..., t : t + 1, :], V[..., t : t + 1, :]),
            {"cache": (K[..., :t, :], V[..., :t, :])},
        )
        for t in range(1, T)
    ]
    one = step(1, 1, 1, 4)
    several = step(2, 3, 6, 4)
    big = step(2, 2, 6, 4, scale=30.0)
    return [
        Case(
            "first step",
            "no cache yet: the new position attends to itself only, and the cache holds it",
            [Call(step(2, 3, 0, 4)[:3])],
            points=1,
            judge=_kv_compare(),
        ),
        Case(
            "cache of 6 positions",
            "2 sequences, 3 heads, 6 cached positions: the output and the cache of 7",
            [Call(several[:3], {"cache": several[3]})],
            points=2,
            judge=_kv_compare(),
        ),
        Case(
            "one head, one cached position",
            "a single sequence and head with one cached position (shapes (1, 1, 1, D))",
            [Call(one[:3], {"cache": one[3]})],
            points=1,
            judge=_kv_compare(),
        ),
        Case(
            "successive steps",
            "steps 0 to 4 of one sequence, each with the cache of the positions before it",
            steps,
            points=2,
            judge=_kv_compare(),
        ),
        Case(
            "large magnitudes",
            "queries and keys of magnitude 30 (scores in the thousands) give finite, correct outputs",
            [Call(big[:3], {"cache": big[3]})],
            points=1,
            judge=_kv_compare(atol=1e-3, rtol=1e-3),
        ),
    ]


# --- exercises ------------------------------------------------------------------------------------------


EXERCISES = [
    Exercise(
        name="tiled_attention",
        reference=tiled_attention,
        make_cases=_tiled_cases,
        mistakes=_TILED_MISTAKES,
        forbidden=WHOLE_ATTENTION + SOFTMAX_FAMILY + TORCH_AND_MATH_ONLY,
        structure_args=(4, "block_size"),
        temporary_limit=temporary_limit,
        temporary_message=TEMPORARY_MESSAGE,
        error_hints=_TILED_HINTS,
    ),
    Exercise(
        name="sliding_window_mask",
        reference=sliding_window_mask,
        make_cases=_swm_cases,
        mistakes=_SWM_MISTAKES,
        forbidden=TORCH_AND_MATH_ONLY,
        structure_args=(0, 1, "L", "S", "window", "causal"),
    ),
    Exercise(
        name="cached_attention_step",
        reference=cached_attention_step,
        make_cases=_kv_cases,
        mistakes=_KV_MISTAKES,
        forbidden=WHOLE_ATTENTION + TORCH_AND_MATH_ONLY,
        output_names=("output", "new cache"),
        error_hints=_CACHE_HINTS,
    ),
]
