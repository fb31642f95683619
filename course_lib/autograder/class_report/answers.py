"""The "think about it" answers of one assignment, per question, for reading side by side."""

from __future__ import annotations

from typing import Any

from .data import Row

__all__ = ["answers_by_question"]


def answers_by_question(rows: list[Row]) -> list[dict[str, Any]]:
    """Every student's answer to each question of one assignment.

    Args:
        rows: the assignment's records, sorted by student (any status; a record without
            ``answers``, graded before records carried them, adds nothing).

    Returns:
        One dict per question id, in the order the notebooks ask them: ``id``, ``answered``
        (students with a non-empty answer), ``unanswered`` (students whose notebook has the
        question and no answer) and ``answers`` (``{"student", "answer"}``, by student).
    """
    questions: dict[str, dict[str, Any]] = {}
    for student, record in rows:
        seen: dict[str, str] = {}
        for entry in record.answers:
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                continue
            text = str(entry.get("answer") or "")
            seen[entry["id"]] = f"{seen[entry['id']]}\n\n{text}".strip() if entry["id"] in seen else text
        for qid, text in seen.items():
            q = questions.setdefault(qid, {"id": qid, "answered": 0, "unanswered": 0, "answers": []})
            if text.strip():
                q["answered"] += 1
                q["answers"].append({"student": student, "answer": text})
            else:
                q["unanswered"] += 1
    return list(questions.values())
