"""Text that came from a submission, made safe to store, show and export.

A student controls exception messages, printed output and file names, so every such string
is treated as data: made valid UTF-8 (a lone surrogate would make SQLite or a file write
fail), shortened, stripped of long runs of numbers (an exception message can carry the hidden
inputs), and escaped for the format it goes into (Markdown, HTML, a CSV cell).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["valid_utf8", "clean_record", "student_message", "operand_message", "markdown_escape", "csv_cell"]

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf)"
#: Four or more numbers in a row (separated by commas, spaces, brackets): tensor contents.
_NUMBER_RUN = re.compile(rf"(?:{_NUMBER}[\s,;\[\]()]*){{4,}}", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u2028\u2029]")


def valid_utf8(s: Any) -> str:
    """``s`` as a string that encodes to UTF-8 (lone surrogates and the like become U+FFFD)."""
    if not isinstance(s, str):
        s = "" if s is None else str(s)
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def clean_record(value: Any) -> Any:
    """Every string in a JSON-like value (dict keys included) made valid UTF-8."""
    if isinstance(value, str):
        return valid_utf8(value)
    if isinstance(value, dict):
        return {valid_utf8(k): clean_record(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_record(v) for v in value]
    return value


def student_message(s: Any, limit: int = 300) -> str:
    """A message from student code, fit for feedback: one line, valid UTF-8, no control
    characters, runs of four or more numbers replaced by "...", at most ``limit`` characters."""
    s = _CONTROL.sub(" ", valid_utf8(s))
    s = _NUMBER_RUN.sub("... ", s)
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


#: A tensor's shape and dtype as the worker words an operand (``(2, 1, 16, 24) float32``): sizes only.
_SHAPE_AND_DTYPE = re.compile(
    r"\((?:\d{1,9}(?:, \d{1,9}){0,7})?\) (?:bool|u?int\d{1,2}|b?float\d{1,2}|complex\d{2,3})\b"
)


def operand_message(s: Any, limit: int = 300) -> str:
    """The worker's words for the operands of a student's failing line (``, where `q` is
    (2, 1, 16, 24) float32 and ...``), fit for feedback: as :func:`student_message`, except
    that a shape followed by its dtype keeps its sizes, however many; ``""`` for anything
    that does not start as those words do."""
    s = " ".join(_CONTROL.sub(" ", valid_utf8(s)).split())
    if not s.startswith(", where `"):
        return ""
    parts, last = [], 0
    for m in _SHAPE_AND_DTYPE.finditer(s):
        parts += [_NUMBER_RUN.sub("... ", s[last : m.start()]), m.group()]
        last = m.end()
    s = "".join([*parts, _NUMBER_RUN.sub("... ", s[last:])])
    return s if len(s) <= limit else s[: limit - 3] + "..."


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~])")


def markdown_escape(s: Any) -> str:
    """Text shown literally in Markdown: one line, every Markdown and HTML character escaped."""
    s = " ".join(_CONTROL.sub(" ", valid_utf8(s)).split())
    return _MD_SPECIAL.sub(r"\\\1", s)


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not run: text starting with ``= + - @`` (or a tab or a
    carriage return) gets a leading apostrophe; numbers are left as they are."""
    if not isinstance(value, str):
        return value
    value = valid_utf8(value)
    if value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
