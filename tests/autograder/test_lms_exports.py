"""LMS exports (Canvas, wide) matched to a roster, and deadlines with a late penalty.

Records are built with the gradebook's API, and grading runs replace the notebook's grading
with a counted stand-in, so no sandbox starts and the whole file runs in seconds.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from course_lib.autograder import autograde
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.deadlines import LatePolicy
from course_lib.autograder.exports import export_csv, export_gradescope, file_stem
from course_lib.autograder.feedback_files import write_feedback
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.record import Record
from course_lib.cli import main

A = "02_self_attention"  # 34 points
B = "03_multi_head_attention"  # 39 points
DEADLINE = "2026-11-23T23:59:00+00:00"


def graded(assignment: str, score: float, submitted: str | None = None, policy: LatePolicy | None = None) -> Record:
    """A graded record of ``score`` points (a refused record's shape, with a score), stamped."""
    rec = replace(refused_record(assignment, "stand-in"), status="graded", raw_score=float(score), messages=())
    return rec.stamp(submitted, None if policy is None else policy.penalty(rec.raw_score, submitted))


def rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


@pytest.fixture
def book(tmp_path: Path) -> Path:
    """ann (A on time, B late), carl (not in the roster), =evil (a formula as a login)."""
    db = tmp_path / "g.sqlite"
    policy = LatePolicy.parse(DEADLINE, "10%/day")
    with Gradebook(db) as gb:
        gb.save("ann", graded(A, 30), "c", 1.0)
        gb.save("ann", graded(B, 20, "2026-11-25T10:00:00+00:00", policy), "c", 1.0)  # 2 started days: -20%
        gb.save("carl", graded(A, 34), "c", 1.0)
        gb.save("=evil", graded(A, 1), "c", 1.0)
    return db


@pytest.fixture
def roster(tmp_path: Path) -> Path:
    """A Canvas gradebook export: its header (A titled like the notebook, B not), its Points
    Possible row, a test student."""
    path = tmp_path / "roster.csv"
    path.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,02 Self Attention (4242),Multi-Head Exercises (4243),"
        "Current Score\n"
        "    Points Possible,,,,,34,39,(read only)\n"
        '"Doe, Ann",101,S101,ann,Section A,,,\n'
        '"Roe, Bob",102,S102,bob,Section B,,,\n'
        '"=HYPERLINK(""http://x"")",103,S103,=evil,Section B,,,\n'
        '"Student, Test",999,,,,,,\n',
        encoding="utf-8",
    )
    return path


def test_canvas_export_has_canvas_columns_points_possible_and_scores_by_login(book, roster, tmp_path, capsys):
    out = tmp_path / "canvas.csv"
    args = ["export", "--db", str(book), "--format", "canvas", "--roster", str(roster), "--out", str(out)]
    assert main([*args, "--map", f"{B}=Multi-Head Exercises (4243)"]) == 0
    table = rows(out)
    # Canvas's identity columns; A found by its title, B by the map: both the roster's own columns
    assert table[0] == [
        "Student",
        "ID",
        "SIS User ID",
        "SIS Login ID",
        "Section",
        "02 Self Attention (4242)",
        "Multi-Head Exercises (4243)",
    ]
    assert table[1] == ["    Points Possible", "", "", "", "", "34", "39"]
    by_login = {r[3]: r for r in table[2:]}
    assert list(by_login) == ["ann", "bob", "'=evil"]  # roster order, the test student skipped
    assert by_login["ann"] == ["Doe, Ann", "101", "S101", "ann", "Section A", "30", "16"]  # B: 20 - 20% late
    assert by_login["bob"][5:] == ["", ""]  # no submission: empty cells
    evil = by_login["'=evil"]
    assert evil[0] == '\'=HYPERLINK("http://x")' and evil[5] == "1"  # every cell through csv_cell
    captured = capsys.readouterr()
    assert "1 student(s) with submissions are not in the roster" in captured.err and "  carl" in captured.err
    assert "carl" not in out.read_text()


