"""Checking a live function by its bytecode, when its source cannot be read.

A function made with ``exec``, or a lambda among others on its line, has no source of its
own to read: the names its bytecode loads are checked instead, so it is never left unchecked.
"""

from __future__ import annotations

import builtins
import types
from typing import Any

from ..livecode import code_loads, object_path
from .rules import DYNAMIC_BUILTINS, Rules, check_path, describe, dynamic_note, is_reference
from .walk import Note

__all__ = ["bytecode_refs"]


def bytecode_refs(code: types.CodeType, env: dict[str, Any], r: Rules, note: Note, trusted: bool) -> list[Any]:
    """Check the names a function's bytecode loads (when its source cannot be read); returns
    the objects they reach, to follow in turn. An attribute is forbidden when it is a forbidden
    tensor method, or the last part of a rule whose module the code also loads (``torch`` and
    ``softmax``).

    Args:
        code: the function's code object.
        env: what its global and closure names hold.
        r: the exercise's rules.
        note: where the notes go.
        trusted: the code is the reference's own.
    """
    names, attrs = code_loads(code)
    modules = {v.__name__ for n in names if isinstance(v := env.get(n), types.ModuleType)}
    for a in sorted(attrs):
        if a in r.methods:
            note(describe(f"the tensor method .{a}()", f"{a} (read from its bytecode)"))
        for rule in r.exact:
            parent, _, last = rule.rpartition(".")
            if last == a and any(parent == m or parent.startswith(m + ".") for m in modules):
                note(describe(rule, f"{a} (read from its bytecode)"))
    reached = []
    for n in sorted(names):
        if n not in env:
            continue
        value = env[n]
        if id(value) in r.objects:
            note(describe(r.objects[id(value)], n))
        elif not trusted and is_reference(value):
            note(describe(object_path(value) or n, n))
        elif any(value is getattr(builtins, b) for b in DYNAMIC_BUILTINS):
            note(dynamic_note(f"{n}()"))
        elif isinstance(value, types.ModuleType):
            note(check_path(value.__name__, n, r, trusted))
        elif id(value) in r.dynamic:
            note(dynamic_note(f"{r.dynamic[id(value)]} (written {n})"))
        reached.append(value)
    return reached
