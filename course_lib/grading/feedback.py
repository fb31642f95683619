"""What a report says to the student, in words: an exception with the student's own line, the
inputs' shapes and a hint; each named mistake once with the tests it explains; how a function
scored with its own callees when references stood in for them.

Plain functions of plain data (messages, calls, result dicts), used by :mod:`.judging` and
:mod:`.report` to build and show reports, and by the autograder's exports to render stored records.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from .._validation import shape_str
from .model import ErrorHint
from .operands import line_names, operand_words

__all__ = [
    "ERROR_HINTS",
    "LINE_HINTS",
    "error_hint",
    "failing_line",
    "describe_exception",
    "describe_inputs",
    "tensor_words",
    "Feedback",
    "error_feedback",
    "errors_of",
    "error_lines",
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

# A tensor's shape and dtype from torch's C base class, with torch's modes off: reading them
# runs none of the student's code (a subclass's own ``shape`` is never asked).
_BASE = torch._C.TensorBase
_SHAPE, _DTYPE = _BASE.__dict__["shape"].__get__, _BASE.__dict__["dtype"].__get__
_NO_MODES = (torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch)


def tensor_words(v: Any) -> str | None:
    """``(2, 4, 8) float32`` for a tensor, the class's name for a subclass of it, None for
    anything else (:func:`.operands.value_words`)."""
    t = type(v)
    if t is torch.Tensor or t is torch.nn.Parameter:
        no_function, no_dispatch = _NO_MODES
        with no_function(), no_dispatch():
            shape, dtype = tuple(_SHAPE(v)), _DTYPE(v)
        return "(" + ", ".join(str(int(s)) for s in shape) + ") " + str(dtype).removeprefix("torch.")
    if issubclass(t, torch.Tensor):
        return f"a {type.__dict__['__name__'].__get__(t)} (a subclass of torch.Tensor)"
    return None


def describe_exception(e: BaseException) -> str:
    """``raised TYPE: MESSAGE``, the line of the student's own code that raised it (the
    innermost frame outside torch, course_lib and the standard library) and the shapes and
    dtypes of the tensors that line names, read from that frame (:mod:`.operands`)."""
    text = f"raised {type(e).__name__}: {short(str(e))}"
    where = None
    tb = e.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_LIBRARY_DIRS) or filename.startswith("<"):
            where = tb
        tb = tb.tb_next
    if where is not None:
        line = linecache.getline(where.tb_frame.f_code.co_filename, where.tb_lineno).strip()
        if line:
            text += f", in your line `{short(line, 160)}`"
            try:
                frame = where.tb_frame
                text += operand_words(line, (frame.f_locals, frame.f_globals), tensor_words)
            except Exception:  # noqa: BLE001 - words about the operands are a hint, never an error
                pass
    return text


def _error_kind(message: str) -> str:
    """What makes two errors the same error: their message and line, sizes and operands left
    out (the same line failing on a 3-D and a 4-D input is one mistake)."""
    return re.sub(r"\d+", "#", message.partition(", where `")[0])


@dataclass
class Feedback:
    """A test's feedback, and the error it raised in full (``""`` when none)."""

    text: str
    error: str = ""


def error_feedback(
    reference: Callable[..., Any], call: Any, outcome: Any, hints: Sequence[ErrorHint] = (), source: str | None = None
) -> Feedback:
    """A failed call's feedback on its test, and for an error, the error in full: the message
    with the student's line and its operands, and a hint chosen by the error, the line (and
    the lines of ``source``, the student's function, that define the line's operands) and the
    exercise (``hints``: the exercise's own, tried first; the mask sentence only where the
    reference takes a ``mask``). The error is said once for all the tests it affects
    (:func:`error_lines`); the test's own feedback names the exception and the test's inputs."""
    message = outcome.message
    if outcome.status != "error":
        return Feedback(message)
    inputs = f"Inputs of this test: {describe_inputs(reference, call)}"
    head = message.partition(":")[0]
    hint = error_hint(message, hints, mask=_takes_mask(reference), source=source)
    error = f"{message}{' ' if message.endswith('.') else '. '}Hint: {hint}" if hint else message
    return Feedback(f"{head} (the error is said once, under Error, with the tests it affects). {inputs}", error)


