"""The live environment: what names mean inside a live function (a notebook's ``check()``).

A name means what the function's globals, closure and builtins hold, as live objects; the
code read is the source of the functions and classes they point to, or their bytecode when
the source cannot be read (:mod:`.bytecode`). Library code (torch, numpy) is not read: the
runtime layer (:mod:`..opwatch`) watches what it runs.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from ..harmless import harmless, membership_reads
from ..livecode import defined_here, object_path, source_tree
from ..ownership import live_owned, own_bound_method
from .bytecode import bytecode_refs
from .refs import Ref, local_imports, refs, stored_names
from .rules import (
    DYNAMIC_BUILTINS,
    DYNAMIC_PATHS,
    Rules,
    check_path,
    describe,
    dynamic_note,
    graded_note,
    is_reference,
    method_note,
    module_note,
    torch_internal,
    under,
)
from .walk import Note, Scope, walk

__all__ = ["LiveScope", "LiveEnvironment", "violations_in_function"]

_CONTAINERS = (list, tuple, set, frozenset, dict)


@dataclass
class LiveScope(Scope):
    """A live function's or class's code, with what its free names hold (``names``: builtins,
    then its globals, then its closure)."""

    names: dict[str, Any] = field(default_factory=dict)


class LiveEnvironment:
    """The walk from a live function through the objects its code reaches (a
    :class:`~.walk.Environment`): functions, lambdas, classes, bound methods, partials,
    containers and the classes of instances.

    Args:
        fn: the graded function.
        rules: the exercise's forbidden calls.
        boundary: the student's graded callees, not read: the reference stands in for them,
            and what they call is charged to them (:mod:`..charging`).
    """

    def __init__(self, fn: Callable[..., Any], rules: Sequence[str], boundary: Sequence[Any] = ()):
        self.fn = fn
        self.rules = Rules.of(rules, live=True)
        self._boundary = {id(b) for b in boundary if b is not fn}
        self._trusted_root = is_reference(fn)  # the reference itself may call its own helpers
        self._seen: set[int] = set()
        own_globals = getattr(fn, "__globals__", None) or {}
        self._graded = {
            id(own_globals[n]): n
            for n in self.rules.graded
            if callable(own_globals.get(n)) and own_globals[n] is not fn
        }

    def start(self, note: Note) -> list[Any]:
        return [self.fn]

    def open(self, obj: Any, note: Note) -> tuple[list[Any], LiveScope | None]:
        if id(obj) in self._seen:
            return [], None
        self._seen.add(id(obj))
        if id(obj) in self._graded:
            note(graded_note(self._graded[id(obj)]))
            return [], None
        if id(obj) in self._boundary:
            return [], None
        if isinstance(obj, types.MethodType):
            obj = obj.__func__
        more = self._without_code(obj, note)
        if more is not None:
            return more, None
        return self._read(obj, note)

    def _without_code(self, obj: Any, note: Note) -> list[Any] | None:
        """What ``obj`` leads to when it has no code to read here (a partial, a container, a
        forbidden or reference object, an instance, library code); None for code to read."""
        if isinstance(obj, functools.partial):
            partial = cast(Any, obj)
            return [partial.func, *partial.args]
        if id(obj) in self.rules.objects:
            note(describe(self.rules.objects[id(obj)], getattr(obj, "__name__", "?")))
            return []
        if type(obj) in _CONTAINERS:
            items = list(obj.values() if isinstance(obj, dict) else obj)[:100]
            return [i for i in items if callable(i) or type(i) in _CONTAINERS]
        if obj is not self.fn and is_reference(obj):
            return []  # already reported where it was read; its own code is the reference
        if not isinstance(obj, (types.FunctionType, type)):
            if not isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)) and defined_here(type(obj)):
                return [type(obj)]  # an instance of a notebook class: its methods
            return []
        if not defined_here(obj) and obj is not self.fn:
            return []  # library code (torch, numpy): the runtime layer watches what it runs
        return None

    def _read(self, obj: Any, note: Note) -> tuple[list[Any], LiveScope | None]:
        """A function's or class's code: what its bytecode reaches when its source cannot be
        read (or it is a lambda), and its source as a scope."""
        trusted = self._trusted_root and is_reference(obj)
        names = dict(vars(builtins))
        namespace = getattr(obj, "__globals__", None) or vars(inspect.getmodule(obj) or builtins)
        names.update(namespace)
        code = getattr(obj, "__code__", None)
        names.update(_closure(obj, code))
        tree = source_tree(obj)
        more: list[Any] = []
        if isinstance(code, types.CodeType) and (tree is None or obj.__name__ == "<lambda>"):
            # no source to read (made with exec, or a lambda among others on its line): the
            # names its bytecode loads are checked instead, so it is never left unchecked
            more = bytecode_refs(code, names, self.rules, note, trusted)
        if tree is None:
            return more, None
        local = stored_names(tree) - ({tree.name} if hasattr(tree, "name") else set())
        imports = local_imports(tree)
        reads = membership_reads(tree)
        own = live_owned(tree, names, namespace)
        return more, LiveScope(refs(tree), local, imports, reads, own, trusted, names)

    def unbound_builtin(self, head: str, scope: LiveScope) -> bool:
        return scope.names[head] is getattr(builtins, head, None)

    def resolve(self, ref: Ref, scope: LiveScope, note: Note) -> list[Any]:
        head = ref.chain[0]
        if head not in scope.names:
            note(method_note(ref, self.rules, None))
            return []
        value: Any = scope.names[head]
        written_path = ".".join([value.__name__, *ref.chain[1:]]) if isinstance(value, types.ModuleType) else None
        if written_path and harmless(written_path, ref.node, scope.reads):
            return []
        base, value, ok = _follow(value, ref.chain[1:])
        note(self._classify(ref, value, ok, written_path, scope.trusted))
        if (
            len(ref.chain) > 1
            and ref.chain[-1] in self.rules.methods
            and (base is torch.Tensor or not isinstance(base, (types.ModuleType, type)))
            and not own_bound_method(value, base)
        ):
            note(describe(f"the tensor method .{ref.chain[-1]}()", ref.written))
        if id(value) in self.rules.objects:
            return []  # reported above: opening it would report it again, by its bare name
        return [value] if ok else []

    def _classify(self, ref: Ref, value: Any, ok: bool, written_path: str | None, trusted: bool) -> str | None:
        """The note for what a reference reached (``ok``: the whole chain was read, to
        ``value``; ``written_path``: the dotted path as written, when it starts at a module)."""
        path = object_path(value) if ok else None
        if ok and id(value) in self.rules.objects:
            return describe(self.rules.objects[id(value)], ref.written)
        if ok and not trusted and is_reference(value):
            return describe(path or ref.written, ref.written)
        if ok and isinstance(value, types.ModuleType):
            return check_path(value.__name__, ref.written, self.rules, trusted)
        library = self._library(value if ok else None, written_path)
        if library is not None:
            return module_note(library)
        if written_path and (under(written_path, DYNAMIC_PATHS) or torch_internal(written_path)):
            return dynamic_note(f"{written_path} (written {ref.written})")
        if ok and any(value is getattr(builtins, b) for b in DYNAMIC_BUILTINS):
            return dynamic_note(f"{value.__name__}() (written {ref.written})")
        if ok and id(value) in self.rules.dynamic:  # from sys import _getframe as gf
            return dynamic_note(f"{self.rules.dynamic[id(value)]} (written {ref.written})")
        return None

    def _library(self, value: Any, written_path: str | None) -> str | None:
        """The forbidden library (``module:numpy``) a reference reaches, by its written path or
        by where the object it reached (or its type: a numpy ufunc) was defined."""
        owners = [written_path, getattr(value, "__module__", None), getattr(type(value), "__module__", None)]
        if value is None:
            owners = owners[:1]
        for owner in owners:
            found = under(owner, self.rules.modules) if isinstance(owner, str) else None
            if found is not None:
                return found
        return None


def _closure(obj: Any, code: Any) -> dict[str, Any]:
    """What a function's closure variables hold (an empty cell is left out)."""
    closure = getattr(obj, "__closure__", None)
    held: dict[str, Any] = {}
    if code is not None and closure:
        for var, cell in zip(code.co_freevars, closure, strict=False):
            try:
                held[var] = cell.cell_contents
            except ValueError:
                pass
    return held


def _follow(value: Any, parts: Sequence[str]) -> tuple[Any, Any, bool]:
    """Read the attributes ``parts`` from ``value``: ``(base, value, ok)``, the object the last
    attribute was read from, what it held, and whether every attribute could be read (if not,
    ``value`` is ``base``)."""
    base: Any = None
    for part in parts:
        base = value
        try:
            value = inspect.getattr_static(value, part) if isinstance(value, type) else getattr(value, part)
        except Exception:  # noqa: BLE001 - an attribute that does not exist or raises
            return base, value, False
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
    return base, value, True


def violations_in_function(fn: Callable[..., Any], rules: Sequence[str], boundary: Sequence[Any] = ()) -> list[str]:
    """Forbidden uses reachable from a live function: its code, and transitively the code of
    the functions, lambdas and classes its globals and closure point to.

    Args:
        fn: the graded function.
        rules: the exercise's forbidden calls.
        boundary: graded callees not to read (see :class:`LiveEnvironment`).

    Returns:
        The notes, each once, in the order found.
    """
    return walk(LiveEnvironment(fn, rules, boundary))
