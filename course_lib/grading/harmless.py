"""Uses of flagged modules that read nothing of the grader's: version queries and ``sys.modules``
membership tests.

``importlib`` and ``sys.modules`` can reach any module, the grader's own included, so using them
holds a notebook for review (:data:`~course_lib.grading.forbidden.rules.REVIEW_PATHS`). Set-up cells
use two harmless parts of them: the installed version of a package
(``importlib.metadata.version("torch")``) and whether a module is loaded (Colab's
``"google.colab" in sys.modules``). These are allowed: :data:`SAFE_PATHS` by name, and
``sys.modules`` only where its value is a truth value (the right of ``in``, ``.keys()`` there,
``.get(...)`` as a condition or compared with ``is None``; never handed to another object,
whose ``__eq__`` or ``__contains__`` could keep the module). Fetching a module out of ``sys.modules``
(``sys.modules["torch"]``, ``sys.modules.get("torch").softmax``), writing to it or calling
through it stays flagged.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .parsing import walk

__all__ = ["SAFE_PATHS", "MODULES_READS", "membership_reads", "harmless"]

#: Version queries: they read a package's metadata file, nothing of any process.
SAFE_PATHS = frozenset({"importlib.metadata.version", "importlib.metadata.PackageNotFoundError"})
#: What a membership read of ``sys.modules`` resolves to.
MODULES_READS = frozenset({"sys.modules", "sys.modules.keys", "sys.modules.get"})


def harmless(path: str, node: ast.AST, reads: set[int]) -> bool:
    """Whether ``node``, which resolves to ``path``, is a version query or reads ``sys.modules``
    only as a membership test (``reads``: :func:`membership_reads` of the code around it)."""
    return path in SAFE_PATHS or (path in MODULES_READS and id(node) in reads)


def _tests(node: ast.AST) -> Iterator[ast.AST]:
    """Expressions of ``node`` whose value is used only as a truth value."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        yield node.test
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node.operand
    elif isinstance(node, ast.Compare) and all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
        operands = [node.left, *node.comparators]
        others = [e for e in operands if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(others) == 1:  # `x is None`, `x is not None`: no method of another object is called
            yield others[0]


def membership_reads(root: ast.AST) -> set[int]:
    """The ids of the attribute nodes under ``root`` that read ``<x>.modules`` only as a
    membership test: ``k in <x>.modules``, ``k in <x>.modules.keys()``, and
    ``<x>.modules.get(k)`` used as a truth value or compared with ``is None``. Whether ``<x>`` is ``sys`` is the
    caller's to resolve (these ids count only where the node's path is in :data:`MODULES_READS`)."""
    found: set[int] = set()
    for node in walk(root):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=False):
                if not isinstance(op, (ast.In, ast.NotIn)):
                    continue
                if isinstance(right, ast.Attribute) and right.attr == "modules":
                    found.add(id(right))
                elif _method_call(right, "keys"):
                    found.add(id(right.func))  # type: ignore[attr-defined]
        todo = list(_tests(node))
        while todo:
            e = todo.pop()
            if isinstance(e, ast.BoolOp):
                todo.extend(e.values)
            elif _method_call(e, "get"):
                found.add(id(e.func))  # type: ignore[attr-defined]
    return found


def _method_call(node: ast.AST, method: str) -> bool:
    """``<x>.modules.<method>(...)``."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == method
        and isinstance(node.func.value, ast.Attribute)
        and node.func.value.attr == "modules"
        and (method != "keys" or not node.args)
    )
