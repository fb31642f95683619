"""The class report's numbers: the gradebook read once, per assignment, as plain data.

Every number of the report comes from here or from :mod:`.items`, :mod:`.answers` and
:mod:`.pairs`, and is written unchanged to ``data.json`` (the keys are documented in
:mod:`course_lib.autograder.class_report`). Scores are over every record of an assignment; named
mistakes and items are over its *graded* records (status ``graded``), the class.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...grading.registry import ASSIGNMENTS
from ..gradebook import Gradebook
from ..record import STATUSES, Record

__all__ = [
    "ClassData",
    "Row",
    "load",
    "functions_of",
    "score_summary",
    "mistakes",
    "explained",
    "page_name",
    "ReportError",
]

#: One submission: (student id, its record).
Row = tuple[str, Record]


class ReportError(ValueError):
    """The report cannot be made (a missing gradebook or notebook); the message says why."""


@dataclass
class ClassData:
    """The gradebook's records grouped by assignment (course order), each sorted by student."""

    assignments: dict[str, list[Row]] = field(default_factory=dict)
    records: int = 0
    without_sources: int = 0  # records graded before the record carried the functions' sources
    without_answers: int = 0  # ... and the "think about it" answers


def load(db: str | Path) -> ClassData:
    """Read every record of the gradebook at ``db``.

    Raises:
        ReportError: ``db`` is not a file.
    """
    if not Path(db).is_file():
        raise ReportError(f"--db: no gradebook at {db}")
    data = ClassData()
    groups: dict[str, list[Row]] = {}
    with Gradebook(db) as book:
        for student, record in book.rows():
            groups.setdefault(record.assignment, []).append((student, record))
            data.records += 1
            data.without_sources += "sources" in record.absent
            data.without_answers += "answers" in record.absent
    order = [a for a in ASSIGNMENTS if a in groups] + sorted(a for a in groups if a not in ASSIGNMENTS)
    data.assignments = {a: sorted(groups[a], key=lambda row: row[0]) for a in order}
    return data


def page_name(assignment: str, index: int) -> str:
    """The page's file stem: the assignment's own name when it is one of the course's, never text
    from a record otherwise."""
    return assignment if assignment in ASSIGNMENTS else f"assignment-{index + 1}"


def functions_of(assignment: str, rows: list[Row]) -> list[str]:
    """The graded functions of ``assignment``, in notebook order."""
    if assignment in ASSIGNMENTS:
        return list(ASSIGNMENTS[assignment])
    seen: dict[str, None] = {}
    for _, record in rows:
        for fr in record.functions:
            seen.setdefault(str(fr.get("function", "")), None)
    return list(seen)


def graded(rows: list[Row]) -> list[Row]:
    """The records that count as the class: status ``graded``."""
    return [(s, r) for s, r in rows if r.status == "graded"]


def _histogram(scores: list[float], max_score: float) -> dict[str, list[float]]:
    top = max([max_score, *scores, 1.0])
    bins = int(min(20, max(1, round(top))))
    counts, edges = np.histogram(np.asarray(scores, dtype=float), bins=bins, range=(0.0, top))
    return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def score_summary(rows: list[Row]) -> dict[str, Any]:
    """Scores of every record of one assignment: count, mean, median, full marks, zero, status
    counts (every status of :data:`~course_lib.autograder.record.STATUSES`), late records and
    a histogram (``edges``, ``counts``). Mean and median are None with no records."""
    scores = [float(r.score) for _, r in rows]
    max_score = max((float(r.points_possible) for _, r in rows), default=0.0)
    statuses = Counter(str(r.status) for _, r in rows)
    return {
        "records": len(rows),
        "max_score": max_score,
        "mean": statistics.fmean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "full_marks": sum(1 for _, r in rows if r.points_possible > 0 and r.score >= r.points_possible),
        "zero": sum(1 for s in scores if s == 0),
        "statuses": {s: statuses.get(s, 0) for s in STATUSES}
        | {s: n for s, n in statuses.items() if s not in STATUSES},
        "late": sum(1 for _, r in rows if r.late is not None),
        "histogram": _histogram(scores, max_score),
    }


def _function(record: Record, name: str) -> dict[str, Any] | None:
    for fr in record.functions:
        if fr.get("function") == name:
            return fr
    return None


