"""The report's figures: one score histogram per assignment, an SVG made with matplotlib (Agg).

The SVG is the same for the same numbers (no date in its metadata, fixed element ids), with a
transparent background and mid-grey text, so it reads on the page's light and dark colours.
"""

from __future__ import annotations

import itertools
from pathlib import Path

__all__ = ["score_histogram"]

_BAR = "#4a86c5"
_INK = "#888888"


def score_histogram(histogram: dict[str, list[float]], max_score: float, path: Path, title: str) -> Path:
    """Draw the score histogram (``edges`` and ``counts``, as :func:`.data.score_summary` gives)
    into the SVG file ``path``.

    Args:
        histogram: ``{"edges": [...], "counts": [...]}``.
        max_score: the assignment's points, marked on the axis.
        path: the SVG file to write.
        title: the figure's title (the assignment's name; never student text).

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    edges, counts = histogram["edges"], histogram["counts"]
    with matplotlib.rc_context({"svg.hashsalt": "course-lib-report", "svg.fonttype": "path"}):
        fig = Figure(figsize=(6.0, 2.6))
        ax = fig.add_subplot()
        widths = [b - a for a, b in itertools.pairwise(edges)]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color=_BAR, edgecolor=_INK, linewidth=0.4)
        ax.set_xlim(edges[0], edges[-1])
        ax.set_xlabel(f"score (out of {max_score:g})", color=_INK)
        ax.set_ylabel("students", color=_INK)
        ax.set_title(title, color=_INK, fontsize=10)
        ax.tick_params(colors=_INK)
        for spine in ax.spines.values():
            spine.set_color(_INK)
        fig.tight_layout()
        fig.savefig(path, format="svg", transparent=True, metadata={"Date": None})
    return path
