"""A submission's history: every grading, resubmission, override and review resolution kept,
the newest counting, and every export reading the score that counts.

Records are built with the gradebook's API; the one grading run replaces the notebook's
grading with a stand-in, so no sandbox starts.
"""

from __future__ import annotations

import csv
import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from course_lib.autograder import autograde
from course_lib.autograder.adjust import clear, override, resolve
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.canvas import export_canvas
from course_lib.autograder.exports import export_csv, export_wide, file_stem
from course_lib.autograder.feedback_files import write_feedback
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.manual import Conflict
from course_lib.autograder.record import Record
from course_lib.cli import main

A = "02_self_attention"  # 34 points
B = "05_layer_norm"  # 19 points


def graded(assignment: str, score: float, notebook: bytes = b"v1", status: str = "graded") -> Record:
    """A record of ``score`` points for the notebook ``notebook`` (a refused record's shape)."""
    rec = replace(refused_record(assignment, "stand-in", sha256(notebook)), status=status, raw_score=float(score))
    return rec.stamp(None, None)


def csv_rows(db: Path, tmp_path: Path) -> dict[tuple[str, str], dict[str, str]]:
    export_csv(db, tmp_path / "all.csv")
    with open(tmp_path / "all.csv", newline="", encoding="utf-8") as f:
        return {(r["student"], r["assignment"]): r for r in csv.DictReader(f)}


def read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def history(db: Path, capsys, *args: str) -> str:
    capsys.readouterr()  # what earlier commands printed
    assert main(["history", *args, "--db", str(db)]) == 0
    return capsys.readouterr().out


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """ann graded 19/34 on A; eve held for review on A; bob 10/19 on B."""
    path = tmp_path / "g.sqlite"
    with Gradebook(path) as book:
        book.save("ann", graded(A, 19), "c", 1.0, by="grader")
        book.save("eve", graded(A, 0, status="review"), "c", 1.0, by="grader")
        book.save("bob", graded(B, 10), "c", 1.0, by="grader")
    return path


def test_a_resubmission_through_grade_keeps_both_gradings_and_the_newest_counts(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "subs" / "ann"
    folder.mkdir(parents=True)

    def stand_in(data, assignment, runner, seed=None):  # the notebook's text is its score
        return graded(assignment, float(data.decode()), data)

    monkeypatch.setattr(autograde, "grade_submission", stand_in)
    db = tmp_path / "g.sqlite"
    argv = ["grade", str(tmp_path / "subs"), "--db", str(db), "--quiet", "--sandbox", "off", "--jobs", "1"]
    (folder / f"{A}.ipynb").write_bytes(b"19")
    assert main(argv) == 0
    assert main(["override", "ann", A, "--points", "25", "--reason", "partial credit", "--db", str(db)]) == 0
    (folder / f"{A}.ipynb").write_bytes(b"34")  # the resubmission
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"note: ann/{A}: a new notebook; the override: 25 points (partial credit) made to the previous one" in out
    with Gradebook(db) as book:
        assert book.record("ann", A).score == 34 and book.record("ann", A).adjustment is None
        kinds = [(e.kind, e.score, e.sha256) for e in book.history("ann", A)]
    assert kinds == [("graded", 19, sha256(b"19")), ("override", 25, sha256(b"19")), ("resubmitted", 34, sha256(b"34"))]
    text = history(db, capsys, "ann")
    assert text.splitlines()[0] == f"ann / {A}: 34 / 34 counts"
    assert "no longer counts: override: 25 points (partial credit)" in text


def test_an_override_counts_in_every_export_and_a_regrade_of_the_same_notebook_keeps_it(db, tmp_path, capsys):
    args = ["override", "ann", A, "--points", "30", "--reason", "regrade request: test 3 was right", "--db", str(db)]
    assert main([*args, "--by", "prof. Ng"]) == 0
    assert capsys.readouterr().out == f"ann / {A}: 30 / 34 counts\n"
    row = csv_rows(db, tmp_path)[("ann", A)]
    assert (row["score"], row["raw_score"]) == ("30", "19")
    assert row["flags"] == "override: 30 points (regrade request: test 3 was right)"
    export_wide(db, tmp_path / "wide.csv")
    assert ["ann", "30", ""] in read(tmp_path / "wide.csv")
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,02 Self Attention (4242),Layer Norm (77)\n"
        "    Points Possible,,,,,34,19\nAnn,1,,ann,S,,\n",
        encoding="utf-8",
    )
    export_canvas(db, tmp_path / "canvas.csv", roster, {B: "77"})
    assert read(tmp_path / "canvas.csv")[2][5] == "30"
    write_feedback(db, tmp_path / "fb", fmt="html")
    page = (tmp_path / "fb" / f"{file_stem('ann')}.html").read_text(encoding="utf-8")
    said = "Score set by your instructor: regrade request: test 3 was right. Score 30 / 34 (the grading gave 19)."
    assert f'{A}: 30 / 34 points</h2>\n<p class="standing">{said}</p>' in page

    with Gradebook(db) as book:  # the same notebook graded again (--force, new checks): the override stays
        book.save("ann", graded(A, 20), "c2", 1.0, by="grader")
        assert book.record("ann", A).score == 30 and book.record("ann", A).graded_score == 20
    text = history(db, capsys, "ann", A)
    lines = text.splitlines()
    assert lines[0] == f"ann / {A}: 30 / 34 counts (override: 30 points (regrade request: test 3 was right))"
    assert [line.split()[2] for line in lines[1:]] == ["graded", "override", "regraded"]
    assert "by prof. Ng: regrade request" in lines[2]
    assert "same notebook; still counts: override: 30 points" in lines[3] and "by grader" in lines[3]


