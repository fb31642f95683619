"""The ``answers`` pages: the index (every assignment's questions) and one page per question.

A question's page shows its text, its rubric (edited in place), and its answers in groups; a
group is graded in one save (``ManualStore.grade`` with every member's version). A save based
on a stale version (another grader saved first) shows who changed what and when, and keeps
what the grader typed. Without JavaScript every form is a plain POST and a redirect; with it
(``static/app.js``) a grade is saved by ``fetch`` and the answer is JSON.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from flask import (
    Blueprint,
    abort,
    current_app,
    g,
    get_template_attribute,
    jsonify,
    redirect,
    render_template,
    request,
    url_for,
)
from werkzeug.wrappers import Response

from ..manual import AnswerChanged, AnswerGrade, Conflict
from .context import gradebook
from .data import HeldCount, assignments, held_counts
from .forms import GradeForm, grade_form, number, rubric_form
from .history_text import describe, item_texts
from .pair_list import pair_count
from .pairs import pair_cache
from .question_view import GroupView, grade_status, question_view, summaries

__all__ = ["answers"]

answers = Blueprint("answers", __name__)


#: How long the index may spend grouping answers not grouped yet; past it, a question's groups
#: are counted once its page (or a later index) has grouped them.
INDEX_GROUPING_SECONDS = 1.0


@answers.get("/")
def index() -> str:
    """Per assignment, its questions (answered, groups, graded, points), its records held for
    review (how many resolved) and its look-alike pairs (how many decided; counted only when
    already computed: the index never computes them); links to the other pages."""
    book = gradebook()
    deadline = time.monotonic() + INDEX_GROUPING_SECONDS
    cache, held = pair_cache(), held_counts(book)
    rows = []
    for assignment in assignments(book):
        found = cache.peek(book, assignment)
        pairs = None if found is None else pair_count(found, book.manual.pairs(assignment))
        questions = summaries(book, current_app.config["EXERCISES"], assignment, deadline)
        rows.append((assignment, questions, held.get(assignment, HeldCount(0, 0)), pairs))
    return render_template("index.html", assignments=rows)


#: Groups shown on one page of a question: a page of a thousand answers' forms takes seconds
#: for a browser to lay out (docs/review-app.md, Speed); the largest groups come first.
PAGE_GROUPS = 50


def _page_number(raw: str | None) -> int:
    """The ``page`` argument (1 when absent); a 400 naming it when it is not a whole number ≥ 1."""
    if raw is None or raw == "":
        return 1
    if not raw.isdigit() or int(raw) < 1:
        abort(400, f"page: expected a whole number from 1, got {raw!r}")
    return int(raw)


def _page(assignment: str, question: str, status: int = 200, **extra: Any) -> tuple[str, int]:
    book, exercises = gradebook(), current_app.config["EXERCISES"]
    messages, kept = extra.setdefault("messages", {}), extra.setdefault("kept", {})
    page = _page_number(extra.pop("page", None) or request.args.get("page"))
    if messages:  # a refused grade: show the page that holds its group now
        plain = question_view(book, exercises, assignment, question, shown=range(0))
        if plain is not None:
            _rekey(plain.groups, messages, kept)
            at = next((i for i, g in enumerate(plain.groups) if g.group.key in messages), None)
            page = page if at is None else at // PAGE_GROUPS + 1
    start = (page - 1) * PAGE_GROUPS
    view = question_view(book, exercises, assignment, question, shown=range(start, start + PAGE_GROUPS))
    if view is None:
        abort(404, f"no question {question!r} in assignment {assignment!r}")
    pages = max(1, -(-len(view.groups) // PAGE_GROUPS))
    if page > pages:
        abort(404, f"page: {question!r} has {pages} page(s) of answer groups, got page {page}")
    extra["paging"] = Paging(page, pages, start, min(start + PAGE_GROUPS, len(view.groups)))
    kept = extra.setdefault("rubric_kept", None)
    extra["rubric_rows"] = (
        list(kept.rows) if kept else [(item.id, item.text, f"{item.points:g}") for item in view.setup.rubric]
    )
    return render_template("question.html", q=view, saved=request.args.get("saved", ""), **extra), status


def _rekey(groups: tuple[GroupView, ...], messages: dict[str, str], kept: dict[str, GradeForm]) -> None:
    """File a refused grade's message and input under the group that now holds its students (the
    groups may have changed since the page was read: another grader split a member off)."""
    for key, form in list(kept.items()):
        holder = next((g.group.key for g in groups if set(form.expected) & set(g.group.students)), key)
        if holder != key:
            kept[holder] = kept.pop(key)
            messages[holder] = messages.pop(key, "")


@dataclass(frozen=True)
class Paging:
    """Which groups a question's page shows.

    Args:
        page: this page (from 1).
        pages: how many pages the groups fill.
        start: the index of the first group shown (0-based).
        stop: one past the last group shown.
    """

    page: int
    pages: int
    start: int
    stop: int


def _back(assignment: str, question: str, anchor: str = "", saved: str = "") -> Response:
    extra: dict[str, Any] = {"saved": saved} if saved else {}
    page = _page_number(request.form.get("page"))
    if page > 1:
        extra["page"] = page
    target = url_for("answers.question", assignment=assignment, question=question, _anchor=anchor or None, **extra)
    return redirect(target, code=303)


@answers.get("/a/<assignment>/q/<question>")
def question(assignment: str, question: str) -> tuple[str, int]:
    """One question: its text, its rubric, its answers in groups."""
    return _page(assignment, question)


@answers.post("/a/<assignment>/q/<question>/rubric")
def rubric(assignment: str, question: str) -> Response | tuple[str, int]:
    """Save the question's points and rubric (``set_question``), then back to the page."""
    try:
        form = rubric_form(request.form)
    except ValueError as err:
        return _page(assignment, question, 400, rubric_message=str(err))
    try:
        rows = [(item, text, number("item_points", points)) for item, text, points in form.rows]
        gradebook().manual.set_question(
            assignment, question, max_points=number("max_points", form.max_points), rubric=rows,
            by=g.grader, expected=form.expected,
        )  # fmt: skip
    except Conflict as err:
        return _page(assignment, question, 409, rubric_message=str(err), rubric_kept=form)
    except ValueError as err:
        return _page(assignment, question, 400, rubric_message=str(err), rubric_kept=form)
    return _back(assignment, question, "rubric", "rubric")


