"""The sentence about the trained model's cross-attention heads, chosen from the measured shares.

The transformer chapter counts, for every head of every decoder layer, the share of queries
whose strongest key is the mirrored source position (the anti-diagonal of reversal). What the
prose can truthfully say depends on those shares: whether every head has found the mirror or
only some, and whether there is more than one layer to compare. :func:`heads_sentence` writes
the sentence from the numbers, so it cannot contradict the printed values or the figure.
"""

from __future__ import annotations

from collections.abc import Sequence

_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def number_word(n: int) -> str:
    """``4`` -> ``"four"`` for the small counts a sentence spells out; larger ones stay digits."""
    return _WORDS.get(n, str(n))


def _heads(indices: Sequence[int]) -> str:
    """``[1]`` -> ``"head 1"``, ``[0, 2]`` -> ``"heads 0 and 2"``, ``[0, 1, 3]`` -> ``"heads 0, 1 and 3"``."""
    names = [str(i) for i in indices]
    if len(names) == 1:
        return f"head {names[0]}"
    return "heads " + ", ".join(names[:-1]) + " and " + names[-1]


def _layer_clause(shares: Sequence[float], threshold: float) -> str:
    """What the heads of one layer do, as a clause without its subject's layer."""
    n = len(shares)
    low, high = min(shares), max(shares)
    perfect = [h for h, s in enumerate(shares) if s >= 1.0]
    if low >= threshold:
        who = "both heads" if n == 2 else f"all {number_word(n)} heads" if n > 1 else "its head"
        clause = f"{who} put their strongest weight on the mirrored position for at least {low:.0%} of the queries"
        if n == 1:
            clause = clause.replace("put their", "puts its")
        if perfect and len(perfect) < n:
            clause += f" ({_heads(perfect)} for every one of them)"
        return clause
    strong = [h for h, s in enumerate(shares) if s >= threshold]
    if strong:
        verb = "puts its" if len(strong) == 1 else "put their"
        return (
            f"{_heads(strong)} {verb} strongest weight on the mirrored position for "
            f"{'at least ' if len(strong) > 1 else ''}{min(shares[h] for h in strong):.0%} of the queries, "
            f"while the other heads do so for at most {max(s for h, s in enumerate(shares) if h not in strong):.0%}"
        )
    best = max(range(n), key=lambda h: shares[h])
    return (
        f"no head puts its strongest weight on the mirrored position for most queries; the best, "
        f"head {best}, does so for {high:.0%}"
    )


def heads_sentence(hits: Sequence[Sequence[float]], threshold: float = 0.75) -> str:
    """The prose about the decoder's cross-attention heads, from the measured shares.

    Args:
        hits: one sequence per decoder layer (first layer first) of one share per head: the
            fraction of queries whose strongest key is the mirrored source position.
        threshold: the share from which a head counts as reading the mirrored position.

    Returns:
        One or two sentences, ending with a full stop. With one layer it describes that
        layer only (there is no first and last layer to compare); with several it describes
        the last layer and gives the best head of the first.
    """
    if not hits or any(len(layer) == 0 for layer in hits):
        raise ValueError("heads_sentence: need at least one layer with at least one head")
    if any(not 0.0 <= s <= 1.0 for layer in hits for s in layer):
        raise ValueError("heads_sentence: shares must lie in [0, 1]")
    last = list(hits[-1])
    if len(hits) == 1:
        text = "In the decoder's single layer, " + _layer_clause(last, threshold) + "."
    else:
        first = list(hits[0])
        best = max(range(len(first)), key=lambda h: first[h])
        text = (
            f"In the last of the {number_word(len(hits))} decoder layers, {_layer_clause(last, threshold)}; "
            f"in the first layer the best head, head {best}, does so for {first[best]:.0%}."
        )
    if min(last) >= threshold and len(last) > 1:
        text += (
            " The heads have learned much the same lookup: the architecture does not make heads"
            " specialise, and on this easy task training has not pushed them apart."
        )
    elif len(last) > 1:
        text += (
            " The other heads look elsewhere, and the figure shows where: what each head does is"
            " decided by training, not by the architecture."
        )
    return text
