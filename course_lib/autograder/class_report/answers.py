"""The "think about it" answers of one assignment, per question, for reading side by side.

Plain data for ``data.json`` (texts, never HTML): the question's Markdown from the exercise
notebook, every student's answer with the names of its images, and the groups of students who
gave the same or nearly the same answer (:func:`.answer_groups.group_answers`); the images
themselves (base64) are handed to the page separately (:func:`answer_images`), so ``data.json``
stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..answer_groups import group_answers
from ..answer_images import digest, record_answers
from ..answer_text import Question
from .data import Row

__all__ = ["answers_by_question", "answer_images"]

#: Student -> question id -> the answer's attachments (``{name: {mime: base64}}``).
Images = dict[str, dict[str, dict[str, dict[str, str]]]]


def answers_by_question(rows: list[Row], questions: Mapping[str, Question] | None = None) -> list[dict[str, Any]]:
    """Every student's answer to each question of one assignment.

    Args:
        rows: the assignment's records, sorted by student (any status; a record without
            ``answers``, graded before records carried them, adds nothing).
        questions: the assignment's questions from its exercise notebook (:func:`.answer_text.questions`);
            each is listed, answered or not, in the notebook's order, before any other id the
            records hold.

    Returns:
        One dict per question: ``id``, ``number`` (its order in the exercise notebook, None when
        it is not there), ``question`` (its Markdown, "" when unknown), ``answered`` (students
        with a non-empty answer), ``unanswered`` (students whose notebook has the question and
        no answer), ``answers`` (``{"student", "answer", "images"}``, by student; ``images``:
        the names of the answer's pasted images) and ``groups``: the groups of two or more
        students whose answers are identical or near-identical (``students``, the
        representative first, ``identical``, ``similarity``: the smallest of a member to the
        representative), largest first.
    """
    out: dict[str, dict[str, Any]] = {}
    pictures: dict[str, dict[str, str]] = {}  # question id -> student -> a digest of the answer's images
    for known in (questions or {}).values():
        out[known.id] = {
            "id": known.id,
            "number": known.number,
            "question": known.text,
            "answered": 0,
            "unanswered": 0,
            "answers": [],
        }
    for student, record in rows:
        for qid, (text, images) in record_answers(record.answers).items():
            q = out.setdefault(
                qid, {"id": qid, "number": None, "question": "", "answered": 0, "unanswered": 0, "answers": []}
            )
            if text.strip():
                q["answered"] += 1
                q["answers"].append({"student": student, "answer": text, "images": sorted(images)})
                pictures.setdefault(qid, {})[student] = digest(images)
            else:
                q["unanswered"] += 1
    for qid, q in out.items():
        q["groups"] = _groups(q["answers"], pictures.get(qid, {}))
    return list(out.values())


def _groups(answers: list[dict[str, Any]], pictures: dict[str, str]) -> list[dict[str, Any]]:
    """The groups of two or more of these answers (see :func:`answers_by_question`): answers that
    show other images (or some and none) are grouped apart, however alike their text."""
    texts = {x["student"]: x["answer"] for x in answers}
    groups = [g for g in group_answers(texts, pictures=pictures) if len(g.students) > 1]
    return [
        {"students": list(g.students), "identical": g.identical, "similarity": round(g.similarity, 4)} for g in groups
    ]


def answer_images(rows: list[Row]) -> Images:
    """The pasted images of the answers, for the pages (``data.json`` has only their names).

    Args:
        rows: the assignment's records.

    Returns:
        Student -> question id -> ``{name: {mime: base64}}``, for the non-blank answers that have any.
    """
    out: Images = {}
    for student, record in rows:
        for qid, (text, images) in record_answers(record.answers).items():
            if images and text.strip():
                out.setdefault(student, {})[qid] = images
    return out
