"""Reading a piece of code: the dotted names it reads, the names it binds, what it imports.

Both environments of the walker (:mod:`.walk`) read code through these functions, the
static one from a notebook's cells and the live one from the source of live functions, so a
new way of writing a name is taught here once.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ..aliases import dotted
from ..parsing import walk

__all__ = ["Chain", "FUNCTIONS", "Ref", "refs", "stored_names", "local_imports"]

Chain = list[str]
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass
class Ref:
    """A dotted name read somewhere in the code, or a dynamic construct found there."""

    chain: Chain
    written: str
    node: ast.AST
    dynamic: str = ""  # a reason, when the construct itself hides what is called


def refs(root: ast.AST) -> Iterator[Ref]:
    """Every dotted name read inside ``root`` (whole chains only), ``getattr`` with a constant
    name as the attribute it reads, and dynamic constructs."""
    nodes = walk(root)
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                base = dotted(node.args[0]) or ["<expr>"]
                read = [*base, node.args[1].value]
                yield Ref(read, ".".join(read), node)
            elif node.func.id == "getattr":
                yield Ref(["getattr"], "getattr", node, "getattr() with a computed name")
        if id(node) in inner:
            continue  # part of a longer dotted name, which is read whole
        chain: list[str] | None = None
        if isinstance(node, ast.Attribute):
            chain = dotted(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            chain = [node.id]
        if chain:
            yield Ref(chain, ".".join(chain), node)


def stored_names(root: ast.AST) -> set[str]:
    """Names bound inside a function (parameters and stores), the function's locals."""
    names: set[str] = set()
    declared: set[str] = set()
    for node in walk(root):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not root:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - declared


def local_imports(root: ast.AST) -> dict[str, str]:
    """``import ...`` inside a function body: local name -> dotted path."""
    found: dict[str, str] = {}
    for node in walk(root):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    found[a.asname] = a.name
                else:
                    found[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name != "*":
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found
