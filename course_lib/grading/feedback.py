"""What a report says to the student, in words: an exception with the student's own line, the
inputs' shapes and a hint; each named mistake once with the tests it explains; how a function
scored with its own callees when references stood in for them.

Plain functions of plain data (messages, calls, result dicts), used by :mod:`.judging` and
:mod:`.report` to build and show reports, and by the autograder's exports to render stored records.
"""

from __future__ import annotations

import inspect
import linecache
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import torch

from .._validation import shape_str

__all__ = [
    "ERROR_HINTS",
    "error_hint",
    "describe_exception",
    "describe_inputs",
    "error_feedback",
    "internal_feedback",
    "mistakes_of",
    "mistake_lines",
    "composition_lines",
]


def short(msg: str, limit: int = 300) -> str:
    """One line of at most ``limit`` characters."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _points(x: float) -> str:
    return f"{x:g}"


def _as_dict(r: Any) -> dict:
    return r if isinstance(r, dict) else asdict(r)


_LIBRARY_DIRS = tuple(
    os.path.dirname(p) + os.sep
    for p in (torch.__file__, os.path.dirname(__file__), os.__file__)  # torch, course_lib, the stdlib
)


def describe_exception(e: BaseException) -> str:
    """``raised TYPE: MESSAGE``, and the line of the student's own code that raised it (the
    innermost frame outside torch, course_lib and the standard library)."""
    text = f"raised {type(e).__name__}: {short(str(e))}"
    where = None
    tb = e.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_LIBRARY_DIRS) or filename.startswith("<"):
            where = (filename, tb.tb_lineno)
        tb = tb.tb_next
    if where is not None:
        line = linecache.getline(*where).strip()
        if line:
            text += f", in your line `{short(line, 160)}`"
    return text


def error_feedback(reference: Callable[..., Any], call: Any, outcome: Any, said: dict[str, str], test: str) -> str:
    """An error's feedback: the message with the student's line, the inputs' shapes and a hint;
    an error already shown on an earlier test of the function is referred to, not repeated."""
    message = outcome.message
    if outcome.status != "error":
        return message
    inputs = f"Inputs of this test: {describe_inputs(reference, call)}"
    kind = re.sub(r"\d+", "#", message)  # the same error with other sizes is the same error
    if kind in said:
        return f"{message}. {inputs} (the same error as test '{said[kind]}')"
    said[kind] = test
    hint = error_hint(message)
    return f"{message}. {inputs}. Hint: {hint}" if hint else f"{message}. {inputs}"


#: Hints for the errors students' shape bugs raise, keyed by a phrase of the error message.
ERROR_HINTS: tuple[tuple[str, str], ...] = (
    (
        "on tensors of dimension other than 2",
        "`.T` reverses every dim of a tensor that is not 2-D: to swap the last two dims of a batch, "
        "use `k.transpose(-2, -1)`",
    ),
    (
        "must match the size of tensor b",
        "two tensors do not broadcast: compare their shapes on that line (dims are aligned from the "
        "right). A reduction without `keepdim=True` drops its dim, and a mask must broadcast to the "
        "scores' shape as given, without being reshaped inside the function",
    ),
    (
        "cannot be multiplied",
        "a matrix product of incompatible shapes: the last dim of the left factor must equal the "
        "second-to-last dim of the right one",
    ),
    (
        "is invalid for input of size",
        "a view or reshape asks for a different number of elements than the tensor has: compute the "
        "sizes from the input's own shape",
    ),
    (
        "view size is not compatible with input tensor",
        "`.view` needs contiguous memory, which a transpose breaks: use `.reshape`, or `.contiguous()` first",
    ),
    (
        "Sizes of tensors must match except in dimension",
        "`torch.cat` joins tensors along one dim and every other dim must match: check the dim you "
        "concatenate on (the one that grows, e.g. the time axis -2 of a (N, H, t, D) cache)",
    ),
    ("Dimension out of range", "a dim index beyond the tensor's number of dims: count dims from the end (-1, -2)"),
    ("only supports boolean masks", "`masked_fill` needs a bool mask (True = may attend); do not convert it"),
    ("expected a value of type", "an argument has the wrong type for that torch call"),
)


def error_hint(message: str) -> str:
    """The hint for a student's error message, or ``""``."""
    for phrase, hint in ERROR_HINTS:
        if phrase in message:
            return hint
    return ""


def describe_value(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        dtype = str(v.dtype).removeprefix("torch.")
        return f"{shape_str(v)} {dtype}"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(describe_value(x) for x in v) + ")"
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v) if not isinstance(v, float) else "a float"
    return type(v).__name__


def describe_inputs(reference: Callable[..., Any], call: Any) -> str:
    """The shapes and dtypes of a call's inputs, named as the reference names its parameters
    (values are never shown: they are hidden inputs)."""
    try:
        params = list(inspect.signature(reference).parameters)
    except (TypeError, ValueError):
        params = []
    parts = []
    for i, a in enumerate(call.args):
        name = params[i] if i < len(params) else f"argument {i}"
        parts.append(f"{name} {describe_value(a)}")
    parts += [f"{k}={describe_value(v)}" for k, v in call.kwargs.items()]
    return ", ".join(parts)


def structure(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"a tensor of shape {shape_str(v)}"
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    return ("an " if type(v).__name__[:1].lower() in "aeiou" else "a ") + type(v).__name__


def internal_feedback(actual: Sequence[Any], expected: Sequence[Any]) -> str:
    """What to say when judging itself failed on odd outputs: never the internal error."""
    for a, e in zip(actual, expected, strict=False):
        if structure(a) != structure(e):
            return f"the output could not be checked: it is {structure(a)}, expected {structure(e)}"
    return "the output could not be checked: it does not have the structure of the expected output"


def mistakes_of(results: Sequence[Any]) -> list[tuple[str, list[str]]]:
    """Each distinct named mistake, with the names of the tests it explains, in the order first
    seen. ``results`` are :class:`TestResult` objects or their dicts (gradebook records; older
    records have only ``diagnosis``)."""
    found: dict[str, list[str]] = {}
    for r in results:
        d = _as_dict(r)
        for message in d.get("diagnoses") or ([d["diagnosis"]] if d.get("diagnosis") else []):
            found.setdefault(message, []).append(d["name"])
    return list(found.items())


def mistake_lines(results: Sequence[Any]) -> list[str]:
    """``Likely mistake (tests a, b): message``: each named mistake once, with its tests."""
    lines = []
    for message, tests in mistakes_of(results):
        which = ", ".join(f"'{t}'" for t in tests)
        lines.append(f"Likely mistake ({'test' if len(tests) == 1 else 'tests'} {which}): {message}")
    return lines


def composition_lines(function: str, comp: Any, max_score: float) -> list[str]:
    """The feedback on a function graded with references standing in for its graded callees."""
    if comp is None:
        return []
    c = _as_dict(comp)
    callees = " and ".join(c["callees"])
    own = f"With your own {callees}, {function} scores {_points(c['score'])}/{_points(max_score)}"
    if c["failed"]:
        own += f" (failing {', '.join(repr(t) for t in c['failed'])})"
    return [
        f"{own}. The score above was measured with the reference {callees} in its place: "
        f"a mistake in {callees} costs points once, in {callees}'s own tests."
    ]