def test_a_plain_roster_with_a_login_column_and_the_wide_format(book, tmp_path, capsys):
    plain = tmp_path / "plain.csv"
    plain.write_text("name,login\nBob,bob\nAnn,ann\n", encoding="utf-8")
    out = tmp_path / "wide.csv"
    assert main(["export", "--db", str(book), "--format", "wide", "--roster", str(plain), "--out", str(out)]) == 0
    assert rows(out) == [["student", f"{A} (max 34)", f"{B} (max 39)"], ["bob", "", ""], ["ann", "30", "16"]]
    err = capsys.readouterr().err
    assert "2 student(s) with submissions are not in the roster" in err and "carl" in err and "=evil" in err
    # without a roster: every student of the gradebook, formulas neutralised
    assert main(["export", "--db", str(book), "--format", "wide", "--out", str(out)]) == 0
    assert [r[0] for r in rows(out)[1:]] == ["'=evil", "ann", "carl"]
    assert "not in the roster" not in capsys.readouterr().err


def test_export_refuses_a_canvas_export_without_roster_or_a_roster_without_logins(book, tmp_path, capsys):
    out = str(tmp_path / "x.csv")
    assert main(["export", "--db", str(book), "--format", "canvas", "--out", out]) == 2
    assert "--roster" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("name,email\nAnn,a@x\n", encoding="utf-8")
    assert main(["export", "--db", str(book), "--format", "canvas", "--roster", str(bad), "--out", out]) == 2
    assert "'SIS Login ID', 'login' or 'student'" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["export", "feedback"])
