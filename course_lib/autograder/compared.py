"""What the look-alike search compares for each graded function: the function, followed by the
notebook's own helpers it reaches.

A graded function that is a one-line wrapper (``return MyPE(d)(x)``) says nothing about who
wrote it; its helpers do. The helpers are the functions and classes defined in the notebook
that the function reaches, transitively, as the forbidden-call scan follows them
(:func:`~course_lib.grading.forbidden.static.reached_definitions`); the assignment's other
graded functions are not followed (each is compared under its own name).

The text (what records store as ``sources``, and what the class report shows) is the graded
function's last top-level ``def`` (:func:`~.notebook.function_sources`), then each helper in
notebook order (code cell, then line), each after a marker comment such as
``# --- helper: MyPE (code cell 7) ---`` (a comment: it leaves no token for the search). At most
:data:`~.notebook.MAX_SOURCE_CHARS` characters in all: a helper that does not fit is left out
whole (so the text always tokenizes), and a last marker says how many were left out.
Read statically; nothing runs.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Sequence

from ..grading.forbidden.notebook import NotebookScan
from ..grading.forbidden.static import reached_definitions
from .lookalike_regions import SEPARATOR
from .notebook import _LINE_BREAK, MAX_SOURCE_CHARS, function_sources

__all__ = ["compared_sources", "helper_marker"]

_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def helper_marker(name: str, cell: int) -> str:
    """The comment line that starts a helper's text: ``# --- helper: NAME (code cell N) ---``."""
    return f"{SEPARATOR}helper: {name} (code cell {cell}) ---"


def compared_sources(scan: NotebookScan, names: Sequence[str]) -> dict[str, str]:
    """Each graded function's text for the look-alike search: its source, then its helpers'.

    Args:
        scan: the notebook, parsed (as the grader parses it).
        names: the assignment's graded functions.

    Returns:
        Function name -> its text (see the module docstring); a name without a ``def`` is left
        out, as in :func:`~.notebook.function_sources`.
    """
    cells = [c.source for c in scan.cells]
    own = function_sources(cells, names)
    where = dict(_definitions(scan))
    out = {}
    for name, text in own.items():
        reached = reached_definitions(scan.env, name, boundary=[n for n in names if n != name])
        placed = sorted({id(d): where[id(d)] for d in reached if id(d) in where}.values(), key=lambda p: p[:2])
        out[name] = _joined(text, [(cell, node.name, _text(node, source)) for cell, _, node, source in placed])
    return out


def _definitions(scan: NotebookScan) -> Iterator[tuple[int, tuple[int, int, _Definition, str]]]:
    """``(id(node), (code cell, line, node, the cell's source))`` of every module-level ``def``
    and ``class`` (in ``if``/``try``/``with``/loop blocks too)."""
    for cell in scan.cells:
        if cell.tree is None:
            continue
        stack: list[ast.stmt] = list(cell.tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, _Definition):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                yield id(node), (cell.index, start, node, cell.source)
            else:
                for field in ("body", "orelse", "finalbody"):
                    stack.extend(s for s in getattr(node, field, []) if isinstance(s, ast.stmt))
                for handler in getattr(node, "handlers", []):
                    stack.extend(handler.body)


def _text(node: _Definition, source: str) -> str:
    """A definition's lines (decorators included), dedented."""
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    return textwrap.dedent("\n".join(_LINE_BREAK.split(source)[start - 1 : node.end_lineno]))


def _joined(text: str, helpers: list[tuple[int, str, str]]) -> str:
    """``text`` and each helper ``(cell, name, source)`` after its marker, within
    :data:`~.notebook.MAX_SOURCE_CHARS`."""
    parts, size, left_out = [text], len(text), 0
    for cell, name, source in helpers:
        block = f"\n\n{helper_marker(name, cell)}\n{source}"
        if size + len(block) > MAX_SOURCE_CHARS:
            left_out += 1
            continue
        parts.append(block)
        size += len(block)
    note = f"\n\n{SEPARATOR}{left_out} helper(s) left out: over {MAX_SOURCE_CHARS:,} characters ---"
    if left_out and size + len(note) <= MAX_SOURCE_CHARS:
        parts.append(note)
    return "".join(parts)
