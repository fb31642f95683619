"""Benchmark: what the review app's index adds per assignment (held records and look-alike pairs).

Run with ``nice python benchmarks/review_index.py [--students N] [--assignments M]``. Prints
numbers; nothing here is a timed test. The index counts each assignment's records held for
review (``data.held_counts``, one query for all) and, when its pairs are cached, checks they are fresh
(``pair_list.grading_state``, the newest grading event); neither computes pairs. The gradebook
holds N students x M assignments, one record each (one in ten held for review) and three events
each (graded, regraded, override), so the events table has 3·N·M rows. Timed: each query per
assignment, and the whole index page through Flask's test client (median of 10).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from course_lib.autograder.gradebook import Gradebook  # noqa: E402
from course_lib.autograder.review_app import create_app  # noqa: E402
from course_lib.autograder.review_app.data import held_counts  # noqa: E402
from course_lib.autograder.review_app.pair_list import grading_state  # noqa: E402

TOKEN = "benchmark-token-" + "x" * 40
EVENT = (
    "INSERT INTO events (student, assignment, at, kind, by, sha256, status, score, max_score, reason, record) "
    "VALUES (?, ?, 't', ?, 'b', '0', ?, 1, 1, '', NULL)"
)
RESULT = "INSERT INTO results VALUES (?, ?, '0', 'c', ?, 1, 1, '{}', 0, 't')"


def build(db: Path, students: int, assignments: int) -> None:
    """The gradebook described in the module's docstring."""
    with Gradebook(db) as book:
        book.conn.execute("BEGIN")
        for a in range(assignments):
            status = ["review" if s % 10 == 0 else "graded" for s in range(students)]
            book.conn.executemany(RESULT, [(f"s{s}", f"a{a}", status[s]) for s in range(students)])
            book.conn.executemany(
                EVENT,
                [(f"s{s}", f"a{a}", k, status[s]) for s in range(students) for k in ("graded", "regraded", "override")],
            )
        book.conn.execute("COMMIT")


def main() -> None:
    """Build the gradebook, time the queries and the index, print the numbers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=1000)
    parser.add_argument("--assignments", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "g.sqlite"
        build(db, args.students, args.assignments)
        names = [f"a{a}" for a in range(args.assignments)]
        with Gradebook(db) as book:
            events = book.conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
            print(f"{args.students} students x {args.assignments} assignments, {events} events")
            start = time.perf_counter()
            for name in names:
                grading_state(book, name)
            print(f"grading_state: {(time.perf_counter() - start) / len(names) * 1000:.2f} ms per assignment")
            start = time.perf_counter()
            held_counts(book)
            print(f"held_counts: {(time.perf_counter() - start) * 1000:.2f} ms for all assignments")
        app = create_app(db, exercises=ROOT / "exercises", solutions=ROOT / "solutions", token=TOKEN, grader="b")
        client = app.test_client()
        assert client.get(f"/?token={TOKEN}").status_code == 303
        times = []
        for _ in range(10):
            start = time.perf_counter()
            assert client.get("/").status_code == 200
            times.append(time.perf_counter() - start)
        print(f"index page: median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
