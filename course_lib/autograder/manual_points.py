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
from dataclasses import dataclass, field
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


#: A grade as a record shows it: its points, the texts of the items applied, the comment, the grader.
_Shown = tuple[float, tuple[str, ...], str, str]


@dataclass(frozen=True)
class ManualTables:
    """The manual grading store's setups and grades, read in one query per table, each grade's
    points computed once per distinct grade (an answer group's members share theirs).

    Args:
        questions: per assignment, its questions graded by hand ``(question, max_points)`` in order.
        grades: per (assignment, question, student), the grade as shown.
        made: the QuestionPoints made so far, shared by the records that show the same.
    """

    questions: Mapping[str, tuple[tuple[str, float], ...]]
    grades: Mapping[tuple[str, str, str], _Shown]
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
        grade_sql = "SELECT assignment, question, student, items, adjust, comment, by FROM manual_grades WHERE 1"
        if student is not None:
            grade_sql, args = grade_sql + " AND student = ?", (student, *args)
        shown: dict[tuple[Any, ...], _Shown] = {}
        grades = {}
        for a, q, s, items, adjust, comment, by in conn.execute(grade_sql + where, args):
            if (a, q) not in maximum:
                continue
            key = (a, q, items, adjust, comment, by)
            if key not in shown:
                shown[key] = _shown(rubric.get((a, q), []), json.loads(items), adjust, maximum[(a, q)], comment, by)
            grades[(a, q, s)] = shown[key]
        return cls({a: tuple(qs) for a, qs in questions.items()}, grades)

    def question_points(self, question: str, max_points: float, grade: _Shown | None, answered: bool) -> QuestionPoints:
        """The (shared) QuestionPoints of a question graded, pending or not answered."""
        key = (question, max_points, grade, answered)
        if key not in self.made:
            if grade is not None:
                points, names, comment, by = grade
                self.made[key] = QuestionPoints(question, max_points, points, comment, names, by, answered)
            else:
                self.made[key] = QuestionPoints(question, max_points, None if answered else 0.0, answered=answered)
        return self.made[key]


def _shown(
    rubric: list[RubricItem], applied: list[int], adjust: float, maximum: float, comment: str, by: str
) -> _Shown:
    """A stored grade as a record shows it (items since deleted dropped)."""
    points = grade_points(tuple(rubric), tuple(applied), adjust, maximum)
    return points, tuple(item.text for item in rubric if item.id in applied), comment, by


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
    found = tuple(
        tables.question_points(
            question,
            max_points,
            tables.grades.get((assignment, question, student)),
            bool(texts.get(question, "").strip()),
        )
        for question, max_points in questions
    )
    return ManualPoints(found)