def test_override_clear_gives_the_grading_back_and_is_kept_in_the_history(db, tmp_path, capsys):
    assert main(["override", "ann", A, "--points", "0", "--reason", "copied", "--db", str(db)]) == 0
    assert csv_rows(db, tmp_path)[("ann", A)]["score"] == "0"
    assert main(["override", "ann", A, "--clear", "--reason", "not copied after all", "--db", str(db)]) == 0
    row = csv_rows(db, tmp_path)[("ann", A)]
    assert (row["score"], row["flags"]) == ("19", "")
    assert [line.split()[2] for line in history(db, capsys, "ann").splitlines()[1:]] == [
        "graded",
        "override",
        "cleared",
    ]
    assert main(["override", "ann", A, "--clear", "--db", str(db)]) == 2
    assert "has no override or resolution to clear (its score 19 is the grading's)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ann", A, "--points", "35", "--reason", "r"], f"--points must be between 0 and 34 ({A}'s points), got 35"),
        (["ann", A, "--points", "-1", "--reason", "r"], "--points must be between 0 and 34"),
        (["ann", A, "--points", "nan", "--reason", "r"], "got nan"),
        (["ann", A, "--points", "3"], "override: --reason must say why"),
        (["ann", A], "give either --points P (with --reason) or --clear"),
        (["ann", A, "--points", "3", "--reason", "r", "--clear"], "give either --points P"),
        (
            ["ann", B, "--points", "3", "--reason", "r"],
            f"ASSIGNMENT '{B}' has no grading for 'ann'; their assignments: {A}",
        ),
        (["zoe", A, "--points", "3", "--reason", "r"], "STUDENT 'zoe' has no grading in"),
    ],
)
def test_a_bad_override_is_refused_naming_the_argument_and_changes_nothing(db, tmp_path, capsys, args, message):
    before = csv_rows(db, tmp_path)
    assert main(["override", *args, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("course-lib override") and message in err
    assert csv_rows(db, tmp_path) == before


def test_a_review_record_is_accepted_with_points_or_rejected_with_a_reason(db, tmp_path, capsys):
    resolve = ["resolve", "eve", A, "--db", str(db)]
    assert main([*resolve, "--accept"]) == 2  # nothing was graded: the grading's 0 is no judgement
    assert "--points is needed: nothing in a held notebook was graded" in capsys.readouterr().err
    assert main([*resolve, "--reject"]) == 2
    assert "resolve --reject: --reason must say why" in capsys.readouterr().err
    assert main(["resolve", "ann", A, "--accept", "--points", "3", "--db", str(db)]) == 2
    assert "has status 'graded', not 'review'; to change its score use course-lib override" in capsys.readouterr().err

    assert main([*resolve, "--accept", "--points", "28", "--reason", "the frame inspection was a debugger"]) == 0
    row = csv_rows(db, tmp_path)[("eve", A)]
    assert (row["status"], row["score"]) == ("review", "28")
    assert row["flags"] == "review accepted: 28 points (the frame inspection was a debugger)"
    assert main([*resolve, "--reject", "--reason", "it reads the grader's inputs"]) == 0  # a later decision counts
    row = csv_rows(db, tmp_path)[("eve", A)]
    assert (row["score"], row["flags"]) == ("0", "review rejected: 0 points (it reads the grader's inputs)")
    assert [line.split()[2] for line in history(db, capsys, "eve").splitlines()[1:]] == [
        "graded",
        "accepted",
        "rejected",
    ]


def test_an_old_gradebook_is_migrated_in_place_with_nothing_lost(tmp_path, capsys):
    """A gradebook written before the history: its rows become the first events, once."""
    path = tmp_path / "old.sqlite"
    old = graded(A, 19)
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE results (student TEXT NOT NULL, assignment TEXT NOT NULL, sha256 TEXT NOT NULL, "
        "checker TEXT NOT NULL, status TEXT NOT NULL, score REAL NOT NULL, max_score REAL NOT NULL, "
        "record TEXT NOT NULL, seconds REAL NOT NULL, graded_at TEXT NOT NULL, PRIMARY KEY (student, assignment))"
    )
    stored = json.dumps(old.to_json(), sort_keys=True)
    conn.execute(
        "INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        ("ann", A, old.sha256, "c", "graded", 19.0, 34.0, stored, 1.0, "2026-11-20T10:00:00Z"),
    )
    conn.commit()
    conn.close()
    for _ in range(2):  # opened twice: migrated once
        with Gradebook(path) as book:
            assert list(book.rows()) == [("ann", old)]
            assert book.conn.execute("SELECT record FROM results").fetchone()[0] == stored
            events = book.history("ann")
    assert [(e.kind, e.at, e.by, e.score) for e in events] == [("graded", "2026-11-20T10:00:00Z", "?", 19)]
    assert "graded before the gradebook kept a history" in history(path, capsys, "ann")


def test_history_of_an_unknown_student_or_a_missing_gradebook_is_an_error(db, tmp_path, capsys):
    assert main(["history", "zoe", "--db", str(db)]) == 2
    assert "course-lib history: no history of 'zoe'" in capsys.readouterr().err
    assert main(["history", "ann", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "no gradebook at" in capsys.readouterr().err


def test_a_resolution_based_on_a_stale_event_conflicts_naming_who_acted_and_saves_nothing(db):
    with Gradebook(db) as book:
        seen = book.last_event("eve", A)
        assert seen == book.history("eve", A)[-1].id and book.last_event("zoe", A) == 0
    resolve(db, "eve", A, accept=True, points=20, reason="read it", by="lee", expected=seen)
    with pytest.raises(Conflict) as caught:
        resolve(db, "eve", A, accept=False, points=None, reason="tampered", by="kim", expected=seen)
    assert caught.value.by == "lee" and caught.value.current.score == 20
    assert "eve's 02_self_attention record was changed by lee" in str(caught.value)
    with pytest.raises(Conflict):
        override(db, "eve", A, 5, "regrade", "kim", expected=seen)
    with pytest.raises(Conflict):
        clear(db, "eve", A, "undo", "kim", expected=seen)
    with Gradebook(db) as book:
        assert [e.kind for e in book.history("eve", A)] == ["graded", "accepted"]
        now = book.last_event("eve", A)
    assert override(db, "eve", A, 5, "regrade", "kim", expected=now).score == 5


def test_history_lists_the_graders_decisions_about_the_students_answers_with_the_events(tmp_path, capsys):
    path = tmp_path / "h.sqlite"
    q = "ch02-nb-mean-shift"
    with Gradebook(path) as book:
        book.save("ann", replace(graded(A, 19), answers=({"id": q, "answer": "x"},)), "c", 1.0, by="grader")
        book.save("bob", graded(A, 10), "c", 1.0, by="grader")
        book.manual.set_question(A, q, max_points=4, rubric=[], by="lee", expected=0)
        book.manual.grade(
            A, q, ["ann"], items=[], adjust=3, comment="nice", by="lee", expected={"ann": 0}, reason="first pass"
        )
        book.manual.decide_pair(A, "ann", "bob", verdict="dismissed", note="common idiom", by="kim", expected=0)
    out = history(path, capsys, "ann")
    lines = out.splitlines()
    assert lines[0] == f"ann / {A}: 22 / 38 counts"
    assert "graded" in lines[1] and "by grader" in lines[1]
    assert f'manual grade     {q}/ann  3 points given by hand, comment "nice"  by lee: first pass' in lines[2]
    assert "manual pair      ann ~ bob  dismissed  by kim: common idiom" in lines[3] and len(lines) == 4
    with Gradebook(path) as book:
        book.manual.set_question(A, "q2", max_points=2, rubric=[], by="lee", expected=0)  # ann did not answer it
        book.manual.clear_grade(A, q, "ann", by="kim", expected=book.manual.grades(A, q)["ann"].version)
    lines = history(path, capsys, "ann").splitlines()
    assert lines[0] == f"ann / {A}: 19 / 40 counts; manual grading pending: 1"
    assert main(["override", "ann", A, "--points", "30", "--reason", "regrade", "--db", str(path)]) == 0
    assert capsys.readouterr().out == f"ann / {A}: 30 / 40 counts\n"  # out of the points possible, 2 + 4 by hand
    assert f"manual clear     {q}/ann  grade removed  by kim" in lines[-1]
