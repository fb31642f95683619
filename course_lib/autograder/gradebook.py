"""The gradebook: one SQLite row per (student, assignment), written in one transaction.

WAL journal mode, so a grader killed at any moment (SIGKILL included) leaves every
committed row intact and no half-written one; the primary key makes a second grading of
the same submission replace the first instead of adding a duplicate. Every grading is also
appended to the ``events`` table, with the overrides and review resolutions that adjust its
score (:mod:`.history`): the records read back carry the adjustment that counts.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from .history import (
    ADJUSTING,
    Adjustment,
    Event,
    EventKind,
    current_adjustments,
    events,
    migrate,
    os_user,
    record_event,
)
from .manual import Conflict, ManualStore
from .manual_points import ManualTables, manual_points
from .manual_schema import migrate as migrate_manual
from .record import Record
from .untrusted_text import valid_utf8

__all__ = ["Gradebook"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    student     TEXT NOT NULL,
    assignment  TEXT NOT NULL,
    sha256      TEXT NOT NULL,
    checker     TEXT NOT NULL,
    status      TEXT NOT NULL,
    score       REAL NOT NULL,
    max_score   REAL NOT NULL,
    record      TEXT NOT NULL,
    seconds     REAL NOT NULL,
    graded_at   TEXT NOT NULL,
    PRIMARY KEY (student, assignment)
);
"""

#: The late penalty per assignment (:class:`course_lib.autograder.deadlines.LatePolicy` as JSON).
_DEADLINES = "CREATE TABLE IF NOT EXISTS deadlines (assignment TEXT PRIMARY KEY, policy TEXT NOT NULL)"


