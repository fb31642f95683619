"""A small class's gradebook for the review app's tests, and the app made from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from conftest import ROOT

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.review_app import create_app

A = "02_self_attention"
Q = "ch02-nb-mean-shift"
TOKEN = "t" * 20 + "-secret-token-of-the-tests-0123456789"
#: A student's hostile answer: markup that must be shown as text, never run.
HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">'

#: student -> answer to Q (blank: not answered).
ANSWERS = {
    "ann": "The mean shifts by $c$ because softmax ignores a constant.",
    "bob": "The mean shifts by $c$ because softmax ignores a constant.",
    "cat": "the mean shifts by $c$  because softmax ignores a constant.",
    "dan": HOSTILE,
    "eve": "",
    "fay": "Nothing changes at all.",
}


def class_gradebook(db: Path, answers: dict[str, str] = ANSWERS, attachments: dict | None = None) -> Path:
    """One record of assignment A per student, each with its answer to question Q (and the
    attachments, ``{name: {mime: base64}}``, given to every answer)."""
    rec = replace(refused_record(A, "x"), status="graded", raw_score=6.0, messages=())
    with Gradebook(db) as book:
        for student, text in answers.items():
            entry = {"id": Q, "answer": text} | ({"attachments": attachments} if attachments else {})
            book.save(student, replace(rec, answers=(entry,), absent=frozenset()), "c", 1.0)
    return db


def make_app(db: Path, grader: str = "prof"):
    """The review app of ``db`` with the tests' token and the course's own notebooks."""
    return create_app(db, exercises=ROOT / "exercises", solutions=ROOT / "solutions", token=TOKEN, grader=grader)


def login(client) -> None:
    """Give Flask's test client the token cookie, as the printed URL does for a browser."""
    response = client.get(f"/?token={TOKEN}")
    assert response.status_code == 303, response.status_code


def csrf(app) -> str:
    """The app's CSRF token (what its forms carry)."""
    from course_lib.autograder.review_app.security import csrf_token

    with app.test_request_context():
        return csrf_token()


def set_rubric(db: Path, max_points: float = 2.0, items=(("explains the constant", 2.0), ("wrong sign", -1.0))):
    """Give question Q points and a rubric; the rubric's item ids, in order."""
    with Gradebook(db) as book:
        setup = book.manual.set_question(
            A, Q, max_points=max_points, rubric=[(None, t, p) for t, p in items], by="prof", expected=0
        )
    return [item.id for item in setup.rubric]
