"""Where two look-alike submissions match (the :class:`Region` lines a report highlights), and
the provided text that never counts as shared (see :mod:`.lookalike`).

Provided text is the starter code of the release (signature, docstring, comments, placeholder).
A line of a student's source is *provided* when its text, stripped of surrounding spaces,
is a line of a starter stub. A fingerprint whose k-gram touches or spans a provided line is
dropped (so the signature and the docstring between it and the first statement neither raise a
similarity nor join two regions), and a region never runs across a provided line: the lines of
a provided docstring are not highlighted as shared. The marker line that starts each helper in
the compared text (:mod:`.compared`) splits the same way.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Region", "Gram", "Printed", "SEPARATOR", "provided_lines", "printed", "regions"]

#: How the comment line that starts a helper in the compared text begins
#: (:func:`~.compared.helper_marker`).
SEPARATOR = "# --- "

#: One winnowed fingerprint: (hash, first line, last line, position of its k-gram in the tokens).
Gram = tuple[int, int, int, int]


@dataclass(frozen=True)
class Region:
    """Matched lines of one graded function, in both sources (1-based, inclusive)."""

    function: str
    a_lines: tuple[int, int]
    b_lines: tuple[int, int]


@dataclass(frozen=True)
class Printed:
    """One source's fingerprints, those touching provided text left out, and its provided lines."""

    grams: tuple[Gram, ...]
    provided: tuple[int, ...]  # sorted line numbers


def provided_lines(source: str, provided: frozenset[str]) -> tuple[int, ...]:
    """The (1-based) lines of ``source`` whose stripped text is in ``provided`` (blank lines never
    are), and the lines that start a helper (:data:`SEPARATOR`): a fingerprint across the end of
    one part of the text and the start of the next is no evidence either."""
    return tuple(
        n
        for n, line in enumerate(source.split("\n"), 1)
        if (line.strip() and line.strip() in provided) or line.startswith(SEPARATOR)
    )


def printed(grams: Iterable[Gram], lines: tuple[int, ...]) -> Printed:
    """``grams`` without those whose lines (first to last, inclusive) hold a provided line."""
    return Printed(tuple(g for g in grams if not _between(lines, g[1] - 1, g[2] + 1)), lines)


def _between(lines: tuple[int, ...], low: int, high: int) -> bool:
    """Whether a line of the sorted ``lines`` is strictly between ``low`` and ``high``."""
    i = bisect.bisect_right(lines, low)
    return i < len(lines) and lines[i] < high


def regions(
    a: Mapping[str, Printed], b: Mapping[str, Printed], keys: set[tuple[str, int]], k: int
) -> tuple[Region, ...]:
    """Matched fingerprints merged into line ranges per function: fingerprints whose k-grams
    overlap or touch in both sources make one region (unless a provided line lies between them
    in either), and so do regions whose lines overlap or touch in both. Where a hash occurs more
    than once in ``b``, the occurrence that keeps ``b``'s offset from ``a`` (in tokens) is taken.

    Args:
        a: function -> the first submission's fingerprints.
        b: the same for the second.
        keys: the matched ``(function, hash)``.
        k: normalised tokens per k-gram.
    """
    found: list[Region] = []
    for f in sorted(a.keys() & b.keys()):
        wanted = {h for g, h in keys if g == f}
        where: defaultdict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for h, first, last, pos in b[f].grams:
            if h in wanted:
                where[h].append((pos, first, last))
        run: list[int] = []  # a's first line, last line, last position; the same for b
        offset = 0
        for h, first, last, pos in a[f].grams:
            if h not in wanted:
                continue
            pb, bf, bl = min(where[h], key=lambda o: abs(o[0] - pos - offset))
            near = run and 0 < pos - run[2] <= k and 0 < pb - run[5] <= k
            if near and not _between(a[f].provided, run[1], first) and not _between(b[f].provided, run[4], bf):
                run = [run[0], max(run[1], last), pos, min(run[3], bf), max(run[4], bl), pb]
            else:
                if run:
                    found.append(Region(f, (run[0], run[1]), (run[3], run[4])))
                run = [first, last, pos, bf, bl, pb]
            offset = pb - pos
        if run:
            found.append(Region(f, (run[0], run[1]), (run[3], run[4])))
    return tuple(_merged(found))


def _merged(found: list[Region]) -> list[Region]:
    """``found`` (in order per function) with neighbours whose lines overlap or touch in both
    sources made one."""
    out: list[Region] = []
    for r in found:
        last = out[-1] if out else None
        if (
            last is not None
            and last.function == r.function
            and last.a_lines[0] <= r.a_lines[0] <= last.a_lines[1] + 1
            and last.b_lines[0] <= r.b_lines[0] <= last.b_lines[1] + 1
        ):
            a = (last.a_lines[0], max(last.a_lines[1], r.a_lines[1]))
            out[-1] = Region(r.function, a, (last.b_lines[0], max(last.b_lines[1], r.b_lines[1])))
        else:
            out.append(r)
    return out
