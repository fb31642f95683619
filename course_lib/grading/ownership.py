"""The student's own objects: when ``obj.softmax(...)`` or ``setattr(obj, ...)`` is provably on
an object of a class the notebook defines, not on a tensor, a module or torch.

The scan flags a call of a forbidden tensor method by name (``x.softmax(-1)``) and any
``setattr``, since in general it cannot know what ``x`` is. Two cases can be proven from the
code alone, and only these are let through:

- ``self`` in a method of a *sealed* class (below): the first parameter of a ``def`` without
  decorators directly in the class's body, never rebound anywhere in that method;
- a name bound only to ``C(...)`` of sealed classes (in the function that uses it, or at module
  level).

A method's ``self`` is whatever it is called with: ``H.forward(tensor)``, ``type(h).m(torch)``,
``h.m.__func__(obj)`` or ``super(H, obj)`` make it anything. So a class is sealed (:func:`sealed`)
only when the whole notebook can call its methods on its own instances alone:

- its name is bound only by its module-level ``class`` statement, which has no decorator and
  no keyword (no metaclass), and whose body reads none of its own names outside the methods;
- its name is only ever read as a constructor call ``C(...)`` or as a base of another sealed
  class all of whose bases are sealed (no ``C.m``, ``f = C.m``, ``map(C.m, ...)``,
  ``getattr(C, ...)``, ``isinstance(x, C)``);
- the notebook has no way to reach a class or a plain method other than by its name: no
  ``type``, ``classmethod``, ``globals``, ``locals``, ``vars``, ``__class__`` and no
  ``super(...)`` with arguments; no attribute (nor constant string) in :data:`FORGING_ATTRS`, no
  ``getattr`` with a computed name, no import of :data:`FORGING_MODULES` nor ``import *``, and no
  method of :data:`CLASS_HOOKS` (which receive a class) anywhere.

Otherwise nothing is owned, and everything is flagged as before.

``obj.X`` is the class's own method when every class it can be defines ``X`` with a ``def``
without decorators, and nothing can put another ``X`` in front of it: no ``.X = ...`` and no
``setattr`` that could set ``X`` (a computed name included) anywhere in the notebook, and no
class of the notebook that binds ``X`` otherwise. Everything else stays flagged; the runtime
layer (:mod:`.opwatch`) still sees a tensor's ``softmax`` however it is reached.
"""

from __future__ import annotations

import ast
import functools
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .history import notebook_sources
from .livecode import defined_here, source_tree
from .parsing import parse_shared, walk

__all__ = [
    "Owned",
    "Proof",
    "owned",
    "sealed",
    "static_proof",
    "live_proof",
    "live_owned",
    "own_bound_method",
    "notebook_trees",
]

#: name -> the notebook's classes it is bound to (None when that cannot be proven).
Classes = Callable[[str], list[ast.ClassDef] | None]

#: Names through which a class, or a method as a plain function, is reached without its name.
FORGING_NAMES = frozenset({"type", "classmethod", "globals", "locals", "vars", "__class__", "__import__"})
#: Attributes (and ``getattr`` names) that do the same, or read a notebook's namespace.
FORGING_ATTRS = frozenset(
    {
        "__class__",
        "__func__",
        "__self__",
        "__dict__",
        "__subclasses__",
        "__mro__",
        "__bases__",
        "__base__",
        "mro",
        "__thisclass__",
        "__self_class__",
        "__objclass__",
        "__reduce__",
        "__reduce_ex__",
        "__getattribute__",
        "getattr_static",
        "getmembers_static",
        "user_ns",
        "user_global_ns",
        "user_module",
    }
)
#: Modules that reach a class or a notebook's namespace by other means.
FORGING_MODULES = frozenset({"inspect", "gc", "__main__", "builtins", "operator"})
#: Methods that receive a class (or make a class's call return anything).
CLASS_HOOKS = frozenset(
    {
        "__new__",
        "__init_subclass__",
        "__class_getitem__",
        "__set_name__",
        "__get__",
        "__set__",
        "__delete__",
        "__prepare__",
        "__instancecheck__",
        "__subclasscheck__",
        "__mro_entries__",
    }
)


@dataclass
class Owned:
    """Node ids under a tree: ``obj.X`` attributes that are the student's own method, and the
    ``setattr`` names of calls on the student's own object."""

    methods: set[int] = field(default_factory=set)
    setattrs: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class Proof:
    """What the notebook proves about names, for :func:`owned`.

    Attributes:
        classes: a module-level name -> the sealed classes it is bound to (only to those), else None.
        instances: a module-level name -> the classes of the objects it is bound to (only ever
            ``C(...)`` of sealed classes), else None.
        rebound: whether the notebook may bind this attribute other than with a plain ``def``.
        sealed: whether a class statement is a sealed class (:func:`sealed`).
    """

    classes: Classes
    instances: Classes
    rebound: Callable[[str], bool]
    sealed: Callable[[ast.ClassDef], bool]