def _takes_mask(reference: Callable[..., Any]) -> bool:
    try:
        return "mask" in inspect.signature(reference).parameters
    except (TypeError, ValueError):
        return False


#: The errors of shape bugs (how torch words a failed broadcast or matrix product).
SHAPE_ERRORS = (
    "must match the size of tensor b",
    "cannot be multiplied",
    "Expected size for first two dimensions of batch2",
    "on tensors of dimension other than 2",
)

#: Hints chosen by the student's line as well as the error, tried before :data:`ERROR_HINTS`.
LINE_HINTS: tuple[ErrorHint, ...] = (
    ErrorHint(
        SHAPE_ERRORS,
        "`.T` reverses every dim of a tensor that is not 2-D, the batch dims too: to swap the last two "
        "dims of a batch, use `.transpose(-2, -1)` (or `.mT`)",
        line=r"\.T\b",
    ),
)

BROADCAST = "must match the size of tensor b"

#: Hints for the errors students' shape bugs raise, keyed by a phrase of the error message.
ERROR_HINTS: tuple[ErrorHint, ...] = (
    ErrorHint(
        ("on tensors of dimension other than 2",),
        "`.T` reverses every dim of a tensor that is not 2-D: to swap the last two dims of a batch, "
        "use `k.transpose(-2, -1)`",
    ),
    ErrorHint(
        (BROADCAST,),
        "two tensors do not broadcast: compare their shapes on that line (dims are aligned from the "
        "right, and each pair must be equal or one of them 1). A reduction without `keepdim=True` "
        "drops its dim, so its result no longer lines up with the tensor it came from",
    ),
    ErrorHint(
        ("cannot be multiplied", "Expected size for first two dimensions of batch2"),
        "a matrix product of incompatible shapes: the last dim of the left factor must equal the "
        "second-to-last dim of the right one",
    ),
    ErrorHint(
        ("is invalid for input of size",),
        "a view or reshape asks for a different number of elements than the tensor has: compute the "
        "sizes from the input's own shape",
    ),
    ErrorHint(
        ("view size is not compatible with input tensor",),
        "`.view` needs contiguous memory, which a transpose breaks: use `.reshape`, or `.contiguous()` first",
    ),
    ErrorHint(
        ("Sizes of tensors must match except in dimension",),
        "`torch.cat` joins tensors along one dim and every other dim must match: check the dim you "
        "concatenate on (the one that grows; count it from the end, -1 is the last)",
    ),
    ErrorHint(
        ("Dimension out of range",), "a dim index beyond the tensor's number of dims: count dims from the end (-1, -2)"
    ),
    ErrorHint(
        ("only supports boolean masks",), "`masked_fill` needs a bool mask (True = may attend); do not convert it"
    ),
    ErrorHint(("expected a value of type",), "an argument has the wrong type for that torch call"),
)

_BROADCAST_HINT = ERROR_HINTS[1]

#: Added to the broadcast hint where the function takes a mask (and only there).
MASK_SENTENCE = "; and a mask must broadcast to the scores' shape as given, without being reshaped inside the function"


def failing_line(message: str) -> str:
    """The student's line quoted in an error message (:func:`describe_exception`), or ``""``."""
    m = re.search(r", in your line `(.*)`(?:, where |\. Hint: |$)", message)
    return m.group(1) if m else ""


