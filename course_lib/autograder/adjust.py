"""An instructor's changes to a grading: overrides and review resolutions, validated.

``override`` sets the score that counts for a submission's current notebook (``0 <= P <=``
the assignment's points), whatever the grading gave, late penalty included: the override is
the final score. ``clear`` removes the override or resolution that counts, so the grading's
score counts again. ``resolve`` settles a ``review`` record (a notebook held because it
tampered with the grading; nothing in it was graded, so it holds 0 points): ``accept`` gives
``points`` (default: the grading's score, refused when that is the 0 of a notebook held
ungraded: give the score you judged), ``reject`` confirms 0 points and needs a reason.

Each is appended to the submission's history (:mod:`.history`) and shown by every export as
a flag; see :meth:`.gradebook.Gradebook.save` for what a regrade or a resubmission does to it.
"""

from __future__ import annotations

from pathlib import Path

from .gradebook import Gradebook
from .identity import identity
from .record import Record

__all__ = ["AdjustError", "override", "clear", "resolve"]


class AdjustError(ValueError):
    """An override or resolution refused: its message names the argument, what was expected
    and what was given."""


def _stored(book: Gradebook, verb: str, student: str, assignment: str) -> tuple[str, Record]:
    """The student's id as stored and their record of ``assignment``, or an AdjustError that
    lists what the gradebook has for them."""
    student, assignment = identity(student), identity(assignment)
    record = book.record(student, assignment)
    if record is not None:
        return student, record
    theirs = sorted(rec.assignment for s, rec in book.rows() if s == student)
    if theirs:
        raise AdjustError(
            f"{verb}: ASSIGNMENT {assignment!r} has no grading for {student!r}; their assignments: {', '.join(theirs)}"
        )
    raise AdjustError(f"{verb}: STUDENT {student!r} has no grading in {book.path} (see course-lib export)")


def _points(verb: str, points: float, record: Record) -> float:
    if not 0 <= points <= record.max_score:
        raise AdjustError(
            f"{verb}: --points must be between 0 and {record.max_score:g} ({record.assignment}'s points), got {points:g}"
        )
    return float(points)


def override(
    db: str | Path, student: str, assignment: str, points: float, reason: str, by: str, expected: int | None = None
) -> Record:
    """Make ``points`` the score that counts for the student's current notebook; returns the
    record as it now counts. With ``expected`` (the :meth:`.Gradebook.last_event` the
    instructor saw), a :class:`.manual.Conflict` when someone acted on it since."""
    if not reason.strip():
        raise AdjustError("override: --reason must say why (it is kept in the history), got an empty reason")
    with Gradebook(db) as book:
        student, record = _stored(book, "override", student, assignment)
        book.adjust(student, record, "override", _points("override", points, record), reason.strip(), by, expected)
        return _now(book, student, record)


def clear(db: str | Path, student: str, assignment: str, reason: str, by: str, expected: int | None = None) -> Record:
    """Remove the override or resolution that counts (an AdjustError when there is none);
    ``expected`` as for :func:`override`."""
    with Gradebook(db) as book:
        student, record = _stored(book, "override --clear", student, assignment)
        if record.adjustment is None:
            raise AdjustError(
                f"override --clear: {student}/{record.assignment} has no override or resolution to clear "
                f"(its score {record.score:g} is the grading's)"
            )
        book.adjust(student, record, "cleared", record.graded_score, reason.strip(), by, expected)
        return _now(book, student, record)


def resolve(
    db: str | Path,
    student: str,
    assignment: str,
    *,
    accept: bool,
    points: float | None,
    reason: str,
    by: str,
    expected: int | None = None,
) -> Record:
    """Settle a ``review`` record: accept it (``points``, default the grading's score) or
    reject it (0 points, ``reason`` required). With ``expected`` (the
    :meth:`.Gradebook.last_event` the instructor saw), a :class:`.manual.Conflict` when
    someone graded, resolved or overrode it since; nothing is saved then."""
    with Gradebook(db) as book:
        student, record = _stored(book, "resolve", student, assignment)
        if record.status != "review":
            raise AdjustError(
                f"resolve: {student}/{record.assignment} has status {record.status!r}, not 'review'; "
                "to change its score use course-lib override"
            )
        if accept:
            if points is None and record.graded_score == 0:
                raise AdjustError(
                    f"resolve --accept: --points is needed: nothing in a held notebook was graded, so the "
                    f"grading's score is 0 of {record.max_score:g}; read the notebook and give the score you judge"
                )
            given = record.graded_score if points is None else _points("resolve", points, record)
            book.adjust(student, record, "accepted", given, reason.strip(), by, expected)
        else:
            if points not in (None, 0):
                raise AdjustError(f"resolve --reject: a rejected notebook gets 0 points, got --points {points:g}")
            if not reason.strip():
                raise AdjustError("resolve --reject: --reason must say why (the student reads it), got an empty reason")
            book.adjust(student, record, "rejected", 0.0, reason.strip(), by, expected)
        return _now(book, student, record)


def _now(book: Gradebook, student: str, record: Record) -> Record:
    """The record as it counts now."""
    return book.record(student, record.assignment) or record
