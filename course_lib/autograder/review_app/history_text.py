"""The history's decisions as sentences ("2 → 3 points; items: A, B; comment: …"), not JSON.

A decision keeps what was stored before and after it as JSON text
(:class:`~course_lib.autograder.manual.Decision`); :func:`describe` reads it back by the
decision's kind: a question's setup (its points and rubric items), a grade (points, the rubric
items applied, the adjustment, the comment), a grade cleared, a member split off or joined
again, a pair's verdict and note. The sentences are plain text: the page escapes them. No Flask
here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..manual import Decision

__all__ = ["describe", "item_texts"]

#: The longest comment or note quoted in a sentence (the rest is cut, marked by "…").
MAX_QUOTE = 200


def _load(text: str) -> Any:
    """The JSON of a decision's side (None for "" or text that is not JSON)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _num(x: Any, sign: str = "") -> str:
    """A number as the pages show it (``sign="+"``: with its sign), "?" for anything else."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "?"
    return f"{x:+g}" if sign else f"{x:g}"


def _quote(text: Any) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 1] + "…"


def _rubric(setup: Any) -> list[tuple[Any, str, Any]]:
    rows = setup.get("rubric") if isinstance(setup, dict) else None
    return [(r[0], str(r[1]), r[2]) for r in rows or () if isinstance(r, list) and len(r) == 3]


def item_texts(decisions: Iterable[Decision]) -> dict[int, str]:
    """Each rubric item's text, the newest the history has (items since removed included).

    Args:
        decisions: decisions, oldest first (those of other kinds are passed over).

    Returns:
        Item id -> text.
    """
    texts: dict[int, str] = {}
    for d in decisions:
        if d.kind == "question":
            for side in (d.before, d.after):
                for item, text, _ in _rubric(_load(side)):
                    if isinstance(item, int):
                        texts[item] = text
    return texts


def _changed(label: str, before: str | None, after: str) -> str:
    """``label: after``, or ``label: before → after`` when it changed."""
    return f"{label}: {after}" if before is None or before == after else f"{label}: {before} → {after}"


def _setup(before: Any, after: Any) -> str:
    """A question's setup: its points, then the rubric items added, removed and changed."""
    was = _num(before.get("max_points")) if isinstance(before, dict) else None
    now = _num(after.get("max_points")) if isinstance(after, dict) else "?"
    parts = [f"{was} → {now} points" if was is not None and was != now else f"{now} points"]
    old = {i: (t, p) for i, t, p in _rubric(before)}
    new = {i: (t, p) for i, t, p in _rubric(after)}
    shown = lambda tp: f"{tp[0]} ({_num(tp[1], '+')})"  # noqa: E731
    added = [shown(new[i]) for i in new if i not in old]
    removed = [shown(old[i]) for i in old if i not in new]
    edited = [f"{shown(old[i])} → {shown(new[i])}" for i in new if i in old and old[i] != new[i]]
    if added:
        parts.append(("items: " if before is None else "items added: ") + ", ".join(added))
    if removed:
        parts.append("items removed: " + ", ".join(removed))
    if edited:
        parts.append("items changed: " + ", ".join(edited))
    return "; ".join(parts)


def _grade_parts(grade: Any, texts: Mapping[int, str]) -> dict[str, str]:
    if not isinstance(grade, dict):
        return {}
    items = [texts.get(i, f"item {i}") for i in grade.get("items") or ()]
    return {
        "points": _num(grade.get("points")),
        "items": ", ".join(items) or "none",
        "adjustment": _num(grade.get("adjust"), "+"),
        "comment": _quote(grade.get("comment") or "") or "none",
    }


def _grade(before: Any, after: Any, texts: Mapping[int, str]) -> str:
    """A grade given (or cleared: ``after`` None): points, items, adjustment, comment."""
    old, new = _grade_parts(before, texts), _grade_parts(after, texts)
    if not new:
        return f"{old.get('points', '?')} points → not graded (the grade was cleared)"
    points = f"{old['points']} → {new['points']} points" if old else f"not graded → {new['points']} points"
    parts = [points, _changed("items", old.get("items"), new["items"])]
    if new["adjustment"] not in ("+0", "-0") or old.get("adjustment", "+0") not in ("+0", "-0"):
        parts.append(_changed("adjustment", old.get("adjustment"), new["adjustment"]))
    if new["comment"] != "none" or old.get("comment", "none") != "none":
        parts.append(_changed("comment", old.get("comment"), new["comment"]))
    return "; ".join(parts)


def _pair(before: Any, after: Any) -> str:
    """A pair's verdict and note."""
    was = before.get("verdict") if isinstance(before, dict) else None
    now = after.get("verdict", "?") if isinstance(after, dict) else "?"
    note = _quote(after.get("note") or "") if isinstance(after, dict) else ""
    verdict = f"{was} → {now}" if was and was != now else str(now)
    return f"{verdict}; note: {note}" if note else verdict


def describe(decision: Decision, texts: Mapping[int, str]) -> str:
    """One decision as a sentence of what changed.

    Args:
        decision: the decision (its kind, and its before and after as JSON text).
        texts: rubric item id -> text (:func:`item_texts`), to name the items a grade applied.

    Returns:
        Plain text (escape it to show it), e.g. ``2 → 3 points; items: A, B; comment: good``.
    """
    before, after = _load(decision.before), _load(decision.after)
    if decision.kind == "question":
        return _setup(before, after)
    if decision.kind in ("grade", "clear"):
        return _grade(before, after, texts)
    if decision.kind == "split":
        return "split off its group, graded apart"
    if decision.kind == "unsplit":
        return "joined its group again"
    if decision.kind == "pair":
        return _pair(before, after)
    return f"{decision.kind}: {decision.before or 'nothing'} → {decision.after or 'nothing'}"
