"""The manual grading store: question setups with rubrics, answer grades (one student or a
group, all or nothing), splits, look-alike pair decisions, the history of every decision, and
two graders who never overwrite each other silently.

Two ``Gradebook`` objects on one file act as two graders, as two requests of the web app do.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.lookalike import REFERENCE
from course_lib.autograder.manual import Conflict, answer_target, pair_target
from course_lib.autograder.record import Late, Record

A = "02_self_attention"
Q = "ch02-nb-mean-shift"


def graded(assignment: str, score: float, answers: tuple[dict, ...] = ()) -> Record:
    """A record of ``score`` points (a refused record's shape) with these answers."""
    rec = replace(refused_record(assignment, "stand-in", sha256(b"v1")), status="graded", raw_score=float(score))
    return replace(rec, answers=answers).stamp(None, None)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ann, bob, eve graded on A; Q worth 4 points with two rubric items."""
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        for student in ("ann", "bob", "eve"):
            book.save(student, graded(A, 10), "c", 1.0, by="grader")
        book.manual.set_question(
            A, Q, max_points=4, rubric=[(None, "names the shift", 3), (None, "says why", 1)], by="lee", expected=0
        )
    return path


def items(book: Gradebook) -> list[int]:
    return [item.id for item in book.manual.setup(A, Q).rubric]


def test_a_question_setup_is_stored_with_its_rubric_and_version(db):
    with Gradebook(db) as book:
        setup = book.manual.setup(A, Q)
        assert (setup.max_points, [(i.text, i.points) for i in setup.rubric]) == (
            4.0,
            [("names the shift", 3.0), ("says why", 1.0)],
        )
        assert setup.version == book.manual.history(A, Q)[-1].id
        assert book.manual.setups(A) == {Q: setup}
        assert book.manual.setup(A, "other").version == 0 and book.manual.setup(A, "other").max_points == 0


def test_a_rubric_edit_keeps_the_ids_of_the_items_it_keeps(db):
    with Gradebook(db) as book:
        first, second = book.manual.setup(A, Q).rubric
        setup = book.manual.set_question(
            A,
            Q,
            max_points=5,
            rubric=[(second.id, "says why, clearly", 2), (None, "a deduction", -1)],
            by="lee",
            expected=book.manual.setup(A, Q).version,
        )
        assert [(i.text, i.points) for i in setup.rubric] == [("says why, clearly", 2.0), ("a deduction", -1.0)]
        assert setup.rubric[0].id == second.id and setup.rubric[1].id not in (first.id, second.id)
        assert book.manual.setup(A, Q) == setup


def test_a_second_grader_saving_on_the_version_read_before_the_first_saved_gets_a_conflict(db):
    with Gradebook(db) as lee, Gradebook(db) as kim:
        read_by_kim = kim.manual.grades(A, Q).get("ann")
        assert read_by_kim is None
        lee.manual.grade(A, Q, ["ann"], items=items(lee)[:1], adjust=0, comment="good", by="lee", expected={"ann": 0})
        with pytest.raises(Conflict) as caught:
            kim.manual.grade(A, Q, ["ann"], items=[], adjust=1, comment="meh", by="kim", expected={"ann": 0})
        assert caught.value.by == "lee" and caught.value.current.comment == "good"
        assert "changed by lee at" in str(caught.value) and "nothing was saved" in str(caught.value)
        assert kim.manual.grades(A, Q)["ann"].comment == "good"
        again = kim.manual.grade(
            A, Q, ["ann"], items=[], adjust=1, comment="meh", by="kim", expected={"ann": caught.value.version}
        )
        assert lee.manual.grades(A, Q)["ann"] == again[0]


def test_a_group_grade_is_all_or_nothing(db):
    with Gradebook(db) as lee, Gradebook(db) as kim:
        kim.manual.grade(A, Q, ["eve"], items=[], adjust=2, comment="alone", by="kim", expected={"eve": 0})
        group = ["ann", "bob", "eve"]
        with pytest.raises(Conflict) as caught:
            lee.manual.grade(
                A, Q, group, items=items(lee), adjust=0, comment="all", by="lee", expected=dict.fromkeys(group, 0)
            )
        assert "eve's answer" in str(caught.value) and caught.value.by == "kim"
        assert set(lee.manual.grades(A, Q)) == {"eve"}
        versions = {s: g.version for s, g in lee.manual.grades(A, Q).items()}
        saved = lee.manual.grade(
            A, Q, group, items=items(lee), adjust=0, comment="all", by="lee", expected={"ann": 0, "bob": 0, **versions}
        )
        assert [g.student for g in saved] == group and {g.points for g in saved} == {4.0}
        assert {s: g.comment for s, g in kim.manual.grades(A, Q).items()} == dict.fromkeys(group, "all")


def test_points_are_the_items_plus_the_adjustment_between_zero_and_the_maximum(db):
    with Gradebook(db) as book:
        both = items(book)
        for student, applied, adjust, points in (
            ("ann", both, 3, 4.0),
            ("bob", both[1:], -5, 0.0),
            ("eve", both[:1], -0.5, 2.5),
        ):
            book.manual.grade(
                A, Q, [student], items=applied, adjust=adjust, comment="", by="lee", expected={student: 0}
            )
            assert book.manual.grades(A, Q)[student].points == points


def test_deleting_a_rubric_item_removes_it_from_every_grades_points(db):
    with Gradebook(db) as book:
        first, second = items(book)
        book.manual.grade(
            A, Q, ["ann", "bob"], items=[first, second], adjust=0, comment="", by="lee", expected={"ann": 0, "bob": 0}
        )
        book.manual.set_question(
            A, Q, max_points=4, rubric=[(second, "says why", 1)], by="lee", expected=book.manual.setup(A, Q).version
        )
        grades = book.manual.grades(A, Q)
        assert {s: (g.items, g.points) for s, g in grades.items()} == {"ann": ((second,), 1.0), "bob": ((second,), 1.0)}


def test_a_cleared_grade_is_ungraded_and_a_save_based_on_it_conflicts(db):
    with Gradebook(db) as lee, Gradebook(db) as kim:
        (grade,) = lee.manual.grade(A, Q, ["ann"], items=[], adjust=1, comment="", by="lee", expected={"ann": 0})
        kim.manual.clear_grade(A, Q, "ann", by="kim", expected=grade.version)
        assert lee.manual.grades(A, Q) == {}
        with pytest.raises(Conflict) as caught:
            lee.manual.grade(A, Q, ["ann"], items=[], adjust=2, comment="", by="lee", expected={"ann": grade.version})
        assert caught.value.current is None and caught.value.by == "kim"
        with pytest.raises(ValueError, match="has no grade to clear"):
            lee.manual.clear_grade(A, Q, "ann", by="lee", expected=0)


def test_a_stale_question_setup_or_pair_decision_conflicts(db):
    with Gradebook(db) as lee, Gradebook(db) as kim:
        version = kim.manual.setup(A, Q).version
        lee.manual.set_question(A, Q, max_points=6, rubric=[], by="lee", expected=version)
        with pytest.raises(Conflict, match="question ch02-nb-mean-shift of 02_self_attention was changed by lee"):
            kim.manual.set_question(A, Q, max_points=2, rubric=[], by="kim", expected=version)
        assert kim.manual.setup(A, Q).max_points == 6
        lee.manual.decide_pair(A, "bob", "ann", verdict="dismissed", note="", by="lee", expected=0)
        with pytest.raises(Conflict) as caught:
            kim.manual.decide_pair(A, "ann", "bob", verdict="confirmed", note="same typo", by="kim", expected=0)
        assert caught.value.current.verdict == "dismissed"


def test_pairs_are_stored_sorted_and_may_name_the_reference(db):
    with Gradebook(db) as book:
        decided = book.manual.decide_pair(
            A, "eve", REFERENCE, verdict="confirmed", note="the solution", by="lee", expected=0
        )
        assert (decided.a, decided.b) == ("eve", REFERENCE)  # the reference second, as lookalike pairs it
        again = book.manual.decide_pair(
            A, "eve", REFERENCE, verdict="dismissed", note="", by="lee", expected=decided.version
        )
        assert book.manual.pairs(A) == {(decided.a, decided.b): again}


def test_splits_are_kept_and_only_changes_enter_the_history(db):
    with Gradebook(db) as book:
        book.manual.set_split(A, Q, "bob", True, by="lee")
        book.manual.set_split(A, Q, "bob", True, by="lee")
        assert book.manual.splits(A, Q) == {"bob"}
        book.manual.set_split(A, Q, "bob", False, by="kim")
        assert book.manual.splits(A, Q) == frozenset()
        assert [(d.kind, d.by) for d in book.manual.history(A, answer_target(Q, "bob"))] == [
            ("split", "lee"),
            ("unsplit", "kim"),
        ]


def test_the_history_lists_every_change_with_before_and_after(db):
    with Gradebook(db) as book:
        (graded_once,) = book.manual.grade(
            A, Q, ["ann"], items=[], adjust=1, comment="ok", by="lee", expected={"ann": 0}, reason="first pass"
        )
        book.manual.grade(
            A, Q, ["ann"], items=[], adjust=2, comment="better", by="kim", expected={"ann": graded_once.version}
        )
        book.manual.clear_grade(A, Q, "ann", by="lee", expected=book.manual.grades(A, Q)["ann"].version)
        book.manual.decide_pair(A, "ann", "bob", verdict="confirmed", note="same typo", by="kim", expected=0)
        lines = book.manual.history(A)
        assert [(d.kind, d.by, d.target) for d in lines] == [
            ("question", "lee", Q),
            ("grade", "lee", answer_target(Q, "ann")),
            ("grade", "kim", answer_target(Q, "ann")),
            ("clear", "lee", answer_target(Q, "ann")),
            ("pair", "kim", pair_target("bob", "ann")),
        ]
        setup, first, second, cleared, pair = lines
        assert setup.before == "" and json.loads(setup.after)["max_points"] == 4
        assert (first.before, json.loads(first.after)["comment"], first.reason) == ("", "ok", "first pass")
        assert (json.loads(second.before)["comment"], json.loads(second.after)["comment"]) == ("ok", "better")
        assert (json.loads(cleared.before)["adjust"], cleared.after) == (2, "")
        assert json.loads(pair.after) == {"verdict": "confirmed", "note": "same typo"}
        assert [d.kind for d in book.manual.about("bob")] == ["pair"]
        assert [d.id for d in lines] == sorted(d.id for d in lines)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m: m.set_question(A, Q, max_points=-1, rubric=[], by="lee", expected=m.setup(A, Q).version), "max_points must be >= 0, got -1"),
        (lambda m: m.set_question(A, Q, max_points=math.inf, rubric=[], by="lee", expected=0), "max_points must be a finite number, got inf"),
        (lambda m: m.set_question(A, Q, max_points=1, rubric=[(None, " ", 1)], by="lee", expected=0), r"rubric\[0\] text must not be empty"),
        (lambda m: m.set_question(A, "q2", max_points=1, rubric=[(1, "x", 1)], by="lee", expected=0), r"rubric: item ids \[1\] are not items of q2's rubric"),
        (lambda m: m.grade(A, Q, ["ann"], items=[999], adjust=0, comment="", by="lee", expected={"ann": 0}), r"items: \[999\] are not items of"),
        (lambda m: m.grade(A, Q, ["zoe"], items=[], adjust=0, comment="", by="lee", expected={"zoe": 0}), "students: no record of '02_self_attention' in the gradebook for 'zoe'"),
        (lambda m: m.grade(A, Q, ["ann"], items=[], adjust=0, comment="", by="lee", expected={}), r"expected: the version each student's grade is based on, none for \['ann'\]"),
        (lambda m: m.grade(A, Q, ["ann", "ann"], items=[], adjust=0, comment="", by="lee", expected={"ann": 0}), "students: one or more students, each once"),
        (lambda m: m.grade(A, "q2", ["ann"], items=[], adjust=0, comment="", by="lee", expected={"ann": 0}), "is not graded by hand"),
        (lambda m: m.grade(A, Q, ["ann"], items=[], adjust=math.nan, comment="", by="lee", expected={"ann": 0}), "adjust must be a finite number"),
        (lambda m: m.grade(A, Q, ["ann"], items=[], adjust=0, comment="", by=" ", expected={"ann": 0}), "by must not be empty"),
        (lambda m: m.decide_pair(A, "ann", "bob", verdict="maybe", note="", by="lee", expected=0), "verdict must be one of confirmed, dismissed, got 'maybe'"),
        (lambda m: m.decide_pair(A, "ann", "bob", verdict="confirmed", note=" ", by="lee", expected=0), "note: confirming a pair needs a note"),
        (lambda m: m.decide_pair(A, "ann", "ann", verdict="dismissed", note="", by="lee", expected=0), "b: a pair is two different students"),
        (lambda m: m.set_split(A, Q, "zoe", True, by="lee"), "student: no record of"),
        (lambda m: m.set_question(A, Q, max_points=1, rubric=[("1 OR 1=1", "x", 1)], by="lee", expected=1), r"rubric\[0\] id must be a rubric item's id \(an integer\), got '1 OR 1=1'"),
        (lambda m: m.grade(A, Q, ["ann"], items=["1"], adjust=0, comment="", by="lee", expected={"ann": 0}), "items must be a rubric item's id"),
        (lambda m: m.grade(A, Q, ["ann"], items=[], adjust=0, comment="", by="lee", expected={"ann": "0"}), r"expected\['ann'\] must be a version \(an integer >= 0"),
        (lambda m: m.decide_pair(A, "ann", "bob", verdict="dismissed", note="", by="lee", expected=-1), "expected must be a version"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_argument_and_nothing_is_saved(db, change, message):
    with Gradebook(db) as book:
        before = book.manual.history()
        with pytest.raises(ValueError, match=message):
            change(book.manual)
        assert book.manual.history() == before and book.manual.grades(A, Q) == {}


def test_a_gradebook_of_the_previous_version_is_migrated_with_every_result_and_event_kept(tmp_path):
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.save("ann", graded(A, 10), "c", 1.0, by="grader")
        book.adjust("ann", graded(A, 10), "override", 12.0, "regrade request", "lee")
        book.set_deadline(A, {"rate": 0.1})
    conn = sqlite3.connect(path)  # as the code before the manual store left it: user_version 1
    for table in ("manual_questions", "manual_rubric", "manual_grades", "manual_splits", "manual_pairs", "decisions"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    before = {
        t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in ("results", "events", "deadlines")
    }
    conn.close()
    for _ in range(2):  # opened twice: migrated once
        with Gradebook(path) as book:
            assert book.conn.execute("PRAGMA user_version").fetchone()[0] == 2
            after = {t: book.conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in before}
            assert after == before
            assert [(s, r.score) for s, r in book.rows()] == [("ann", 12.0)]
            assert book.manual.history() == [] and book.manual.setups(A) == {}
    with Gradebook(path) as book:
        book.manual.set_question(A, Q, max_points=2, rubric=[], by="lee", expected=0)
        assert book.manual.setup(A, Q).max_points == 2


def answered(*questions: str, blank: tuple[str, ...] = ()) -> tuple[dict, ...]:
    """A record's answers: a text for each of ``questions``, whitespace for each of ``blank``."""
    return tuple({"id": q, "answer": f"my answer to {q}"} for q in questions) + tuple(
        {"id": q, "answer": " \n"} for q in blank
    )


@pytest.fixture
def handgraded(tmp_path: Path) -> Path:
    """Q (4 points) and Q2 (2 points) of A graded by hand; ann answered both, bob only Q (Q2
    blank), eve neither; ann's Q graded 3, bob's Q graded 4."""
    path = tmp_path / "h.sqlite"
    with Gradebook(path) as book:
        book.save("ann", graded(A, 10, answered(Q, "q2")), "c", 1.0, by="grader")
        book.save("bob", graded(A, 20, answered(Q, blank=("q2",))), "c", 1.0, by="grader")
        book.save("eve", graded(A, 5), "c", 1.0, by="grader")
        store = book.manual
        store.set_question(A, Q, max_points=4, rubric=[(None, "names the shift", 3)], by="lee", expected=0)
        store.set_question(A, "q2", max_points=2, rubric=[], by="lee", expected=0)
        store.set_question(A, "q3", max_points=0, rubric=[], by="lee", expected=0)  # not graded by hand
        (item,) = items(book)
        store.grade(A, Q, ["ann"], items=[item], adjust=0, comment="good", by="lee", expected={"ann": 0})
        store.grade(A, Q, ["bob"], items=[item], adjust=1, comment="", by="kim", expected={"bob": 0})
    return path


def test_records_carry_graded_pending_and_unanswered_questions(handgraded):
    with Gradebook(handgraded) as book:
        records = dict(book.rows())
        assert records["ann"] == book.record("ann", A)
    ann, bob, eve = (records[s].manual for s in ("ann", "bob", "eve"))
    assert ann is not None and bob is not None and eve is not None
    assert [(q.question, q.points, q.max_points) for q in ann.questions] == [(Q, 3.0, 4.0), ("q2", None, 2.0)]
    assert (ann.questions[0].items, ann.questions[0].comment, ann.questions[0].by) == (
        ("names the shift",),
        "good",
        "lee",
    )
    assert (ann.points, ann.max_points, ann.pending) == (3.0, 6.0, 1)
    assert [(q.points, q.answered) for q in bob.questions] == [(4.0, True), (0.0, False)]
    assert [(q.points, q.answered, q.line()) for q in eve.questions] == [
        (0.0, False, "0 / 4 (not answered)"),
        (0.0, False, "0 / 2 (not answered)"),
    ]
    assert (records["ann"].score, records["ann"].points_possible) == (13.0, 40.0)
    assert records["ann"].all_flags == ("manual grading pending: 1",) and records["bob"].all_flags == ()


def test_an_assignment_without_questions_graded_by_hand_has_no_manual_points(handgraded):
    with Gradebook(handgraded) as book:
        book.save("ann", graded("05_layer_norm", 7, answered(Q)), "c", 1.0, by="grader")
        rec = book.record("ann", "05_layer_norm")
    assert rec is not None and rec.manual is None and (rec.score, rec.points_possible) == (7.0, rec.max_score)


def test_the_late_penalty_takes_the_same_share_of_manual_points_and_a_rejected_review_counts_zero(handgraded):
    with Gradebook(handgraded) as book:
        rec = book.record("bob", A)
        assert rec is not None
        late = replace(rec, late=Late(2, 0.25, 5.0, "2026-11-25T10:00:00Z", "2026-11-23T23:59:00Z", 0.125, 0.5))
        assert late.score == 20 - 5 + 4 * 0.75
        book.adjust("bob", rec, "override", 30.0, "regrade request", "lee")
        assert book.record("bob", A).score == 30 + 4  # type: ignore[union-attr]
        book.adjust("bob", rec, "rejected", 0.0, "tampered", "lee")
        assert book.record("bob", A).score == 0  # type: ignore[union-attr]
