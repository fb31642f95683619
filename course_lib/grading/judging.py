"""Judging: a function's :class:`~course_lib.grading.model.Outcome` objects turned into a
:class:`~course_lib.grading.report.Report`.

Running a student's function is kept apart from judging it: :func:`~.exercise_spec.run_calls` (or
the autograder's sandbox) turns calls into outcomes, plain tensors or an error message, and
:func:`judge` scores them against the reference, names the classic mistakes that explain a
failed test, and holds back the points of tests that outputs which are not an implementation
could pass. In a notebook both happen in one process (:func:`course_lib.grading.check`); the
autograder judges the arrays that come back from its sandbox, so student objects never reach
the judge.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .compare import default_judge
from .exercise_spec import Exercise
from .feedback import error_feedback, internal_feedback
from .forbidden.rules import NUMPY_BRIDGES, module_note
from .inplace import INPLACE_FEEDBACK, ArgPath, argument_words, inplace_message
from .model import Case, Outcome
from .report import Report, ReportStatus, TestResult

__all__ = ["judge", "zero_report", "runtime_violations", "runtime_note", "PROPERTY_GATE"]

PROPERTY_GATE = (
    "this test passes, but it earns its points only once the value tests of this function pass: "
    "a property, or an answer that does not depend on the input values, can be met by outputs "
    "that are not an implementation (such as uniform weights)"
)


def runtime_violations(outcomes: Sequence[Sequence[Outcome]]) -> list[str]:
    """What the runtime layer saw run that the exercise forbids, over all calls (in order)."""
    seen: list[str] = []
    for outs in outcomes:
        for o in outs:
            for what in o.seen:
                if what not in seen:
                    seen.append(what)
    return seen


def runtime_note(seen: Sequence[str]) -> str:
    if any(s in [f"the tensor method .{m}()" for m in NUMPY_BRIDGES] for s in seen):
        return f"ran {', '.join(seen[:5])} while being checked: " + module_note("numpy")
    return (
        f"ran {', '.join(seen[:5])} while being checked, which this exercise asks you to write yourself "
        "(seen as the code ran, whatever name reached it)"
    )


def judge(
    exercise: Exercise,
    outcomes: Sequence[Sequence[Outcome]],
    notes: Sequence[str] = (),
    seed: int | None = None,
    source: str | None = None,
) -> Report:
    """Score ``outcomes`` (from :func:`~course_lib.grading.exercise_spec.run_calls` or a sandbox)
    against the reference.

    A forbidden torch call seen at run time scores 0. A call that made a temporary over the
    exercise's ``temporary_limit`` fails its case. Property and invariance cases, and value
    cases whose answer does not depend on the input values, earn their points only when every
    other value case passes (:meth:`~course_lib.grading.exercise_spec.Exercise.gated`). Every named
    mistake whose outputs equal the student's on a failed case is listed, unless the student
    passes a case it fails or another mistake explains more of the failed cases (:func:`_diagnose`).
    A case whose call changed a tensor of its caller in place fails too, even with the right
    values, and the change is named (``source``, the student's source of the function when
    known, names the argument and the operation: :mod:`.inplace`).
    """
    seen = runtime_violations(outcomes)
    if seen:
        return zero_report(exercise, "forbidden", runtime_note(seen), seed=seed)
    cases = exercise.cases(seed)
    expected = exercise.expected(seed)
    results: list[TestResult] = []
    failed: dict[int, list[Any]] = {}
    passed: set[int] = set()
    all_not_implemented = True
    for i, (case, outs, exp) in enumerate(zip(cases, outcomes, expected, strict=False)):
        problem = _first_problem(outs)
        if problem is None or problem.status != "not_implemented":
            all_not_implemented = False
        if problem is not None:
            call = case.calls[list(outs).index(problem)]
            fb = error_feedback(exercise.reference, call, problem, exercise.error_hints, source)
            results.append(TestResult(case.name, case.checks, 0.0, case.points, False, fb.text, error=fb.error))
            continue
        result, wrong = _value_result(exercise, case, outs, exp)
        results.append(result)
        if wrong is not None:
            failed[i] = wrong
        elif result.passed:
            passed.add(i)
    _add_diagnoses(exercise, results, failed, passed, seed)
    _fail_inplace(exercise, outcomes, results, source)
    _withhold_gated(exercise, results)
    status: ReportStatus
    if all_not_implemented:
        for r in results:
            r.feedback = "not implemented yet"
        status = "not implemented"
    else:
        status = "passed" if all(r.passed for r in results) else "failed"
    return Report(exercise.name, results, status, list(notes))


def _first_problem(outcomes: Sequence[Outcome]) -> Outcome | None:
    for o in outcomes:
        if o.status != "ok":
            return o
    return None


def _value_result(
    exercise: Exercise, case: Case, outs: Sequence[Outcome], expected: list[Any]
) -> tuple[TestResult, list[Any] | None]:
    """The result of a case whose every call returned, and the student's outputs when they fail
    the case's judge (what a named mistake may explain), else None."""
    actual = [o.value for o in outs]
    feedback: str | None
    try:
        feedback = (case.judge or default_judge(case, exercise.output_names))(case.calls, actual, expected)
    except Exception:  # noqa: BLE001 - odd outputs must not crash the judge, nor show its internals
        feedback = internal_feedback(actual, expected)
    if feedback is not None:
        return TestResult(case.name, case.checks, 0.0, case.points, False, feedback), actual
    over = _over_limit(exercise, case, outs)
    if over:
        message = exercise.temporary_message
        result = TestResult(
            case.name, case.checks, 0.0, case.points, False, over, message, diagnoses=[message] if message else []
        )
        return result, None
    return TestResult(case.name, case.checks, case.points, case.points, True), None


