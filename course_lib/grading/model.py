"""What a check is made of: calls, test cases, named mistakes, and how one call went.

A graded function is described by an :class:`~course_lib.grading.exercise_spec.Exercise`: its
reference implementation, a list of :class:`Case` objects (each a few :class:`Call` objects
plus a judge) and the classic :class:`Mistake` implementations used to name what went wrong.
Running a call gives an :class:`Outcome` (:mod:`.run`); judging the outcomes gives a
:class:`~course_lib.grading.report.Report` (:mod:`.judging`).

Plain data only: this module imports nothing else of the grader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

__all__ = ["Call", "Judge", "Case", "Mistake", "ErrorHint", "OutcomeStatus", "OUTCOME_STATUSES", "Outcome"]


@dataclass(frozen=True)
class Call:
    """One call of the graded function: positional and keyword arguments.

    Arguments are plain data only: tensors, ints, floats, bools, strings and ``None``, so
    that a call can be sent to a sandbox and its inputs cannot carry code.
    """

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


# A judge gets the case's calls, the student's outputs (one per call, each a tensor or a
# tuple of tensors) and the reference's outputs; it returns None (pass) or the feedback.
Judge = Callable[[Sequence[Call], Sequence[Any], Sequence[Any]], "str | None"]


@dataclass
class Case:
    """One test: some calls, what they check, how many points, how to judge them.

    Args:
        name: short title shown in the report, e.g. ``"L != S"``.
        checks: what the test checks, in words (Gradescope's test name is
            ``"<function>: <checks>"``). Never reveals the hidden input values.
        calls: the calls to make.
        points: points for passing.
        judge: ``None`` compares every output with the reference's (``atol``/``rtol``);
            otherwise a custom :data:`Judge`, for properties.
        atol, rtol: tolerances of the comparison with the reference.
    """

    name: str
    checks: str
    calls: list[Call]
    points: float = 1.0
    judge: Judge | None = None
    atol: float = 1e-4
    rtol: float = 1e-4


@dataclass
class Mistake:
    """A classic wrong implementation and the words that name it.

    When a student's outputs on a failed test equal this implementation's outputs, the
    report shows ``message`` as the diagnosis.
    """

    message: str
    implementation: Callable[..., Any]


@dataclass(frozen=True)
class ErrorHint:
    r"""A hint for an error that a student's function raises, chosen by the error and the line.

    Args:
        phrases: the hint is for an error whose message contains one of these.
        hint: what to check or change, in words.
        line: when set, a regular expression that the student's failing line must match too
            (``r"\.T\b"``: the line transposes with ``.T``; ``"mask"``: it uses the mask).
    """

    phrases: tuple[str, ...]
    hint: str
    line: str = ""


#: How one call of a student's function went (:class:`Outcome`; also sent by the sandbox's worker).
OutcomeStatus = Literal["ok", "not_implemented", "error", "timeout", "bad_type"]
OUTCOME_STATUSES: tuple[str, ...] = get_args(OutcomeStatus)


@dataclass
class Outcome:
    """What one call of a student's function gave.

    ``status`` (:data:`OutcomeStatus`) is ``"ok"`` (``value`` holds plain tensors),
    ``"not_implemented"``, ``"error"``, ``"timeout"`` or ``"bad_type"``; ``message`` says more.
    """

    status: OutcomeStatus
    value: Any = None
    message: str = ""
    seen: list[str] = field(default_factory=list)  # forbidden torch calls that ran (runtime layer)
    largest: int = 0  # elements of the largest new floating-point tensor it made (when measured)
    #: the caller's tensors the call changed in place, each as its position or keyword, then the
    #: indices into tuples and lists (:mod:`course_lib.grading.inplace`); only for ``"ok"``
    changed: list[tuple[int | str, ...]] = field(default_factory=list)
