"""The answers pages' forms read from a request: each bad value a ValueError naming the field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from werkzeug.datastructures import MultiDict

__all__ = ["GradeForm", "RubricForm", "number", "grade_form", "rubric_form"]


@dataclass(frozen=True)
class GradeForm:
    """A group's grade as posted (what a conflict keeps on the page).

    Args:
        group: the group's key.
        expected: each member's grade version the grade is based on.
        items: the rubric item ids applied.
        adjust: the adjustment as typed.
        comment: the comment to the students.
        seen: each member's answer as the grader read it (its digest); None when not posted.
    """

    group: str
    expected: dict[str, int]
    items: tuple[int, ...]
    adjust: str
    comment: str
    seen: dict[str, str] | None = None


@dataclass(frozen=True)
class RubricForm:
    """A question's rubric as posted.

    Args:
        max_points: as typed.
        rows: the items kept, ``(id or None, text, points as typed)``.
        expected: the setup's version it is based on.
    """

    max_points: str
    rows: tuple[tuple[int | None, str, str], ...]
    expected: int


def number(name: str, text: str, *, default: float | None = None) -> float:
    """A finite number typed in field ``name`` ("" is ``default`` when one is given)."""
    if not text.strip() and default is not None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {text!r}")
    return value


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: expected a whole number, got {text!r}") from None


def grade_form(form: MultiDict[str, str]) -> GradeForm:
    """The grade posted for a group (``group``, ``expected`` as JSON, ``item``s, ``adjust``, ``comment``,
    ``seen`` as JSON when posted)."""
    try:
        expected = json.loads(form.get("expected", ""))
    except ValueError:
        expected = None
    if (
        not isinstance(expected, dict)
        or not expected
        or not all(isinstance(k, str) and isinstance(v, int) for k, v in expected.items())
    ):
        raise ValueError(f"expected: the members' versions as a JSON object, got {form.get('expected', '')!r}")
    items = tuple(_integer("item", i) for i in form.getlist("item"))
    seen = _seen(form.get("seen"))
    return GradeForm(form.get("group", ""), expected, items, form.get("adjust", "0"), form.get("comment", ""), seen)


def _seen(raw: str | None) -> dict[str, str] | None:
    """The ``seen`` field: the members' answers as read, a JSON object of strings (None when absent)."""
    if raw is None:
        return None
    try:
        seen = json.loads(raw)
    except ValueError:
        seen = None
    if not isinstance(seen, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in seen.items()):
        raise ValueError(f"seen: the members' answers as read, a JSON object of strings, got {raw!r}")
    return seen


def rubric_form(form: MultiDict[str, str]) -> RubricForm:
    """The rubric posted: ``max_points``, rows of ``item_id``/``item_text``/``item_points``, the row
    numbers to ``remove``; a new row (no id) left blank is no item."""
    removed = set(form.getlist("remove"))
    rows = []
    columns = zip(form.getlist("item_id"), form.getlist("item_text"), form.getlist("item_points"), strict=False)
    for n, (item, text, points) in enumerate(columns):
        if str(n) in removed or (not item and not text.strip()):
            continue
        rows.append((_integer("item_id", item) if item else None, text, points))
    return RubricForm(form.get("max_points", ""), tuple(rows), _integer("expected", form.get("expected", "0")))
