"""Honest students' functions shared by the local tests (``check``) and the sandboxed ones, which
send their source as a notebook cell (``inspect.getsource``): the same student, both graders.

Each writes the right thing another way than the reference, and uses nothing the exercise
forbids: it must keep full marks.
"""

from __future__ import annotations

import math

import torch


def layer_norm(x, gamma, beta, eps=1e-5):
    """Layer norm from means and variances, in float64, with einsum and rsqrt."""
    x64 = x.double()
    mean = x64.mean(dim=-1, keepdim=True)
    var = x64.var(dim=-1, keepdim=True, unbiased=False)
    scaled = torch.einsum("...e,e->...e", (x64 - mean) * torch.rsqrt(var + eps), gamma.double())
    return (scaled + beta.double()).to(x.dtype)


def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta, eps)


def tiled_attention(q, k, v, mask=None, block_size=128):
    """Tiled attention in torch and math only, one block of scores at a time."""
    S = k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1])
    m = acc = total = None
    for start in range(0, S, block_size):
        x = torch.einsum("...ld,...sd->...ls", q, k[..., start : start + block_size, :]) * scale
        if mask is not None:
            block = mask[..., start : start + block_size] if mask.shape[-1] == S else mask
            x = x.masked_fill(~block, -math.inf)
        m_new = x.amax(-1, keepdim=True) if m is None else torch.maximum(m, x.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(x - safe)
        pv = p @ v[..., start : start + block_size, :]
        if m is None:
            acc, total = pv, p.sum(-1, keepdim=True)
        else:
            rescale = torch.exp(torch.where(torch.isfinite(m), m, safe) - safe)
            acc, total = acc * rescale + pv, total * rescale + p.sum(-1, keepdim=True)
        m = m_new
    return acc / torch.where(total == 0, torch.ones_like(total), total)
