"""Find calls a graded function may not use, by reading its source.

Each exercise lists calls the student must write themselves (``torch.softmax`` inside
``softmax``, ``F.scaled_dot_product_attention`` inside ``scaled_dot_product_attention``).
Any use of ``course_lib`` (the reference implementations) is always forbidden.

Two ways to resolve a name such as ``F.softmax`` to ``torch.nn.functional.softmax``:

- :func:`violations_in_function` (a live function, in a notebook): looks the name up in
  the function's globals and compares objects, so any alias is recognised;
- :func:`violations_in_source` (the autograder, which never runs student code in its own
  process): reads the notebook's import statements.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import types
from typing import Any, Callable, Iterable, Sequence

__all__ = ["violations_in_function", "violations_in_source", "function_source"]

REFERENCE_PACKAGE = "course_lib"
_DYNAMIC = {"eval", "exec", "__import__", "compile"}


def _chains(func: ast.AST) -> Iterable[tuple[list[str], str]]:
    """Every dotted name read inside ``func``: (["F", "softmax"], "F.softmax")."""
    inner = {id(n.value) for n in ast.walk(func) if isinstance(n, ast.Attribute)}
    for node in ast.walk(func):
        if id(node) in inner:
            continue  # part of a longer dotted name, which is checked whole
        chain: list[str] | None = None
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            chain = [node.id]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            base = _chain(node.args[0])
            chain = (base or ["<expr>"]) + [node.args[1].value]
        if chain:
            yield chain, ".".join(chain)


def _chain(node: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if parts:
        return ["<expr>"] + parts[::-1]
    return None


def _method_rules(rules: Sequence[str]) -> set[str]:
    return {r.split(":", 1)[1] for r in rules if r.startswith("method:")}


def _describe(path: str, written: str) -> str:
    shown = path if path == written else f"{path} (written {written})"
    if path.startswith(REFERENCE_PACKAGE):
        return (f"uses {shown}, a reference implementation: graded functions must be your own code")
    return f"uses {shown}, which this exercise asks you to write yourself"


def _dynamic_note(name: str) -> str:
    return f"uses {name}(), which graded functions may not use (it can hide what the code calls)"


# ---------------------------------------------------------------------------------------
# Source only (autograder)
# ---------------------------------------------------------------------------------------


def _import_aliases(tree: ast.AST) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    root = a.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def function_source(source: str, name: str) -> ast.FunctionDef | None:
    """The last top-level ``def name`` in ``source`` (what a notebook run would keep)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found = node
    return found


def violations_in_source(source: str, name: str, rules: Sequence[str]) -> list[str]:
    """Forbidden uses inside ``def name`` in ``source``, resolved through its imports."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    func = function_source(source, name)
    if func is None:
        return []
    aliases = _import_aliases(tree)
    exact = {r for r in rules if not r.startswith("method:")}
    methods = _method_rules(rules)
    found: list[str] = []
    for chain, written in _chains(func):
        if chain[0] in _DYNAMIC and len(chain) == 1:
            note = _dynamic_note(chain[0])
        else:
            root = aliases.get(chain[0])
            path = ".".join([root, *chain[1:]]) if root else None
            note = None
            if path and (path.split(".")[0] == REFERENCE_PACKAGE or path in exact):
                note = _describe(path, written)
            elif path == "importlib.import_module":
                note = _dynamic_note("importlib.import_module")
            elif len(chain) > 1 and chain[-1] in methods and (path is None or path == f"torch.Tensor.{chain[-1]}"):
                note = _describe(f"the tensor method .{chain[-1]}()", written)
        if note and note not in found:
            found.append(note)
    return found


# ---------------------------------------------------------------------------------------
# A live function (notebook)
# ---------------------------------------------------------------------------------------


def _resolve_rule(rule: str) -> Any:
    parts = rule.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            return None
        return obj
    return None


def _is_reference(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == REFERENCE_PACKAGE
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == REFERENCE_PACKAGE and callable(obj)


def violations_in_function(fn: Callable[..., Any], rules: Sequence[str]) -> list[str]:
    """Forbidden uses inside ``fn``'s own source, resolved through its globals."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return []
    func = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None)
    if func is None:
        return []
    import builtins

    env = dict(vars(builtins))
    env.update(getattr(fn, "__globals__", {}))
    trusted = _is_reference(fn)  # the reference itself may call its own helpers
    forbidden = {}
    for r in rules:
        if not r.startswith("method:"):
            obj = _resolve_rule(r)
            if obj is not None:
                forbidden[id(obj)] = r
    methods = _method_rules(rules)
    import torch

    local_imports = _import_aliases(func)  # `import ...` inside the function body itself
    exact = {r for r in rules if not r.startswith("method:")}
    found: list[str] = []
    for chain, written in _chains(func):
        note = None
        if chain[0] in local_imports:
            path = ".".join([local_imports[chain[0]], *chain[1:]])
            if path.split(".")[0] == REFERENCE_PACKAGE or path in exact:
                note = _describe(path, written)
        elif chain[0] in _DYNAMIC and len(chain) == 1 and chain[0] not in getattr(fn, "__globals__", {}):
            note = _dynamic_note(chain[0])
        elif chain[0] != "<expr>" and chain[0] in env:
            obj: Any = env[chain[0]]
            base: Any = None
            ok = True
            for p in chain[1:]:
                base = obj
                try:
                    obj = getattr(obj, p)
                except Exception:  # noqa: BLE001
                    ok = False
                    break
            if ok and id(obj) in forbidden:
                note = _describe(forbidden[id(obj)], written)
            elif ok and not trusted and _is_reference(obj):
                name = obj.__name__ if isinstance(obj, types.ModuleType) else f"{obj.__module__}.{getattr(obj, '__qualname__', '?')}"
                note = _describe(name, written)
            elif len(chain) > 1 and chain[-1] in methods and (base is torch.Tensor or not isinstance(base, types.ModuleType)):
                note = _describe(f"the tensor method .{chain[-1]}()", written)
        elif len(chain) > 1 and chain[-1] in methods:
            note = _describe(f"the tensor method .{chain[-1]}()", written)
        if note and note not in found:
            found.append(note)
    return found
