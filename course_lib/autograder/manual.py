"""The manual grading store: the points graders give by hand, kept in the gradebook.

A question graded by hand has a setup (its points and a rubric of items with points, edited by
the graders); each student's answer to it gets a grade (the rubric items that apply, points
added or taken off, a comment to the student); answers split off their answer group are kept;
look-alike pairs get a decision (confirmed or dismissed, with a note).

Every change is one ``BEGIN IMMEDIATE`` transaction that checks the version the grader's
change is based on (``expected``: the id of the last decision on what they changed, as they
read it; 0 when nothing was stored), writes, and appends one line per thing changed to the
``decisions`` history (who, when, what before and after, why). A stale version raises
:class:`Conflict` naming who changed it and when, and saves nothing: two graders never
overwrite each other silently. ``Gradebook(db).manual`` is the store of a gradebook.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from .history import now
from .lookalike import REFERENCE
from .manual_schema import (
    VERDICTS,
    AnswerChanged,
    AnswerGrade,
    Conflict,
    Decision,
    PairDecision,
    QuestionSetup,
    RubricItem,
    answer_digests,
    answer_target,
    as_json,
    check_seen,
    finite,
    grade_json,
    grade_points,
    item_id,
    pair_key,
    pair_target,
    require_records,
    rubrics,
    setup_json,
    text_arg,
    version_arg,
)

__all__ = [
    "AnswerChanged",
    "AnswerGrade",
    "Conflict",
    "Decision",
    "ManualStore",
    "PairDecision",
    "QuestionSetup",
    "RubricItem",
    "answer_target",
    "pair_key",
    "pair_target",
]

_DECISION = "SELECT id, at, by, kind, assignment, target, before, after, reason FROM decisions"


class ManualStore:
    """The manual grading store of a gradebook's connection (see the module's docstring).

    Args:
        conn: the gradebook's connection (autocommit: ``isolation_level=None``), migrated.
    """

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def _decide(
        self,
        kind: str,
        assignment: str,
        target: str,
        before: Any,
        after: Any,
        *,
        by: str,
        at: str,
        reason: str = "",
        students: tuple[str | None, str | None] = (None, None),
    ) -> int:
        """Append one decision (inside the caller's transaction); returns its id."""
        cursor = self.conn.execute(
            "INSERT INTO decisions (at, by, kind, assignment, target, before, after, reason, student, other) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (at, by, kind, assignment, target, as_json(before), as_json(after), reason, *students),
        )
        return int(cursor.lastrowid or 0)

    def _conflict(self, what: str, current: Any, expected: int, version: int) -> Conflict:
        row = self.conn.execute("SELECT by, at FROM decisions WHERE id = ?", (version,)).fetchone()
        by, at = row if row else ("?", "?")
        return Conflict(what, current, by, at, expected, version)

    def _last_version(self, assignment: str, target: str, kinds: tuple[str, ...]) -> int:
        """The id of the newest decision of ``kinds`` on ``target`` (0 when none)."""
        marks = ", ".join("?" * len(kinds))
        row = self.conn.execute(
            f"SELECT MAX(id) FROM decisions WHERE assignment = ? AND target = ? AND kind IN ({marks})",
            (assignment, target, *kinds),
        ).fetchone()
        return int(row[0] or 0)

    # -- question setups -------------------------------------------------------------------

    def setup(self, assignment: str, question: str) -> QuestionSetup:
        """A question's setup (max_points 0, no rubric, version 0 when it has none)."""
        row = self.conn.execute(
            "SELECT max_points, version FROM manual_questions WHERE assignment = ? AND question = ?",
            (assignment, question),
        ).fetchone()
        items = self.conn.execute(
            "SELECT id, text, points FROM manual_rubric WHERE assignment = ? AND question = ? ORDER BY position",
            (assignment, question),
        )
        rubric = tuple(RubricItem(*item) for item in items)
        max_points, version = row if row else (0.0, 0)
        return QuestionSetup(assignment, question, float(max_points), rubric, int(version))

    def setups(self, assignment: str) -> dict[str, QuestionSetup]:
        """Every question of ``assignment`` that has a setup, in the order they were first set."""
        items = rubrics(self.conn, assignment)
        rows = self.conn.execute(
            "SELECT question, max_points, version FROM manual_questions WHERE assignment = ? ORDER BY rowid",
            (assignment,),
        )
        return {
            q: QuestionSetup(assignment, q, float(m), tuple(items.get((assignment, q), ())), int(v)) for q, m, v in rows
        }

    def set_question(
        self,
        assignment: str,
        question: str,
        *,
        max_points: float,
        rubric: Sequence[tuple[int | None, str, float]],
        by: str,
        expected: int,
        reason: str = "",
    ) -> QuestionSetup:
        """Set a question's points and replace its rubric whole.

        Args:
            assignment: the assignment's name.
            question: the question's id.
            max_points: its points (finite, >= 0; 0: not graded by hand).
            rubric: its items in order, ``(id, text, points)``: id None for a new item, else one
                of this question's items (kept, its text and points replaced); an item left out
                is deleted, and dropped from every grade that applied it.
            by: the grader.
            expected: the setup's version the change is based on (0: no setup yet).
            reason: why (kept in the history).

        Returns:
            The setup as now stored.
        """
        text_arg("question", question, required=True)
        by, expected = text_arg("by", by, required=True), version_arg("expected", expected)
        max_points = finite("max_points", max_points)
        if max_points < 0:
            raise ValueError(f"max_points must be >= 0, got {max_points:g}")
        items = [
            (
                None if item is None else item_id(f"rubric[{n}] id", item),
                text_arg(f"rubric[{n}] text", text, required=True),
                finite(f"rubric[{n}] points", points),
            )
            for n, (item, text, points) in enumerate(rubric)
        ]
        ids = [item for item, _, _ in items if item is not None]
        if len(ids) != len(set(ids)):
            raise ValueError(f"rubric: each item id at most once, got {ids}")
        with self._transaction():
            current = self.setup(assignment, question)
            if current.version != expected:
                raise self._conflict(f"question {question} of {assignment}", current, expected, current.version)
            unknown = sorted(set(ids) - {i.id for i in current.rubric})
            if unknown:
                raise ValueError(f"rubric: item ids {unknown} are not items of {question}'s rubric")
            self._write_rubric(assignment, question, items)
            after = QuestionSetup(assignment, question, max_points, self.setup(assignment, question).rubric, 0)
            version = self._decide(
                "question", assignment, question, setup_json(current) if current.version else None,
                setup_json(after), by=by, at=now(), reason=reason,
            )  # fmt: skip
            self.conn.execute(
                "INSERT INTO manual_questions VALUES (?, ?, ?, ?) ON CONFLICT (assignment, question) "
                "DO UPDATE SET max_points = excluded.max_points, version = excluded.version",
                (assignment, question, max_points, version),
            )
        return QuestionSetup(assignment, question, max_points, after.rubric, version)

    def _write_rubric(self, assignment: str, question: str, items: list[tuple[int | None, str, float]]) -> None:
        """Replace a question's rubric with ``items`` (validated; inside the caller's transaction)."""
        kept = [item for item, _, _ in items if item is not None]
        self.conn.execute(
            f"DELETE FROM manual_rubric WHERE assignment = ? AND question = ? AND id NOT IN ({', '.join('?' * len(kept))})",
            (assignment, question, *kept),
        )
        for position, (item, text, points) in enumerate(items):
            if item is None:
                self.conn.execute(
                    "INSERT INTO manual_rubric (assignment, question, position, text, points) VALUES (?, ?, ?, ?, ?)",
                    (assignment, question, position, text, points),
                )
            else:
                self.conn.execute(
                    "UPDATE manual_rubric SET position = ?, text = ?, points = ? WHERE id = ?",
                    (position, text, points, item),
                )

    # -- answer grades ---------------------------------------------------------------------

    def _grades(self, setup: QuestionSetup, students: Sequence[str] | None = None) -> dict[str, AnswerGrade]:
        sql = (
            "SELECT student, items, adjust, comment, by, at, version, answer FROM manual_grades "
            "WHERE assignment = ? AND question = ?"
        )
        args: tuple[Any, ...] = (setup.assignment, setup.question)
        if students is not None:
            sql += f" AND student IN ({', '.join('?' * len(students))})"
            args += tuple(students)
        known = {item.id for item in setup.rubric}
        found = {}
        for student, items, adjust, comment, by, at, version, answer in self.conn.execute(
            sql + " ORDER BY student", args
        ):
            applied = tuple(i for i in json.loads(items) if i in known)
            points = grade_points(setup.rubric, applied, adjust, setup.max_points)
            found[student] = AnswerGrade(
                setup.assignment, setup.question, student, applied, adjust, comment, points, by, at, version, answer
            )
        return found

    def grades(self, assignment: str, question: str) -> dict[str, AnswerGrade]:
        """Every graded answer to a question, by student."""
        return self._grades(self.setup(assignment, question))

    def grade(
        self,
        assignment: str,
        question: str,
        students: Sequence[str],
        *,
        items: Sequence[int],
        adjust: float,
        comment: str,
        by: str,
        expected: Mapping[str, int],
        reason: str = "",
        seen: Mapping[str, str] | None = None,
    ) -> list[AnswerGrade]:
        """Give the same grade to the answers of ``students`` (one student, or an answer group),
        all or nothing; each grade keeps the digest of the answer it is given to (the record's
        now), so a resubmitted answer that differs makes it pending (:mod:`.manual_points`).

        Args:
            assignment: the assignment's name.
            question: the question's id (graded by hand: its max_points > 0).
            students: whose answers (each with a record of ``assignment``).
            items: the ids of this question's rubric items that apply.
            adjust: points added (may be negative; finite).
            comment: to the student (Markdown).
            by: the grader.
            expected: each student's grade version the grade is based on (0: ungraded).
            reason: why (kept in the history).
            seen: each student's answer as the grader read it (its ``answer_images.answer_digest``);
                when given, an answer changed since raises AnswerChanged (a Conflict) and saves nothing.

        Returns:
            The grades as now stored, in the order of ``students``.
        """
        students = list(students)
        if not students or len(set(students)) != len(students):
            raise ValueError(f"students: one or more students, each once, got {students!r}")
        unexpected = [s for s in students if s not in expected]
        if unexpected:
            raise ValueError(f"expected: the version each student's grade is based on, none for {unexpected!r}")
        adjust, comment, by = finite("adjust", adjust), text_arg("comment", comment), text_arg("by", by, required=True)
        expected = {s: version_arg(f"expected[{s!r}]", expected[s]) for s in students}
        applied = tuple(dict.fromkeys(item_id("items", i) for i in items))
        if seen is not None and not all(isinstance(seen.get(s), str) for s in students):
            raise ValueError(f"seen: the digest of each student's answer as read, got {dict(seen)!r}")
        require_records(self.conn, assignment, students)
        with self._transaction():
            setup = self.setup(assignment, question)
            if setup.max_points <= 0:
                raise ValueError(f"question: {question!r} of {assignment!r} is not graded by hand (max_points 0)")
            unknown = sorted(set(applied) - {i.id for i in setup.rubric})
            if unknown:
                raise ValueError(f"items: {unknown} are not items of {question}'s rubric")
            current = self._grades(setup, students)
            for student in students:
                version = current[student].version if student in current else 0
                if version != expected[student]:
                    raise self._stale(assignment, question, student, current.get(student), expected[student])
            at, digests = now(), answer_digests(self.conn, assignment, question, students)
            check_seen(self.conn, assignment, question, seen, digests)
            points = grade_points(setup.rubric, applied, adjust, setup.max_points)
            return [
                self._write_grade(
                    AnswerGrade(assignment, question, s, applied, adjust, comment, points, by, at, 0, digests[s]),
                    current.get(s),
                    reason,
                )
                for s in students
            ]

    def _write_grade(self, grade: AnswerGrade, before: AnswerGrade | None, reason: str) -> AnswerGrade:
        """Store ``grade`` in place of ``before`` and append its decision (inside the caller's
        transaction); the grade with its version."""
        version = self._decide(
            "grade", grade.assignment, answer_target(grade.question, grade.student), grade_json(before),
            grade_json(grade), by=grade.by, at=grade.at, reason=reason, students=(grade.student, None),
        )  # fmt: skip
        self.conn.execute(
            "INSERT INTO manual_grades (assignment, question, student, items, adjust, comment, by, at, version, "
            "answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (assignment, question, student) DO UPDATE "
            "SET items = excluded.items, adjust = excluded.adjust, comment = excluded.comment, by = excluded.by, "
            "at = excluded.at, version = excluded.version, answer = excluded.answer",
            (grade.assignment, grade.question, grade.student, json.dumps(list(grade.items)), grade.adjust,
             grade.comment, grade.by, grade.at, version, grade.answer),
        )  # fmt: skip
        return replace(grade, version=version)

    def _stale(
        self, assignment: str, question: str, student: str, current: AnswerGrade | None, expected: int
    ) -> Conflict:
        """The Conflict of an answer whose version is not the one expected (when its grade was
        cleared, the clearing is the change)."""
        target = answer_target(question, student)
        version = self._last_version(assignment, target, ("grade", "clear")) if current is None else current.version
        return self._conflict(f"{student}'s answer to {question} of {assignment}", current, expected, version)

    def clear_grade(self, assignment: str, question: str, student: str, *, by: str, expected: int) -> None:
        """Remove a student's grade of a question (the answer is ungraded again).

        Args:
            assignment: the assignment's name.
            question: the question's id.
            student: whose grade.
            by: the grader.
            expected: the grade's version the removal is based on.
        """
        by, expected = text_arg("by", by, required=True), version_arg("expected", expected)
        with self._transaction():
            setup = self.setup(assignment, question)
            current = self._grades(setup, [student]).get(student)
            version = 0 if current is None else current.version
            if version != expected:
                raise self._stale(assignment, question, student, current, expected)
            if current is None:
                raise ValueError(f"student: {student}'s answer to {question} of {assignment} has no grade to clear")
            self._decide(
                "clear", assignment, answer_target(question, student), grade_json(current), None,
                by=by, at=now(), students=(student, None),
            )  # fmt: skip
            self.conn.execute(
                "DELETE FROM manual_grades WHERE assignment = ? AND question = ? AND student = ?",
                (assignment, question, student),
            )

    # -- answer groups split by a grader ---------------------------------------------------

    def splits(self, assignment: str, question: str) -> frozenset[str]:
        """The students whose answer a grader split off its group."""
        rows = self.conn.execute(
            "SELECT student FROM manual_splits WHERE assignment = ? AND question = ?", (assignment, question)
        )
        return frozenset(s for (s,) in rows)

    def set_split(self, assignment: str, question: str, student: str, split: bool, *, by: str) -> None:
        """Split a student's answer off its group (``split``), or let it join again; a change
        is kept in the history, a no-change writes nothing."""
        by = text_arg("by", by, required=True)
        require_records(self.conn, assignment, [student], "student")
        with self._transaction():
            was = student in self.splits(assignment, question)
            if was == bool(split):
                return
            if split:
                self.conn.execute("INSERT INTO manual_splits VALUES (?, ?, ?)", (assignment, question, student))
            else:
                self.conn.execute(
                    "DELETE FROM manual_splits WHERE assignment = ? AND question = ? AND student = ?",
                    (assignment, question, student),
                )
            self._decide(
                "split" if split else "unsplit", assignment, answer_target(question, student), {"split": was},
                {"split": bool(split)}, by=by, at=now(), students=(student, None),
            )  # fmt: skip

    # -- look-alike pairs ------------------------------------------------------------------

    def pairs(self, assignment: str) -> dict[tuple[str, str], PairDecision]:
        """Every decided look-alike pair of ``assignment``, by ``(a, b)`` (:func:`.manual_schema.pair_key`)."""
        rows = self.conn.execute(
            "SELECT a, b, verdict, note, by, at, version FROM manual_pairs WHERE assignment = ? ORDER BY a, b",
            (assignment,),
        )
        return {(row[0], row[1]): PairDecision(assignment, *row) for row in rows}

    def decide_pair(
        self, assignment: str, a: str, b: str, *, verdict: str, note: str, by: str, expected: int
    ) -> PairDecision:
        """Decide a look-alike pair.

        Args:
            assignment: the assignment's name.
            a: one student.
            b: the other, or :data:`.lookalike.REFERENCE`.
            verdict: ``confirmed`` (a note is required) or ``dismissed``.
            note: the grader's note.
            by: the grader.
            expected: the pair's version the decision is based on (0: undecided).

        Returns:
            The decision as now stored.
        """
        if verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
        note, by = text_arg("note", note), text_arg("by", by, required=True)
        expected = version_arg("expected", expected)
        if verdict == "confirmed" and not note.strip():
            raise ValueError("note: confirming a pair needs a note saying why (kept in the history), got an empty note")
        if a == b:
            raise ValueError(f"b: a pair is two different students, got {a!r} twice")
        a, b = pair_key(a, b)
        require_records(self.conn, assignment, [s for s in (a, b) if s != REFERENCE], "a, b")
        with self._transaction():
            current = self.pairs(assignment).get((a, b))
            version = 0 if current is None else current.version
            if version != expected:
                raise self._conflict(f"the pair {a} ~ {b} of {assignment}", current, expected, version)
            at = now()
            before = None if current is None else {"verdict": current.verdict, "note": current.note}
            version = self._decide(
                "pair", assignment, pair_target(a, b), before, {"verdict": verdict, "note": note},
                by=by, at=at, reason=note, students=(a, b),
            )  # fmt: skip
            self.conn.execute(
                "INSERT INTO manual_pairs VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (assignment, a, b) "
                "DO UPDATE SET verdict = excluded.verdict, note = excluded.note, by = excluded.by, "
                "at = excluded.at, version = excluded.version",
                (assignment, a, b, verdict, note, by, at, version),
            )
        return PairDecision(assignment, a, b, verdict, note, by, at, version)  # type: ignore[arg-type]

    # -- history ---------------------------------------------------------------------------

    def history(self, assignment: str | None = None, target: str | None = None) -> list[Decision]:
        """The decisions (of one assignment, of one target: a question's id,
        :func:`answer_target`, :func:`pair_target`), oldest first."""
        where, args = [], []
        if assignment is not None:
            where.append("assignment = ?")
            args.append(assignment)
        if target is not None:
            where.append("target = ?")
            args.append(target)
        sql = _DECISION + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        return [Decision(*row) for row in self.conn.execute(sql, args)]

    def about(self, student: str, assignment: str | None = None) -> list[Decision]:
        """The decisions about a student's answers and pairs (of one assignment, or all), oldest first."""
        sql = _DECISION + " WHERE (student = ? OR other = ?)"
        args: tuple[str, ...] = (student, student)
        if assignment is not None:
            sql += " AND assignment = ?"
            args += (assignment,)
        return [Decision(*row) for row in self.conn.execute(sql + " ORDER BY id", args)]
