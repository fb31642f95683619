"""Student code as HTML: numbered lines, some highlighted, every character escaped.

One function for every page that shows a submission's code: the class report's look-alike
pairs (:mod:`.class_report.html`) and the review app's held records and pairs
(:mod:`.review_app`). Nothing from the code is run or passed through: each line is escaped
with :func:`html.escape`.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape

__all__ = ["numbered_code"]


def numbered_code(source: str, ranges: Iterable[tuple[int, int]] = ()) -> str:
    """The source as a ``<pre>`` of numbered lines, those in ``ranges`` highlighted.

    Args:
        source: the code (a student's: any text).
        ranges: 1-based inclusive ``(first, last)`` line ranges to highlight (class ``hl``).

    Returns:
        ``<pre><span class=hl><i>3</i>...</span>...</pre>``: one ``span`` a line, its number in
        an ``i`` (styled apart by the page, not selected with the code).
    """
    marked = {n for lo, hi in ranges for n in range(lo, hi + 1)}
    lines = source.split("\n")
    return (
        "<pre>"
        + "".join(
            f"<span{' class=hl' if n in marked else ''}><i>{n}</i>{escape(line, quote=True)}</span>"
            for n, line in enumerate(lines, 1)
        )
        + "</pre>"
    )
