"""The points graders gave by hand, as every record read from the gradebook carries them.

A question with ``max_points > 0`` in the manual grading store (:mod:`.manual`) adds its
points to every record of its assignment: the grade's points when the student's answer was
graded, nothing yet (pending) when it was answered but not graded, and 0 ("not answered")
when the record has no answer to it or a blank one. Like the adjustment, they are read from
the gradebook each time, never stored in the record's JSON (:attr:`.record.Record.manual`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
        by: the grader ("" when not graded).
        answered: whether the record holds a non-blank answer to it.
    """

    question: str
    max_points: float
    points: float | None
    comment: str = ""
    items: tuple[str, ...] = ()
    by: str = ""
    answered: bool = True

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
        """How many answered questions are not graded yet."""
        return sum(1 for q in self.questions if q.points is None)


@dataclass(frozen=True)
class _Grade:
    items: tuple[int, ...]
    adjust: float
    comment: str
    by: str


@dataclass(frozen=True)
class ManualTables:
    """The manual grading store's setups and grades, read in one query per table.

    Args:
        questions: per assignment, its questions graded by hand ``(question, max_points)`` in order.
        rubric: per (assignment, question), its rubric items.
        grades: per (assignment, question, student), the grade stored.
    """

    questions: Mapping[str, tuple[tuple[str, float], ...]]
    rubric: Mapping[tuple[str, str], tuple[RubricItem, ...]]
    grades: Mapping[tuple[str, str, str], _Grade]

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
            return cls({}, {}, {})
        grade_sql = "SELECT assignment, question, student, items, adjust, comment, by FROM manual_grades WHERE 1"
        if student is not None:
            grade_sql, args = grade_sql + " AND student = ?", (student, *args)
        grades = {
            (a, q, s): _Grade(tuple(json.loads(items)), adjust, comment, by)
            for a, q, s, items, adjust, comment, by in conn.execute(grade_sql + where, args)
        }
        items = {k: tuple(v) for k, v in rubrics(conn, assignment).items()}
        return cls({a: tuple(qs) for a, qs in questions.items()}, items, grades)


def _answers(answers: tuple[dict[str, Any], ...]) -> dict[str, str]:
    """The record's answers by question id (a malformed entry left out)."""
    found = {}
    for entry in answers:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            text = entry.get("answer")
            found[entry["id"]] = text if isinstance(text, str) else ""
    return found


def manual_points(
    tables: ManualTables, student: str, assignment: str, answers: tuple[dict[str, Any], ...]
) -> ManualPoints | None:
    """A record's manual points (None when its assignment has no question graded by hand).

    Args:
        tables: the store's tables (:meth:`ManualTables.read`).
        student: the student's id.
        assignment: the record's assignment.
        answers: the record's answers (``[{"id", "answer"}]``).

    Returns:
        One :class:`QuestionPoints` per question graded by hand, or None.
    """
    questions = tables.questions.get(assignment)
    if not questions:
        return None
    texts = _answers(answers)
    found = []
    for question, max_points in questions:
        grade = tables.grades.get((assignment, question, student))
        answered = bool(texts.get(question, "").strip())
        if grade is not None:
            rubric = tables.rubric.get((assignment, question), ())
            points = grade_points(rubric, grade.items, grade.adjust, max_points)
            names = tuple(item.text for item in rubric if item.id in grade.items)
            found.append(QuestionPoints(question, max_points, points, grade.comment, names, grade.by, answered))
        elif answered:
            found.append(QuestionPoints(question, max_points, None))
        else:
            found.append(QuestionPoints(question, max_points, 0.0, answered=False))
    return ManualPoints(tuple(found))
