"""Files given to the grader that no graded record can be made of: each one a record anyway.

A file under ``SUBMISSIONS/`` that is not ``<student>/<NN_slug>.ipynb`` (``Copy of
02_self_attention.ipynb``, a ``.py`` export, a stray top-level notebook), and every
``unmatched`` or ``invalid`` entry of the collect manifest (:mod:`.collect`), becomes an
:class:`UngradedFile` with its status and reason. ``course-lib grade`` stores them in the
gradebook's ``ungraded`` table (replaced on each run: it is what the folder holds now), counts
and lists them in its summary and exits with 1; the CSV export has a row for each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .gradebook import Gradebook
from .untrusted_text import valid_utf8

if TYPE_CHECKING:
    from .collect import Manifest

__all__ = ["UngradedFile", "from_manifest", "save_ungraded", "ungraded_rows"]

_TABLE = (
    "CREATE TABLE IF NOT EXISTS ungraded (origin TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, "
    "student TEXT NOT NULL, assignment TEXT NOT NULL)"
)


@dataclass(frozen=True)
class UngradedFile:
    """A file no graded record could be made of.

    Args:
        origin: where it is: its path under the submissions folder, or ``DOWNLOAD: PATH`` for
            a file of an LMS download that ``collect`` did not collect.
        status: ``unmatched`` (no student or no assignment) or ``invalid`` (unreadable).
        reason: why, in a sentence.
        student: the student, where known ("" otherwise).
        assignment: the assignment, where known ("" otherwise).
    """

    origin: str
    status: str
    reason: str
    student: str = ""
    assignment: str = ""

    def line(self) -> str:
        """``origin: status: reason``, one line."""
        return f"{self.origin}: {self.status}: {self.reason}"


def from_manifest(manifest: Manifest) -> list[UngradedFile]:
    """The manifest's ``unmatched`` and ``invalid`` entries."""
    return [
        UngradedFile(f"{e.source}: {e.origin}", e.status, e.reason, e.student, e.assignment)
        for e in manifest.entries
        if e.status in ("unmatched", "invalid")
    ]


def save_ungraded(book: Gradebook, files: list[UngradedFile]) -> None:
    """Replace the gradebook's ungraded files with ``files``, in one transaction."""
    book.conn.execute(_TABLE)
    book.conn.execute("BEGIN IMMEDIATE")
    try:
        book.conn.execute("DELETE FROM ungraded")
        book.conn.executemany(
            "INSERT INTO ungraded VALUES (?, ?, ?, ?, ?)",
            [tuple(valid_utf8(x) for x in (f.origin, f.status, f.reason, f.student, f.assignment)) for f in files],
        )
        book.conn.execute("COMMIT")
    except BaseException:
        if book.conn.in_transaction:
            book.conn.execute("ROLLBACK")
        raise


def ungraded_rows(book: Gradebook) -> list[UngradedFile]:
    """The gradebook's ungraded files (none in a gradebook that predates them)."""
    book.conn.execute(_TABLE)
    rows = book.conn.execute("SELECT origin, status, reason, student, assignment FROM ungraded ORDER BY rowid")
    return [UngradedFile(*row) for row in rows]
