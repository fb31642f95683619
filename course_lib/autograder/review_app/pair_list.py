"""The look-alike pairs the review app shows: computed once per assignment and grading, then cached.

The pairs are :func:`course_lib.autograder.class_report.pairs.lookalikes`' (the class report's
search, with the course's exercise and solution notebooks), over the assignment's records in
the gradebook. Computing them takes seconds for a large class, so an app keeps each
assignment's in a :class:`PairCache`, keyed on the gradebook's state (:func:`grading_state`: the
newest grading event of that assignment, one cheap query): a regrade written to
the gradebook while the app runs gives fresh pairs on the next request. Decisions on them live
in the gradebook (:meth:`ManualStore.decide_pair`, by the students' ids), not here, so they
still show after a regrade. Only the students' sources are kept: the
solution's code is read for the comparison and dropped.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..class_report.data import Row, functions_of
from ..class_report.pairs import assignment_lookalikes, student_sources
from ..gradebook import Gradebook
from ..lookalike import REFERENCE, Region
from ..manual import PairDecision, pair_key
from ..record import Record

__all__ = [
    "ShownPair",
    "AssignmentPairs",
    "PairCount",
    "compute_pairs",
    "grading_state",
    "pair_count",
    "PairCache",
    "REFERENCE",
]

#: The events that change what the pairs are computed from (a record's code): a grading.
_GRADINGS = ("graded", "regraded", "resubmitted")


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


@dataclass(frozen=True)
class PairCount:
    """How many look-alike pairs an assignment has, and how many are decided.

    Args:
        pairs: the pairs found.
        confirmed: of those, the ones confirmed.
        dismissed: of those, the ones dismissed.
    """

    pairs: int
    confirmed: int
    dismissed: int


def pair_count(found: AssignmentPairs, decisions: Mapping[tuple[str, str], PairDecision]) -> PairCount:
    """The pairs of ``found`` and their decisions (a decision on a pair no longer found: not counted).

    Args:
        found: the assignment's pairs.
        decisions: :meth:`ManualStore.pairs` of the assignment (keyed by the sorted students).

    Returns:
        The :class:`PairCount`.
    """
    verdicts = [decisions[k].verdict for k in (pair_key(p.a, p.b) for p in found.pairs) if k in decisions]
    return PairCount(len(found.pairs), verdicts.count("confirmed"), verdicts.count("dismissed"))


def _rows(db: str | Path, assignment: str) -> list[Row]:
    """The assignment's records, sorted by student (only that assignment's JSON is read)."""
    with Gradebook(db) as book:
        rows = book.conn.execute(
            "SELECT student, record FROM results WHERE assignment = ? ORDER BY student", (assignment,)
        ).fetchall()
    return [(student, Record.from_json(json.loads(record))) for student, record in rows]


def grading_state(book: Gradebook, assignment: str) -> int:
    """The id of the assignment's newest grading event (0 when none): it changes when
    ``course-lib grade`` stores a grading of the assignment, and only then (a review decision
    or an override changes a score, not the code the pairs compare).

    Args:
        book: the gradebook.
        assignment: the assignment's name.

    Returns:
        The event's id.
    """
    marks = ", ".join("?" * len(_GRADINGS))
    row = book.conn.execute(
        f"SELECT MAX(id) FROM events WHERE assignment = ? AND kind IN ({marks})", (assignment, *_GRADINGS)
    ).fetchone()
    return int(row[0] or 0)


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
    other requests for it wait) and kept while the gradebook's :func:`grading_state` of that
    assignment stays the same (a regrade: computed again on the next request)."""

    def __init__(self, db: str | Path, exercises: str | Path, solutions: str | Path):
        self.db, self.exercises, self.solutions = db, exercises, solutions
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._pairs: dict[str, tuple[int, AssignmentPairs]] = {}

    def _state(self, assignment: str) -> int:
        with Gradebook(self.db) as book:
            return grading_state(book, assignment)

    def get(self, assignment: str) -> AssignmentPairs:
        """The assignment's pairs (computed now if not yet, or if graded again since)."""
        with self._lock:
            lock = self._locks.setdefault(assignment, threading.Lock())
        with lock:
            state = self._state(assignment)
            kept = self._pairs.get(assignment)
            if kept is None or kept[0] != state:
                kept = (state, compute_pairs(self.db, assignment, self.exercises, self.solutions))
                self._pairs[assignment] = kept
            return kept[1]

    def peek(self, book: Gradebook, assignment: str) -> AssignmentPairs | None:
        """The assignment's pairs if they are computed and fresh, else None (never computes).

        Args:
            book: the gradebook (the caller's open one: one cheap query).
            assignment: the assignment's name.

        Returns:
            The cached pairs, or None.
        """
        kept = self._pairs.get(assignment)
        if kept is None or kept[0] != grading_state(book, assignment):
            return None
        return kept[1]