class Gradebook:
    """A SQLite gradebook at ``path`` (created if missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(_SCHEMA)
        self.conn.execute(_DEADLINES)
        migrate(self.conn)
        migrate_manual(self.conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Gradebook:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def manual(self) -> ManualStore:
        """The manual grading store (:mod:`.manual`) on this gradebook's connection."""
        return ManualStore(self.conn)

    def is_current(self, student: str, assignment: str, sha256: str, checker: str) -> bool:
        """True when this exact notebook was already graded by this version of the checks (a
        record of the grader's own failure, status ``error``, is never current)."""
        row = self.conn.execute(
            "SELECT sha256, checker, status FROM results WHERE student = ? AND assignment = ?", (student, assignment)
        ).fetchone()
        return row is not None and row[0] == sha256 and row[1] == checker and row[2] != "error"

    def save(
        self, student: str, record: Record, checker: str, seconds: float, by: str | None = None
    ) -> Adjustment | None:
        """Store one graded submission, replacing an earlier grading, and append it to the
        history (``graded``, ``regraded`` for the same notebook, ``resubmitted`` for a new
        one; ``by`` defaults to the OS user), in one transaction. The student id is made valid
        UTF-8 first, as the record's strings were when it was made (a lone surrogate would make
        SQLite refuse the row).

        Returns:
            The adjustment made to the previous notebook that this new one drops (None when
            nothing was dropped).
        """
        student = valid_utf8(student)
        record = replace(record, adjustment=None, manual=None)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        values = (
            student,
            record.assignment,
            record.sha256,
            checker,
            record.status,
            record.graded_score,
            record.max_score,
            _json(record),
            seconds,
            at,
        )
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            kind, reason, dropped = self._grading_kind(student, record)
            self.conn.execute(
                "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (student, assignment) DO UPDATE SET sha256 = excluded.sha256, "
                "checker = excluded.checker, status = excluded.status, score = excluded.score, "
                "max_score = excluded.max_score, record = excluded.record, seconds = excluded.seconds, "
                "graded_at = excluded.graded_at",
                values,
            )
            record_event(
                self.conn,
                student,
                record.assignment,
                kind,
                by=by or os_user(),
                sha256=record.sha256,
                status=record.status,
                score=record.graded_score,
                max_score=record.max_score,
                reason=reason,
                record=record.to_json(),
            )
            self.conn.execute("COMMIT")
        except BaseException:
            # an interrupt (SIGTERM, Ctrl-C) can land just after COMMIT: nothing to roll back, and
            # a ROLLBACK then would raise in place of the interrupt
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return dropped

    def _grading_kind(self, student: str, record: Record) -> tuple[EventKind, str, Adjustment | None]:
        """A new grading's history kind, what it does to the adjustment that counted (and to the
        hand grades of answers it changed), and the adjustment it drops (a new notebook's)."""
        row = self.conn.execute(
            "SELECT sha256 FROM results WHERE student = ? AND assignment = ?", (student, record.assignment)
        ).fetchone()
        if row is None:
            return "graded", "", None
        adjustment = current_adjustments(self.conn, student).get((student, record.assignment))
        if row[0] == record.sha256:
            kept = f"same notebook; still counts: {adjustment.flag()}" if adjustment else "same notebook"
            return "regraded", kept, None
        manual = manual_points(
            ManualTables.read(self.conn, student, record.assignment), student, record.assignment, record.answers
        )
        changed = [q.question for q in manual.questions if q.changed] if manual else []
        by_hand = f"; answers changed since graded by hand, pending again: {', '.join(changed)}" if changed else ""
        if adjustment is None:
            return "resubmitted", "a new notebook" + by_hand, None
        dropped = f"a new notebook; made to the previous one, no longer counts: {adjustment.flag()}"
        return "resubmitted", dropped + by_hand, adjustment

    def adjust(
        self,
        student: str,
        record: Record,
        kind: EventKind,
        points: float,
        reason: str,
        by: str,
        expected: int | None = None,
    ) -> None:
        """Append an adjustment (``override``, ``accepted``, ``rejected``, ``cleared``) of
        ``record``, the stored grading of ``student`` (validated by the caller).

        Args:
            student: the student's id.
            record: their stored record.
            kind: the adjustment's kind.
            points: the score that counts (``cleared``: the grading's).
            reason: why.
            by: who.
            expected: the submission's newest event (:meth:`last_event`) the adjustment is
                based on; None: not checked.

        Raises:
            Conflict: ``expected`` is given and another event came since (nothing is saved).
        """
        if kind not in ADJUSTING:
            raise ValueError(f"adjust: kind must be one of {', '.join(ADJUSTING)}, got {kind!r}")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if expected is not None:
                self._check_event(valid_utf8(student), record.assignment, expected)
            record_event(
                self.conn,
                valid_utf8(student),
                record.assignment,
                kind,
                by=by,
                sha256=record.sha256,
                status=record.status,
                score=points,
                max_score=record.max_score,
                reason=reason,
            )
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def last_event(self, student: str, assignment: str) -> int:
        """The id of the newest event of a submission (0 when it has none): the version an
        instructor's adjustment is based on (``expected`` of :meth:`adjust`)."""
        row = self.conn.execute(
            "SELECT MAX(id) FROM events WHERE student = ? AND assignment = ?", (valid_utf8(student), assignment)
        ).fetchone()
        return int(row[0] or 0)

    def _check_event(self, student: str, assignment: str, expected: int) -> None:
        """A Conflict (with the record as it counts now) when the submission's newest event is
        not ``expected`` (inside the caller's transaction)."""
        version = self.last_event(student, assignment)
        if version == expected:
            return
        row = self.conn.execute("SELECT by, at FROM events WHERE id = ?", (version,)).fetchone()
        by, at = row if row else ("?", "?")
        what = f"{student}'s {assignment} record"
        raise Conflict(what, self.record(student, assignment), by, at, expected, version)

    def history(self, student: str, assignment: str | None = None) -> list[Event]:
        """A student's history (of one assignment, or all), oldest first per assignment."""
        return events(self.conn, valid_utf8(student), assignment)

    def record(self, student: str, assignment: str) -> Record | None:
        """The stored record of one submission, or None."""
        row = self.conn.execute(
            "SELECT record FROM results WHERE student = ? AND assignment = ?", (valid_utf8(student), assignment)
        ).fetchone()
        if row is None:
            return None
        student = valid_utf8(student)
        adjustment = current_adjustments(self.conn, student).get((student, assignment))
        rec = Record.from_json(json.loads(row[0]))
        manual = manual_points(ManualTables.read(self.conn, student, assignment), student, assignment, rec.answers)
        return replace(rec, adjustment=adjustment, manual=manual)

    def update_record(self, student: str, record: Record) -> None:
        """Replace a stored record's score and record (a new late penalty) and nothing else: the
        notebook's hash, the checker version and the grading time stay those of its grading."""
        self.conn.execute(
            "UPDATE results SET score = ?, record = ? WHERE student = ? AND assignment = ?",
            (record.graded_score, _json(record), valid_utf8(student), record.assignment),
        )

    def set_deadline(self, assignment: str, policy: dict[str, Any] | None) -> None:
        """Store an assignment's late penalty (None removes it)."""
        if policy is None:
            self.conn.execute("DELETE FROM deadlines WHERE assignment = ?", (assignment,))
        else:
            self.conn.execute(
                "INSERT INTO deadlines VALUES (?, ?) ON CONFLICT (assignment) DO UPDATE SET policy = excluded.policy",
                (assignment, json.dumps(policy, sort_keys=True)),
            )

    def deadlines(self) -> dict[str, dict[str, Any]]:
        """Every assignment's stored late penalty."""
        return {a: json.loads(p) for a, p in self.conn.execute("SELECT assignment, policy FROM deadlines")}

    def rows(self) -> Iterator[tuple[str, Record]]:
        """Every graded submission as (student, record), sorted by student and assignment, each
        record with the adjustment that counts (an override, a resolved review) if any and its
        points given by hand (one query per table of the manual grading store)."""
        adjustments = current_adjustments(self.conn)
        tables = ManualTables.read(self.conn)
        rows = self.conn.execute("SELECT student, assignment, record FROM results ORDER BY student, assignment")
        for student, assignment, record in rows.fetchall():
            rec = Record.from_json(json.loads(record))
            manual = manual_points(tables, student, assignment, rec.answers)
            yield student, replace(rec, adjustment=adjustments.get((student, assignment)), manual=manual)

    def count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])


def _json(record: Record) -> str:
    """The ``record`` column: the record's JSON with sorted keys."""
    return json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False)
