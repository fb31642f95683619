"""A submission's history: every grading, resubmission, override and review resolution.

The gradebook's ``results`` table holds the newest grading of each (student, assignment); the
``events`` table, append-only, holds everything that ever happened to it, oldest first, each
grading with its whole record. What counts is the newest grading, adjusted by the newest
:class:`Adjustment` made since that notebook was first graded:

- ``override``: the instructor's score for the notebook (``course-lib override``);
- ``accepted`` / ``rejected``: a ``review`` record resolved (``course-lib resolve``);
- ``cleared``: the previous adjustment removed (``course-lib override --clear``).

A regrade of the same notebook (same hash: ``--force``, a new version of the checks) keeps
the adjustment, and its history line says so; a new notebook (a resubmission) is graded
afresh and the adjustment made to the old one no longer applies: its history line says which
adjustment was dropped, and ``grade`` prints a note naming the submission.

A gradebook written before the history existed is migrated in place when it is opened: each
stored grading becomes its first event (``graded``, by ``?``), in one transaction.
"""

from __future__ import annotations

import getpass
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["Adjustment", "Event", "EventKind", "EVENT_KINDS", "migrate", "current_adjustments", "now", "os_user"]

#: What an event can be: a first grading, a regrade of the same notebook, a new notebook, an
#: override, a review record accepted or rejected, an adjustment removed.
EventKind = Literal["graded", "regraded", "resubmitted", "override", "accepted", "rejected", "cleared"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
#: The kinds that adjust the score the grading gave (``cleared`` removes the adjustment).
ADJUSTING = ("override", "accepted", "rejected", "cleared")

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    student     TEXT NOT NULL,
    assignment  TEXT NOT NULL,
    at          TEXT NOT NULL,
    kind        TEXT NOT NULL,
    by          TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    status      TEXT NOT NULL,
    score       REAL NOT NULL,
    max_score   REAL NOT NULL,
    reason      TEXT NOT NULL,
    record      TEXT
)""",
    "CREATE INDEX IF NOT EXISTS events_of ON events (student, assignment, id)",
)
#: ``PRAGMA user_version`` of a gradebook with a history.
VERSION = 1


@dataclass(frozen=True)
class Adjustment:
    """An instructor's change to a grading's score, made to one notebook.

    Args:
        kind: ``override``, ``accepted`` or ``rejected``.
        points: the score that counts instead of the grading's.
        reason: why (the instructor's words; may be empty for ``accepted``).
        by: who made it.
        at: when (ISO 8601, UTC).
        sha256: the hash of the notebook it was made to.
    """

    kind: str
    points: float
    reason: str
    by: str
    at: str
    sha256: str

    def flag(self) -> str:
        """The adjustment as an export's flag: ``override: 30 points (regrade request)``."""
        why = f" ({self.reason})" if self.reason else ""
        if self.kind == "override":
            return f"override: {self.points:g} points{why}"
        return f"review {self.kind}: {self.points:g} points{why}"


@dataclass(frozen=True)
class Event:
    """One line of a submission's history.

    Args:
        id: its place in the gradebook's history (increasing).
        student: the student's id.
        assignment: the assignment's name.
        at: when (ISO 8601, UTC).
        kind: one of :data:`EVENT_KINDS`.
        by: who: the OS user who ran ``grade``, or ``--by``; ``?`` for a migrated grading.
        sha256: the notebook's hash (of the grading, or the one the adjustment was made to).
        status: the record's status at that point.
        score: a grading's score (after any late penalty), an adjustment's points; for
            ``cleared``, the grading's score that counts again.
        max_score: the assignment's points.
        reason: why, or what happened to an earlier adjustment.
    """

    id: int
    student: str
    assignment: str
    at: str
    kind: str
    by: str
    sha256: str
    status: str
    score: float
    max_score: float
    reason: str

    def line(self) -> str:
        """The event as one line of ``course-lib history``."""
        why = f": {self.reason}" if self.reason else ""
        return (
            f"{self.at}  {self.assignment}  {self.kind:<11}  {self.score:g} / {self.max_score:g}  "
            f"({self.status}, notebook {self.sha256[:10] or '-'})  by {self.by}{why}"
        )


def now() -> str:
    """The time now, ISO 8601 in UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def os_user() -> str:
    """The user running this process (``?`` when the system cannot say)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "?"


def migrate(conn: sqlite3.Connection) -> None:
    """Give a gradebook its history table; a gradebook without one gets an event per stored
    grading (kind ``graded``, by ``?``), all in one transaction (a second grader opening the
    same file waits, then finds it done)."""
    if conn.execute("PRAGMA user_version").fetchone()[0] >= VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] < VERSION:
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO events (student, assignment, at, kind, by, sha256, status, score, max_score, "
                "reason, record) SELECT student, assignment, graded_at, 'graded', '?', sha256, status, score, "
                "max_score, 'graded before the gradebook kept a history', record FROM results "
                "ORDER BY graded_at, student, assignment"
            )
            conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def current_adjustments(conn: sqlite3.Connection, student: str | None = None) -> dict[tuple[str, str], Adjustment]:
    """The adjustment that counts for each (student, assignment) that has one: the newest
    ``override``/``accepted``/``rejected`` event since the notebook was first graded (its
    ``resubmitted`` or first ``graded`` event), unless a ``cleared`` came after it."""
    where = "kind != 'regraded'" + ("" if student is None else " AND student = ?")
    args = () if student is None else (student,)
    current: dict[tuple[str, str], Adjustment] = {}
    rows = conn.execute(
        f"SELECT student, assignment, kind, score, reason, by, at, sha256 FROM events WHERE {where} ORDER BY id", args
    )
    for s, a, kind, score, reason, by, at, sha in rows:
        if kind in ("graded", "resubmitted", "cleared"):
            current.pop((s, a), None)
        elif kind in ("override", "accepted", "rejected"):
            current[(s, a)] = Adjustment(kind, float(score), reason, by, at, sha)
    return current


def record_event(
    conn: sqlite3.Connection,
    student: str,
    assignment: str,
    kind: EventKind,
    *,
    by: str,
    sha256: str,
    status: str,
    score: float,
    max_score: float,
    reason: str = "",
    record: dict | None = None,
) -> None:
    """Append one event (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO events (student, assignment, at, kind, by, sha256, status, score, max_score, reason, record) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            student,
            assignment,
            now(),
            kind,
            by,
            sha256,
            status,
            score,
            max_score,
            reason,
            None if record is None else json.dumps(record, sort_keys=True, ensure_ascii=False),
        ),
    )


def events(conn: sqlite3.Connection, student: str, assignment: str | None = None) -> list[Event]:
    """A student's events (of one assignment, or all), oldest first."""
    sql = "SELECT id, student, assignment, at, kind, by, sha256, status, score, max_score, reason FROM events "
    if assignment is None:
        rows = conn.execute(sql + "WHERE student = ? ORDER BY assignment, id", (student,))
    else:
        rows = conn.execute(sql + "WHERE student = ? AND assignment = ? ORDER BY id", (student, assignment))
    return [Event(*row) for row in rows]
