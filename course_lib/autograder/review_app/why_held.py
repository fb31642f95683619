"""Why a submission was held for review, read from its record's flags.

A ``review`` record (:func:`course_lib.autograder.autograde.grade_submission`) carries one
flag ``review: ...`` per reason. The static scan writes ``cell N, line L: uses X`` (``X`` a
dotted path, ``the attribute X``, ``X()``) or ``cell N, line L: X may stand for more than ...
paths``; the sandbox writes what broke its trust (``a frame out of sequence ...``), with no
cell. :func:`held_reasons` reads them; :func:`construct_lines` finds the construct in the
code the record kept (the graded functions' sources), which may not hold the flagged cell.
Nothing here trusts the text: the pages escape all of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["HeldReason", "held_reasons", "construct_lines"]

_WHERE = re.compile(r"cell (\d+)(?:, line (\d+))?: (.*)", re.S)
_USES = re.compile(r"uses (?:the attribute )?(.+?)(?:\(\))?", re.S)
_STANDS = re.compile(r"(\S+) may stand for more than", re.S)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class HeldReason:
    """One reason a submission was held.

    Args:
        text: the flag as recorded, without its ``review:`` prefix.
        cell: the notebook's code cell it names (1-based), None when the flag names none.
        line: the line in that cell, None when not named (0 from the scan: unknown).
        construct: the construct it names (``ctypes.pythonapi``, ``f_back``, ``eval``), None
            when the flag names none (a broken channel).
    """

    text: str
    cell: int | None
    line: int | None
    construct: str | None


def held_reasons(flags: Sequence[str]) -> list[HeldReason]:
    """The ``review:`` flags of a record as :class:`HeldReason` s, in order (other flags left out).

    Args:
        flags: the record's flags (``Record.flags``).

    Returns:
        One reason per ``review:`` flag.
    """
    out = []
    for flag in flags:
        if not flag.startswith("review:"):
            continue
        text = flag.removeprefix("review:").strip()
        cell = line = None
        rest = text.removeprefix("the notebook: ")
        where = _WHERE.fullmatch(text)
        if where:
            cell = int(where.group(1))
            line = int(where.group(2)) if where.group(2) and where.group(2) != "0" else None
            rest = where.group(3)
        uses = _USES.fullmatch(rest)
        stands = _STANDS.match(rest)
        construct = uses.group(1).strip() if uses else stands.group(1) if stands else None
        out.append(HeldReason(text, cell, line, construct or None))
    return out


def construct_lines(construct: str, sources: Mapping[str, str]) -> dict[str, list[int]]:
    """Where the code kept in the record mentions a construct's last name.

    Args:
        construct: what a flag names (``ctypes.pythonapi``: ``pythonapi`` is looked for).
        sources: graded function -> its source (``Record.sources``).

    Returns:
        Function -> the 1-based lines that have the name as a whole word (functions without it
        left out).
    """
    names = _NAME.findall(construct)
    if not names:
        return {}
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(names[-1])}(?![A-Za-z0-9_])")
    found = {}
    for function, source in sources.items():
        lines = [n for n, text in enumerate(str(source).split("\n"), 1) if word.search(text)]
        if lines:
            found[str(function)] = lines
    return found