def explained(fr: dict[str, Any], function: str) -> dict[str, list[str]]:
    """One student's named mistakes of one function, each with the tests it explains, one
    mistake per explanation, by the grader's own rule (:func:`course_lib.grading.judging._diagnose`,
    so a record graded before that rule counts as a new one would): a mistake is left out when
    another explains every test it explains and more (it matches less well), or when one seen
    before it explains exactly the same tests (the outputs cannot tell the two apart, as a
    ``-1e9`` fill that both the -1e9 and the -1e4 mistakes explain). So the one kept is the one
    that explains the most tests, then the first in the exercise's order (the order of a
    result's ``diagnoses``); the others are not listed with it. An in-place change (``your f
    changed its ...``) is another kind of mistake: always kept, never merged.

    Args:
        fr: the function's report in a record (``Report.to_dict()``).
        function: the graded function's name.

    Returns:
        Mistake -> the names of the tests it explains, in the order first seen.
    """
    where: dict[str, list[str]] = {}
    for res in fr.get("results", []):
        for text in res.get("diagnoses") or []:
            where.setdefault(str(text), []).append(str(res.get("name", "")))
    inplace = f"your {function} changed its "
    values = {m: frozenset(t) for m, t in where.items() if not m.startswith(inplace)}
    kept: list[frozenset[str]] = []
    out = {}
    for m, tests in where.items():
        if m in values:
            if any(values[m] < other for other in values.values()) or values[m] in kept:
                continue
            kept.append(values[m])
        out[m] = tests
    return out


def _tally(
    named: dict[str, dict[str, Any]], unknown: dict[str, list[str]], student: str, fr: dict[str, Any], function: str
) -> None:
    """Add one student's report of ``function`` to the named mistakes and the unrecognised failures."""
    counted = explained(fr, function)
    for res in fr.get("results", []):
        for text in res.get("diagnoses") or []:
            if text not in counted:
                continue
            entry = named.setdefault(text, {"students": {}, "tests": {}, "feedback": Counter()})
            entry["students"][student] = None
            entry["tests"][str(res.get("name", ""))] = None
            if res.get("feedback"):
                entry["feedback"][str(res["feedback"])] += 1
        failed = not res.get("passed") and not res.get("withheld") and not res.get("diagnoses")
        if failed and fr.get("status") == "failed":
            students = unknown.setdefault(str(res.get("name", "")), [])
            if not students or students[-1] != student:
                students.append(student)


def mistakes(rows: list[Row], functions: list[str]) -> list[dict[str, Any]]:
    """Per graded function, what the class (its graded records) got wrong.

    A student is counted once per mistake the feedback names: two named mistakes that explain
    the same failed tests of the student's function count as the one kept by :func:`explained`.

    Returns:
        One dict per function: ``function``, ``statuses`` (students per function status),
        ``named`` (each named mistake: ``mistake``, ``count`` of students, ``share`` of the class,
        ``students``, ``tests`` it was seen on, ``feedback``: the test feedback shown with it
        most often), most students first, and ``unrecognised`` (per test, the students who failed
        it with no named mistake: ``test``, ``count``, ``share``, ``students``).
    """
    cls = graded(rows)
    size = len(cls)
    out = []
    for name in functions:
        named: dict[str, dict[str, Any]] = {}
        unknown: dict[str, list[str]] = {}
        status: Counter[str] = Counter()
        for student, record in cls:
            fr = _function(record, name)
            if fr is None:
                continue
            status[str(fr.get("status", ""))] += 1
            _tally(named, unknown, student, fr, name)
        ranked = sorted(named.items(), key=lambda kv: (-len(kv[1]["students"]), kv[0]))
        out.append(
            {
                "function": name,
                "statuses": dict(sorted(status.items())),
                "named": [
                    {
                        "mistake": text,
                        "count": len(e["students"]),
                        "share": len(e["students"]) / size if size else 0.0,
                        "students": list(e["students"]),
                        "tests": list(e["tests"]),
                        "feedback": e["feedback"].most_common(1)[0][0] if e["feedback"] else "",
                    }
                    for text, e in ranked
                ],
                "unrecognised": [
                    {"test": test, "count": len(s), "share": len(s) / size if size else 0.0, "students": s}
                    for test, s in sorted(unknown.items(), key=lambda kv: (-len(kv[1]), kv[0]))
                ],
            }
        )
    return out
