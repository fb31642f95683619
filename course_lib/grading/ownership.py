"""The student's own objects: when ``obj.softmax(...)`` or ``setattr(obj, ...)`` is provably on
an object of a class the notebook defines, not on a tensor, a module or torch.

The scan flags a call of a forbidden tensor method by name (``x.softmax(-1)``) and any
``setattr``, since in general it cannot know what ``x`` is. Two cases can be proven from the
code alone, and only these are let through:

- ``self`` in a method of a class the notebook defines: the first parameter of a ``def``
  without decorators directly in the class's body, never rebound anywhere in that method;
- a name bound only to ``C(...)`` of such a class (in the function that uses it, or at module
  level).

``obj.X`` is the class's own method when every class it can be defines ``X`` with a ``def``
without decorators, and nothing can put another ``X`` in front of it: no ``.X = ...`` and no
``setattr`` that could set ``X`` (a computed name included) in the class or in the function,
and no class of the notebook that binds ``X`` otherwise. Everything else stays flagged; the
runtime layer (:mod:`.opwatch`) still sees a tensor's ``softmax`` however it is reached.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .parsing import walk

__all__ = ["Owned", "owned"]

#: name -> the notebook's classes it is bound to (None when that cannot be proven).
Classes = Callable[[str], list[ast.ClassDef] | None]


@dataclass
class Owned:
    """Node ids under a tree: ``obj.X`` attributes that are the student's own method, and the
    ``setattr`` names of calls on the student's own object."""

    methods: set[int] = field(default_factory=set)
    setattrs: set[int] = field(default_factory=set)


def _bindings(scope: ast.AST, name: str) -> list[ast.AST]:
    """Every node under ``scope`` that binds ``name``."""
    out: list[ast.AST] = []
    for node in walk(scope):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.append(node)
        elif isinstance(node, ast.arg) and node.arg == name:
            out.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            out.append(node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out += [node for a in node.names if (a.asname or a.name).split(".")[0] == name]
        elif isinstance(node, ast.ExceptHandler) and node.name == name:
            out.append(node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            out.append(node)
    return out


def _methods(cls: ast.ClassDef) -> set[str]:
    return {f.name for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.decorator_list}


def _may_set(scopes: Iterable[ast.AST], attr: str) -> bool:
    """Whether code under ``scopes`` may bind the attribute ``attr`` of some object."""
    for scope in scopes:
        for node in walk(scope):
            if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, (ast.Store, ast.Del)):
                return True
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("setattr", "delattr")
            ):
                name = node.args[1] if len(node.args) > 1 else None
                if not (isinstance(name, ast.Constant) and name.value != attr):
                    return True
    return False


def _instances(root: ast.AST, classes: Classes) -> list[tuple[ast.AST, str, list[ast.ClassDef]]]:
    """(scope, name, its possible classes) for every provable own object under ``root``."""
    found: list[tuple[ast.AST, str, list[ast.ClassDef]]] = []
    for cls in [n for n in walk(root) if isinstance(n, ast.ClassDef)]:
        for f in cls.body:
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.decorator_list:
                args = f.args.posonlyargs + f.args.args
                if args and len(_bindings(f, args[0].arg)) == 1:
                    found.append((f, args[0].arg, [cls]))
    for fn in [n for n in walk(root) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        stores = {n.id for n in walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for name in stores:
            sites = _bindings(fn, name)
            parents = [a for a in walk(fn) if isinstance(a, ast.Assign) and any(t in sites for t in a.targets)]
            if len(parents) != len(sites) or any(len(a.targets) != 1 for a in parents):
                continue
            kinds = [_class_call(a.value, classes) for a in parents]
            if all(k is not None for k in kinds):
                found.append((fn, name, [c for k in kinds for c in k or []]))
    return found


def _class_call(value: ast.AST, classes: Classes) -> list[ast.ClassDef] | None:
    """The classes of ``C(...)`` when ``C`` is provably the notebook's own class."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return classes(value.func.id)
    return None


def owned(root: ast.AST, classes: Classes, rebound: Callable[[str], bool], module_level: Classes) -> Owned:
    """The student's own method accesses and ``setattr`` calls under ``root``.

    Args:
        root: a function, class or statement of the notebook.
        classes: a module-level name -> the notebook classes it is bound to (only to those), else None.
        rebound: whether some class of the notebook binds this attribute other than with a plain ``def``.
        module_level: a module-level name -> the classes of the objects it is bound to (only ever
            ``C(...)`` of the notebook's classes), else None.
    """
    out = Owned()
    scopes = [({id(n) for n in walk(scope)}, name, kinds) for scope, name, kinds in _instances(root, classes)]
    local = {n.id for n in walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {a.arg for a in walk(root) if isinstance(a, ast.arg)}
    for node in walk(root):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load):
            name, attr = node.value.id, node.attr
            kinds = [k for ids, n, k in scopes if n == name and id(node) in ids]
            if not kinds and name not in local:
                kinds = [k] if (k := module_level(name)) else []
            if kinds and _own_method(attr, kinds[0], root, rebound):
                out.methods.add(id(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and any(n == target.id and id(node) in ids for ids, n, _ in scopes):
                out.setattrs.add(id(node.func))
    return out


def _own_method(attr: str, kinds: list[ast.ClassDef], root: ast.AST, rebound: Callable[[str], bool]) -> bool:
    return (
        bool(kinds)
        and all(attr in _methods(c) for c in kinds)
        and not _may_set([root, *kinds], attr)
        and not rebound(attr)
    )
