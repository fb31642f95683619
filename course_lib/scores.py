"""Score functions: how well does each key match the query? (seq2seq chapter).

Every function scores one query per batch element against S keys and returns raw
scores of shape (N, S); :func:`course_lib.attention_pool` turns them into weights.
Weight matrices multiply from the right (``query @ W``), as in the book's equations.
"""

from __future__ import annotations

import math

import torch

from ._validation import check_shapes

__all__ = [
    "dot_score",
    "scaled_dot_score",
    "cosine_score",
    "additive_score",
    "additive_score_projected",
    "multiplicative_score",
]


def dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    r"""Dot-product score :math:`\mathrm{score}(q, k_s) = q^\top k_s` (Luong's "dot").

    Args:
        query: one query vector per batch element.
        keys: S key vectors per batch element.

    Shape:
        - query: :math:`(N, D)`
        - keys: :math:`(N, S, D)`
        - output: :math:`(N, S)`

    Returns:
        Unnormalised scores.
    """
    check_shapes("dot_score", query=(query, "N D"), keys=(keys, "N S D"))
    return (keys @ query.unsqueeze(-1)).squeeze(-1)  # (N, S, D) @ (N, D, 1) -> (N, S)


def scaled_dot_score(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    r"""Scaled dot-product score :math:`q^\top k_s / \sqrt{D}` (Vaswani et al., 2017).

    Dividing by :math:`\sqrt{D}` keeps the variance of the score near 1 when the entries
    of ``q`` and ``k`` have unit variance, so the softmax does not saturate as D grows.

    Args:
        query: one query vector per batch element.
        keys: S key vectors per batch element, of the query's width D.

    Shape:
        - query: :math:`(N, D)`
        - keys: :math:`(N, S, D)`
        - output: :math:`(N, S)`

    Returns:
        Unnormalised scores, :func:`dot_score` divided by :math:`\sqrt{D}`.
    """
    check_shapes("scaled_dot_score", query=(query, "N D"), keys=(keys, "N S D"))
    return dot_score(query, keys) / math.sqrt(query.shape[-1])


def cosine_score(query: torch.Tensor, keys: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    r"""Cosine similarity of the query with each key, with norms clamped at ``eps``.

    .. math::
        q^\top k_s / (\max(\lVert q\rVert, \epsilon)\, \max(\lVert k_s\rVert, \epsilon)).

    The content-based score of Neural Turing Machines: it compares directions only, so it
    lies in [-1, 1] whatever the vectors' lengths. ``eps`` guards zero vectors: each norm
    is clamped separately, as :func:`torch.nn.functional.cosine_similarity` does.

    Args:
        query: one query vector per batch element.
        keys: S key vectors per batch element.
        eps: lower bound on each norm; a zero query or key then scores 0, not ``NaN``.

    Shape:
        - query: :math:`(N, D)`
        - keys: :math:`(N, S, D)`
        - output: :math:`(N, S)`

    Returns:
        Scores in [-1, 1].
    """
    check_shapes("cosine_score", query=(query, "N D"), keys=(keys, "N S D"))
    q_norm = query.norm(dim=-1, keepdim=True).clamp_min(eps)  # (N, 1)
    k_norm = keys.norm(dim=-1).clamp_min(eps)  # (N, S)
    return dot_score(query, keys) / (q_norm * k_norm)


def additive_score_projected(query_proj: torch.Tensor, keys_proj: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r"""Bahdanau's score from already projected query and keys: :math:`v^\top \tanh(q' + k'_s)`.

    A decoder scores the same keys at every step, so it projects them once and calls this.

    Shape:
        - query_proj: :math:`(N, A)`
        - keys_proj: :math:`(N, S, A)`
        - v: :math:`(A)`
        - output: :math:`(N, S)`
    """
    check_shapes(
        "additive_score_projected",
        query_proj=(query_proj, "N A"),
        keys_proj=(keys_proj, "N S A"),
        v=(v, "A"),
    )
    hidden = torch.tanh(query_proj.unsqueeze(1) + keys_proj)  # (N, 1, A) + (N, S, A) -> (N, S, A)
    return hidden @ v  # (N, S)


def additive_score(
    query: torch.Tensor,
    keys: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    r"""Additive (Bahdanau, "concat") score :math:`v^\top \tanh(q W_q + k_s W_k)`.

    A one-hidden-layer MLP over query and key; query and keys may have different widths.

    Args:
        query: decoder state, one per batch element.
        keys: encoder annotations.
        W_q: projection of the query into the attention space of width A.
        W_k: projection of the keys into the same space.
        v: weights of the output unit.

    Shape:
        - query: :math:`(N, D_q)`
        - keys: :math:`(N, S, D_k)`
        - W_q: :math:`(D_q, A)`
        - W_k: :math:`(D_k, A)`
        - v: :math:`(A)`
        - output: :math:`(N, S)`

    Returns:
        Unnormalised scores.
    """
    check_shapes(
        "additive_score",
        query=(query, "N Dq"),
        keys=(keys, "N S Dk"),
        W_q=(W_q, "Dq A"),
        W_k=(W_k, "Dk A"),
        v=(v, "A"),
    )
    return additive_score_projected(query @ W_q, keys @ W_k, v)


def multiplicative_score(query: torch.Tensor, keys: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    r"""Multiplicative score, Luong's "general": :math:`q W k_s^\top`.

    A learned bilinear form; with ``W`` the identity it is :func:`dot_score`.

    Args:
        query: one query vector per batch element (e.g. the decoder state).
        keys: S key vectors per batch element (e.g. the encoder annotations).
        W: the learned matrix; query and keys may have different widths.

    Shape:
        - query: :math:`(N, D_q)`
        - keys: :math:`(N, S, D_k)`
        - W: :math:`(D_q, D_k)`
        - output: :math:`(N, S)`

    Returns:
        Unnormalised scores.
    """
    check_shapes("multiplicative_score", query=(query, "N Dq"), keys=(keys, "N S Dk"), W=(W, "Dq Dk"))
    return dot_score(query @ W, keys)
