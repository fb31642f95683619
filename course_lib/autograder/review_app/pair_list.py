"""The look-alike pairs the review app shows: computed once per assignment, then cached.

The pairs are :func:`course_lib.autograder.class_report.pairs.lookalikes`' (the class report's
search, with the course's exercise and solution notebooks), over the assignment's records in
the gradebook. Computing them takes seconds for a large class, so an app keeps each
assignment's in a :class:`PairCache` for its lifetime; decisions on them live in the gradebook
(:meth:`ManualStore.decide_pair`), not here. Only the students' sources are kept: the
solution's code is read for the comparison and dropped.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from ..class_report.data import Row, functions_of
from ..class_report.pairs import assignment_lookalikes, student_sources
from ..gradebook import Gradebook
from ..lookalike import REFERENCE, Region
from ..record import Record

__all__ = ["ShownPair", "AssignmentPairs", "compute_pairs", "PairCache", "REFERENCE"]


@dataclass(frozen=True)
class ShownPair:
    """One look-alike pair of an assignment.

    Args:
        number: its place in the list, 1-based (the most similar first).
        a: a student.
        b: another student, or :data:`~course_lib.autograder.lookalike.REFERENCE`.
        similarity: shared fingerprints over those of the smaller submission.
        shared: shared fingerprints.
        regions: the matched lines, per graded function.
    """

    number: int
    a: str
    b: str
    similarity: float
    shared: int
    regions: tuple[Region, ...]

    @property
    def reference(self) -> bool:
        """Whether ``b`` is the reference solution (whose code is never shown)."""
        return self.b == REFERENCE

    @property
    def functions(self) -> tuple[str, ...]:
        """The graded functions with matched lines, in order of first match."""
        return tuple(dict.fromkeys(r.function for r in self.regions))


@dataclass(frozen=True)
class AssignmentPairs:
    """An assignment's pairs and the students' code they point into.

    Args:
        assignment: the assignment's name.
        pairs: the pairs, most similar first.
        sources: student -> graded function -> source (students only, never the solution).
        compared: how many submissions had sources to compare.
    """

    assignment: str
    pairs: tuple[ShownPair, ...]
    sources: dict[str, dict[str, str]]
    compared: int


def _rows(db: str | Path, assignment: str) -> list[Row]:
    """The assignment's records, sorted by student (only that assignment's JSON is read)."""
    with Gradebook(db) as book:
        rows = book.conn.execute(
            "SELECT student, record FROM results WHERE assignment = ? ORDER BY student", (assignment,)
        ).fetchall()
    return [(student, Record.from_json(json.loads(record))) for student, record in rows]


def compute_pairs(db: str | Path, assignment: str, exercises: str | Path, solutions: str | Path) -> AssignmentPairs:
    """An assignment's look-alike pairs, as the class report finds them
    (:func:`~course_lib.autograder.class_report.pairs.assignment_lookalikes`).

    Args:
        db: the gradebook.
        assignment: the assignment's name.
        exercises: folder of the exercise notebooks (the starter code).
        solutions: folder of the solution notebooks (compared with, never shown).

    Returns:
        The :class:`AssignmentPairs`.

    Raises:
        ReportError: a notebook the search needs is missing or unreadable.
    """
    rows = _rows(db, assignment)
    found, summary = assignment_lookalikes(
        rows, assignment, functions_of(assignment, rows), exercises=exercises, solutions=solutions
    )
    pairs = tuple(
        ShownPair(
            number=i,
            a=p["a"],
            b=p["b"],
            similarity=float(p["similarity"]),
            shared=int(p["shared"]),
            regions=tuple(
                Region(r["function"], (r["a_lines"][0], r["a_lines"][1]), (r["b_lines"][0], r["b_lines"][1]))
                for r in p["regions"]
            ),
        )
        for i, p in enumerate(found, 1)
    )
    return AssignmentPairs(assignment, pairs, student_sources(rows), int(summary["compared"]))


class PairCache:
    """Each assignment's pairs, computed on first use (one computation at a time per assignment,
    other requests for it wait) and kept for the app's lifetime."""

    def __init__(self, db: str | Path, exercises: str | Path, solutions: str | Path):
        self.db, self.exercises, self.solutions = db, exercises, solutions
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._pairs: dict[str, AssignmentPairs] = {}

    def get(self, assignment: str) -> AssignmentPairs:
        """The assignment's pairs (computed now if not yet)."""
        with self._lock:
            lock = self._locks.setdefault(assignment, threading.Lock())
        with lock:
            if assignment not in self._pairs:
                self._pairs[assignment] = compute_pairs(self.db, assignment, self.exercises, self.solutions)
            return self._pairs[assignment]