def test_export_and_feedback_refuse_a_missing_gradebook_and_write_nothing(verb, tmp_path, capsys):
    missing, out = tmp_path / "nothing.sqlite", tmp_path / "out"
    assert main([verb, "--db", str(missing), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"course-lib {verb}: no gradebook at {missing}\n"
    assert not out.exists() and not missing.exists()


def test_a_late_record_shows_raw_score_penalty_and_final_in_csv_gradescope_and_feedback(book, tmp_path):
    export_csv(book, tmp_path / "grades.csv")
    with open(tmp_path / "grades.csv", newline="", encoding="utf-8") as f:
        table = {(r["student"], r["assignment"]): r for r in csv.DictReader(f)}
    late, on_time = table[("ann", B)], table[("ann", A)]
    assert (late["score"], late["raw_score"], late["late_days"], late["penalty"]) == ("16", "20", "2", "4")
    assert (on_time["score"], on_time["raw_score"], on_time["late_days"], on_time["penalty"]) == ("30", "30", "", "")

    export_gradescope(book, tmp_path / "gs")
    res = json.loads((tmp_path / "gs" / file_stem("ann") / B / "results.json").read_text())
    assert res["score"] == 16
    assert "2 started day(s) after the deadline" in res["output"] and "penalty 20% = 4 point(s)" in res["output"]
    assert "Raw score 20, final score 16 / 39" in res["output"]
    res = json.loads((tmp_path / "gs" / file_stem("ann") / A / "results.json").read_text())
    assert "Late" not in res["output"]

    write_feedback(book, tmp_path / "md", fmt="md")
    md = (tmp_path / "md" / f"{file_stem('ann')}.md").read_text()
    section = md.split(f"## {B}".replace("_", "\\_"))[1]
    first = section.split("\n\n")[1]  # the line under the heading
    assert first.startswith("**Late: submitted") and "Raw score 20, final score 16 / 39" in first
    assert md.count("Late:") == 1
    write_feedback(book, tmp_path / "html", fmt="html")
    html = (tmp_path / "html" / f"{file_stem('ann')}.html").read_text()
    assert re.search(rf'<h2 id="a\d+">{B}: 16 / 39 points</h2>\n<p class="standing">Late: submitted', html)


def test_lateness_counts_started_days_and_the_penalty_stops_at_the_cap():
    policy = LatePolicy.parse("2026-11-23T23:59:00+01:00", "10%/day,max=25%")
    deadline = datetime.fromisoformat("2026-11-23T23:59:00+01:00")
    assert policy.days_late(deadline) == 0
    assert policy.days_late(datetime.fromisoformat("2026-11-23T23:59:01+01:00")) == 1
    assert policy.days_late(datetime.fromisoformat("2026-11-23T22:59:01+00:00")) == 1  # other timezone, 1 s late
    assert policy.days_late(datetime.fromisoformat("2026-11-24T23:59:01+01:00")) == 2
    rec = graded(A, 20, "2026-11-25T23:59:01+01:00", policy)  # 3 days: 30%, capped at 25%
    assert rec.late is not None and rec.late.days == 3 and rec.late.fraction == 0.25
    assert (rec.raw_score, rec.late.points, rec.score) == (20, 5, 15)
    slower = LatePolicy.parse("2026-11-23T23:59:00+01:00", "1%/day")
    again = rec.stamp(rec.submitted_at, slower.penalty(rec.raw_score, rec.submitted_at))  # from raw, not compounded
    assert again.score == pytest.approx(19.4) and again.raw_score == 20
    assert graded(A, 20, None, policy).late is None  # no time: on time


@pytest.mark.parametrize(
    "args, message",
    [
        (["--deadline", "next friday", "--late-penalty", "10%/day"], "--deadline: expected an ISO 8601 time"),
        (
            ["--deadline", "2026-11-23T23:59:00", "--late-penalty", "10%/day"],
            "--deadline: '2026-11-23T23:59:00' has no timezone",
        ),
        (["--deadline", DEADLINE, "--late-penalty", "10%"], "--late-penalty: expected RATE%/day or RATE%/day,max=CAP%"),
        (["--deadline", DEADLINE, "--late-penalty", "10%/day,max=150%"], "--late-penalty: the rate and the cap"),
        (["--deadline", DEADLINE], "--late-penalty: --deadline and --late-penalty go together"),
        (["--late-penalty", "10%/day"], "--deadline: --deadline and --late-penalty go together"),
        (["--no-deadline", "--deadline", DEADLINE, "--late-penalty", "5%/day"], "--no-deadline: cannot be combined"),
        (
            ["--deadline", DEADLINE, "--late-penalty", "5%/day", "--timestamps", "/nonexistent.csv"],
            "--timestamps: cannot read",
        ),
    ],
)
def test_deadline_arguments_are_validated_with_the_argument_and_the_expected_form(tmp_path, capsys, args, message):
    (tmp_path / "subs").mkdir()
    assert main(["grade", str(tmp_path / "subs"), "--db", str(tmp_path / "g.sqlite"), "--quiet", *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "g.sqlite").exists()  # refused before anything is graded


def test_a_timestamps_file_with_a_bad_time_names_the_file_and_line(tmp_path, capsys):
    (tmp_path / "subs").mkdir()
    stamps = tmp_path / "t.csv"
    stamps.write_text(f"student,assignment,submitted_at\nann,{A},{DEADLINE}\nbob,{A},yesterday\n", encoding="utf-8")
    argv = ["grade", str(tmp_path / "subs"), "--db", str(tmp_path / "g.sqlite"), "--quiet"]
    assert main([*argv, "--deadline", DEADLINE, "--late-penalty", "5%/day", "--timestamps", str(stamps)]) == 2
    assert f"--timestamps: {stamps} line 3: expected an ISO 8601 time" in capsys.readouterr().err


def test_a_rerun_with_another_deadline_changes_the_penalty_without_regrading(tmp_path, monkeypatch, capsys):
    for student in ("ann", "bob"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        (tmp_path / "subs" / student / f"{A}.ipynb").write_bytes(b"{}" + student.encode())
    stamps = tmp_path / "t.csv"
    stamps.write_text(f"student,assignment,submitted_at\nann,{A},2026-11-26T12:00:00Z\n", encoding="utf-8")
    counter = tmp_path / "graded"  # a file: the grading processes are forks of this one
    counter.touch()

    def calls() -> list[str]:
        return counter.read_text().split()

    def stand_in(data, assignment, runner, seed=None):  # the notebook's grading, counted
        with open(counter, "a") as f:
            f.write(assignment + "\n")
        return replace(refused_record(assignment, "x", sha256(data)), status="graded", raw_score=30.0)

    monkeypatch.setattr(autograde, "grade_submission", stand_in)
    db = tmp_path / "g.sqlite"
    argv = ["grade", str(tmp_path / "subs"), "--db", str(db), "--quiet", "--sandbox", "off"]

    def state() -> dict[str, tuple]:
        with Gradebook(db) as gb:
            return {
                s: (score, json.loads(rec)["raw_score"], sha, checker, at)
                for s, score, rec, sha, checker, at in gb.conn.execute(
                    "SELECT student, score, record, sha256, checker, graded_at FROM results"
                )
            }

    # 2.5 days late -> 3 started days at 10%: 30 - 9
    assert main([*argv, "--deadline", DEADLINE, "--late-penalty", "10%/day", "--timestamps", str(stamps)]) == 0
    assert len(calls()) == 2
    first = state()
    assert first["ann"][:2] == (21, 30) and first["bob"][:2] == (30, 30)
    assert "late: 1 submission(s) with a penalty; 1 without a submission time, counted as on time" in (
        capsys.readouterr().out
    )

    # another deadline and rate, no timestamps file: the stored time is kept; 2 days at 30%, capped at 50%
    assert main([*argv, "--deadline", "2026-11-25T00:00:00Z", "--late-penalty", "30%/day,max=50%"]) == 0
    second = state()
    assert len(calls()) == 2  # nothing regraded
    assert second["ann"][:2] == (15, 30) and second["ann"][2:] == first["ann"][2:]  # same sha, checker, graded_at
    assert second["bob"] == first["bob"]

    # a plain rerun keeps the stored deadline; --no-deadline removes it
    main(argv)
    assert state()["ann"][:2] == (15, 30)
    main([*argv, "--no-deadline"])
    assert state()["ann"][:2] == (30, 30) and len(calls()) == 2
    with Gradebook(db) as gb:
        record = gb.record("ann", A)
        assert record is not None and record.late is None and gb.deadlines() == {}


def test_student_ids_match_after_nfc_and_trimming_so_every_late_student_is_penalised(tmp_path, monkeypatch, capsys):
    # macOS writes "zoë" decomposed (NFD); a zip tool kept "bob "'s trailing space; the LMS writes NFC
    folders = {"zoe\u0308": "zoë", "bob ": "bob", "ann": "ann"}
    for folder in folders:
        (tmp_path / "subs" / folder).mkdir(parents=True)
        (tmp_path / "subs" / folder / f"{A}.ipynb").write_bytes(b"{}" + folder.encode())
    stamps = tmp_path / "t.csv"
    stamps.write_text(
        "student,assignment,submitted_at\n"
        + "".join(f"{s},{A},2026-11-26T12:00:00Z\n" for s in ("zo\u00eb", "bob", " ann", "carol"))
        + f"\u00e0nn,{A},2026-11-26T12:00:00Z\n",
        encoding="utf-8",
    )

    def stand_in(data, assignment, runner, seed=None):
        return replace(refused_record(assignment, "x", sha256(data)), status="graded", raw_score=30.0)

    monkeypatch.setattr(autograde, "grade_submission", stand_in)
    db = tmp_path / "g.sqlite"
    argv = ["grade", str(tmp_path / "subs"), "--db", str(db), "--sandbox", "off", "--quiet"]
    assert main([*argv, "--deadline", DEADLINE, "--late-penalty", "10%/day", "--timestamps", str(stamps)]) == 0
    out = capsys.readouterr()
    with Gradebook(db) as gb:
        scores = {s: score for s, score in gb.conn.execute("SELECT student, score FROM results")}
    assert scores == {"zo\u00eb": 21, "bob": 21, "ann": 21}  # every one of them 3 started days late
    said = out.out + out.err
    assert "'carol' (02_self_attention) matches no submission" in said
    assert "'ànn' (02_self_attention) matches no submission" in said
    assert "U+00E0 U+006E U+006E vs the folder's U+0061 U+006E U+006E" in said  # a near miss: its code points
    assert "'zoë'" not in said and "'bob'" not in said


def test_a_roster_login_matches_a_folder_written_in_another_unicode_form(tmp_path):
    db = tmp_path / "g.sqlite"
    with Gradebook(db) as gb:
        gb.save("zo\u00eb", graded(A, 30), "c", 0.1)  # the folder's id, in NFC
    roster = tmp_path / "roster.csv"
    roster.write_text("student\n zoe\u0308 \n", encoding="utf-8")  # NFD, with spaces
    from course_lib.autograder.exports import export_wide

    n, extra = export_wide(db, tmp_path / "w.csv", roster)
    assert (n, extra) == (1, [])
    assert rows(tmp_path / "w.csv")[1] == ["zo\u00eb", "30"]


# --- Canvas for real: the file, read by Canvas's own import rules, updates existing columns only ---

_NON_ASSIGNMENT = re.compile(r"Current (Score|Points|Grade)|Final (Score|Points|Grade)|Override (Score|Grade|Status)")


def canvas_import(path: Path, course: dict[int, tuple[str, float]]) -> tuple[list[str], dict, dict]:
    """A reimplementation of the header and column rules of Canvas's gradebook import
    (canvas-lms ``app/models/gradebook_importer.rb``: ``header?``, ``row_has_student_headers?``,
    ``update_column_count``, ``strip_non_assignment_columns``, ``parse_assignments``,
    ``check_for_non_student_row``, ``process_pp``, ``process_submissions``; and
    ``Assignment.title_and_id`` in ``app/models/assignment.rb``).

    ``course``: Canvas id -> (title, points possible). Returns the titles of the assignments the
    import would create, each existing assignment's points possible after the import, and the
    grades it reads: ``{(SIS login, Canvas id or new title): grade}``.
    """
    table = rows(path)
    header = table[0]
    assert len(header) > 3 and "Student" in header[0] and "ID" in header[1], "InvalidHeaderRow"
    student_columns = 3
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        student_columns += 1
    elif re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3]):
        student_columns += 2 + bool(re.search(r"Integration\s+ID", header[4]))
    assert "Section" in header[student_columns - 1], "InvalidHeaderRow"
    login_column = next(i for i, h in enumerate(header) if re.search(r"SIS\s+Login\s+ID", h))
    created, columns = [], {}
    for index, name in enumerate(header[student_columns:], start=student_columns):
        if _NON_ASSIGNMENT.search(name):
            continue
        m = re.fullmatch(r"(.*)\s\((\d+)\)", name, re.S)  # title_and_id
        key: int | str | None = int(m.group(2)) if m and int(m.group(2)) in course else None
        key = key or next((i for i, (title, _) in course.items() if title == name), None)  # backward compat
        if key is None:
            key = m.group(1) if m else name
            created.append(key)
        columns[index] = key
    points = {i: pp for i, (_, pp) in course.items()}
    grades = {}
    for row in table[1:]:
        if "Points Possible" in row[0]:  # process_pp: a value sets the assignment's points possible
            points.update({columns[i]: float(row[i]) for i in columns if row[i] and columns[i] in points})
        elif not all(re.fullmatch(r"\s*(Muted|Manual Posting.*)?\s*", c, re.I) for c in row):
            grades.update({(row[login_column], columns[i]): row[i].strip() for i in columns})
    return created, points, grades


COURSE = {4242: ("02 Self Attention", 34.0), 4243: ("Multi-Head Exercises", 39.0), 7: ("Quiz 1", 5.0)}


def test_the_reimplemented_importer_sees_a_column_titled_by_the_notebook_as_a_new_assignment(tmp_path):
    path = tmp_path / "old.csv"  # what the export wrote before: the notebook's name for a title
    path.write_text(f"Student,ID,SIS User ID,SIS Login ID,Section,{B}\n    Points Possible,,,,,39\nAnn,1,,ann,S,16\n")
    created, _, grades = canvas_import(path, COURSE)
    assert created == [B] and grades == {("ann", B): "16"}


@pytest.mark.parametrize("target", ["Multi-Head Exercises (4243)", "4243", "Multi-Head Exercises"])
def test_canvas_import_by_canvas_rules_creates_no_assignment_and_sets_the_right_cells(book, roster, tmp_path, target):
    out = tmp_path / "canvas.csv"
    args = ["export", "--db", str(book), "--format", "canvas", "--roster", str(roster), "--out", str(out)]
    assert main([*args, "--map", f"{B}={target}", "--missing", "zero"]) == 0
    created, points, grades = canvas_import(out, COURSE)
    assert created == []  # every column is an assignment the course has
    assert points == {i: pp for i, (_, pp) in COURSE.items()}  # no points possible changed
    assert grades == {
        ("ann", 4242): "30",
        ("ann", 4243): "16",
        ("bob", 4242): "0",  # --missing zero
        ("bob", 4243): "0",
        ("'=evil", 4242): "1",
        ("'=evil", 4243): "0",
    }


def test_an_assignment_without_a_canvas_column_is_an_error_naming_it_and_the_roster_columns(
    book, roster, tmp_path, capsys
):
    out = tmp_path / "canvas.csv"
    args = ["export", "--db", str(book), "--format", "canvas", "--roster", str(roster), "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"assignment {B} has no column in the roster" in err and f'--map {B}="TITLE (ID)"' in err
    assert "'02 Self Attention (4242)', 'Multi-Head Exercises (4243)'" in err and "Current Score" not in err
    assert not out.exists()
    assert main([*args, "--map", f"{B}=Layer Norm (9999)"]) == 2  # a map to no column of the roster
    err = capsys.readouterr().err
    assert f"--map {B}='Layer Norm (9999)': no assignment column(s) of the roster" in err and "(4243)" in err
    assert main([*args, "--map", f"{B}=02 Self Attention (4242)"]) == 2  # two notebooks, one column
    assert f"{A} and {B} both go to the column '02 Self Attention (4242)'" in capsys.readouterr().err
    assert main([*args, "--map", B]) == 2
    assert '--map: expected ASSIGNMENT="Canvas title (id)"' in capsys.readouterr().err
    assert main([*args, "--map", "99_nothing=4243"]) == 2
    assert "--map 99_nothing: no such assignment" in capsys.readouterr().err
    assert not out.exists()


def test_scale_rescales_to_canvas_points_possible_and_without_it_a_difference_is_a_warning(book, tmp_path, capsys):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,02 Self Attention (4242),Multi-Head Exercises (4243)\n"
        "    Points Possible,,,,,10,39\n"
        "Ann,101,S101,ann,A,,\n",
        encoding="utf-8",
    )
    out = tmp_path / "canvas.csv"
    args = ["export", "--db", str(book), "--format", "canvas", "--roster", str(roster), "--out", str(out)]
    args += ["--map", f"{B}=4243"]
    assert main([*args, "--scale"]) == 0
    assert rows(out)[1][5:] == ["10", "39"] and rows(out)[2][5:] == ["8.82", "16"]  # 30 * 10 / 34; 16 * 39 / 39
    assert "warning" not in capsys.readouterr().err
    assert main(args) == 0
    assert rows(out)[1][5:] == ["10", "39"] and rows(out)[2][5:] == ["30", "16"]  # Canvas's points stay
    assert f"warning: {A} has 34 points, Canvas's '02 Self Attention (4242)' 10" in capsys.readouterr().err
    assert main(["export", "--db", str(book), "--format", "wide", "--out", str(out), "--scale"]) == 2
    assert "--map, --missing and --scale go with --format canvas" in capsys.readouterr().err


Q = "ch02-nb-mean-shift"


@pytest.fixture
def by_hand(tmp_path: Path) -> Path:
    """A with Q (4 points by hand, one rubric item of 3) and q2 (2 points): ann 30 by the
    checks, Q graded 3 with a comment, q2 answered and pending; carl 34, Q graded 4, q2 blank."""
    db = tmp_path / "h.sqlite"
    with Gradebook(db) as gb:
        ann = replace(graded(A, 30), answers=({"id": Q, "answer": "x"}, {"id": "q2", "answer": "y"}))
        gb.save("ann", ann, "c", 1.0)
        gb.save("carl", replace(graded(A, 34), answers=({"id": Q, "answer": "z"},)), "c", 1.0)
        setup = gb.manual.set_question(A, Q, max_points=4, rubric=[(None, "names the shift", 3)], by="lee", expected=0)
        gb.manual.set_question(A, "q2", max_points=2, rubric=[], by="lee", expected=0)
        item = setup.rubric[0].id
        gb.manual.grade(A, Q, ["ann"], items=[item], adjust=0, comment="**good**", by="lee", expected={"ann": 0})
        gb.manual.grade(A, Q, ["carl"], items=[item], adjust=1, comment="", by="lee", expected={"carl": 0})
    return db


def test_the_csv_and_wide_table_add_manual_points_to_the_score_and_the_maximum(by_hand, tmp_path):
    export_csv(by_hand, tmp_path / "all.csv")
    with open(tmp_path / "all.csv", newline="", encoding="utf-8") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    ann, carl = table["ann"], table["carl"]
    assert (ann["score"], ann["max_score"], ann["raw_score"], ann["manual"], ann["manual_pending"]) == (
        "33",
        "40",
        "30",
        "3",
        "1",
    )
    assert ann["flags"] == "manual grading pending: 1"
    assert (carl["score"], carl["max_score"], carl["manual"], carl["manual_pending"], carl["flags"]) == (
        "38",
        "40",
        "4",
        "0",
        "",
    )
    out = tmp_path / "wide.csv"
    assert main(["export", "--db", str(by_hand), "--format", "wide", "--out", str(out)]) == 0
    assert rows(out) == [["student", f"{A} (max 40)"], ["ann", "33"], ["carl", "38"]]


def test_canvas_scale_rescales_from_the_points_possible_with_manual_points(by_hand, tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,02 Self Attention (4242)\n"
        "    Points Possible,,,,,10\nAnn,101,S101,ann,A,\n",
        encoding="utf-8",
    )
    out = tmp_path / "canvas.csv"
    args = ["export", "--db", str(by_hand), "--format", "canvas", "--roster", str(roster), "--out", str(out)]
    assert main([*args, "--scale"]) == 0
    assert rows(out)[2][5:] == ["8.25"]  # 33 * 10 / 40


def test_gradescope_results_have_a_test_per_question_graded_by_hand_with_its_comment(by_hand, tmp_path):
    assert export_gradescope(by_hand, tmp_path / "gs") == 2
    ann = json.loads((tmp_path / "gs" / file_stem("ann") / A / "results.json").read_text(encoding="utf-8"))
    assert ann["score"] == 33
    by_hand_tests = [t for t in ann["tests"] if "graded by hand" in t["name"]]
    assert [(t["name"], t["score"], t["max_score"], t["status"]) for t in by_hand_tests] == [
        (f"{Q} (graded by hand)", 3.0, 4.0, "failed")
    ]
    assert by_hand_tests[0]["output"] == "3 / 4\n- names the shift\n**good**"
    assert "Being graded by hand: 1 question(s)" in ann["output"]
    carl = json.loads((tmp_path / "gs" / file_stem("carl") / A / "results.json").read_text(encoding="utf-8"))
    assert [(t["score"], t["status"]) for t in carl["tests"] if "graded by hand" in t["name"]] == [
        (4.0, "passed"),
        (0.0, "failed"),
    ]
    assert "Being graded by hand" not in carl["output"]
