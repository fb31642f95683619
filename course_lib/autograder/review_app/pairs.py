"""The ``pairs`` pages: an assignment's look-alike pairs, and a grader's decision on each.

``/a/<assignment>/pairs`` lists the pairs (similarity, the students, the decision);
``/a/<assignment>/pairs/<n>`` shows pair ``n``: per graded function the two codes side by side,
the shared regions highlighted (:func:`course_lib.autograder.code_view.numbered_code`, the class
report's rendering), and the decision: dismissed, or confirmed with a note (required), saved
with :meth:`ManualStore.decide_pair` and ``expected``, the pair's version the page showed: a
grader who decided on an older page gets a 409 that shows the decision stored first; nothing is
overwritten. The solution's code is never shown: a pair with the reference solution shows the
student's side only and says so.

The pairs are computed once per assignment per app (:class:`.pair_list.PairCache`).
"""

from __future__ import annotations

import json
import threading

from flask import Blueprint, abort, current_app, g, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response

from ..class_report.data import ReportError
from ..code_view import numbered_code
from ..manual import Conflict, Decision, PairDecision, pair_key, pair_target
from .context import gradebook
from .pair_list import AssignmentPairs, PairCache, ShownPair

__all__ = ["pairs", "pair_cache"]

pairs = Blueprint("pairs", __name__)

#: The longest note kept from a form.
MAX_NOTE = 4000
_CACHE_LOCK = threading.Lock()


def pair_cache() -> PairCache:
    """This app's cache of look-alike pairs (made on first use)."""
    with _CACHE_LOCK:
        cache = current_app.extensions.get("review_pairs")
        if cache is None:
            config = current_app.config
            cache = PairCache(config["STORE_DB"], config["EXERCISES"], config["SOLUTIONS"])
            current_app.extensions["review_pairs"] = cache
        return cache


def _assignment_pairs(assignment: str) -> AssignmentPairs:
    if gradebook().conn.execute("SELECT 1 FROM results WHERE assignment = ? LIMIT 1", (assignment,)).fetchone() is None:
        abort(404, f"assignment: the gradebook has no record of {assignment!r}")
    try:
        return pair_cache().get(assignment)
    except ReportError as err:
        abort(503, f"the look-alike search cannot run: {err}")


def _decision(decisions: dict[tuple[str, str], PairDecision], pair: ShownPair) -> PairDecision | None:
    return decisions.get(pair_key(pair.a, pair.b))


@pairs.get("/a/<assignment>/pairs")
def pair_list(assignment: str) -> str:
    """The assignment's look-alike pairs, most similar first, each with its decision."""
    found = _assignment_pairs(assignment)
    decisions = gradebook().manual.pairs(assignment)
    rows = [(p, _decision(decisions, p)) for p in found.pairs]
    return render_template("pairs_list.html", assignment=assignment, found=found, rows=rows)


def _sides(found: AssignmentPairs, pair: ShownPair) -> list[tuple[str, Markup, Markup | None]]:
    """Per function: the function, ``a``'s code and ``b``'s (None for the reference solution),
    the shared regions highlighted."""
    out = []
    for function in pair.functions:
        regions = [r for r in pair.regions if r.function == function]
        a_src = found.sources.get(pair.a, {}).get(function, "")
        left = Markup(numbered_code(a_src, [r.a_lines for r in regions]))
        right = None
        if not pair.reference:
            b_src = found.sources.get(pair.b, {}).get(function, "")
            right = Markup(numbered_code(b_src, [r.b_lines for r in regions]))
        out.append((function, left, right))
    return out


def _history(decisions: list[Decision]) -> list[tuple[str, str, str, str]]:
    """The pair's decisions as (when, by, verdict, note), oldest first."""
    out = []
    for d in decisions:
        try:
            after = json.loads(d.after) if d.after else {}
        except ValueError:
            after = {}
        verdict = str(after.get("verdict", d.kind)) if isinstance(after, dict) else d.kind
        out.append((d.at, d.by, verdict, d.reason))
    return out


def _pair(found: AssignmentPairs, number: int) -> ShownPair:
    if not 1 <= number <= len(found.pairs):
        abort(404, f"pair: expected a number from 1 to {len(found.pairs)}, got {number}")
    return found.pairs[number - 1]


def _page(assignment: str, number: int, *, status: int = 200, **extra: object) -> tuple[str, int]:
    found = _assignment_pairs(assignment)
    pair = _pair(found, number)
    store = gradebook().manual
    current = _decision(store.pairs(assignment), pair)
    html = render_template(
        "pairs_pair.html",
        assignment=assignment,
        found=found,
        pair=pair,
        sides=_sides(found, pair),
        current=current,
        expected=0 if current is None else current.version,
        history=_history(store.history(assignment, pair_target(pair.a, pair.b))),
        **extra,
    )
    return html, status


@pairs.get("/a/<assignment>/pairs/<int:number>")
def pair_page(assignment: str, number: int) -> tuple[str, int]:
    """One pair: the two codes side by side and the decision."""
    return _page(assignment, number, saved=request.args.get("saved", ""))


@pairs.post("/a/<assignment>/pairs/<int:number>")
def decide(assignment: str, number: int) -> Response | tuple[str, int]:
    """Dismiss or confirm the pair; 400 with the form kept for bad input, 409 on a conflict."""
    form = request.form
    verdict, note = form.get("verdict", ""), form.get("note", "")[:MAX_NOTE]
    kept = {"form_verdict": verdict, "form_note": note}
    try:
        expected = int(form.get("expected", ""))
    except ValueError:
        abort(400, f"expected: the pair's version the page showed, got {form.get('expected', '')[:40]!r}")
    pair = _pair(_assignment_pairs(assignment), number)
    if (form.get("a"), form.get("b")) != (pair.a, pair.b):
        abort(409, f"pair {number}: the list of pairs changed since the page was opened; open the list again")
    try:
        gradebook().manual.decide_pair(
            assignment, pair.a, pair.b, verdict=verdict, note=note, by=g.grader, expected=expected
        )
    except Conflict as conflict:
        return _page(assignment, number, status=409, conflict=conflict, **kept)
    except ValueError as err:
        return _page(assignment, number, status=400, error=str(err), **kept)
    return redirect(url_for("pairs.pair_page", assignment=assignment, number=number, saved=verdict), code=303)