def _over_limit(exercise: Exercise, case: Case, outs: Sequence[Outcome]) -> str:
    """Feedback when a call made a temporary larger than the exercise allows, else ``""``."""
    if exercise.temporary_limit is None:
        return ""
    for call, o in zip(case.calls, outs, strict=False):
        limit = exercise.temporary_limit(call)
        if o.largest > limit:
            return (
                f"the correct values, but one temporary held {o.largest:,} numbers, more than the "
                f"{limit:,} this test allows"
            )
    return ""


def _add_diagnoses(
    exercise: Exercise, results: list[TestResult], failed: dict[int, list[Any]], passed: set[int], seed: int | None
) -> None:
    """Set each failed case's named mistakes (:func:`_diagnose`) on its result."""
    try:
        diagnoses = _diagnose(exercise, failed, passed, seed) if failed else {}
    except Exception:  # noqa: BLE001 - a diagnosis is a hint; its failure must not lose the grade
        diagnoses = {}
    for i, messages in diagnoses.items():
        results[i].diagnosis, results[i].diagnoses = messages[0], messages


def _diagnose(
    exercise: Exercise,
    failed: dict[int, list[Any]],
    passed: set[int],
    seed: int | None,
) -> dict[int, list[str]]:
    """The named mistakes that explain each failed case (index -> messages, in the exercise's
    order). A mistake explains a case when its outputs there equal the student's, dtype kind
    included (a float mask is not an integer one); it is left out when the student passes a case
    that the mistake fails (the student's code does not have that mistake: an overflow is not
    the cause when the large-input test passes), when another mistake explains every failed
    case it explains and more (it matches less well: a special case of the other, such as a
    mistake that coincides with it only where ``pad_id`` is 0), and when an earlier mistake of
    the exercise explains exactly the same failed cases (the student's outputs cannot tell the
    two apart: one mistake is one diagnosis, as a fill of -1e10 that both the -1e9 and the
    -1e4 fill explain, on the cases that do not tell them apart)."""
    cases = exercise.cases(seed)
    names = exercise.output_names
    explained: dict[str, set[int]] = {}
    for run in exercise.mistake_runs(seed):
        if any(run.fails[i] for i in passed):
            continue
        for i, actual in failed.items():
            outs = run.outputs[i]
            if outs is not None and _same_outputs(cases[i], names, actual, outs):
                explained.setdefault(run.mistake.message, set()).add(i)
    found: dict[int, list[str]] = {}
    kept: list[set[int]] = []
    for message, where in explained.items():  # in the exercise's order
        if any(where < other for other in explained.values()) or where in kept:
            continue
        kept.append(where)
        for i in sorted(where):
            found.setdefault(i, []).append(message)
    return {i: found[i] for i in sorted(found)}


def _same_outputs(case: Case, names: Sequence[str], actual: list[Any], outs: list[Any]) -> bool:
    """Whether a student's outputs of a case equal a mistake's: the same values (within the
    case's tolerances) and, where both are tensors, the same kind of dtype (bool, integer or
    floating)."""
    try:
        pairs = zip(_leaves(actual), _leaves(outs), strict=True)
        if any(_kind(a) != _kind(o) for a, o in pairs if isinstance(a, torch.Tensor) and isinstance(o, torch.Tensor)):
            return False
        return default_judge(case, names, detail=False)(case.calls, actual, outs) is None
    except Exception:  # noqa: BLE001 - a diagnosis is a hint; its failure must not lose the grade
        return False


def _leaves(value: Any) -> list[Any]:
    """The items of nested lists and tuples of outputs, in order."""
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _kind(value: torch.Tensor) -> str:
    """The kind of a tensor's dtype: ``"bool"``, ``"integer"`` or ``"floating"``."""
    if value.dtype == torch.bool:
        return "bool"
    return "floating" if value.is_floating_point() or value.is_complex() else "integer"


def _fail_inplace(
    exercise: Exercise, outcomes: Sequence[Sequence[Outcome]], results: list[TestResult], source: str | None
) -> None:
    """Fail each case whose calls changed a tensor of the caller (an outcome's ``changed``) and
    name the change on it: a function that returns the right values but changes its inputs
    breaks the code that calls it. Its values' feedback, if wrong, is kept."""
    per_case: list[list[ArgPath]] = [[p for o in outs for p in o.changed] for outs in outcomes]
    every = list(dict.fromkeys(p for paths in per_case for p in paths))
    if not every:
        return
    message = inplace_message(exercise.name, every, exercise.reference, source)
    for r, paths in zip(results, per_case, strict=False):
        if not paths:
            continue
        if r.passed:
            words = argument_words(exercise.name, list(dict.fromkeys(paths)), exercise.reference, source)
            r.points, r.passed, r.feedback = 0.0, False, INPLACE_FEEDBACK.format(words)
        if message not in r.diagnoses:
            r.diagnoses = [*r.diagnoses, message]
        r.diagnosis = r.diagnoses[0]


def _withhold_gated(exercise: Exercise, results: list[TestResult]) -> None:
    """Withhold the points of passed gated cases (:meth:`Exercise.gated`) while a value case fails."""
    gated = exercise.gated()
    if not all(r.passed for i, r in enumerate(results) if i not in gated):
        for i, r in enumerate(results):
            if i in gated and r.passed:
                r.points, r.passed, r.feedback, r.withheld = 0.0, False, PROPERTY_GATE, True


def zero_report(exercise: Exercise, status: ReportStatus, note: str, seed: int | None = None) -> Report:
    """A report with every test failed for one reason (forbidden call, missing function): the
    reason is its one note, said once for the function, not again on every test."""
    results = [TestResult(c.name, c.checks, 0.0, c.points, False) for c in exercise.cases(seed)]
    return Report(exercise.name, results, status, [note])
