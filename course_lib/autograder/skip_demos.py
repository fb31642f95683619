"""Leave the notebooks' demonstrations out of grading: the graded functions are what counts.

The course's notebooks put every demonstration of the student's functions (a figure, a printed
comparison) in a top-level block ``with when_implemented():`` (or ``with when_implemented(fn):``). Nobody grades what a demo prints
or draws, and demos are most of a notebook's running time: in chapter 2 they took more time
than every graded call together. So the grader does not run a demo block, under one condition
that keeps every definition: the block binds no name that a graded function is looked up by,
and none that code which does run reads (a ``def``, an import or an assignment used later keeps
its block). Everything else in the notebook runs as written, plots included, in its order.

What changes for a student is only what a skipped demo would have done: its printed output,
and an error it would have raised (the tests report a failing function more precisely; a
definition after a crashing demo in the same cell is graded, not missing). A notebook that
binds ``when_implemented`` itself (not by importing it from ``course_lib.grading``) has
every block run.
"""

from __future__ import annotations

import ast
import symtable
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..grading.parsing import SHARED_CHARS, parse, walk
from ..grading.sourcecache import SourceCache

__all__ = ["skip_demos"]

_MARKER = "when_implemented"


def _is_demo(node: ast.stmt) -> bool:
    """``with when_implemented():`` (or with the names of the functions it uses,
    ``with when_implemented(dot_score):``) and nothing else in the ``with``."""
    if not isinstance(node, ast.With) or len(node.items) != 1:
        return False
    item = node.items[0]
    call = item.context_expr
    return (
        item.optional_vars is None
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == _MARKER
        and all(isinstance(arg, ast.Name) for arg in call.args)  # when_implemented(dot_score)
        and not call.keywords
    )


def _binds(node: ast.AST) -> list[str]:
    """The names ``node`` itself binds or deletes (not those of the nodes inside it)."""
    if isinstance(node, ast.Name):
        return [node.id] if isinstance(node.ctx, (ast.Store, ast.Del)) else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names)
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)):
        return [node.name] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [node.rest] if node.rest else []
    return []


def _bound(nodes: Iterable[ast.AST]) -> set[str]:
    """Every name the statements bind or delete in the module's scope (an over-estimate: the
    names bound inside comprehensions and nested scopes count too, so a block is kept when unsure)."""
    return {name for top in nodes for node in walk(top) for name in _binds(node)}


def _read(nodes: Iterable[ast.AST]) -> set[str]:
    """Every global name the statements read: at module level, and inside their functions and
    classes the names that are not their own (Python's symbol tables say which)."""
    names: set[str] = set()
    for node in nodes:
        try:
            table = symtable.symtable(ast.unparse(node), "<cell>", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return {"*"}  # unreadable: treat as reading every name (see skip_demos)
        stack = [table]
        while stack:
            t = stack.pop()
            top = t.get_type() == "module"
            for sym in t.get_symbols():
                if sym.is_referenced() and (top or sym.is_global() or sym.is_declared_global()):
                    names.add(sym.get_name())
                if sym.is_declared_global():
                    names.add(sym.get_name())
            stack.extend(t.get_children())
    return names


def _marker_imported_only(trees: Sequence[ast.Module]) -> bool:
    """True when ``when_implemented`` is bound only by ``from course_lib.grading import when_implemented``."""
    for tree in trees:
        for node in walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if (a.asname or a.name) == _MARKER and (
                        node.module != "course_lib.grading" or node.level or a.name != _MARKER
                    ):
                        return False
            elif _MARKER in _binds(node):  # every node is visited: its own names are enough
                return False
    return True


@dataclass(frozen=True)
class _Statement:
    """What skipping needs to know of one top-level statement of a cell."""

    demo: bool  # a ``with when_implemented():`` block that could be skipped
    binds: frozenset[str]
    reads: frozenset[str]
    lines: tuple[int, int]  # first and last line, 1-based


def _read_cell(src: str) -> tuple[bool, tuple[_Statement, ...]] | None:
    """(whether the cell binds ``when_implemented`` other than by importing it, its statements),
    or None for a cell that does not parse."""
    try:
        tree = parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    statements = tuple(
        _Statement(
            demo=_is_demo(node) and node.col_offset == 0 and "\r" not in src,
            binds=frozenset(_bound([node])),
            reads=frozenset(_read([node])),
            lines=(node.lineno, node.end_lineno or node.lineno),
        )
        for node in tree.body
    )
    return not _marker_imported_only([tree]), statements


#: :func:`_read_cell` of the most recently used cells (a class's notebooks share most cells), up
#: to 4,000,000 characters of source: the sources themselves and a few small sets a statement.
_cell: SourceCache[tuple[bool, tuple[_Statement, ...]] | None] = SourceCache(_read_cell, 4_000_000, SHARED_CHARS)


def skip_demos(cells: Sequence[str], graded: Iterable[str]) -> list[str]:
    """The cells with every demo block that grading can do without replaced by ``pass``.

    Args:
        cells: the notebook's code cells as the sandbox would run them ("" for a cell not run).
        graded: the names the grader looks up after the cells (the graded functions).

    Returns:
        The same number of cells; in each, a skipped block's lines are replaced by one ``pass``
        and empty lines, so line numbers in messages stay those of the notebook. A cell that does
        not parse is returned as it is.
    """
    infos = [_cell(src) for src in cells]
    if any(info is not None and info[0] for info in infos):
        return list(cells)
    statements = {(i, j): st for i, info in enumerate(infos) if info is not None for j, st in enumerate(info[1])}
    skipped = {key for key, st in statements.items() if st.demo}
    needed = set(graded)
    for key, st in statements.items():
        if key not in skipped:
            needed |= st.reads
    changed = True
    while changed:  # a block that must run reads names too: the blocks binding those run as well
        changed = False
        for key in sorted(skipped):
            st = statements[key]
            if "*" in needed or st.binds & needed:
                skipped.discard(key)
                needed |= st.reads
                changed = True
    out = list(cells)
    for i, j in sorted(skipped, reverse=True):
        first, last = statements[i, j].lines
        lines = out[i].split("\n")
        lines[first - 1 : last] = ["pass"] + [""] * (last - first)
        out[i] = "\n".join(lines)
    for i, src in enumerate(out):
        if src is not cells[i]:
            try:
                parse(src)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                out[i] = cells[i]  # never make a cell worse than it was
    return out
