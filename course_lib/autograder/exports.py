"""Out of the gradebook: a CSV, a wide table, Gradescope ``results.json`` files, feedback
reports (the Canvas gradebook import: :mod:`.canvas`).

Every export reads the score that counts (:attr:`.record.Record.score`: an instructor's
override or review resolution where there is one); the CSV's ``flags`` and the feedback say
so. The wide table and Canvas's file carry scores only: an LMS's importer would take any
other column for an assignment.

A late submission's record keeps its raw score, the penalty and the final score (``score``);
the CSV, Gradescope's output text and the feedback show all three, Canvas and the wide table
the final score.

Feedback files are written by :mod:`.feedback_files`. Feedback and exports carry what the checks say (test titles, feedback sentences, likely
mistakes) and never the hidden inputs: no test case stores its input values in a record, and
messages that came from student code were shortened and stripped of number runs when graded.
Everything a student controls is treated as data: every per-student file name carries a hash
of the exact student id (so no folder name can overwrite another student's file), Markdown
and HTML are escaped, and a CSV cell that a spreadsheet would run as a formula is neutralised.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path

from ..grading.feedback import composition_lines, errors_of
from ..grading.registry import ASSIGNMENTS
from .gradebook import Gradebook
from .identity import identity
from .record import Record
from .ungraded import ungraded_rows
from .untrusted_text import csv_cell, valid_utf8

__all__ = [
    "export_csv",
    "export_wide",
    "export_gradescope",
    "gradescope_results",
    "GRADESCOPE_VISIBILITY",
    "file_stem",
    "read_roster",
    "RosterError",
    "late_line",
    "adjustment_line",
    "gradebook_table",
    "manual_cells",
    "manual_tests",
]

#: The identity columns of a Canvas gradebook export, in its order.
CANVAS_IDENTITY = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
#: The label of the second row of a Canvas gradebook export (the points per assignment).
POINTS_POSSIBLE = "    Points Possible"


def file_stem(student: str) -> str:
    """A file name for a student: a readable part and a hash of the exact id, always (two ids
    that read alike, such as ``Ana María`` and ``Ana_Mar_a``, never share a file)."""
    student = valid_utf8(student)
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", student)[:60].lstrip(".") or "_"
    digest = hashlib.sha256(student.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}"


def late_line(rec: Record) -> str | None:
    """A late record's raw score, penalty and final score in one sentence (None when on time);
    the points given by hand count in the raw score and the penalty alike."""
    late = rec.late
    if late is None:
        return None
    by_hand = 0.0 if rec.manual is None else rec.manual.points
    penalty = round(late.points + by_hand - rec.manual_score, 6)
    return (
        f"Late: submitted {late.submitted}, {late.days} started day(s) after the deadline "
        f"{late.deadline}; penalty {late.fraction * 100:g}% = {penalty:g} point(s). "
        f"Raw score {rec.raw_score + by_hand:g}, final score {rec.score:g} / {rec.points_possible:g}."
    )


def manual_cells(rec: Record) -> tuple[str, str]:
    """The CSV's ``manual`` (the points given by hand, before any late penalty) and
    ``manual_pending`` (answers not graded yet) cells; both empty without questions graded by hand."""
    if rec.manual is None:
        return "", ""
    return f"{rec.manual.points:g}", str(rec.manual.pending)


def adjustment_line(rec: Record) -> str | None:
    """An override's or a resolution's sentence for the student (None without one)."""
    adj = rec.adjustment
    if adj is None:
        return None
    what = {"override": "Score set by your instructor", "accepted": "Accepted after review"}
    head = what.get(adj.kind, "Rejected after review")
    why = f": {adj.reason}" if adj.reason else ""
    if adj.kind == "rejected":
        return f"{head}{why}. Score 0 / {rec.points_possible:g} (the grading gave {rec.graded_score:g})."
    return f"{head}{why}. Score {adj.points:g} / {rec.max_score:g} (the grading gave {rec.graded_score:g})."


def export_csv(db: str | Path, out: str | Path) -> int:
    """One row per student and assignment: student, assignment, score (the one that counts,
    :attr:`.record.Record.score`: an override's or resolution's, else the final score after any
    late penalty, plus the points given by hand), max_score (the points possible: the checks'
    and the questions graded by hand), status, flags (forbidden calls, tampering, use of the
    reference, an instructor's override or review resolution, ``manual grading pending: N``;
    ``|``-separated), seed, raw_score (the checks' points before the penalty), late_days and
    penalty (the checks' points; both empty when on time), manual (the points given by hand,
    before the penalty) and manual_pending (answers not graded yet; both empty without questions
    graded by hand), then the points of every graded function (empty where the assignment
    does not grade it). Then one row per file no graded record was made of (status
    ``unmatched`` or ``invalid``, :mod:`.ungraded`): its student and assignment where known, no
    score, and ``origin: status: reason`` as its flags.

    Returns the number of rows written.
    """
    functions = [f for names in ASSIGNMENTS.values() for f in names]
    n = 0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(db) as book, open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "student",
                "assignment",
                "score",
                "max_score",
                "status",
                "flags",
                "seed",
                "raw_score",
                "late_days",
                "penalty",
                "manual",
                "manual_pending",
                *functions,
            ]
        )
        for student, rec in book.rows():
            points = {r["function"]: r["score"] for r in rec.functions}
            late = rec.late
            w.writerow(
                [
                    csv_cell(student),
                    csv_cell(rec.assignment),
                    f"{rec.score:g}",
                    f"{rec.points_possible:g}",
                    csv_cell(rec.status),
                    csv_cell(" | ".join(rec.all_flags)),
                    "" if rec.seed is None else str(rec.seed),
                    f"{rec.raw_score:g}",
                    "" if late is None else str(late.days),
                    "" if late is None else f"{late.points:g}",
                    *manual_cells(rec),
                    *(f"{points[fn]:g}" if fn in points else "" for fn in functions),
                ]
            )
            n += 1
        for stray in ungraded_rows(book):  # a file no graded record was made of: its reason as the flag
            w.writerow(
                [csv_cell(c) for c in (stray.student, stray.assignment, "", "", stray.status, stray.line())]
                + [""] * (6 + len(functions))
            )
            n += 1
    return n


class RosterError(ValueError):
    """A roster that cannot be read: not CSV, or no column to match students by."""


def read_roster(path: str | Path) -> tuple[list[str], str, list[dict[str, str]]]:
    """A roster's header, the column students are matched by, and its students.

    Accepted: a Canvas gradebook export (matched by ``SIS Login ID``), or any CSV with a
    ``login`` or else a ``student`` column (case-insensitive). Rows with an empty login are
    skipped: Canvas's "Points Possible" row, its test student, blank lines.
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = [h or "" for h in reader.fieldnames or []]
            rows = list(reader)
    except UnicodeDecodeError:
        raise RosterError(f"roster {path} is not UTF-8 text") from None
    lower = {h.strip().lower(): h for h in header}
    key = next((lower[k] for k in ("sis login id", "login", "student") if k in lower), None)
    if key is None:
        raise RosterError(
            f"roster {path} has no 'SIS Login ID', 'login' or 'student' column to match students by "
            f"(its columns: {', '.join(header) or 'none'})"
        )
    students = []
    for row in rows:
        login = identity(row.get(key) or "")
        if login and "Points Possible" not in (row.get(header[0]) or ""):
            students.append({**{k: (v or "") for k, v in row.items() if isinstance(k, str)}, key: login})
    return header, key, students


def gradebook_table(db: str | Path) -> tuple[dict[str, dict[str, Record]], dict[str, float]]:
    """Records per student and assignment, and each graded assignment's points possible
    (the checks' and the questions graded by hand; registry order)."""
    table: dict[str, dict[str, Record]] = {}
    points: dict[str, float] = {}
    with Gradebook(db) as book:
        for student, rec in book.rows():
            table.setdefault(identity(student), {})[rec.assignment] = rec
            points.setdefault(rec.assignment, rec.points_possible)
    order = [a for a in ASSIGNMENTS if a in points] + sorted(a for a in points if a not in ASSIGNMENTS)
    return table, {a: points[a] for a in order}


def _score(rec: Record | None) -> str:
    return "" if rec is None else f"{rec.score:g}"


def export_wide(db: str | Path, out: str | Path, roster: str | Path | None = None) -> tuple[int, list[str]]:
    """One row per student, one column per assignment: the final score (after any late
    penalty). The header carries each assignment's points: ``student``, then
    ``NAME (max POINTS)``. With a roster, its students in its order (matched by login, the
    cell empty where they have no submission); without, every student of the gradebook.

    Returns the number of student rows and the students with submissions not in the roster.
    """
    table, points = gradebook_table(db)
    if roster is not None:
        _, key, students = read_roster(roster)
        logins = [row[key] for row in students]
    else:
        logins = sorted(table)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([csv_cell(c) for c in ("student", *(f"{a} (max {p:g})" for a, p in points.items()))])
        for login in logins:
            recs = table.get(login, {})
            w.writerow([csv_cell(c) for c in (login, *(_score(recs.get(a)) for a in points))])
    known = set(logins)
    return len(logins), sorted(s for s in table if s not in known)


#: Gradescope's visibility settings (its autograder specification), for tests and results.
GRADESCOPE_VISIBILITY = ("visible", "after_due_date", "after_published", "hidden")


def gradescope_results(rec: Record, visibility: str = "visible") -> dict:
    """One submission in Gradescope's autograder results format (``results.json``).

    Every test has a ``status``: ``passed`` or ``failed`` (the only two Gradescope knows). A test
    that passed but whose points are withheld until the function's value tests pass is
    ``passed`` with a score of 0 and says so in its output (without a status Gradescope would
    show it as failed). Every text is shown as plain text (``output_format`` ``text``), so
    nothing a student wrote is rendered as HTML.

    Args:
        rec: the record.
        visibility: of the results and of every test, one of :data:`GRADESCOPE_VISIBILITY`.

    Raises:
        ValueError: an unknown ``visibility``.
    """
    if visibility not in GRADESCOPE_VISIBILITY:
        raise ValueError(
            f"gradescope: visibility must be one of {', '.join(GRADESCOPE_VISIBILITY)}, got {visibility!r}"
        )
    tests = []
    for fr in rec.functions:
        said: dict[str, str] = {}  # each likely mistake in full once, on the first test it explains
        errors = {tests[0]: (error, tests) for error, tests in errors_of(fr["results"])}
        for r in fr["results"]:
            withheld = bool(r.get("withheld"))
            if withheld:
                lines = [f"Passed, points withheld: {r['feedback'].removeprefix('this test passes, but ')}"]
            else:
                lines = [r["feedback"] or ("passed" if r["passed"] else "failed")]
            if r is fr["results"][0]:  # the function's notes (a forbidden call, a missing def) once
                lines += [f"Note: {note}" for note in fr.get("notes", ())]
            lines += _error_said_once(r, errors)
            for message in r.get("diagnoses") or ([r["diagnosis"]] if r["diagnosis"] else []):
                if message in said:
                    lines.append(f"Likely mistake: the one named in test '{said[message]}'")
                else:
                    said[message] = r["name"]
                    lines.append(f"Likely mistake: {message}")
            if r is fr["results"][-1]:
                lines += composition_lines(fr["function"], fr.get("composition"), fr["max_score"])
            tests.append(
                {
                    "name": f"{fr['function']}: {r['checks']}",
                    "score": r["points"],
                    "max_score": r["max_points"],
                    "status": "passed" if r["passed"] or withheld else "failed",
                    "output": "\n".join(lines),
                    "visibility": visibility,
                }
            )
    tests += manual_tests(rec, visibility)
    pending = 0 if rec.manual is None else rec.manual.pending
    late = late_line(rec)
    waiting = [f"Being graded by hand: {pending} question(s); the score does not count them yet."] if pending else []
    output = "\n".join([*([late] if late else []), *waiting, *rec.messages])
    return {
        "score": rec.score,
        "output": output or f"{rec.assignment}: {rec.score:g}/{rec.points_possible:g}",
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": visibility,
        "stdout_visibility": "hidden",
        "extra_data": {
            "assignment": rec.assignment,
            "status": rec.status,
            "seed": rec.seed,
            "flags": list(rec.flags),
            "isolation": rec.isolation,
        },
        "tests": tests,
    }


def manual_tests(rec: Record, visibility: str) -> list[dict]:
    """One Gradescope test per question graded by hand (or not answered): its points, the
    rubric items applied and the grader's comment (plain text); a question still being graded
    has none (the results' output says how many)."""
    tests = []
    for q in () if rec.manual is None else rec.manual.questions:
        if q.points is None:
            continue
        lines = [q.line(), *(f"- {item}" for item in q.items), *([q.comment] if q.comment else [])]
        tests.append(
            {
                "name": f"{q.question} (graded by hand)",
                "score": q.points,
                "max_score": q.max_points,
                "status": "passed" if q.points >= q.max_points else "failed",
                "output": "\n".join(lines),
                "visibility": visibility,
            }
        )
    return tests


def _error_said_once(r: dict, errors: dict[str, tuple[str, list[str]]]) -> list[str]:
    """A Gradescope test's lines for the error it raised: in full on the first test it affects
    (with the others named), referred to on the others."""
    if not r.get("error"):
        return []
    if r["name"] in errors:
        error, tests = errors[r["name"]]
        also = f" (also tests {', '.join(repr(t) for t in tests[1:])})" if len(tests) > 1 else ""
        return [f"Error{also}: {error}"]
    first = next((t for t, (_, tests) in errors.items() if r["name"] in tests), "")
    return [f"Error: the one shown in test '{first}'"]


def export_gradescope(db: str | Path, out: str | Path, visibility: str = "visible") -> int:
    """``OUT/<student file stem>/<assignment>/results.json`` per submission (tests and results
    shown as ``visibility``, :func:`gradescope_results`); returns how many."""
    if visibility not in GRADESCOPE_VISIBILITY:
        raise ValueError(f"export: --visibility must be one of {', '.join(GRADESCOPE_VISIBILITY)}, got {visibility!r}")
    n = 0
    with Gradebook(db) as book:
        for student, rec in book.rows():
            path = Path(out) / file_stem(student) / rec.assignment / "results.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(gradescope_results(rec, visibility), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
            )
            n += 1
    return n