def _conflict_message(err: Conflict, assignment: str, question: str) -> str:
    """The Conflict's own sentence (who changed what, when), then what they saved; the grader's
    input stays on the page, and saving it again replaces theirs knowingly."""
    current = err.current
    if isinstance(err, AnswerChanged):
        if _wants_json():
            return f"{err}. Reload the page to read the answer as it is now, then save again."
        return f"{err}. The page shows the answer as it is now; your input is kept: save again to grade it."
    if not isinstance(current, AnswerGrade):
        return f"{err}. Their change removed the grade. Your input is kept: save again to grade."
    texts = {item.id: item.text for item in gradebook().manual.setup(assignment, question).rubric}
    items = "; ".join(texts.get(i, f"item {i}") for i in current.items) or "no rubric item"
    comment = f", with the comment: {current.comment}" if current.comment else ""
    return (
        f"{err}. They gave {current.points:g} points ({items}){comment}. "
        "Your input is kept: save again to replace their grade."
    )


def _wants_json() -> bool:
    return request.headers.get("Accept", "") == "application/json"


@answers.post("/a/<assignment>/q/<question>/grade")
def grade(assignment: str, question: str) -> Response | tuple[str, int] | tuple[Response, int]:
    """Grade a whole group in one save; a Conflict or a bad value keeps what was typed.

    Answered as JSON when asked (``Accept: application/json``, the page's script): ``expected``
    (each member's new version), ``status_html`` (the group's status line) and ``points`` (each
    member's points as their line in the members' list shows them)."""
    try:
        form = grade_form(request.form)
    except ValueError as err:
        abort(400, str(err))
    store = gradebook().manual
    try:
        saved = store.grade(
            assignment, question, list(form.expected), items=form.items, adjust=number("adjust", form.adjust, default=0.0),
            comment=form.comment, by=g.grader, expected=form.expected, seen=form.seen,
        )  # fmt: skip
    except (Conflict, ValueError) as err:
        message = _conflict_message(err, assignment, question) if isinstance(err, Conflict) else str(err)
        return _refused(assignment, question, form, message, 409 if isinstance(err, Conflict) else 400)
    if not _wants_json():
        return _back(assignment, question, f"g-{form.group}", form.group)
    status, common = grade_status(list(saved))
    html = get_template_attribute("macros.html", "group_status")(status, common, len(saved), len(saved))
    points = {s.student: f"{s.points:g} pts" for s in saved}  # each member's line (macros.html)
    return jsonify(ok=True, expected={s.student: s.version for s in saved}, status_html=str(html), points=points)


def _refused(
    assignment: str, question: str, form: GradeForm, message: str, status: int
) -> tuple[str, int] | tuple[Response, int]:
    if not _wants_json():
        return _page(assignment, question, status, messages={form.group: message}, kept={form.group: form})
    current = gradebook().manual.grades(assignment, question)
    expected = {s: (current[s].version if s in current else 0) for s in form.expected}
    return jsonify(ok=False, message=message, expected=expected), status


@answers.post("/a/<assignment>/q/<question>/split")
def split(assignment: str, question: str) -> Response:
    """Split a member off its group (``split=1``) or let it join again (``split=0``)."""
    student = request.form.get("student", "")
    if not student:
        abort(400, "student: expected a student's id, got none")
    try:
        gradebook().manual.set_split(assignment, question, student, request.form.get("split") == "1", by=g.grader)
    except ValueError as err:
        abort(400, str(err))
    return _back(assignment, question, "groups")


@answers.get("/a/<assignment>/q/<question>/history")
def history(assignment: str, question: str) -> str:
    """Every decision on this question: its setup, its answers' grades and splits, oldest first,
    each as a sentence of what changed (:mod:`.history_text`)."""
    everything = gradebook().manual.history(assignment)
    decisions = [d for d in everything if d.target == question or d.target.startswith(question + "/")]
    student = request.args.get("student")
    if student:
        decisions = [d for d in decisions if d.target in (question, f"{question}/{student}")]
    texts = item_texts(everything)
    rows = [(d, describe(d, texts)) for d in decisions]
    return render_template("history.html", assignment=assignment, question=question, rows=rows, student=student)
