"""Benchmark: saving a grade by hand, and reading every record with manual points.

Run with ``python benchmarks/manual_store.py`` (use ``nice`` on a shared machine). Prints
numbers; nothing here is a timed test. Targets: a save (one student's grade, or a 25-member
answer group's, in one transaction with its history lines) in at most 100 ms; reading every
record (``Gradebook.rows()``) about as fast with manual points as without.

The gradebook is :func:`benchmarks.report.make_gradebook`'s: 1,000 students x 7 assignments,
answers to most "think about it" questions. Then every question gets a setup (2 points, three
rubric items) and the answers are graded in groups of 25, as a grader working through answer
groups would, before the saves are timed (each on a fresh version: no conflict).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import make_gradebook

from course_lib.autograder import gradebook
from course_lib.autograder.gradebook import Gradebook


def _rows_seconds(book: Gradebook) -> float:
    """The time of reading every record (``Gradebook.rows()``)."""
    t0 = time.perf_counter()
    n = sum(1 for _ in book.rows())
    assert n == book.count()
    return time.perf_counter() - t0


def _rows_with_and_without(book: Gradebook, runs: int = 7) -> tuple[float, float]:
    """The median times of ``Gradebook.rows()`` with the manual points and with them left out
    (the store's tables read as empty), alternated so that the machine's load hits both alike."""
    real = gradebook.ManualTables.read
    with_, without = [], []
    for _ in range(runs):
        gradebook.ManualTables.read = classmethod(lambda cls, *a, **k: cls({}, {}))  # type: ignore[method-assign]
        try:
            without.append(_rows_seconds(book))
        finally:
            gradebook.ManualTables.read = real  # type: ignore[method-assign]
        with_.append(_rows_seconds(book))
    return statistics.median(with_), statistics.median(without)


def _answered(book: Gradebook) -> dict[tuple[str, str], list[str]]:
    """(assignment, question) -> the students with a non-blank answer."""
    found: dict[tuple[str, str], list[str]] = {}
    for student, rec in book.rows():
        for entry in rec.answers:
            found.setdefault((rec.assignment, entry["id"]), [])
            if entry.get("answer", "").strip():
                found[(rec.assignment, entry["id"])].append(student)
    return found


def _grade_all(book: Gradebook, answered: dict[tuple[str, str], list[str]]) -> int:
    """Set up every question and grade every answer, 25 at a time; returns the grades saved."""
    saved = 0
    for (assignment, question), students in answered.items():
        rubric = [(None, "names the idea", 1.0), (None, "says why", 1.0), (None, "wrong claim", -0.5)]
        setup = book.manual.set_question(assignment, question, max_points=2, rubric=rubric, by="bench", expected=0)
        ids = [i.id for i in setup.rubric]
        for start in range(0, len(students), 25):
            group = students[start : start + 25]
            book.manual.grade(
                assignment,
                question,
                group,
                items=ids[:2],
                adjust=0,
                comment="",
                by="bench",
                expected=dict.fromkeys(group, 0),
            )
            saved += len(group)
    return saved


def _saves(book: Gradebook, assignment: str, question: str, students: list[str], size: int, n: int) -> list[float]:
    """``n`` timed saves of groups of ``size`` (each based on the version stored)."""
    items = [i.id for i in book.manual.setup(assignment, question).rubric]
    times = []
    for k in range(n):
        group = [students[(k * size + j) % len(students)] for j in range(size)]
        current = book.manual.grades(assignment, question)
        expected = {s: current[s].version if s in current else 0 for s in group}
        t0 = time.perf_counter()
        book.manual.grade(
            assignment, question, group, items=items[: 1 + k % 3], adjust=k % 2, comment=f"save {k}", by="bench",
            expected=expected,
        )  # fmt: skip
        times.append(time.perf_counter() - t0)
    return times


def _line(label: str, times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"  {label}: median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms over {len(ms)} saves (goal <= 100 ms)"


def main() -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/manual_store.py", description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=1000, help="students (default: 1000)")
    p.add_argument("--saves", type=int, default=100, help="timed saves of each kind (default: 100)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="manual-bench-"))
    try:
        db = work / "gradebook.sqlite"
        t0 = time.perf_counter()
        records, _, _ = make_gradebook(db, args.n)
        print(
            f"gradebook: {records} records ({args.n} students x 7 assignments), built in {time.perf_counter() - t0:.1f} s"
        )
        with Gradebook(db) as book:
            before = _rows_seconds(book)
            answered = _answered(book)
            t0 = time.perf_counter()
            graded = _grade_all(book, answered)
            print(
                f"  {len(answered)} questions set up, {graded} answers graded in groups of 25 in "
                f"{time.perf_counter() - t0:.1f} s"
            )
            after, left_out = _rows_with_and_without(book)
            (assignment, question), students = max(answered.items(), key=lambda kv: len(kv[1]))
            one = _saves(book, assignment, question, students, 1, args.saves)
            group = _saves(book, assignment, question, students, 25, args.saves)
            decisions = len(book.manual.history())
        print(_line("grade of one student", one))
        print(_line("grade of a 25-member group", group))
        print(
            f"  Gradebook.rows() of {records} records: {before * 1000:.0f} ms before any grade by hand; with "
            f"{graded} grades ({decisions} decisions in the history) {after * 1000:.0f} ms, and "
            f"{left_out * 1000:.0f} ms with them left out (medians of 7, alternated)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
