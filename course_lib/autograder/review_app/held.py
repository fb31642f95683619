"""The ``held`` pages: the records the autograder held for review, and a grader's decision.

``/a/<assignment>/held`` lists the assignment's ``review`` records (who, why, resolved or not
and by whom); ``/a/<assignment>/held/<student>`` shows one: why it was held (each flag read by
:mod:`.why_held`: the code cell, the line and the construct it names, or, when the flag names
no cell, what it says), the student's code as the record kept it (the graded functions,
escaped, numbered, the construct's lines highlighted), the message, the submission's history,
and the two decisions: accept (points: the grading's score by default, required when that is
the 0 of a notebook nothing in was graded) or reject (a reason required). Both go through
:func:`course_lib.autograder.adjust.resolve` with ``expected``, the id of the newest event the
page was rendered with: a grader who acted on an older page gets a 409 that names who acted
first and shows what is stored now; nothing is overwritten.
"""

from __future__ import annotations

import math

from flask import Blueprint, abort, current_app, g, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response

from ..adjust import AdjustError, resolve
from ..code_view import numbered_code
from ..manual import Conflict
from ..record import Record
from .context import gradebook
from .why_held import construct_lines, held_reasons

__all__ = ["held"]

held = Blueprint("held", __name__)

#: The longest reason kept from a form (the history keeps it whole).
MAX_REASON = 4000


def _held_students(assignment: str) -> list[str]:
    rows = gradebook().conn.execute(
        "SELECT student FROM results WHERE assignment = ? AND status = 'review' ORDER BY student", (assignment,)
    )
    return [s for (s,) in rows]


def _known(assignment: str) -> None:
    """404 unless the gradebook has a record of ``assignment``."""
    row = gradebook().conn.execute("SELECT 1 FROM results WHERE assignment = ? LIMIT 1", (assignment,)).fetchone()
    if row is None:
        abort(404, f"assignment: the gradebook has no record of {assignment!r}")


@held.get("/a/<assignment>/held")
def held_list(assignment: str) -> str:
    """The assignment's records held for review, resolved or not."""
    _known(assignment)
    records = []
    for student in _held_students(assignment):
        record = gradebook().record(student, assignment)
        if record is not None:
            records.append((student, record, held_reasons(record.flags)))
    return render_template("held_list.html", assignment=assignment, records=records)


def _code(record: Record) -> list[tuple[str, Markup]]:
    """Each graded function's code, numbered, the lines naming a flagged construct highlighted."""
    marked: dict[str, list[int]] = {}
    for reason in held_reasons(record.flags):
        if reason.construct:
            for function, lines in construct_lines(reason.construct, record.sources).items():
                marked.setdefault(function, []).extend(lines)
    return [
        (str(f), Markup(numbered_code(str(src), [(n, n) for n in marked.get(str(f), [])])))
        for f, src in record.sources.items()
    ]


def _page(assignment: str, student: str, *, status: int = 200, **extra: object) -> tuple[str, int]:
    """The record's page as stored now (``extra``: the form's values, an error, a conflict)."""
    book = gradebook()
    record = book.record(student, assignment)
    if record is None or record.status != "review":
        abort(404, f"student: {student!r} has no record of {assignment!r} held for review")
    reasons = held_reasons(record.flags)
    where = {r.text: construct_lines(r.construct, record.sources) if r.construct else {} for r in reasons}
    html = render_template(
        "held_record.html",
        assignment=assignment,
        student=student,
        record=record,
        reasons=reasons,
        where=where,
        code=_code(record),
        history=book.history(student, assignment),
        expected=book.last_event(student, assignment),
        needs_points=record.graded_score == 0,
        **extra,
    )
    return html, status


@held.get("/a/<assignment>/held/<path:student>")
def held_record(assignment: str, student: str) -> tuple[str, int]:
    """One held record: why, the code, the history and the two decisions."""
    return _page(assignment, student, saved=request.args.get("saved", ""))


def _points(text: str, record: Record) -> float | None:
    """The form's points: None when left empty; an AdjustError for text that is no number."""
    if not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise AdjustError(f"points: expected a number between 0 and {record.max_score:g}, got {text[:40]!r}")
    return value


@held.post("/a/<assignment>/held/<path:student>")
def decide(assignment: str, student: str) -> Response | tuple[str, int]:
    """Accept or reject the record; 400 with the form kept for bad input, 409 on a conflict."""
    form = request.form
    action, reason = form.get("action", ""), form.get("reason", "")[:MAX_REASON]
    kept = {"form_action": action, "form_points": form.get("points", "")[:40], "form_reason": reason}
    if action not in ("accept", "reject"):
        abort(400, f"action: expected 'accept' or 'reject', got {action[:40]!r}")
    try:
        expected = int(form.get("expected", ""))
    except ValueError:
        abort(400, f"expected: the id of the event the page showed last, got {form.get('expected', '')[:40]!r}")
    record = gradebook().record(student, assignment)
    if record is None or record.status != "review":
        abort(404, f"student: {student!r} has no record of {assignment!r} held for review")
    try:
        points = _points(form.get("points", ""), record)
        resolve(
            current_app.config["STORE_DB"],
            student,
            assignment,
            accept=action == "accept",
            points=points,
            reason=reason,
            by=g.grader,
            expected=expected,
        )
    except Conflict as conflict:
        return _page(assignment, student, status=409, conflict=conflict, **kept)
    except AdjustError as err:
        return _page(assignment, student, status=400, error=str(err), **kept)
    saved = "accepted" if action == "accept" else "rejected"
    return redirect(url_for("held.held_record", assignment=assignment, student=student, saved=saved), code=303)
