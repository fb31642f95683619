"""A hand grade follows the answer it was given to: a resubmission that changed the answer (its
text or its pasted images) makes the question pending again, in the records, the exports and
the feedback; an unchanged answer keeps its grade; grading the new answer counts it again, and
the history keeps the earlier grade.
"""

from __future__ import annotations

import base64
import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from course_lib.autograder.answer_images import answer_digest
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.exports import export_csv
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.manual import AnswerChanged, Conflict, answer_target
from course_lib.autograder.manual_feedback import manual_html, manual_markdown
from course_lib.autograder.record import Record
from course_lib.cli import main

A = "02_self_attention"
Q = "ch02-nb-mean-shift"
FIRST = "The mean shifts by c because softmax ignores a constant."
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"first picture").decode()
OTHER_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"other picture").decode()


def submission(text: str, notebook: bytes, png: str | None = None) -> Record:
    """A graded record of A (10 points) of the notebook ``notebook`` whose answer to Q is ``text``
    (showing the image ``png`` when given)."""
    rec = replace(refused_record(A, "stand-in", sha256(notebook)), status="graded", raw_score=10.0)
    entry: dict = {"id": Q, "answer": text}
    if png is not None:
        entry["answer"] = text + "\n\n![plot](attachment:plot.png)"
        entry["attachments"] = {"plot.png": {"image/png": png}}
    return replace(rec, answers=(entry,)).stamp(None, None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ann's answer to Q (4 points by hand) graded 3 by lee, with a comment."""
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.save("ann", submission(FIRST, b"v1", PNG), "c", 1.0, by="grader")
        setup = book.manual.set_question(
            A, Q, max_points=4, rubric=[(None, "names the shift", 3)], by="lee", expected=0
        )
        book.manual.grade(
            A, Q, ["ann"], items=[setup.rubric[0].id], adjust=0, comment="good", by="lee", expected={"ann": 0}
        )
    return path


def resubmit(db: Path, text: str, png: str | None = PNG) -> Record:
    """ann hands in a new notebook whose answer to Q is ``text``; her record as it counts now."""
    with Gradebook(db) as book:
        book.save("ann", submission(text, b"v2", png), "c", 1.0, by="grader")
        rec = book.record("ann", A)
    assert rec is not None and rec.manual is not None
    return rec


def test_a_resubmission_that_changed_the_answer_makes_its_grade_pending(db):
    rec = resubmit(db, "Nothing changes at all.")
    (q,) = rec.manual.questions  # type: ignore[union-attr]
    assert (q.points, q.pending, q.changed, q.by, q.comment, q.items) == (None, True, True, "lee", "", ())
    assert q.note == f"answer changed since graded by lee on {q.at[:10]}" and q.at[:4].isdigit()
    assert (rec.score, rec.points_possible, rec.all_flags) == (10.0, rec.max_score + 4, ("manual grading pending: 1",))


def test_a_resubmission_with_the_same_answer_keeps_its_grade(db):
    rec = resubmit(db, FIRST)  # a new notebook (other code), the answer as it was
    (q,) = rec.manual.questions  # type: ignore[union-attr]
    assert (q.points, q.changed, q.comment, q.by) == (3.0, False, "good", "lee")
    assert (rec.score, rec.all_flags) == (13.0, ())


def test_other_pictures_with_the_same_text_make_the_grade_pending(db):
    rec = resubmit(db, FIRST, png=OTHER_PNG)
    assert rec.manual is not None and rec.manual.questions[0].changed and rec.manual.pending == 1
    assert resubmit(db, FIRST, png=None).manual.questions[0].changed  # type: ignore[union-attr]
    assert not resubmit(db, FIRST, png=PNG).manual.questions[0].changed  # type: ignore[union-attr]


def test_an_answer_emptied_by_the_resubmission_is_not_answered_and_not_pending(db):
    rec = resubmit(db, " ", png=None)
    (q,) = rec.manual.questions  # type: ignore[union-attr]
    assert (q.points, q.answered, q.changed, q.line()) == (0.0, False, False, "0 / 4 (not answered)")


def test_grading_the_changed_answer_counts_it_again_and_the_history_keeps_the_earlier_grade(db):
    resubmit(db, "Nothing changes at all.")
    with Gradebook(db) as book:
        earlier = book.manual.grades(A, Q)["ann"]
        (again,) = book.manual.grade(
            A, Q, ["ann"], items=list(earlier.items), adjust=0, comment="good", by="kim",
            expected={"ann": earlier.version},
        )  # fmt: skip
        rec = book.record("ann", A)
        history = book.manual.history(A, answer_target(Q, "ann"))
    assert again.answer != earlier.answer
    assert rec is not None and rec.manual is not None
    assert (rec.manual.questions[0].points, rec.manual.questions[0].by, rec.score, rec.all_flags) == (
        3.0,
        "kim",
        13.0,
        (),
    )
    assert [(d.by, json.loads(d.after)["answer"]) for d in history] == [("lee", earlier.answer), ("kim", again.answer)]
    assert json.loads(history[1].before)["answer"] == earlier.answer


def test_the_csv_and_the_feedback_show_a_changed_answer_as_pending(db, tmp_path):
    resubmit(db, "Nothing changes at all.")
    export_csv(db, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["score"], row["manual"], row["manual_pending"], row["flags"]) == (
        "10",
        "0",
        "1",
        "manual grading pending: 1",
    )
    with Gradebook(db) as book:
        manual = book.record("ann", A).manual  # type: ignore[union-attr]
    assert f"**{Q}**: being graded by hand (of 4)" in manual_markdown(manual)
    shown = manual_html(manual)
    assert "being graded by hand (of 4)" in shown and "good" not in shown and "names the shift" not in shown


def test_course_lib_history_says_which_answer_changed_since_graded(db, capsys):
    with Gradebook(db) as book:
        day = book.manual.grades(A, Q)["ann"].at[:10]
    resubmit(db, "Nothing changes at all.")
    capsys.readouterr()
    assert main(["history", "ann", "--db", str(db)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"ann / {A}: 10 / ") and first.endswith(
        f" counts; manual grading pending: 1 ({Q}: answer changed since graded by lee on {day})"
    )


def test_a_grade_based_on_an_answer_read_before_a_resubmission_is_refused_and_saves_nothing(db):
    with Gradebook(db) as book:
        earlier = book.manual.grades(A, Q)["ann"]
    read = answer_digest(FIRST + "\n\n![plot](attachment:plot.png)", {"plot.png": {"image/png": PNG}})
    assert read == earlier.answer  # what the grader read is what the grade was given to
    resubmit(db, "Nothing changes at all.", png=None)  # meanwhile ann hands in a new answer
    with Gradebook(db) as book:
        before = book.manual.history()
        with pytest.raises(Conflict) as caught:
            book.manual.grade(A, Q, ["ann"], items=[], adjust=1, comment="ok", by="kim",
                              expected={"ann": earlier.version}, seen={"ann": read})  # fmt: skip
        assert isinstance(caught.value, AnswerChanged) and caught.value.students == ("ann",)
        assert str(caught.value).startswith(f"the answer of ann to {Q} of {A} changed since you read it")
        assert "nothing was saved" in str(caught.value)
        assert book.manual.history() == before and book.manual.grades(A, Q)["ann"] == earlier
        now = answer_digest("Nothing changes at all.")
        (saved,) = book.manual.grade(A, Q, ["ann"], items=[], adjust=1, comment="ok", by="kim",
                                     expected={"ann": earlier.version}, seen={"ann": now})  # fmt: skip
        assert saved.answer == now and book.record("ann", A).manual.questions[0].points == 1.0  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="seen: the digest of each student's answer as read"):
            book.manual.grade(A, Q, ["ann"], items=[], adjust=1, comment="", by="kim",
                              expected={"ann": saved.version}, seen={})  # fmt: skip


def test_the_resubmission_event_names_the_answers_whose_hand_grade_no_longer_counts(db):
    resubmit(db, FIRST)  # the same answer: its grade still counts
    with Gradebook(db) as book:
        book.save("ann", submission("Nothing changes at all.", b"v3"), "c", 1.0, by="grader")
        events = book.history("ann", A)
    assert [(e.kind, e.reason) for e in events] == [
        ("graded", ""),
        ("resubmitted", "a new notebook"),
        ("resubmitted", f"a new notebook; answers changed since graded by hand, pending again: {Q}"),
    ]
