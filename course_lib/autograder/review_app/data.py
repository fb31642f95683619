"""What the answers pages show, read from the gradebook as plain data (no Flask here).

The students' answers are read with SQLite's own JSON functions (only the ``answers`` of each
record, not the whole record), so a question of 1,000 students opens in well under a second.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from ...grading.registry import ASSIGNMENTS
from ..answer_images import answer_digest, digest, record_answers
from ..gradebook import Gradebook

__all__ = ["Answer", "HeldCount", "assignments", "answers_of", "held_counts"]


@dataclass(frozen=True)
class Answer:
    """One student's answer to one question.

    Args:
        student: the student's id.
        text: the answer's Markdown ("" when not answered).
        attachments: the answer cells' attachments, ``{name: {mime: base64}}``.
    """

    student: str
    text: str
    attachments: dict[str, dict[str, str]]

    @cached_property
    def pictures(self) -> str:
        """The digest of its attachments (:func:`.answer_images.digest`; "" for none)."""
        return digest(self.attachments)

    @cached_property
    def digest(self) -> str:
        """Its :func:`.answer_images.answer_digest`: a grade given to another digest is pending."""
        return answer_digest(self.text, pictures=self.pictures)

    @property
    def blank(self) -> bool:
        """Whether the student left the question unanswered."""
        return not self.text.strip()


def assignments(book: Gradebook) -> list[str]:
    """The gradebook's assignments, in course order (unknown ones after, sorted)."""
    found = {a for (a,) in book.conn.execute("SELECT DISTINCT assignment FROM results")}
    return [a for a in ASSIGNMENTS if a in found] + sorted(found - set(ASSIGNMENTS))


def answers_of(book: Gradebook, assignment: str) -> dict[str, dict[str, Answer]]:
    """Every student's answer to each question of one assignment.

    Args:
        book: the gradebook.
        assignment: the assignment.

    Returns:
        Question id -> student -> :class:`Answer`, questions in the order the notebooks ask
        them, students sorted; a question asked twice in one notebook has its answers joined.
    """
    rows = book.conn.execute(
        "SELECT student, json_extract(record, '$.answers') FROM results WHERE assignment = ? ORDER BY student",
        (assignment,),
    )
    out: dict[str, dict[str, Answer]] = {}
    for student, raw in rows:
        for question, (text, attachments) in record_answers(json.loads(raw) if raw else ()).items():
            out.setdefault(question, {})[student] = Answer(student, text, attachments)
    return out


@dataclass(frozen=True)
class HeldCount:
    """How many of an assignment's records are held for review.

    Args:
        held: records whose status is ``review``.
        resolved: of those, how many a person accepted, rejected or overrode (and not cleared since).
    """

    held: int
    resolved: int


def held_counts(book: Gradebook) -> dict[str, HeldCount]:
    """Every assignment's records held for review, and how many are resolved, in one query
    (each held record's newest adjusting or grading event, read through the events' index), as
    :func:`course_lib.autograder.history.current_adjustments` decides.

    Args:
        book: the gradebook.

    Returns:
        Assignment -> :class:`HeldCount` (an assignment with no held record: absent).
    """
    rows = book.conn.execute(
        "SELECT r.assignment, COUNT(*), SUM((SELECT e.kind FROM events e WHERE e.student = r.student "
        "AND e.assignment = r.assignment AND e.kind != 'regraded' ORDER BY e.id DESC LIMIT 1) "
        "IN ('override', 'accepted', 'rejected')) FROM results r WHERE r.status = 'review' GROUP BY r.assignment"
    )
    return {assignment: HeldCount(int(held), int(resolved or 0)) for assignment, held, resolved in rows}
