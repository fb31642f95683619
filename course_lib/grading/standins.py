"""A mistake costs points once: grading a function with references standing in for its graded callees.

When a graded function calls another graded function of the same notebook (``self_attention``
calls the student's ``scaled_dot_product_attention``), a mistake in the callee would also cost
the caller's points. So when a callee fails its own tests, the caller is graded a second time
with the reference standing in for every graded callee, and that run's score counts; the
feedback still shows how the student's own composition scored (:class:`~.report.Composition`).

This module finds the callees (in a live function for :func:`course_lib.grading.check`, in a
notebook's source for the autograder) and does the live stand-in. The autograder's stand-in
never puts the reference in the student's process: its calls are forwarded to the grading
process (see :mod:`course_lib.autograder.sandbox.runner`).
"""

from __future__ import annotations

import ast
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .forbidden import StaticEnvironment
from .forbidden.refs import FUNCTIONS, stored_names
from .graded_names import defines
from .history import executed_cells
from .livecode import code_loads, defined_here
from .report import Composition, Report

__all__ = ["live_callees", "static_callees", "written", "standing_in", "composed"]


def live_callees(fn: Callable[..., Any], candidates: Sequence[str]) -> list[str]:
    """The graded functions (names in ``candidates``) that ``fn`` calls through its globals,
    directly or through helpers the notebook defines (not through another graded function),
    including one that does not exist because its cell failed: it is stood in for like a wrong
    one, but only where the notebook's cells (IPython's history, :func:`~.history.executed_cells`)
    hold its ``def``. A function never written gets no stand-in."""
    env = getattr(fn, "__globals__", None)
    if not isinstance(env, dict):
        return []
    found: list[str] = []
    seen: set[int] = set()
    todo: list[Any] = [fn]
    while todo:
        obj = todo.pop()
        code = getattr(obj, "__code__", None)
        if id(obj) in seen or not isinstance(code, types.CodeType):
            continue
        seen.add(id(obj))
        names, _ = code_loads(code)
        for n in sorted(names):
            value = env.get(n)
            if n in candidates and n not in env:  # its cell failed: the reference stands in for it too,
                if n not in found and written(n, executed_cells(env) or []):  # if the student wrote it
                    found.append(n)
            elif n in candidates and value is not fn and callable(value):
                if n not in found:
                    found.append(n)
            elif isinstance(value, types.FunctionType) and defined_here(value):
                todo.append(value)
    return [c for c in candidates if c in found]


def static_callees(
    env: StaticEnvironment, name: str, candidates: Sequence[str], unreadable: Sequence[str] = ()
) -> list[str]:
    """The same, read from a notebook's cells without running them: the graded names that the
    definitions reachable from ``name`` refer to and that the notebook defines, bound in a
    readable cell or written with ``def`` in a cell that cannot be read (``unreadable``: an
    honest syntax error, the cell not run). A function never written gets no stand-in. A
    function's own parameters and locals are not followed to the module-level bindings of the
    same names (``weights`` inside ``attention_pool`` is not the notebook's ``weights = ...``)."""
    found: set[str] = set()
    seen: set[str] = {name}
    todo: list[ast.AST] = list(env.values(name))
    while todo:
        node = todo.pop()
        local = stored_names(node) if isinstance(node, FUNCTIONS) else set()
        for ref in env.refs(node):
            head = ref.chain[0]
            if head in seen or head in local:
                continue
            seen.add(head)
            if head in candidates:  # the reference stands in for it, if the student wrote it
                if defines(env.bindings, head) or written(head, unreadable):  # an alias is not writing it
                    found.add(head)
            else:
                todo.extend(env.values(head))
    return [c for c in candidates if c in found]


def written(name: str, sources: Iterable[str]) -> bool:
    """Whether a line of ``sources`` defines ``name`` with ``def`` (``async def`` too)."""
    pattern = re.compile(rf"^[^\S\n]*(?:async[^\S\n]+)?def[^\S\n]+{re.escape(name)}[^\S\n]*\(", re.MULTILINE)
    return any(pattern.search(s) for s in sources)


@contextmanager
def standing_in(namespace: dict[str, Any], references: Mapping[str, Callable[..., Any]]) -> Iterator[None]:
    """Put ``references`` in ``namespace`` (a notebook's globals) for the duration, then put
    the student's own functions back, whatever happens."""
    saved = {n: namespace[n] for n in references if n in namespace}
    try:
        namespace.update(references)
        yield
    finally:
        for n in references:
            if n in saved:
                namespace[n] = saved[n]
            else:
                namespace.pop(n, None)


def composed(own: Report, stand_in: Report, callees: Sequence[str]) -> Report:
    """The report that counts (``stand_in``), remembering how the student's own composition
    (``own``) scored and which of its tests failed; ``own`` itself when the references changed
    nothing (the same score, the same tests failed): the callees did not cost it a point, so
    there is no composition to tell the student about. A forbidden call seen only with the
    student's callees is theirs, never the caller's (:mod:`.charging`): then ``stand_in``
    counts whatever its score."""
    failed = [r.name for r in own.results if not r.passed]
    theirs = own.status == "forbidden" and stand_in.status != "forbidden"
    if not theirs and stand_in.score == own.score and failed == [r.name for r in stand_in.results if not r.passed]:
        return own
    stand_in.composition = Composition(list(callees), own.score, own.status, failed)
    return stand_in