def error_hint(message: str, hints: Sequence[ErrorHint] = (), mask: bool = False, source: str | None = None) -> str:
    """The hint for a student's error message, or ``""``: the first of ``hints`` (an exercise's
    own), :data:`LINE_HINTS` and :data:`ERROR_HINTS` whose phrase the message contains and whose
    ``line`` (if any) the failing line matches, or one of the statements of ``source`` (the
    student's function, when known) that assign an operand of the failing line that the
    message says has three dims or more (``kt = k.T`` behind ``q @ kt``: :func:`operand_sources`).
    The broadcast hint speaks of masks only when ``mask`` (the function takes one)."""
    line = failing_line(message)
    lines = [line, *operand_sources(line, source, message)]
    for h in (*hints, *LINE_HINTS, *ERROR_HINTS):
        if any(p in message for p in h.phrases) and (not h.line or any(re.search(h.line, x) for x in lines)):
            return h.hint + (MASK_SENTENCE if mask and h is _BROADCAST_HINT else "")
    return ""


def operand_sources(line: str, source: str | None, message: str) -> list[str]:
    """The statements of ``source`` that assign a name ``line`` reads, for the names that
    ``message`` describes as tensors of three dims or more (``, where `kt` is (4, 5, 2)
    float32``): what a line-chosen hint reads besides the failing line. ``[]`` when the source
    is unknown or does not parse."""
    batched = [n for n in line_names(line) if _dims(message, n) >= 3]
    if not source or not batched:
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found = []
    for node in ast.walk(tree):
        targets = {t.id for t in _assigned(node) if isinstance(t, ast.Name)}
        if targets & set(batched):
            found.append(ast.get_source_segment(source, node) or "")
    return found


def _assigned(node: ast.AST) -> list[ast.expr]:
    """The targets an assignment statement binds, tuples unpacked; ``[]`` for anything else."""
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    else:
        return []
    out: list[ast.expr] = []
    while targets:
        t = targets.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            targets.extend(t.elts)
        else:
            out.append(t)
    return out


def _dims(message: str, name: str) -> int:
    """The number of dims ``message``'s operand words give ``name`` (0 when it names none)."""
    m = re.search(rf"`{re.escape(name)}` is \(([\d, ]*)\) ", message)
    return len([d for d in m.group(1).split(",") if d.strip()]) if m else 0


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


def errors_of(results: Sequence[Any]) -> list[tuple[str, list[str]]]:
    """Each distinct error raised, in full as first raised, with the names of the tests it
    affects, in the order first seen; two errors that differ only in sizes are one. ``results``
    are :class:`TestResult` objects or their dicts (gradebook records; older records have no
    ``error``: their feedback holds it, on every test)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for r in results:
        d = _as_dict(r)
        error = d.get("error") or ""
        if error:
            found.setdefault(_error_kind(error), (error, []))[1].append(d["name"])
    return list(found.values())


def error_lines(results: Sequence[Any]) -> list[str]:
    """``Error (tests a, b): raised ..., in your line ..., where ... Hint: ...``: each error once,
    with the tests it affects."""
    lines = []
    for error, tests in errors_of(results):
        which = ", ".join(f"'{t}'" for t in tests)
        lines.append(f"Error ({'test' if len(tests) == 1 else 'tests'} {which}): {error}")
    return lines


def composition_lines(function: str, comp: Any, max_score: float) -> list[str]:
    """The feedback on a function graded with references standing in for its graded callees."""
    if comp is None:
        return []
    c = _as_dict(comp)
    callees = " and ".join(c["callees"])
    if c["status"] == "forbidden":  # the forbidden call was the callee's (:mod:`.charging`)
        return [
            f"The score above was measured with the reference {callees} in its place: your own "
            f"{callees} makes a forbidden call (itself or through a function it calls), which "
            "costs points once, where it is made."
        ]
    own = f"With your own {callees}, {function} scores {_points(c['score'])}/{_points(max_score)}"
    if c["failed"]:
        own += f" (failing {', '.join(repr(t) for t in c['failed'])})"
    return [
        f"{own}. The score above was measured with the reference {callees} in its place: "
        f"a mistake in {callees} costs points once, in {callees}'s own tests."
    ]
