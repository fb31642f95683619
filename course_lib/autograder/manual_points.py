"""The points graders gave by hand, as every record read from the gradebook carries them.

A question with ``max_points > 0`` in the manual grading store (:mod:`.manual`) adds its
points to every record of its assignment: the grade's points when the student's answer was
graded, nothing yet (pending) when it was answered but not graded, and 0 ("not answered")
when the record has no answer to it or a blank one. A grade counts only for the answer it was
given to (:func:`.answer_images.answer_digest` of its text and pasted images): when a
resubmission changed the answer, the question is pending again ("answer changed since graded by
X on DATE") until a grader saves a grade of the new answer; an unchanged answer keeps its grade. Like the adjustment, they are read from
the gradebook each time, never stored in the record's JSON (:attr:`.record.Record.manual`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .answer_images import answer_digest, record_answers
from .manual_schema import RubricItem, grade_points, rubrics

__all__ = ["ManualPoints", "QuestionPoints", "ManualTables", "manual_points"]


@dataclass(frozen=True)
class QuestionPoints:
    """A student's points for one question graded by hand.

    Args:
        question: the question's id.
        max_points: its points.
        points: the grade's points; None when answered but not graded yet; 0 when not answered.
        comment: the grader's comment to the student (Markdown; "" when none).
        items: the texts of the rubric items applied (Markdown).
        by: the grader ("" when not graded; when ``changed``, the grader of the earlier answer).
        answered: whether the record holds a non-blank answer to it.
        changed: pending because the answer changed since it was graded (by ``by`` at ``at``).
        at: when it was graded (ISO 8601, UTC; "" when not graded).
    """

    question: str
    max_points: float
    points: float | None
    comment: str = ""
    items: tuple[str, ...] = ()
    by: str = ""
    answered: bool = True
    changed: bool = False
    at: str = ""

    @property
    def note(self) -> str:
        """``answer changed since graded by lee on 2026-11-27`` when ``changed``, else ""."""
        return f"answer changed since graded by {self.by} on {self.at[:10]}" if self.changed else ""

    @property
    def pending(self) -> bool:
        """Answered and not graded yet."""
        return self.points is None

    def line(self) -> str:
        """``3 / 4`` or ``being graded by hand (of 4)`` or ``0 / 4 (not answered)``."""
        if self.points is None:
            return f"being graded by hand (of {self.max_points:g})"
        return f"{self.points:g} / {self.max_points:g}" + ("" if self.answered else " (not answered)")


@dataclass(frozen=True)
class ManualPoints:
    """A record's points given by hand: its assignment's questions with ``max_points > 0``.

    Args:
        questions: one per question, in the order they were first set up.
    """

    questions: tuple[QuestionPoints, ...]

    @property
    def points(self) -> float:
        """The points of the graded questions (and the 0 of the unanswered ones)."""
        return float(sum(q.points for q in self.questions if q.points is not None))

    @property
    def max_points(self) -> float:
        """The points of every question graded by hand."""
        return float(sum(q.max_points for q in self.questions))

    @property
    def pending(self) -> int:
        """How many answered questions are not graded yet (those whose answer changed since included)."""
        return sum(1 for q in self.questions if q.points is None)

    @property
    def changed(self) -> int:
        """How many of the pending questions were graded before the answer changed."""
        return sum(1 for q in self.questions if q.changed)


#: A grade as a record shows it: its points, the texts of the items applied, the comment, the grader.
_Shown = tuple[float, tuple[str, ...], str, str]
#: A stored grade: as shown, the digest of the answer it was given to, when.
_Graded = tuple[_Shown, str, str]


@dataclass(frozen=True)
class ManualTables:
    """The manual grading store's setups and grades, read in one query per table, each grade's
    points computed once per distinct grade (an answer group's members share theirs).

    Args:
        questions: per assignment, its questions graded by hand ``(question, max_points)`` in order.
        grades: per (assignment, question, student), the grade as shown, the digest of the
            answer it was given to and when.
        made: the QuestionPoints made so far, shared by the records that show the same.
    """

    questions: Mapping[str, tuple[tuple[str, float], ...]]
    grades: Mapping[tuple[str, str, str], _Graded]
    made: dict[tuple[Any, ...], QuestionPoints] = field(default_factory=dict, compare=False)

    @classmethod
    def read(cls, conn: sqlite3.Connection, student: str | None = None, assignment: str | None = None) -> ManualTables:
        """The tables of every assignment (or of one), the grades of every student (or of one)."""
        questions: dict[str, list[tuple[str, float]]] = {}
        where, args = ("", ()) if assignment is None else (" AND assignment = ?", (assignment,))
        rows = conn.execute(
            f"SELECT assignment, question, max_points FROM manual_questions WHERE max_points > 0{where} ORDER BY rowid",
            args,
        )
        for a, q, m in rows:
            questions.setdefault(a, []).append((q, float(m)))
        if not questions:
            return cls({}, {})
        maximum = {(a, q): m for a, qs in questions.items() for q, m in qs}
        rubric = rubrics(conn, assignment)
        grade_sql = (
            "SELECT assignment, question, student, items, adjust, comment, by, answer, at FROM manual_grades WHERE 1"
        )
        if student is not None:
            grade_sql, args = grade_sql + " AND student = ?", (student, *args)
        shown: dict[tuple[Any, ...], _Shown] = {}
        grades = {}
        for a, q, s, items, adjust, comment, by, answer, at in conn.execute(grade_sql + where, args):
            if (a, q) not in maximum:
                continue
            key = (a, q, items, adjust, comment, by)
            if key not in shown:
                shown[key] = _shown(rubric.get((a, q), []), json.loads(items), adjust, maximum[(a, q)], comment, by)
            grades[(a, q, s)] = (shown[key], answer, at)
        return cls({a: tuple(qs) for a, qs in questions.items()}, grades)

    def question_points(
        self, question: str, max_points: float, graded: _Graded | None, answer: tuple[str, dict[str, Any]]
    ) -> QuestionPoints:
        """The (shared) QuestionPoints of a question graded, pending (its answer changed since it
        was graded, or never graded) or not answered.

        Args:
            question: the question's id.
            max_points: its points.
            graded: the student's stored grade of it, None when none.
            answer: the record's answer to it now, ``(text, attachments)``.

        Returns:
            Its points as the record shows them.
        """
        text, attachments = answer
        answered = bool(text.strip())
        if graded is not None and graded[1] != answer_digest(text, attachments):
            if not answered:  # the answer is gone: not answered, whatever the grade said
                graded = None
            else:
                by, at = graded[0][3], graded[2]
                key: tuple[Any, ...] = (question, max_points, "changed", by, at)
                if key not in self.made:
                    self.made[key] = QuestionPoints(question, max_points, None, by=by, changed=True, at=at)
                return self.made[key]
        key = (question, max_points, graded, answered)
        if key not in self.made:
            if graded is not None:
                (points, names, comment, by), _, at = graded
                self.made[key] = QuestionPoints(question, max_points, points, comment, names, by, answered, at=at)
            else:
                self.made[key] = QuestionPoints(question, max_points, None if answered else 0.0, answered=answered)
        return self.made[key]


def _shown(
    rubric: list[RubricItem], applied: list[int], adjust: float, maximum: float, comment: str, by: str
) -> _Shown:
    """A stored grade as a record shows it (items since deleted dropped)."""
    points = grade_points(tuple(rubric), tuple(applied), adjust, maximum)
    return points, tuple(item.text for item in rubric if item.id in applied), comment, by


def manual_points(
    tables: ManualTables, student: str, assignment: str, answers: tuple[dict[str, Any], ...]
) -> ManualPoints | None:
    """A record's manual points (None when its assignment has no question graded by hand).

    Args:
        tables: the store's tables (:meth:`ManualTables.read`).
        student: the student's id.
        assignment: the record's assignment.
        answers: the record's answers (``[{"id", "answer", "attachments"?}]``).

    Returns:
        One :class:`QuestionPoints` per question graded by hand, or None.
    """
    questions = tables.questions.get(assignment)
    if not questions:
        return None
    texts = record_answers(answers)
    found = tuple(
        tables.question_points(
            question, max_points, tables.grades.get((assignment, question, student)), texts.get(question, ("", {}))
        )
        for question, max_points in questions
    )
    return ManualPoints(found)
