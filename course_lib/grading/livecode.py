"""Reading live objects: the source and bytecode of the functions and classes a notebook's
globals point to, and whether the student wrote them (used by the live scan of
:func:`course_lib.grading.check`)."""

from __future__ import annotations

import ast
import dis
import inspect
import textwrap
import types
from typing import Any

from .parsing import parse, walk

__all__ = ["object_path", "source_tree", "code_loads", "defined_here"]


def object_path(obj: Any) -> str | None:
    """``module.qualname`` of a live object (a module's name for a module), None if unknown."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    module = getattr(obj, "__module__", None)
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if isinstance(module, str) and isinstance(qual, str):
        return f"{module}.{qual}"
    return None


def source_tree(obj: Any) -> ast.AST | None:
    """The definition of a live function or class, parsed from its source (None if unknown)."""
    try:
        src = textwrap.dedent(inspect.getsource(obj))
        tree = parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError, ValueError, RecursionError):
        return None
    name = getattr(obj, "__name__", None)
    for node in walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
    for node in walk(tree):
        if isinstance(node, ast.Lambda):
            return node
    return tree


def code_loads(code: types.CodeType, depth: int = 0) -> tuple[set[str], set[str]]:
    """The global (and closure) names and the attribute names that a code object and the code
    nested in it load, read from its bytecode."""
    globals_, attrs = set(code.co_freevars), set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_GLOBALS"):
            globals_.add(str(ins.argval))
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR", "IMPORT_NAME", "IMPORT_FROM"):
            attrs.add(str(ins.argval))
    if depth < 20:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                g, a = code_loads(const, depth + 1)
                globals_ |= g
                attrs |= a
    return globals_, attrs


def defined_here(obj: Any) -> bool:
    """True for code written by the student (a notebook cell, a script, a test module), not
    for installed libraries (whose calls the runtime layer watches)."""
    module = getattr(obj, "__module__", None)
    if not isinstance(module, str):
        return False
    root = module.split(".")[0]
    if root in ("torch", "numpy", "builtins", "functools", "typing", "math", "matplotlib", "collections", "abc"):
        return False
    return True
