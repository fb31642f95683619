"""Graded names follow the object, not the spelling.

A notebook's cells run in the module ``__main__``, so ``__main__.multi_head_attention``,
``from __main__ import multi_head_attention as m`` and ``sys.modules["__main__"]`` reach the
same function as the bare name. A rule that forbids calling one's own graded function
(``graded:multi_head_attention`` for the sum form) and the stand-in for a graded callee
(:mod:`~course_lib.grading.standins`) read every spelling as the name it reaches
(``sys.modules``, ``globals()`` and ``vars()`` are refused in graded code by themselves).
Only a definition of the name in the notebook (``def``, ``class``, a ``lambda``, or a value
that builds one, such as a decorator's) is the student's own function: an alias bound from
``__main__`` is not.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

__all__ = ["MAIN", "main_attribute", "defines"]

#: The module a notebook's cells run in.
MAIN = "__main__"


def main_attribute(path: str) -> str | None:
    """The notebook name that a dotted path reaches through the notebook's own module
    (``"__main__.multi_head_attention"`` -> ``"multi_head_attention"``), or None."""
    parts = path.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == MAIN else None


def _alias(value: ast.AST) -> list[str] | None:
    """The dotted name an alias binding copies (``f = a.b`` -> ["a", "b"]), or None."""
    parts: list[str] = []
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name):
        return [value.id, *parts[::-1]]
    return None


def defines(bindings: Mapping[str, Sequence[ast.AST]], name: str, depth: int = 0) -> bool:
    """Whether a module-level binding of ``name`` defines a function of the notebook's own: a
    ``def``, ``class`` or ``lambda``, a value built by a call (a decorator, ``functools.partial``),
    or an alias of another name the notebook defines. An alias of an import, of ``__main__``'s
    attribute or of an item of ``globals()``/``sys.modules`` (a subscript) defines nothing."""
    if depth > 8:
        return False
    for value in bindings.get(name, ()):
        if isinstance(value, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.Call)):
            if not _through_namespace(value):
                return True
        chain = _alias(value)
        if chain and len(chain) == 1 and chain[0] != name and defines(bindings, chain[0], depth + 1):
            return True
    return False


def _through_namespace(value: ast.AST) -> bool:
    """A call that reads a notebook name out of a namespace (``globals().get("f")``,
    ``getattr(__main__, "f")``, ``vars(m)["f"]``): an alias, not a definition."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Name) and func.id == "getattr":
        return True
    if isinstance(func, ast.Attribute) and func.attr == "get":
        base = func.value
        return isinstance(base, ast.Call) or (_alias(base) or [""])[0] in (MAIN, "sys")
    return False