# ---------------------------------------------------------------------------------------
# Sealed classes: the notebook reaches their methods only through their own instances
# ---------------------------------------------------------------------------------------


def _forging(node: ast.AST) -> bool:
    """Whether ``node`` reaches a class or a plain method other than by the class's name."""
    if isinstance(node, ast.Name):
        return node.id in FORGING_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in FORGING_ATTRS
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(part in FORGING_ATTRS for part in node.value.split("."))
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        star = isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
        return star or any(m.split(".")[0] in FORGING_MODULES for m in modules)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name in CLASS_HOOKS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "super":
            return bool(node.args or node.keywords)
        if node.func.id == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            return not (isinstance(name, ast.Constant) and isinstance(name.value, str))
    return False


def _parents(trees: Iterable[ast.AST]) -> dict[int, ast.AST]:
    return {id(child): node for tree in trees for node in walk(tree) for child in ast.iter_child_nodes(node)}


def _class_body_reads_itself(cls: ast.ClassDef) -> bool:
    """Whether the class body, outside its methods' bodies, reads a name it binds (``REG.append(m)``)."""
    names = _stored_names_of_body(cls)
    todo: list[ast.AST] = list(cls.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += [*getattr(node, "decorator_list", []), *node.args.defaults]
            todo += [d for d in node.args.kw_defaults if d is not None]
            continue
        todo += list(ast.iter_child_nodes(node))
    return False


def _candidates(trees: Sequence[ast.Module]) -> dict[str, ast.ClassDef]:
    """Module-level classes whose name is bound by their own class statement alone."""
    top: dict[str, ast.ClassDef] = {}
    for tree in trees:
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                top.setdefault(stmt.name, stmt)
    out: dict[str, ast.ClassDef] = {}
    for name, cls in top.items():
        sites = [b for tree in trees for b in _bindings(tree, name)]
        if sites == [cls] and not cls.decorator_list and not cls.keywords and not _class_body_reads_itself(cls):
            out[name] = cls
    return out


def _allowed_use(node: ast.Name, parent: ast.AST | None, kept: Mapping[str, ast.ClassDef]) -> bool:
    """``C(...)``, or ``C`` as a base of a kept class all of whose bases are kept."""
    if isinstance(parent, ast.Call) and parent.func is node:
        return True
    return (
        isinstance(parent, ast.ClassDef)
        and kept.get(parent.name) is parent
        and any(b is node for b in parent.bases)
        and all(isinstance(b, ast.Name) and b.id in kept for b in parent.bases)
    )


def sealed(trees: Sequence[ast.Module]) -> dict[str, ast.ClassDef]:
    """The notebook's sealed classes (see the module's docstring), by name."""
    if any(_forging(node) for tree in trees for node in walk(tree)):
        return {}
    kept = _candidates(trees)
    parents = _parents(trees)
    uses = [n for tree in trees for n in walk(tree) if isinstance(n, ast.Name) and n.id in kept]
    changed = True
    while changed:
        bad = {n.id for n in uses if n.id in kept and not _allowed_use(n, parents.get(id(n)), kept)}
        changed = bool(bad)
        kept = {k: v for k, v in kept.items() if k not in bad}
    return kept


def _stored_names_of(stmt: ast.stmt) -> set[str]:
    """The names a class-body statement binds in the class."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for n in walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} | {
        (a.asname or a.name).split(".")[0]
        for n in walk(stmt)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }


def _stored_names_of_body(cls: ast.ClassDef) -> set[str]:
    return {n for stmt in cls.body for n in _stored_names_of(stmt)}


def _rebound(trees: Sequence[ast.Module], attr: str) -> bool:
    """Whether some class binds ``attr`` other than with a plain ``def``, or the notebook may
    set an attribute ``attr`` on some object."""
    for cls in [n for tree in trees for n in walk(tree) if isinstance(n, ast.ClassDef)]:
        for stmt in cls.body:
            plain = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not stmt.decorator_list
            if not plain and attr in _stored_names_of(stmt):
                return True
    return _may_set(trees, attr)


# ---------------------------------------------------------------------------------------
# The proof in a notebook's source (the autograder) and in a live notebook (check())
# ---------------------------------------------------------------------------------------


def static_proof(trees: Sequence[ast.Module], bindings: Mapping[str, list[ast.AST]], imports: Iterable[str]) -> Proof:
    """The proof from a notebook's cells: ``bindings`` and ``imports`` are its module-level
    names (:class:`~.forbidden.StaticEnvironment`)."""
    kept = sealed(trees)
    imported = set(imports)

    def classes(name: str) -> list[ast.ClassDef] | None:
        return [kept[name]] if name in kept and name not in imported else None

    def instances(name: str) -> list[ast.ClassDef] | None:
        values = bindings.get(name)
        if not values or name in imported:
            return None
        found: list[ast.ClassDef] = []
        for v in values:
            kinds = classes(v.func.id) if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) else None
            if kinds is None:
                return None
            found += kinds
        return found

    return Proof(
        classes, instances, functools.cache(lambda attr: _rebound(trees, attr)), lambda c: kept.get(c.name) is c
    )


def notebook_trees(sources: Iterable[str]) -> list[ast.Module]:
    """The cells that parse, each with the Python bodies of the magics IPython made of it
    (``get_ipython().run_cell_magic('time', '', body)``) as cells of their own."""
    trees: list[ast.Module] = []
    todo = list(sources)
    while todo and len(trees) < 10_000:
        try:
            tree = parse_shared(todo.pop(0))  # only read
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        trees.append(tree)
        for node in walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("run_cell_magic", "run_line_magic"):
                    todo += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return trees


def live_proof(env: Mapping[str, Any], trees: Sequence[ast.Module] | None) -> Proof:
    """The proof in a live notebook: ``trees`` are its cells (None when unknown: nothing is
    owned); a name is a sealed class when its live value is a class of the notebook whose
    source is the sealed class statement."""
    kept = sealed(trees) if trees is not None else {}
    shapes = {name: ast.dump(cls) for name, cls in kept.items()}

    def classes(name: str) -> list[ast.ClassDef] | None:
        value = env.get(name)
        if name not in shapes or not isinstance(value, type) or not defined_here(value):
            return None
        node = source_tree(value)
        return [node] if isinstance(node, ast.ClassDef) and ast.dump(node) == shapes[name] else None

    def instances(name: str) -> list[ast.ClassDef] | None:
        value, kind = env.get(name), type(env.get(name))
        if isinstance(value, type) or env.get(kind.__name__) is not kind:
            return None
        return classes(kind.__name__)

    def is_sealed(cls: ast.ClassDef) -> bool:
        return shapes.get(cls.name) == ast.dump(cls) and classes(cls.name) is not None

    return Proof(classes, instances, functools.cache(lambda attr: _rebound(trees or [], attr)), is_sealed)


def live_owned(tree: ast.AST, env: Mapping[str, Any], namespace: Mapping[str, Any]) -> Callable[[], Owned]:
    """:func:`owned` of a live function's or class's source (``env``: what its names hold),
    computed when first needed, proven over the cells of the notebook whose globals are
    ``namespace`` (:func:`~.history.notebook_sources`)."""

    def proven() -> Owned:
        cells = notebook_sources(namespace)
        return owned(tree, live_proof(env, notebook_trees(cells) if cells is not None else None))

    return functools.cache(proven)


def own_bound_method(value: Any, base: Any) -> bool:
    """Whether ``value`` (read as an attribute of the live object ``base``) is a method of the
    student's own object: a bound method of a function of the notebook, not of a tensor."""
    import torch

    return (
        isinstance(value, types.MethodType)
        and isinstance(value.__func__, types.FunctionType)
        and defined_here(value.__func__)
        and not isinstance(base, torch.Tensor)
    )


# ---------------------------------------------------------------------------------------
# The own methods and setattr calls under a tree
# ---------------------------------------------------------------------------------------


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


def _instances(root: ast.AST, proof: Proof) -> list[tuple[ast.AST, str, list[ast.ClassDef]]]:
    """(scope, name, its possible classes) for every provable own object under ``root``."""
    found: list[tuple[ast.AST, str, list[ast.ClassDef]]] = []
    for cls in [n for n in walk(root) if isinstance(n, ast.ClassDef) and proof.sealed(n)]:
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
            kinds = [_class_call(a.value, proof.classes) for a in parents]
            if all(k is not None for k in kinds):
                found.append((fn, name, [c for k in kinds for c in k or []]))
    return found


def _class_call(value: ast.AST, classes: Classes) -> list[ast.ClassDef] | None:
    """The classes of ``C(...)`` when ``C`` is provably a sealed class of the notebook."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return classes(value.func.id)
    return None


def owned(root: ast.AST, proof: Proof) -> Owned:
    """The student's own method accesses and ``setattr`` calls under ``root`` (a function,
    class or statement of the notebook)."""
    out = Owned()
    scopes = [({id(n) for n in walk(scope)}, name, kinds) for scope, name, kinds in _instances(root, proof)]
    local = {n.id for n in walk(root) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {a.arg for a in walk(root) if isinstance(a, ast.arg)}
    for node in walk(root):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load):
            name, attr = node.value.id, node.attr
            kinds = [k for ids, n, k in scopes if n == name and id(node) in ids]
            if not kinds and name not in local:
                kinds = [k] if (k := proof.instances(name)) else []
            if kinds and _own_method(attr, kinds[0], root, proof.rebound):
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
