"""The "think about it" answers of one assignment, per question, for reading side by side.

Plain data for ``data.json`` (texts, never HTML): the question's Markdown from the exercise
notebook, every student's answer with the names of its images, and the groups of students who
gave the same or nearly the same answer (:func:`.answer_groups.group_answers`); the images
themselves (base64) are handed to the page separately (:func:`answer_images`), so ``data.json``
stays small.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..answer_groups import group_answers
from ..answer_text import Question
from .data import Row

__all__ = ["answers_by_question", "answer_images"]

#: Student -> question id -> the answer's attachments (``{name: {mime: base64}}``).
Images = dict[str, dict[str, dict[str, dict[str, str]]]]


def _answers_of(record_answers: tuple[Any, ...]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Question id -> (answer, attachments) of one record; two entries of one id are joined."""
    seen: dict[str, tuple[str, dict[str, Any]]] = {}
    for entry in record_answers:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            continue
        text = str(entry.get("answer") or "")
        images = entry.get("attachments")
        images = {str(k): v for k, v in images.items() if isinstance(v, dict)} if isinstance(images, dict) else {}
        if entry["id"] in seen:
            before, before_images = seen[entry["id"]]
            text, images = f"{before}\n\n{text}".strip(), {**images, **before_images}
        seen[entry["id"]] = (text, images)
    return seen


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
        for qid, (text, images) in _answers_of(record.answers).items():
            q = out.setdefault(
                qid, {"id": qid, "number": None, "question": "", "answered": 0, "unanswered": 0, "answers": []}
            )
            if text.strip():
                q["answered"] += 1
                q["answers"].append({"student": student, "answer": text, "images": sorted(images)})
                pictures.setdefault(qid, {})[student] = _digest(images) if images else ""
            else:
                q["unanswered"] += 1
    for qid, q in out.items():
        q["groups"] = _groups(q["answers"], pictures.get(qid, {}))
    return list(out.values())


def _digest(images: dict[str, Any]) -> str:
    """A short digest of an answer's images: two answers that read alike but show other pictures differ."""
    return hashlib.sha256(json.dumps(images, sort_keys=True).encode()).hexdigest()[:16]


def _groups(answers: list[dict[str, Any]], pictures: dict[str, str]) -> list[dict[str, Any]]:
    """The groups of two or more of these answers (see :func:`answers_by_question`)."""
    texts = {
        x["student"]: x["answer"] + (f"\n\nimages {pictures[x['student']]}" if pictures.get(x["student"]) else "")
        for x in answers
    }
    return [
        {"students": list(g.students), "identical": g.identical, "similarity": round(g.similarity, 4)}
        for g in group_answers(texts)
        if len(g.students) > 1
    ]


def answer_images(rows: list[Row]) -> Images:
    """Student -> question id -> the images of that answer, for the answers that have any."""
    out: Images = {}
    for student, record in rows:
        for qid, (text, images) in _answers_of(record.answers).items():
            if images and text.strip():
                out.setdefault(student, {})[qid] = images
    return out
