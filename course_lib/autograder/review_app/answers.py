"""The ``answers`` pages: the index (every assignment's questions) and one page per question."""

from __future__ import annotations

from flask import Blueprint, current_app, render_template

from .context import gradebook
from .data import answers_of, assignments
from .standins import group_answers, questions

__all__ = ["answers"]

answers = Blueprint("answers", __name__)


@answers.get("/")
def index() -> str:
    """Per assignment, its questions: answered, groups, graded, points; links to the other pages."""
    book = gradebook()
    rows = []
    for assignment in assignments(book):
        by_question = answers_of(book, assignment)
        asked = questions(current_app.config["EXERCISES"], assignment)
        ids = list(asked) + [q for q in by_question if q not in asked]
        items = []
        for qid in ids:
            texts = {s: a.text for s, a in by_question.get(qid, {}).items() if not a.blank}
            items.append({"id": qid, "answered": len(texts), "groups": len(group_answers(texts))})
        rows.append({"assignment": assignment, "questions": items})
    return render_template("index.html", assignments=rows)


@answers.get("/a/<assignment>/q/<question>")
def question(assignment: str, question: str) -> str:
    """One question: its text, its rubric, its answers in groups."""
    return render_template("index.html", assignments=[])
