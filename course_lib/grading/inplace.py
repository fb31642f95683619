"""In-place changes of a caller's tensors: found by comparing the arguments before and after a
call, and named in words.

A function that runs ``scores.masked_fill_(~mask, float("-inf"))`` on its caller's ``scores``,
``x.sub_(mean)`` or ``q *= scale`` may return the right values, but the caller's tensors come
back changed, which breaks the code around it. :func:`changed_paths` finds them in this process
(:func:`~course_lib.grading.run.call_once`: the function gets copies of the call's arguments,
which are compared bit for bit with the originals afterwards, ``NaN`` included); the sandbox's
worker reports the same fact from the bytes it was sent. A path is where the tensor sat in the
call: its position (or keyword), then the indices into a tuple or list, such as ``(3, 0)`` for
the keys of a KV cache passed fourth.

:func:`inplace_message` names the argument as the student's ``def`` names it and, when the
source shows it cheaply, the in-place operation (a method ending in ``_``, an augmented
assignment, an item assignment, ``out=`` or ``inplace=True`` on that very name). Only a
tensor the caller passed counts: a tensor the function made itself (``out = x.clone()``,
``torch.empty(...)``) is its own to change.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .parsing import parse_shared, walk

__all__ = ["ArgPath", "changed_paths", "function_source", "argument_words", "inplace_message", "INPLACE_FEEDBACK"]

#: Where a tensor sat in a call: its position or keyword, then indices into tuples and lists.
ArgPath = tuple[int | str, ...]

#: A test's feedback when its values were right but the call changed an input (its words).
INPLACE_FEEDBACK = "the correct values, but the call changed its {} in place"

_AUGMENTED: dict[type, str] = {
    ast.Add: "+=",
    ast.Sub: "-=",
    ast.Mult: "*=",
    ast.Div: "/=",
    ast.FloorDiv: "//=",
    ast.Mod: "%=",
    ast.Pow: "**=",
    ast.MatMult: "@=",
    ast.BitAnd: "&=",
    ast.BitOr: "|=",
    ast.BitXor: "^=",
}

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(before: torch.Tensor, after: Any) -> bool:
    """Whether ``after`` holds exactly ``before``'s data: shape, dtype and every bit (a ``NaN``
    equals itself, ``-0.0`` differs from ``0.0``)."""
    if type(after) is not torch.Tensor or after.shape != before.shape or after.dtype != before.dtype:
        return False
    size = before.element_size()
    if size not in _BITS or before.is_complex():
        return bool(torch.equal(before, after))
    with torch.no_grad():
        return bool(torch.equal(before.detach().view(_BITS[size]), after.detach().view(_BITS[size])))


def _changed(before: Any, after: Any, path: ArgPath, found: list[ArgPath]) -> None:
    if isinstance(before, torch.Tensor):
        if not _same_bits(before, after):
            found.append(path)
    elif type(before) in (tuple, list):
        if type(after) is not type(before) or len(after) != len(before):
            found.append(path)  # a list the function emptied or grew
            return
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            _changed(b, a, (*path, i), found)


def changed_paths(originals: Any, given_args: tuple, given_kwargs: dict[str, Any]) -> list[ArgPath]:
    """The paths of the tensors that a call changed: ``originals`` (a
    :class:`~course_lib.grading.model.Call`) holds the arguments as they were, ``given_args``
    and ``given_kwargs`` the copies the function was given, as they are after the call.

    Returns:
        The changed paths, positional ones first, in order.
    """
    found: list[ArgPath] = []
    for i, (b, a) in enumerate(zip(originals.args, given_args, strict=False)):
        _changed(b, a, (i,), found)
    for k, b in originals.kwargs.items():
        _changed(b, given_kwargs.get(k), (k,), found)
    return found


def function_source(fn: Any) -> str | None:
    """The source of a live function (a notebook cell's too), or None when it cannot be read."""
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except Exception:  # noqa: BLE001 - only a hint's words depend on it: never the check itself
        return None


def _parameters(reference: Callable[..., Any], tree: ast.FunctionDef | None) -> list[str]:
    if tree is not None:
        return [a.arg for a in (*tree.args.posonlyargs, *tree.args.args)]
    try:
        return list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        return []


def _definition(source: str | None, name: str) -> ast.FunctionDef | None:
    if not source:
        return None
    try:
        tree = parse_shared(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    named = [node for node in defs if node.name == name]
    found = named or defs  # check(my_softmax, name="softmax"): the source's one def
    return found[-1] if found else None


def _label(path: ArgPath, params: Sequence[str]) -> tuple[str, str | None]:
    """The argument's words (``x``, ``cache[0]``) and the parameter's name (None if unknown)."""
    head = path[0]
    name = head if isinstance(head, str) else (params[head] if head < len(params) else None)
    words = name if name is not None else f"argument {head}"
    return words + "".join(f"[{i}]" for i in path[1:]), name


def _operation(tree: ast.FunctionDef | None, name: str | None) -> str:
    """How the source changes ``name`` in place, as code (``x.sub_(...)``), or ``""``."""
    if tree is None or name is None:
        return ""

    def is_it(node: ast.AST | None) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        return isinstance(node, ast.Name) and node.id == name

    for node in walk(tree):
        if isinstance(node, ast.AugAssign) and is_it(node.target):
            return f"{ast.unparse(node.target)} {_AUGMENTED.get(type(node.op), 'op=')} ..."
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and is_it(t) for t in node.targets):
            target = next(t for t in node.targets if isinstance(t, ast.Subscript))
            return f"{ast.unparse(target)} = ..."
        if isinstance(node, ast.Call):
            func = node.func
            attr = func.attr if isinstance(func, ast.Attribute) else ""
            in_place = attr.endswith("_") and not attr.startswith("_")
            if in_place and isinstance(func, ast.Attribute) and is_it(func.value):
                return f"{name}.{attr}(...)"
            first = node.args[0] if node.args else None
            if in_place and is_it(first):
                return f"{ast.unparse(func)}({name}, ...)"
            for kw in node.keywords:
                if kw.arg == "out" and is_it(kw.value):
                    return f"{ast.unparse(func)}(..., out={name})"
                if kw.arg == "inplace" and is_it(first) and isinstance(kw.value, ast.Constant) and kw.value.value:
                    return f"{ast.unparse(func)}({name}, ..., inplace=True)"
    return ""


def _fix(operation: str) -> str:
    """How to write ``operation`` (:func:`_operation`) without changing the caller's tensor."""
    if operation.endswith("_(...)") and "." in operation:  # x.sub_(...) -> x = x.sub(...)
        name, method = operation[: -len("_(...)")].split(".", 1)
        return f"use the out-of-place `{method}` and keep its result (`{name} = {name}.{method}(...)`), or clone first"
    if "_(" in operation:
        return "use the out-of-place function (without the trailing underscore) and keep its result, or clone first"
    if operation.endswith(" = ...") and "[" in operation:
        return "write into a tensor of your own (`out = x.clone()`, then change `out`)"
    if operation.endswith("= ..."):
        target, op = operation.split(" ")[:2]
        return f"write `{target} = {target} {op[:-1]} ...` (a new tensor) instead of `{operation}`, or clone first"
    return "work on a tensor of your own (the out-of-place operation, or `.clone()` first) instead"


def argument_words(
    function: str, paths: Sequence[ArgPath], reference: Callable[..., Any], source: str | None = None
) -> str:
    """``argument `x``` or ``arguments `q` and `k```: the changed arguments, as the student's
    ``def`` names them (the reference's names when the source is unknown)."""
    params = _parameters(reference, _definition(source, function))
    labels: list[str] = []
    for path in paths:
        words = _label(path, params)[0]
        if words not in labels:
            labels.append(words)
    return _words(labels)


def _words(labels: Sequence[str]) -> str:
    noun = "argument" if len(labels) == 1 else "arguments"
    return f"{noun} " + " and ".join(f"`{w}`" for w in labels[:4])


def inplace_message(
    function: str, paths: Sequence[ArgPath], reference: Callable[..., Any], source: str | None = None
) -> str:
    """The named mistake of a function whose calls changed the tensors at ``paths``.

    Args:
        function: the graded function's name.
        paths: the changed arguments (:func:`changed_paths`, over all calls; each once).
        reference: the reference, whose parameter names stand in when the source is unknown.
        source: the student's source of the function, to name its parameters and the operation.

    Returns:
        One sentence, e.g. ``your layer_norm changed its argument `x` in place (`x.sub_(...)`):
        ...``.
    """
    tree = _definition(source, function)
    params = _parameters(reference, tree)
    labels, operations = [], []
    for path in paths:
        words, name = _label(path, params)
        if words not in labels:
            labels.append(words)
            op = _operation(tree, name)
            if op and op not in operations:
                operations.append(op)
    how = f" ({', '.join(f'`{o}`' for o in operations[:3])})" if operations else ""
    fix = _fix(operations[0]) if operations else _fix("")
    return (
        f"your {function} changed its {_words(labels)} in place{how}, so the caller's tensor is no longer "
        f"what it passed: {fix}"
    )
