"""A notebook's cells, each parsed once and on its own, failing closed.

One cell that cannot be parsed is reported (and not run) instead of hiding the others.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from ..harmless import membership_reads
from ..parsing import SHARED_CHARS, SHARED_TOTAL_CHARS, parse_shared
from ..sourcecache import SourceCache
from .refs import Ref, local_imports, refs

__all__ = ["ParsedCell", "parse_cells", "cell_reading"]


@dataclass
class ParsedCell:
    """One code cell: its number (1-based, among code cells), source, syntax tree, and why it
    cannot run (``problem``; then ``tree`` is None and the sandbox does not run the cell)."""

    index: int
    source: str
    tree: ast.Module | None
    problem: str = ""


def parse_cells(sources: Sequence[str], first: int = 1) -> list[ParsedCell]:
    """Parse every cell on its own. A cell that cannot be parsed (syntax error, nesting too
    deep, invalid characters) gets a ``problem`` and no tree: it is reported and not run."""
    cells = []
    for i, src in enumerate(sources, first):
        tree, problem = _parse_cell(src)
        cells.append(ParsedCell(i, src, tree, problem))
    return cells


def _parse_cell(src: str) -> tuple[ast.Module | None, str]:
    """(tree, "") or (None, why the cell cannot be read). The tree is shared with every notebook
    that has the same cell (:func:`~course_lib.grading.parsing.parse_shared`): only read here."""
    try:
        return parse_shared(src), ""
    except SyntaxError as e:
        where = f" (line {e.lineno})" if e.lineno else ""
        msg = " ".join(str(e.msg).split())[:200]
        return None, f"{type(e).__name__}: {msg}{where}"
    except RecursionError:
        return None, "the code is nested too deeply to be read"
    except MemoryError:
        return None, "the code is too large to be read"
    except (ValueError, UnicodeError, OverflowError) as e:
        return None, f"the code cannot be read ({type(e).__name__})"


def _read_cell(src: str) -> tuple[dict[str, str], list[Ref], set[int]]:
    tree = parse_shared(src)
    return local_imports(tree), list(refs(tree)), membership_reads(tree)


#: The local imports, the refs and the harmless ``sys.modules`` reads
#: (:func:`~..harmless.membership_reads`) of a readable cell of at most
#: :data:`~course_lib.grading.parsing.SHARED_CHARS` characters, read once from its shared tree
#: while it is among the most recently used :data:`~..parsing.SHARED_TOTAL_CHARS` characters
#: (the refs keep the tree alive: as much memory again as the parse cache, at most): only
#: read, never changed.
cell_reading: SourceCache[tuple[dict[str, str], list[Ref], set[int]]] = SourceCache(
    _read_cell, SHARED_TOTAL_CHARS, SHARED_CHARS
)
