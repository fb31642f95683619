"""Self-checks for the exercise notebooks, and the autograder's judging.

In a notebook::

    from course_lib.grading import check
    check(softmax)                 # the graded function named like yours
    check(my_softmax, name="softmax")

:func:`check` runs the function on fixed, random and edge-case inputs, compares it with
the reference, recognises classic mistakes, and returns a :class:`Report` (shown as HTML
in a notebook: the score, the likely mistake and its fix, then the failing tests). A wrong shape, an exception, a ``NaN`` or a wrong type is a failed
test with feedback, never an error of the check itself.

The modules, from the data to the words:

- :mod:`.model`: calls, cases, named mistakes and outcomes; :mod:`.exercise_spec`: an
  :class:`Exercise` (one graded function's cases, mistakes and forbidden calls)
- :mod:`.rubrics`: the exercises of each assignment (``rubrics/chNN.py``, helpers in
  ``rubrics/_common.py``); :mod:`.registry` looks them up from :mod:`course_lib.assignments`
- :mod:`.run`: calling a student's function (fresh inputs, a time limit); :mod:`.seeding`:
  fresh inputs from the instructor's seed
- :mod:`.compare`: output against reference; :mod:`.judging`: outcomes to a :class:`Report`;
  :mod:`.report`: the report; :mod:`.rendering`: how it is shown (text, HTML);
  :mod:`.feedback`: its words
- :mod:`.standins`: references standing in for a failing graded callee; :mod:`.charging`: a
  forbidden call charged to the function that makes it; :mod:`.inplace`: a
  caller's tensors changed in place, found and named
- forbidden calls: :mod:`.forbidden` (reading the code: rules, the one walker, the static and
  the live environment, bytecode), :mod:`.opwatch` and :mod:`.oplists` (the operators a call
  actually runs); what they read with: :mod:`.aliases`, :mod:`.graded_names`,
  :mod:`.liveness`, :mod:`.ownership`, :mod:`.harmless`, :mod:`.livecode`, :mod:`.history`
- :mod:`.demos`: :class:`when_implemented`, the notebooks' demo blocks that never stop Run All
- :mod:`.parsing` (thread-safe ``ast.parse``), :mod:`.sourcecache` (a bounded cache by source)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .charging import live_charges
from .demos import when_implemented
from .exercise_spec import Exercise, run_calls
from .inplace import function_source
from .judging import judge, zero_report
from .model import Call, Case, Mistake, Outcome
from .registry import ASSIGNMENTS, assignment_of, exercise, exercises_of
from .released import NO_STAND_IN, NotReleased, is_released
from .report import Report, TestResult
from .standins import composed, live_callees, standing_in

__all__ = [
    "check",
    "Report",
    "TestResult",
    "Exercise",
    "Case",
    "Call",
    "Mistake",
    "Outcome",
    "ASSIGNMENTS",
    "exercise",
    "exercises_of",
    "assignment_of",
    "judge",
    "run_calls",
    "when_implemented",
]


def check(fn: Callable[..., Any], name: str | None = None) -> Report:
    """Grade one function against its reference and return the report.

    Args:
        fn: the student's function.
        name: the graded function it implements; defaults to ``fn.__name__``.

    Returns:
        A :class:`Report` with ``.passed``, ``.score``, ``.max_score`` and per-test
        ``.results`` (feedback and the likely mistake for each failed test).

    When ``fn`` calls another graded function of its notebook and that function fails its own
    check, ``fn`` is graded with the reference standing in for it (a mistake costs points once,
    where it was made); the report's ``composition`` says how ``fn`` scored with the student's
    own callee. A forbidden call made in such a callee costs the callee's points only
    (:mod:`.charging`). A released student package has no references (:mod:`.released`): its
    report says instead which callee to fix first.
    """
    if name is None:
        name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"check: name must be a str naming a graded function, got {type(name).__name__}")
    try:
        ex = exercise(name)
    except NotReleased as err:  # a released self-check without this assignment's data: say so
        return Report(name, [], "error", [str(err)])
    if not callable(fn):
        return zero_report(ex, "missing", f"{name} is a {type(fn).__name__}, not a function")
    notes = live_charges(fn, name)  # a forbidden call in a graded callee is the callee's (:mod:`.charging`)
    if notes:
        return zero_report(ex, "forbidden", "; ".join(notes))
    source = function_source(fn)  # names an in-place change of an input (:mod:`.inplace`)
    own = judge(ex, run_calls(fn, ex), source=source)  # the runtime layer watches the calls too
    namespace = getattr(fn, "__globals__", None)
    callees = live_callees(fn, [n for n in ASSIGNMENTS[assignment_of(name)] if n != name])
    if own.passed or not callees or not isinstance(namespace, dict):
        return own
    failing = (c for c in callees if c not in namespace or not _passes_as_written(namespace[c], c))
    first = next(failing, None)  # lazily: each callee is checked once, and only as far as needed
    if first is None:
        return own  # the callees are right: the student's own composition is the one to grade
    if is_released():  # no references to stand in: say so, and grade the student's own composition
        return _without_stand_in(own, [first, *failing])
    references = {c: exercise(c).reference for c in callees}
    with standing_in(namespace, references):
        stand_in = judge(ex, run_calls(fn, ex), source=source)
    return composed(own, stand_in, callees)


def _passes_as_written(fn: Callable[..., Any], name: str) -> bool:
    """Whether a callee passes as the student wrote it: with its own callees, not the references
    standing in for them (a callee of a callee that fails or is forbidden fails it too), as the
    autograder decides."""
    report = check(fn, name=name)
    return report.passed and report.composition is None


def _without_stand_in(own: Report, failing: list[str]) -> Report:
    """``own`` with the note of a released check that cannot stand references in for ``failing``."""
    if not failing:
        return own
    one = len(failing) == 1
    note = NO_STAND_IN.format(
        function=own.function,
        callees=" and ".join(failing),
        verb="fails" if one else "fail",
        its="its" if one else "their",
        that="it" if one else "them",
    )
    own.notes = [*own.notes, note]
    return own
