"""``ast.parse`` that may be called from several threads at once, and a faster ``ast.walk``.

CPython 3.11 counts the depth of the AST it is building in state shared by the whole
interpreter. When two threads parse at the same time and a garbage collection in one runs
Python code (a ``__del__``) that lets the other thread in, the count of one parse ends
wrong and it raises ``SystemError: AST constructor recursion depth mismatch``
(cpython gh-106905). The batch grader reads notebooks in threads, so every parse the
grader makes goes through one lock (:data:`LOCK`; numpy's ``.npy`` header reader, which
parses with ``ast.literal_eval``, takes it too).
"""

from __future__ import annotations

import ast

from .._ast_lock import LOCK
from .sourcecache import SourceCache


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """:func:`ast.parse` of ``source``, one thread at a time.

    Args:
        source: Python source text.
        filename: the name shown in a ``SyntaxError``.

    Returns:
        The module's tree. Raises what :func:`ast.parse` raises (``SyntaxError``,
        ``ValueError``, ``RecursionError``, ``MemoryError``).
    """
    with LOCK:
        return ast.parse(source, filename=filename)


#: Sources up to this size are parsed once per process by :func:`parse_shared` (a class's
#: notebooks share most cells).
SHARED_CHARS = 20_000
#: The most source characters whose trees :func:`parse_shared` keeps, least recently used
#: dropped first: an AST costs about 30 bytes a character of ordinary code and up to 130 for
#: dense expressions, so at most about 30 to 130 MB of trees.
SHARED_TOTAL_CHARS = 1_000_000

_parse_cached: SourceCache[ast.Module] = SourceCache(parse, SHARED_TOTAL_CHARS, SHARED_CHARS)


def parse_shared(source: str) -> ast.Module:
    """:func:`parse` of ``source``, the same tree for the same source (up to
    :data:`SHARED_CHARS` characters, while it is among the :data:`SHARED_TOTAL_CHARS` most
    recently used) within a process: the tree is shared, so callers only read it, never change
    it. Raises what :func:`parse` raises (a failure is not kept)."""
    return _parse_cached(source)


def walk(node: ast.AST) -> list[ast.AST]:
    """The nodes of the tree under ``node`` (``node`` first), in the order :func:`ast.walk`
    yields them (breadth first), as a list: the grader's scans read every tree several times,
    and this is about twice as fast as the generator.

    Args:
        node: any AST node.

    Returns:
        The nodes, breadth first.
    """
    nodes = [node]
    i = 0
    while i < len(nodes):
        n = nodes[i]
        i += 1
        for name in n._fields:
            v = getattr(n, name, None)
            if isinstance(v, ast.AST):
                nodes.append(v)
            elif isinstance(v, list):
                nodes.extend([x for x in v if isinstance(x, ast.AST)])
    return nodes
