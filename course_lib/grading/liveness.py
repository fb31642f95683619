"""Which binding of a graded name is the live one: an abandoned first attempt costs nothing.

``check()`` judges the function the name holds when it is called, the last one defined. A
notebook may keep an abandoned attempt above it (``def softmax(...): return
torch.softmax(...)``, then the real ``def softmax``). The static scan follows only the last
binding when it can prove that the earlier ones never run at grading time: every binding is a
plain top-level ``def`` or ``name = ...`` (the last a ``def``; nothing binds the name in a
branch, a loop, a function, through ``globals()``, ``setattr`` or an import), and nothing can
keep an earlier one: the name is only ever *called* (``softmax(x)``) or handed to the course's
``check`` (``check(softmax)``), never read as a value (``_orig = softmax``), through the notebook's module (``import
__main__``) or by its name in a string (``globals()["softmax"]``); ``sys.modules``, frames
and ``__globals__`` hold a notebook for review anyway. Otherwise every
binding is scanned, as before. (A cell that fails before its ``def`` leaves the earlier binding
live: the runtime layer, :mod:`.opwatch`, still sees what it calls.)
"""

from __future__ import annotations

import ast
from collections.abc import Container, Mapping, Sequence

from .parsing import walk

__all__ = ["only_the_last_is_live", "LiveBindings"]


def only_the_last_is_live(name: str, trees: Sequence[ast.Module]) -> bool:
    """Whether no code of the notebook (``trees``) can keep a binding of ``name`` other than
    the current one: ``name`` is only called, or passed first to ``check``."""
    loads = calls = constants = allowed_constants = 0
    for tree in trees:
        for node in walk(tree):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                loads += 1
            elif isinstance(node, ast.Import) and any(a.name == "__main__" for a in node.names):
                return False  # the notebook's module, whose attribute is the binding of its time
            elif isinstance(node, ast.ImportFrom) and node.module == "__main__":
                return False
            elif isinstance(node, ast.Constant) and node.value == name:
                constants += 1
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id == name:
                    calls += 1
                elif node.func.id == "check" and node.args and _is(node.args[0], name):
                    calls += 1
                    allowed_constants += sum(1 for k in node.keywords if k.arg == "name" and _constant(k.value, name))
    return loads == calls and constants == allowed_constants


def _is(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _constant(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


class LiveBindings:
    """The bindings of a name that graded code can reach: the last one alone when it is provably
    the live one, else all of them.

    The last one is the live one when every binding is a plain top-level ``def name`` or
    ``name = ...`` (the last a ``def``), the name is not imported, nothing makes the notebook
    opaque (``from m import *``, a binding through ``globals()`` or ``setattr``, the notebook's
    own ``check``, which could keep what it is given), and :func:`only_the_last_is_live`.
    """

    def __init__(
        self, trees: Sequence[ast.Module], bindings: Mapping[str, list[ast.AST]], imports: Container[str], opaque: bool
    ):
        self.trees, self.bindings, self.imports, self.opaque = trees, bindings, imports, opaque
        self._live: dict[str, list[ast.AST]] = {}
        self._top: set[int] = set()  # values bound by a plain top-level `def name` or `name = ...`
        for tree in trees:
            for stmt in tree.body:
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    self._top.add(id(stmt))
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    self._top.add(id(stmt.value))

    def __call__(self, name: str) -> list[ast.AST]:
        if name not in self._live:
            values = self.bindings.get(name, [])
            last = (
                values
                and not self.opaque
                and name not in self.imports
                and all(id(v) in self._top for v in values)
                and isinstance(values[-1], ast.FunctionDef | ast.AsyncFunctionDef)
                and only_the_last_is_live(name, self.trees)
            )
            self._live[name] = values[-1:] if last else values
        return self._live[name]
