"""The operands of a student's failing line, in words: each plain name the line reads, with
its shape and dtype when it is a tensor (never its values: those are the hidden inputs).

``, where `q` is (2, 4, 8) float32 and `k` is (2, 6, 8) float32`` follows the line an error
report quotes (:func:`course_lib.grading.feedback.describe_exception`).

The same code runs on both sides: imported here (``check`` in a notebook), and in the
sandbox's worker, which may not import ``course_lib``, run from this file's source, which the
autograder hands it when it starts (``WatchLists.operands``; the worker's
``stubs.GraderModules``). So it imports only the standard library (a test checks): what reads
a tensor is passed in (``tensor_words``), so that each side uses torch's own C getters, taken
before any student code ran. Only dict look-ups, ``type()`` and
the lengths and slices of exact lists and tuples touch the student's objects: no method of
theirs is called. The text is feedback only; it never decides points.
"""

from __future__ import annotations

import io
import keyword
import tokenize
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["MAX_NAMES", "MAX_CHARS", "line_names", "value_words", "operand_words"]

#: At most this many names are described, in the order the line reads them.
MAX_NAMES = 6
#: The description's length, at most (it is cut with "...").
MAX_CHARS = 260
#: The items of a list or tuple described, at most.
MAX_ITEMS = 4

#: What a line names but is no operand: modules, functions, methods and classes.
_NOT_OPERANDS = (
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    type,
)

_type_name = type.__dict__["__name__"].__get__  # a class's own name, whatever its metaclass says

#: A tensor in words (``"(2, 4, 8) float32"``), or None when the value is no tensor.
TensorWords = Callable[[Any], "str | None"]


def line_names(line: str) -> list[str]:
    """The plain names a line of code reads, in order, each once: not attribute names (after a
    dot), keyword arguments or assignment targets (before a single ``=``), nor keywords. A line
    cut out of a longer statement is read as far as it goes."""
    names: list[str] = []
    before = ""  # the previous token's text
    pending = ""  # a name, unless the next token is "="
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line.strip()).readline):
            if pending and not (tok.type == tokenize.OP and tok.string == "="):
                names.append(pending)
            pending = ""
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) and before != ".":
                pending = tok.string
            before = tok.string
    except (tokenize.TokenError, SyntaxError):  # an unclosed bracket: the names so far
        pass
    if pending:
        names.append(pending)
    return list(dict.fromkeys(names))


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def value_words(value: Any, tensor_words: TensorWords, depth: int = 0) -> str | None:
    """A value in words: a tensor's shape and dtype (``tensor_words``), the items of a list or
    tuple (the first :data:`MAX_ITEMS`, one level deep), else its type's name; None for what is
    no operand (a module, function or class)."""
    words = tensor_words(value)
    if words is not None:
        return words
    t = type(value)
    if issubclass(t, _NOT_OPERANDS):
        return None
    if t is tuple or t is list:
        n = len(value)
        if depth > 0 or n == 0:
            return f"{_a(_type_name(t))} of {n} items"
        items = [value_words(v, tensor_words, depth + 1) or _a(_type_name(type(v))) for v in value[:MAX_ITEMS]]
        more = f", ... ({n} items)" if n > MAX_ITEMS else ""
        return f"{_a(_type_name(t))} of ({', '.join(items)}{more})"
    return _a(_type_name(t))


def operand_words(line: str, scopes: Sequence[Mapping[str, Any]], tensor_words: TensorWords) -> str:
    """``, where `q` is (2, 4, 8) float32 and `k` is ...``: the names ``line`` reads that one of
    ``scopes`` (the failing frame's locals, then its globals) holds, in words; ``""`` when none.
    At most :data:`MAX_NAMES` names and :data:`MAX_CHARS` characters."""
    parts: list[str] = []
    for name in line_names(line):
        for scope in scopes:
            if name in scope:
                words = value_words(scope[name], tensor_words)
                if words is not None:
                    parts.append(f"`{name}` is {words}")
                break
        if len(parts) == MAX_NAMES:
            break
    if not parts:
        return ""
    text = ", where " + (", ".join(parts[:-1]) + " and " if len(parts) > 1 else "") + parts[-1]
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."
