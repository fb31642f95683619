"""The manual grading store's tables and what it reads back: question setups, answer grades,
pair decisions and the append-only history of decisions.

Kept apart from :mod:`.manual` (the store's changes) so that the records' manual points
(:mod:`.manual_points`) read them without importing the writer. A gradebook made before the
store existed (``PRAGMA user_version`` 1) gets the tables when it is opened, in one
transaction (:func:`migrate`); nothing in it changes.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from .answer_images import answer_digest, record_answers
from .lookalike import REFERENCE

__all__ = [
    "AnswerChanged",
    "AnswerGrade",
    "Conflict",
    "Decision",
    "PairDecision",
    "QuestionSetup",
    "RubricItem",
    "Verdict",
    "VERDICTS",
    "VERSION",
    "answer_digests",
    "answer_target",
    "migrate",
    "pair_key",
    "pair_target",
]

#: ``PRAGMA user_version`` of a gradebook with the manual grading store.
VERSION = 2

#: A look-alike pair's decision: the pair copied (``confirmed``) or not (``dismissed``).
Verdict = Literal["confirmed", "dismissed"]
VERDICTS: tuple[str, ...] = get_args(Verdict)

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS manual_questions (
    assignment  TEXT NOT NULL,
    question    TEXT NOT NULL,
    max_points  REAL NOT NULL,
    version     INTEGER NOT NULL,
    PRIMARY KEY (assignment, question)
)""",
    """CREATE TABLE IF NOT EXISTS manual_rubric (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    assignment  TEXT NOT NULL,
    question    TEXT NOT NULL,
    position    INTEGER NOT NULL,
    text        TEXT NOT NULL,
    points      REAL NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS manual_rubric_of ON manual_rubric (assignment, question, position)",
    """CREATE TABLE IF NOT EXISTS manual_grades (
    assignment  TEXT NOT NULL,
    question    TEXT NOT NULL,
    student     TEXT NOT NULL,
    items       TEXT NOT NULL,
    adjust      REAL NOT NULL,
    comment     TEXT NOT NULL,
    by          TEXT NOT NULL,
    at          TEXT NOT NULL,
    version     INTEGER NOT NULL,
    answer      TEXT NOT NULL,
    PRIMARY KEY (assignment, question, student)
)""",
    """CREATE TABLE IF NOT EXISTS manual_splits (
    assignment  TEXT NOT NULL,
    question    TEXT NOT NULL,
    student     TEXT NOT NULL,
    PRIMARY KEY (assignment, question, student)
)""",
    """CREATE TABLE IF NOT EXISTS manual_pairs (
    assignment  TEXT NOT NULL,
    a           TEXT NOT NULL,
    b           TEXT NOT NULL,
    verdict     TEXT NOT NULL,
    note        TEXT NOT NULL,
    by          TEXT NOT NULL,
    at          TEXT NOT NULL,
    version     INTEGER NOT NULL,
    PRIMARY KEY (assignment, a, b)
)""",
    # student / other: the students a decision is about (for a student's history), not shown
    """CREATE TABLE IF NOT EXISTS decisions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    by          TEXT NOT NULL,
    kind        TEXT NOT NULL,
    assignment  TEXT NOT NULL,
    target      TEXT NOT NULL,
    before      TEXT NOT NULL,
    after       TEXT NOT NULL,
    reason      TEXT NOT NULL,
    student     TEXT,
    other       TEXT
)""",
    "CREATE INDEX IF NOT EXISTS decisions_of ON decisions (assignment, target, id)",
    "CREATE INDEX IF NOT EXISTS decisions_student ON decisions (student)",
    "CREATE INDEX IF NOT EXISTS decisions_other ON decisions (other)",
)


@dataclass(frozen=True)
class RubricItem:
    """One rubric item of a question graded by hand.

    Args:
        id: unique in the gradebook, stable across edits of the rubric.
        text: what it says (Markdown).
        points: its points; negative for a deduction.
    """

    id: int
    text: str
    points: float


@dataclass(frozen=True)
class QuestionSetup:
    """How a question is graded by hand.

    Args:
        assignment: the assignment's name.
        question: the question's id.
        max_points: its points; 0 when it is not graded by hand.
        rubric: its rubric items, in order.
        version: the id of the last decision on this setup, 0 when none.
    """

    assignment: str
    question: str
    max_points: float
    rubric: tuple[RubricItem, ...]
    version: int


@dataclass(frozen=True)
class AnswerGrade:
    """A grader's points for one student's answer to one question.

    Args:
        assignment: the assignment's name.
        question: the question's id.
        student: the student's id.
        items: the ids of the rubric items applied (items since deleted are dropped on read).
        adjust: points added (may be negative).
        comment: to the student (Markdown).
        points: ``min(max(sum of the items' points + adjust, 0), max_points)``, computed on read.
        by: the grader.
        at: when (ISO 8601, UTC).
        version: the id of the last decision on this answer.
        answer: the digest of the answer it was given to (:func:`.answer_images.answer_digest`):
            when the record's answer has another, the grade is pending (the answer changed).
    """

    assignment: str
    question: str
    student: str
    items: tuple[int, ...]
    adjust: float
    comment: str
    points: float
    by: str
    at: str
    version: int
    answer: str = ""

    def changed(self, digest: str) -> bool:
        """Whether the answer now (its ``digest``) is not the one this grade was given to."""
        return digest != self.answer

    def stale_note(self) -> str:
        """``answer changed since graded by lee on 2026-11-27``."""
        return f"answer changed since graded by {self.by} on {self.at[:10]}"


@dataclass(frozen=True)
class PairDecision:
    """A grader's decision on a look-alike pair.

    Args:
        assignment: the assignment's name.
        a: the first student (``(a, b)`` sorted; a student before the reference: :func:`pair_key`).
        b: the second student, or :data:`.lookalike.REFERENCE`.
        verdict: ``confirmed`` or ``dismissed``.
        note: the grader's note (required to confirm).
        by: the grader.
        at: when (ISO 8601, UTC).
        version: the id of the last decision on this pair.
    """

    assignment: str
    a: str
    b: str
    verdict: Verdict
    note: str
    by: str
    at: str
    version: int


@dataclass(frozen=True)
class Decision:
    """One line of the manual grading history.

    Args:
        id: its place in the history (increasing); the version of what it changed.
        at: when (ISO 8601, UTC).
        by: the grader.
        kind: ``question``, ``grade``, ``clear``, ``split``, ``unsplit`` or ``pair``.
        assignment: the assignment's name.
        target: what it changed: the question's id, :func:`answer_target` or :func:`pair_target`.
        before: what was stored before, as JSON text ("" when nothing).
        after: what is stored after, as JSON text ("" when nothing).
        reason: why (the grader's words; may be empty).
    """

    id: int
    at: str
    by: str
    kind: str
    assignment: str
    target: str
    before: str
    after: str
    reason: str

    def summary(self) -> str:
        """What the decision did, in words: ``3 / 4 points``, ``grade removed``, ``confirmed``."""
        after = json.loads(self.after) if self.after else None
        if self.kind == "grade" and after:
            comment = " ".join(str(after.get("comment", "")).split())
            said = f', comment "{comment[:60]}{"..." if len(comment) > 60 else ""}"' if comment else ""
            return f"{after['points']:g} points given by hand{said}"
        if self.kind == "question" and after:
            return f"{after['max_points']:g} points, {len(after['rubric'])} rubric item(s)"
        if self.kind == "pair" and after:
            return str(after["verdict"])
        return {"clear": "grade removed", "split": "split off its answer group", "unsplit": "back in its group"}.get(
            self.kind, self.kind
        )

    def line(self) -> str:
        """The decision as one line of ``course-lib history``."""
        why = f": {self.reason}" if self.reason else ""
        return (
            f"{self.at}  {self.assignment}  manual {self.kind:<8}  {self.target}  {self.summary()}  by {self.by}{why}"
        )


class Conflict(Exception):
    """A save based on a stale version: someone saved first; nothing was saved.

    Args:
        what: what the save would have changed (``question ch02-q1 of 02_self_attention``).
        current: what is stored now (a QuestionSetup, AnswerGrade, PairDecision, or None).
        by: who made the change the save did not know of.
        at: when (ISO 8601, UTC).
        expected: the version the save was based on.
        version: the version stored now.
    """

    def __init__(self, what: str, current: Any, by: str, at: str, expected: int, version: int):
        self.what, self.current, self.by, self.at = what, current, by, at
        self.expected, self.version = expected, version
        super().__init__(
            f"{what} was changed by {by} at {at} since you read it (version {version}, yours {expected}); "
            "nothing was saved: reload it and decide again"
        )


class AnswerChanged(Conflict):
    """A grade based on answers that changed since the grader read them (a student handed in a
    new notebook meanwhile); nothing was saved.

    Args:
        what: whose answers (``the answer of ann to ch02-q1 of 02_self_attention``).
        students: the students whose answer changed.
        at: when the newest of their new notebooks was graded (ISO 8601, UTC).
    """

    def __init__(self, what: str, students: tuple[str, ...], at: str):
        Exception.__init__(
            self,
            f"{what} changed since you read it (a new notebook, graded at {at}); nothing was saved: "
            "read the answer as it is now and grade it again",
        )
        self.what, self.current, self.by, self.at = what, None, ", ".join(students), at
        self.expected = self.version = 0
        self.students = students


def check_seen(
    conn: sqlite3.Connection, assignment: str, question: str, seen: Mapping[str, str] | None, now: Mapping[str, str]
) -> None:
    """Raise :class:`AnswerChanged` when an answer's digest ``now`` is not the one the grader
    read (``seen``, by student; None: not checked; inside the caller's transaction)."""
    if seen is None:
        return
    changed = tuple(s for s in now if seen[s] != now[s])
    if not changed:
        return
    marks = ", ".join("?" * len(changed))
    (at,) = conn.execute(
        f"SELECT MAX(graded_at) FROM results WHERE assignment = ? AND student IN ({marks})", (assignment, *changed)
    ).fetchone()
    raise AnswerChanged(f"the answer of {', '.join(changed)} to {question} of {assignment}", changed, str(at))


def as_json(data: Any) -> str:
    """A decision's ``before`` or ``after``: JSON text, "" for nothing."""
    return "" if data is None else json.dumps(data, sort_keys=True, ensure_ascii=False)


def text_arg(name: str, value: Any, *, required: bool = False) -> str:
    """``value``, or a ValueError naming ``name`` when it is not a string (or, ``required``, blank)."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    if required and not value.strip():
        raise ValueError(f"{name} must not be empty, got {value!r}")
    return value


def setup_json(setup: QuestionSetup) -> dict[str, Any]:
    """A setup as the history keeps it."""
    return {"max_points": setup.max_points, "rubric": [[i.id, i.text, i.points] for i in setup.rubric]}


def grade_json(grade: AnswerGrade | None) -> dict[str, Any] | None:
    """A grade as the history keeps it (None for no grade)."""
    if grade is None:
        return None
    return {
        "items": list(grade.items),
        "adjust": grade.adjust,
        "comment": grade.comment,
        "points": grade.points,
        "answer": grade.answer,
    }


def require_records(conn: sqlite3.Connection, assignment: str, students: Sequence[str], name: str = "students") -> None:
    """A ValueError naming ``name`` and the students of ``students`` with no record of ``assignment``."""
    marks = ", ".join("?" * len(students))
    rows = conn.execute(
        f"SELECT student FROM results WHERE assignment = ? AND student IN ({marks})", (assignment, *students)
    )
    found = {s for (s,) in rows}
    missing = [s for s in students if s not in found]
    if missing:
        raise ValueError(f"{name}: no record of {assignment!r} in the gradebook for {', '.join(map(repr, missing))}")


def answer_digests(conn: sqlite3.Connection, assignment: str, question: str, students: Sequence[str]) -> dict[str, str]:
    """The digest (:func:`.answer_images.answer_digest`) of each student's answer to ``question``
    in their record of ``assignment`` now (a student without a record left out)."""
    marks = ", ".join("?" * len(students))
    rows = conn.execute(
        f"SELECT student, json_extract(record, '$.answers') FROM results WHERE assignment = ? AND student IN ({marks})",
        (assignment, *students),
    )
    found = {}
    for student, raw in rows:
        text, attachments = record_answers(json.loads(raw) if raw else ()).get(question, ("", {}))
        found[student] = answer_digest(text, attachments)
    return found


def version_arg(name: str, value: Any) -> int:
    """A version (the id of a decision, 0 for none), or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a version (an integer >= 0, 0 when nothing was stored), got {value!r}")
    return value


def item_id(name: str, value: Any) -> int:
    """A rubric item's id, or a ValueError naming ``name`` when it is not an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a rubric item's id (an integer), got {value!r}")
    return value


def answer_target(question: str, student: str) -> str:
    """The history's target of one student's answer: ``question/student``."""
    return f"{question}/{student}"


def pair_key(a: str, b: str) -> tuple[str, str]:
    """A look-alike pair as the store keeps it: the two students sorted, or the student then
    :data:`.lookalike.REFERENCE` (as :mod:`.lookalike` pairs them)."""
    if a == REFERENCE or b == REFERENCE:
        return (b, a) if a == REFERENCE else (a, b)
    first, second = sorted((a, b))
    return first, second


def pair_target(a: str, b: str) -> str:
    """The history's target of a look-alike pair: ``a ~ b``, in :func:`pair_key`'s order."""
    first, second = pair_key(a, b)
    return f"{first} ~ {second}"


def migrate(conn: sqlite3.Connection) -> None:
    """Give a gradebook (``user_version`` 1, with its history) the manual grading tables, in one
    transaction (a second grader opening the same file waits, then finds it done)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < VERSION:
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def rubrics(conn: sqlite3.Connection, assignment: str | None = None) -> dict[tuple[str, str], list[RubricItem]]:
    """Every question's rubric items in order, by (assignment, question) (of one assignment, or all)."""
    sql = "SELECT assignment, question, id, text, points FROM manual_rubric"
    rows = conn.execute(
        sql + (" ORDER BY position" if assignment is None else " WHERE assignment = ? ORDER BY position"),
        () if assignment is None else (assignment,),
    )
    found: dict[tuple[str, str], list[RubricItem]] = {}
    for a, q, item, text, points in rows:
        found.setdefault((a, q), []).append(RubricItem(item, text, points))
    return found


def grade_points(items: tuple[RubricItem, ...], applied: tuple[int, ...], adjust: float, max_points: float) -> float:
    """An answer's points: its items' points plus ``adjust``, between 0 and ``max_points``."""
    points = {item.id: item.points for item in items}
    total = sum(points[i] for i in applied if i in points) + adjust
    return float(min(max(total, 0.0), max_points))


def finite(name: str, value: float) -> float:
    """``value`` as a float, or a ValueError naming ``name`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)
