"""The check machinery: test cases, comparison with the reference, diagnoses, reports.

A graded function is described by an :class:`Exercise`: its reference implementation, a
list of :class:`Case` objects (each a few :class:`Call` objects plus a judge), the classic
:class:`Mistake` implementations used to name what went wrong, and the calls the student
may not use.

Running a student's function is kept apart from judging it: :func:`run_calls` turns calls
into :class:`Outcome` objects (plain tensors, or an error message), and :func:`judge` turns
outcomes into a :class:`Report` (its wording: :mod:`.feedback`). In a notebook both happen in one process
(:func:`course_lib.grading.check`); the autograder runs the calls in a sandbox and judges
the arrays that come back, so student objects never reach the judge.
"""

from __future__ import annotations

import html
import math
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import torch

from .._checks import shape_str
from .feedback import (
    composition_lines,
    describe_exception,
    error_feedback,
    internal_feedback,
    mistake_lines,
    mistakes_of,
)

__all__ = [
    "Call",
    "Case",
    "Mistake",
    "Exercise",
    "Outcome",
    "TestResult",
    "Report",
    "run_calls",
    "call_once",
    "judge",
    "compare",
    "to_plain",
]

#: Seconds one call of a student's function may take before it counts as a failure.
CALL_TIME_LIMIT = 10.0


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


@dataclass
class Exercise:
    """Everything needed to grade one function of the graded API.

    Args:
        name: the function's name (as in ``course_lib``).
        reference: the reference implementation.
        make_cases: builds the cases (deterministic: fixed seeds).
        mistakes: classic mistakes, tried in order when a test fails.
        forbidden: calls the student may not use, as dotted paths
            (``"torch.nn.functional.softmax"``) or ``"method:NAME"`` for a tensor method.
        output_names: names of the items when the function returns a tuple.
        structure_args: arguments (positions or keyword names) that are structure, not values
            (positions, lengths): fresh inputs under ``--seed`` redraw them but never rescale
            them (see :mod:`course_lib.grading.seeding`).
        temporary_limit: when set, the largest new floating-point tensor (in elements) that one
            call may create, as a function of the call (e.g. one block of scores for tiled
            attention). The runtime layer measures it (:class:`~course_lib.grading.opwatch.OpWatch`);
            a call over the limit fails its case, with ``temporary_message`` as the diagnosis.
        temporary_message: the named mistake for a call over ``temporary_limit``.
    """

    name: str
    reference: Callable[..., Any]
    make_cases: Callable[[], list[Case]]
    mistakes: list[Mistake] = field(default_factory=list)
    forbidden: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    structure_args: tuple[int | str, ...] = ()
    temporary_limit: Callable[[Call], int] | None = None
    temporary_message: str = ""
    _cases: dict[int | None, list[Case]] = field(default_factory=dict, repr=False)
    _expected: dict[int | None, list[list[Any]]] = field(default_factory=dict, repr=False)
    _fallbacks: dict[int, int] = field(default_factory=dict, repr=False)
    _unchanged: dict[int, int] = field(default_factory=dict, repr=False)
    _failing: dict[int, list[Mistake]] = field(default_factory=dict, repr=False)  # per self-check case
    _gated: set[int] | None = field(default=None, repr=False)
    _mistake_runs: dict[int | None, list[_MistakeRun]] = field(default_factory=dict, repr=False)

    def cases(self, seed: int | None = None) -> list[Case]:
        """The cases: the self-check's (``seed=None``), or every input drawn anew from the
        instructor's ``seed`` (:mod:`course_lib.grading.seeding`). Computed once per seed."""
        if seed not in self._cases:
            if seed is None:
                self._cases[None] = self.make_cases()
            else:
                from .seeding import fresh_cases

                fresh = fresh_cases(self, int(seed))
                self._cases[seed], self._fallbacks[seed] = fresh.cases, fresh.fallbacks
                self._unchanged[seed] = fresh.unchanged
        return self._cases[seed]

    def fallbacks(self, seed: int) -> int:
        """How many cases fell back to the self-check's under ``seed`` (no fresh one would do)."""
        self.cases(seed)
        return self._fallbacks.get(seed, 0)

    def unchanged(self, seed: int) -> int:
        """How many cases have the self-check's very inputs under ``seed`` (0 when all are fresh):
        the fallbacks and any case drawn equal to the public one."""
        self.cases(seed)
        return self._unchanged.get(seed, 0)

    def expected(self, seed: int | None = None) -> list[list[Any]]:
        """The reference's output for every call of every case (computed once per seed)."""
        if seed not in self._expected:
            expected = []
            for case in self.cases(seed):
                outs = []
                for c in case.calls:
                    out = call_once(self.reference, c, time_limit=None)
                    if out.status != "ok":
                        raise RuntimeError(f"reference {self.name} failed on case {case.name!r}: {out.message}")
                    outs.append(out.value)
                expected.append(outs)
            self._expected[seed] = expected
        return self._expected[seed]

    def gated(self) -> set[int]:
        """Indices of the cases that earn their points only once the function's other value cases
        pass: properties and invariances (a case with its own judge), and value cases whose answer
        does not depend on the input values. Empty when no other value case is left to require."""
        if self._gated is None:
            from .seeding import input_independent

            cases = self.cases()
            gated = {i for i, c in enumerate(cases) if c.judge is not None} | input_independent(self)
            self._gated = gated if any(i not in gated for i in range(len(cases))) else set()
        return self._gated

    def watch(self) -> dict[str, Any]:
        """What the runtime layer watches while the student's function runs (see
        :mod:`course_lib.grading.opwatch`)."""
        from .forbidden import watch_spec

        spec: dict[str, Any] = dict(watch_spec(self.forbidden))
        if self.temporary_limit is not None:
            spec["largest"] = True
        return spec

    def mistake_runs(self, seed: int | None = None) -> list[_MistakeRun]:
        """Each named mistake's outputs on every case, and which cases it fails (computed once
        per seed: they do not depend on the student)."""
        if seed not in self._mistake_runs:
            cases, expected = self.cases(seed), self.expected(seed)
            runs = []
            for m in self.mistakes:
                outputs: list[list[Any] | None] = []
                fails: list[bool] = []
                for case, exp in zip(cases, expected, strict=True):
                    outs = []
                    for c in case.calls:
                        o = call_once(m.implementation, c, time_limit=None)
                        if o.status != "ok":
                            break
                        outs.append(o.value)
                    else:
                        outputs.append(outs)
                        try:
                            verdict = (case.judge or _default_judge(case, self.output_names))(case.calls, outs, exp)
                        except Exception:  # noqa: BLE001 - a mistake's odd output fails the case
                            verdict = "could not be judged"
                        fails.append(verdict is not None)
                        continue
                    outputs.append(None)
                    fails.append(False)  # an error is not evidence against the diagnosis
                runs.append(_MistakeRun(m, outputs, fails))
            self._mistake_runs[seed] = runs
        return self._mistake_runs[seed]

    @property
    def max_score(self) -> float:
        return float(sum(c.points for c in self.cases()))


@dataclass
class _MistakeRun:
    """A named mistake's outputs per case (``None`` where it raised) and the cases it fails."""

    mistake: Mistake
    outputs: list[list[Any] | None]
    fails: list[bool]


#: How one call of a student's function went (:class:`Outcome`; also sent by the sandbox's worker).
OutcomeStatus = Literal["ok", "not_implemented", "error", "timeout", "bad_type"]
OUTCOME_STATUSES: tuple[str, ...] = get_args(OutcomeStatus)

#: A function's verdict (:class:`Report`), shown to students and kept in gradebooks, hence
#: the words: ``"not implemented"`` here is the report of a function whose calls all had
#: the outcome ``"not_implemented"``.
ReportStatus = Literal["passed", "failed", "not implemented", "forbidden", "missing", "error"]
REPORT_STATUSES: tuple[str, ...] = get_args(ReportStatus)


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


class _CallTimeout(Exception):
    pass


def _copy_arg(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.clone()
    if type(a) in (tuple, list):
        return type(a)(_copy_arg(x) for x in a)  # a KV cache (K, V): its tensors are copied too
    return a


def to_plain(value: Any) -> Any:
    """Turn a returned value into plain data, or raise ``TypeError`` saying why not.

    Accepts exactly ``torch.Tensor`` (not subclasses or look-alikes), Python numbers, and
    tuples or lists of those. Tensors are detached copies; methods of the object itself
    are never called, so an object that only pretends to be a tensor is refused.
    """
    t = type(value)
    if t is torch.Tensor:
        return torch.Tensor.detach(value).clone()
    if t in (tuple, list):
        return tuple(to_plain(v) for v in value)
    if t in (int, float, bool):
        return value
    if isinstance(value, torch.Tensor):
        raise TypeError(f"returned a {t.__name__} (a subclass of torch.Tensor), expected a plain torch.Tensor")
    raise TypeError(f"returned a {t.__module__}.{t.__qualname__}, expected a torch.Tensor")


def call_once(
    fn: Callable[..., Any],
    call: Call,
    time_limit: float | None = CALL_TIME_LIMIT,
    watch: dict[str, list[str]] | None = None,
) -> Outcome:
    """Call ``fn`` on fresh copies of the call's arguments and catch whatever happens.

    With ``watch`` (an exercise's :meth:`Exercise.watch`), the torch functions and operators
    it names are recorded in the outcome's ``seen`` when the call runs them.
    """
    args = tuple(_copy_arg(a) for a in call.args)
    kwargs = {k: _copy_arg(v) for k, v in call.kwargs.items()}
    w = None
    if watch:
        from .opwatch import OpWatch

        w = OpWatch(**watch)
    out = _call(fn, args, kwargs, time_limit, w)
    if w is not None:
        out.seen, out.largest = list(w.seen), int(w.largest)
    return out


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], time_limit: float | None, w: Any) -> Outcome:
    """One call, watched by ``w`` (an :class:`~.opwatch.OpWatch` or None) while ``fn`` runs:
    copying the inputs and the result is not part of what the watch sees."""
    use_alarm = (
        time_limit is not None
        and threading.current_thread() is threading.main_thread()
        and hasattr(signal, "setitimer")
    )
    old = None
    if use_alarm:

        def _on_alarm(signum, frame):
            raise _CallTimeout()

        old = signal.signal(signal.SIGALRM, _on_alarm)
        assert time_limit is not None  # use_alarm needs one
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        if w is not None:
            with w:
                value = fn(*args, **kwargs)
        else:
            value = fn(*args, **kwargs)
        return Outcome("ok", to_plain(value))
    except _CallTimeout:
        return Outcome("timeout", message=f"took longer than {time_limit:g} s")
    except NotImplementedError:
        return Outcome("not_implemented", message="not implemented yet")
    except TypeError as e:
        msg = str(e)
        if msg.startswith("returned a "):
            return Outcome("bad_type", message=msg)
        return Outcome("error", message=describe_exception(e))
    except RecursionError:
        return Outcome("error", message="raised RecursionError (infinite recursion?)")
    except Exception as e:  # noqa: BLE001 - any student error is a graded outcome
        return Outcome("error", message=describe_exception(e))
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def run_calls(fn: Callable[..., Any], exercise: Exercise, seed: int | None = None) -> list[list[Outcome]]:
    """Run every call of every case of ``exercise`` on ``fn``, in this process, watching
    for the torch calls the exercise forbids."""
    watch = exercise.watch()
    return [[call_once(fn, c, watch=watch) for c in case.calls] for case in exercise.cases(seed)]


def _with_article(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


#: id(expected), atol, rtol -> (expected, what :func:`_allowed_error` found for it); at most
#: _ALLOWED_MAX_BYTES of float64 tensors (cleared when full).
_ALLOWED: dict[tuple[int, float, float], tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor | None]]] = {}
_ALLOWED_BYTES = [0]
_ALLOWED_MAX_BYTES = 32 << 20


def _allowed_error(expected: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``expected`` in float64 and the error each entry may have, ``atol + |rtol * expected|``
    (as :func:`torch.isclose` computes it), or None for the latter when an allowed error is not
    finite (an inf expected: only the full comparison decides). Kept per expected tensor: the
    grader compares the same reference outputs with every student's."""
    key = (id(expected), float(atol), float(rtol))
    hit = _ALLOWED.get(key)
    if hit is not None and hit[0] is expected:
        return hit[1]
    e = expected.detach().to(torch.float64)
    allowed = atol + (rtol * e).abs()
    found = (e, allowed if bool(torch.isfinite(allowed).all()) else None)
    size = 16 * e.numel()
    if size <= _ALLOWED_MAX_BYTES // 4:
        if _ALLOWED_BYTES[0] + size > _ALLOWED_MAX_BYTES:
            _ALLOWED.clear()
            _ALLOWED_BYTES[0] = 0
        _ALLOWED[key] = (expected, found)  # expected kept alive: its id stays its own
        _ALLOWED_BYTES[0] += size
    return found


def compare(
    actual: Any,
    expected: Any,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    what: str = "the output",
    names: Sequence[str] = (),
    nested: bool = False,
    detail: bool = True,
) -> str | None:
    """``None`` when ``actual`` matches ``expected``; otherwise what differs, in words.

    Tensors must have the expected shape, a compatible dtype (bool for masks, floating
    point for values), and values within ``atol + rtol * |expected|``; a ``NaN`` or
    ``inf`` counts as a match only where the expected value has the same. ``nested`` says
    ``actual`` is an item of a returned tuple (for the wording of the feedback). With
    ``detail=False`` differing values are only said to differ (for a caller that asks
    whether two outputs match, not how far apart they are).
    """
    if isinstance(expected, tuple):
        if not isinstance(actual, tuple):
            return f"returned a single value, expected a tuple of {len(expected)} ({', '.join(names) or 'values'})"
        if len(actual) != len(expected):
            return f"returned a tuple of {len(actual)} values, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=False)):
            item = names[i] if i < len(names) else f"item {i}"
            msg = compare(a, e, atol, rtol, what=f"the {item}", nested=True, detail=detail)
            if msg:
                return msg
        return None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(actual, torch.Tensor) and actual.numel() == 1:
            actual = actual.item()
        if type(actual) not in (int, float):
            return f"{what} is {_with_article(type(actual).__name__)}, expected a number"
        if math.isnan(expected) and math.isnan(actual):
            return None
        if not abs(actual - expected) <= atol + rtol * abs(expected):
            return f"{what} is {actual:.6g}, expected {expected:.6g}"
        return None
    if not isinstance(expected, torch.Tensor):
        return None if actual == expected else f"{what} is {actual!r}, expected {expected!r}"
    if isinstance(actual, tuple):
        if nested:  # an item of a returned tuple
            return f"{what} is a tuple of {len(actual)} values, expected a torch.Tensor"
        return f"returned a tuple of {len(actual)} values, expected a single tensor"
    if not isinstance(actual, torch.Tensor):
        return f"{what} is {_with_article(type(actual).__name__)}, expected a torch.Tensor"
    if actual.shape != expected.shape:
        return f"{what} has shape {shape_str(actual)}, expected {shape_str(expected)}"
    if expected.dtype == torch.bool:
        if actual.dtype != torch.bool:
            return f"{what} has dtype {actual.dtype}, expected torch.bool (True = may attend)"
        wrong = int((actual != expected).sum())
        return None if wrong == 0 else f"{what} has {wrong} of {expected.numel()} entries wrong"
    if expected.is_floating_point() and not (actual.is_floating_point()):
        return f"{what} has dtype {actual.dtype}, expected a floating-point tensor"
    a = actual.to(torch.float64)
    e, allowed = _allowed_error(expected, atol, rtol)
    if allowed is not None and bool(((a - e).abs_() <= allowed).all()):
        return None  # every error finite and within its bound: what isclose says below, in 4 operations
    ok = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)  # a NaN or inf only where expected
    if bool(ok.all()):
        return None
    if not detail:
        return f"{what} differs from the expected one"
    a_bad, e_bad = ~torch.isfinite(a), ~torch.isfinite(e)
    if bool(a_bad.any()) and not bool(torch.equal(a_bad, e_bad)):
        kind = "NaN" if bool(torch.isnan(a).any()) else "inf"
        return f"{what} contains {kind} where the expected output is finite"
    finite = ~a_bad & ~e_bad
    err = (a - e).abs()[finite]
    worst = float(err.max()) if err.numel() else float("nan")
    n_wrong = int((~ok).sum())
    return f"{what} differs from the expected one in {n_wrong} of {ok.numel()} entries (largest error {worst:.3g})"


@dataclass
class TestResult:
    """The result of one test: points, and feedback when it failed.

    ``diagnosis`` is the first named mistake whose outputs match the student's on this test,
    ``diagnoses`` all of them (see :func:`judge`)."""

    name: str
    checks: str
    points: float
    max_points: float
    passed: bool
    feedback: str = ""
    diagnosis: str = ""
    withheld: bool = False  # it passed, but its points wait for the function's value tests
    diagnoses: list[str] = field(default_factory=list)


@dataclass
class Composition:
    """How the student's function scored with the student's own graded functions as its
    callees, when the report's score comes from a run with the references standing in."""

    callees: list[str]
    score: float
    status: str
    failed: list[str]


@dataclass
class Report:
    """The result of checking one function: per-test results, score and feedback.

    Shown in a notebook as a table; ``str(report)`` gives the same as text. Each named
    mistake is said once, after the tests, with the tests it explains.
    """

    function: str
    results: list[TestResult]
    status: ReportStatus
    notes: list[str] = field(default_factory=list)
    max_points: float | None = None
    composition: Composition | None = None

    @property
    def score(self) -> float:
        return float(sum(r.points for r in self.results))

    @property
    def max_score(self) -> float:
        if self.max_points is not None:
            return float(self.max_points)
        return float(sum(r.max_points for r in self.results))

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def diagnoses(self) -> list[str]:
        """The distinct mistakes recognised, in the order first seen."""
        return [m for m, _ in mistakes_of(self.results)]

    def to_dict(self) -> dict:
        return {
            "function": self.function,
            "status": self.status,
            "score": self.score,
            "max_score": self.max_score,
            "notes": list(self.notes),
            "results": [asdict(r) for r in self.results],
            "composition": asdict(self.composition) if self.composition else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        comp = d.get("composition")
        return cls(
            function=d["function"],
            results=[TestResult(**r) for r in d["results"]],
            status=d["status"],
            notes=list(d.get("notes", [])),
            max_points=d.get("max_score"),
            composition=Composition(**comp) if comp else None,
        )

    def _headline(self) -> str:
        words = {
            "passed": "all tests passed",
            "failed": "some tests failed",
            "not implemented": "not implemented yet",
            "forbidden": "uses a call this exercise forbids",
            "missing": "function not found",
            "error": "could not be checked",
        }[self.status]
        return f"{self.function}: {_format_points(self.score)}/{_format_points(self.max_score)} points, {words}"

    def composition_lines(self) -> list[str]:
        return composition_lines(self.function, self.composition, self.max_score)

    def __str__(self) -> str:
        lines = [self._headline()]
        lines += [f"  ! {n}" for n in self.notes]
        if self.status == "not implemented":
            return "\n".join(lines)
        for r in self.results:
            mark = "PASS" if r.passed else "FAIL"
            lines.append(f"  {mark} {_format_points(r.points)}/{_format_points(r.max_points)}  {r.name}: {r.checks}")
            if r.feedback:
                lines.append(f"       {r.feedback}")
        lines += [f"  {m}" for m in mistake_lines(self.results)]
        lines += [f"  {c}" for c in self.composition_lines()]
        return "\n".join(lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = "#1a7f37" if self.passed else "#b35900"
        out = [
            f'<div class="course-lib-report"><p style="color:{colour};font-weight:bold">'
            f"{html.escape(self._headline())}</p>"
        ]
        for n in self.notes:
            out.append(f"<p>&#9888; {html.escape(n)}</p>")
        if self.status != "not implemented" and self.results:
            out.append(
                "<table><thead><tr><th></th><th>test</th><th>checks</th><th>points</th>"
                "<th>feedback</th></tr></thead><tbody>"
            )
            for r in self.results:
                mark = "&#10004;" if r.passed else "&#10008;"
                out.append(
                    f"<tr><td>{mark}</td><td>{html.escape(r.name)}</td><td>{html.escape(r.checks)}</td>"
                    f"<td>{_format_points(r.points)}/{_format_points(r.max_points)}</td>"
                    f"<td>{html.escape(r.feedback)}</td></tr>"
                )
            out.append("</tbody></table>")
            for m in mistake_lines(self.results):
                head, _, message = m.partition(": ")
                out.append(f"<p><b>{html.escape(head)}:</b> {html.escape(message)}</p>")
            for c in self.composition_lines():
                out.append(f"<p>{html.escape(c)}</p>")
        out.append("</div>")
        return "".join(out)


def _format_points(x: float) -> str:
    return f"{x:g}"


def _first_problem(outcomes: Sequence[Outcome]) -> Outcome | None:
    for o in outcomes:
        if o.status != "ok":
            return o
    return None


def _default_judge(case: Case, names: Sequence[str], detail: bool = True) -> Judge:
    def judge_(calls, actual, expected):
        for a, e in zip(actual, expected, strict=False):
            msg = compare(a, e, case.atol, case.rtol, names=names, detail=detail)
            if msg:
                return msg
        return None

    return judge_


def _diagnose(
    exercise: Exercise,
    failed: dict[int, list[Any]],
    passed: set[int],
    seed: int | None,
) -> dict[int, list[str]]:
    """The named mistakes that explain each failed case (index -> messages, in the exercise's
    order). A mistake explains a case when its outputs there equal the student's; it is left
    out when the student passes a case that the mistake fails (the student's code does not
    have that mistake: an overflow is not the cause when the large-input test passes)."""
    cases = exercise.cases(seed)
    names = exercise.output_names
    found: dict[int, list[str]] = {}
    for run in exercise.mistake_runs(seed):
        if any(run.fails[i] for i in passed):
            continue
        for i, actual in failed.items():
            outs = run.outputs[i]
            if outs is None:
                continue
            try:
                same = _default_judge(cases[i], names, detail=False)(cases[i].calls, actual, outs) is None
            except Exception:  # noqa: BLE001 - a diagnosis is a hint; its failure must not lose the grade
                same = False
            if same:
                found.setdefault(i, []).append(run.mistake.message)
    return found


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
    return (
        f"ran {', '.join(seen[:5])} while being checked, which this exercise asks you to write yourself "
        "(seen as the code ran, whatever name reached it)"
    )


def judge(
    exercise: Exercise, outcomes: Sequence[Sequence[Outcome]], notes: Sequence[str] = (), seed: int | None = None
) -> Report:
    """Score ``outcomes`` (from :func:`run_calls` or a sandbox) against the reference.

    A forbidden torch call seen at run time scores 0. A call that made a temporary over the
    exercise's ``temporary_limit`` fails its case. Property and invariance cases, and value
    cases whose answer does not depend on the input values, earn their points only when every
    other value case passes (:meth:`Exercise.gated`). Every named mistake whose outputs equal
    the student's on a failed case is listed, unless the student passes a case it fails.
    """
    seen = runtime_violations(outcomes)
    if seen:
        return zero_report(exercise, "forbidden", runtime_note(seen), seed=seed)
    cases = exercise.cases(seed)
    expected = exercise.expected(seed)
    names = exercise.output_names
    results: list[TestResult] = []
    failed: dict[int, list[Any]] = {}
    passed: set[int] = set()
    errors_said: dict[str, str] = {}  # error message -> the first test that showed it
    all_not_implemented = True
    for i, (case, outs, exp) in enumerate(zip(cases, outcomes, expected, strict=False)):
        problem = _first_problem(outs)
        if problem is None or problem.status != "not_implemented":
            all_not_implemented = False
        if problem is not None:
            call = case.calls[list(outs).index(problem)]
            said = error_feedback(exercise.reference, call, problem, errors_said, case.name)
            results.append(TestResult(case.name, case.checks, 0.0, case.points, False, said))
            continue
        actual = [o.value for o in outs]
        feedback: str | None
        try:
            feedback = (case.judge or _default_judge(case, names))(case.calls, actual, exp)
        except Exception:  # noqa: BLE001 - odd outputs must not crash the judge, nor show its internals
            feedback = internal_feedback(actual, exp)
        if feedback is None:
            over = _over_limit(exercise, case, outs)
            if over:
                results.append(
                    TestResult(
                        case.name,
                        case.checks,
                        0.0,
                        case.points,
                        False,
                        over,
                        exercise.temporary_message,
                        diagnoses=[exercise.temporary_message] if exercise.temporary_message else [],
                    )
                )
                continue
            passed.add(i)
            results.append(TestResult(case.name, case.checks, case.points, case.points, True))
            continue
        failed[i] = actual
        results.append(TestResult(case.name, case.checks, 0.0, case.points, False, feedback))
    try:
        diagnoses = _diagnose(exercise, failed, passed, seed) if failed else {}
    except Exception:  # noqa: BLE001 - a diagnosis is a hint; its failure must not lose the grade
        diagnoses = {}
    for i, messages in diagnoses.items():
        results[i].diagnosis, results[i].diagnoses = messages[0], messages
    gated = exercise.gated()
    if not all(r.passed for i, r in enumerate(results) if i not in gated):
        for i, r in enumerate(results):
            if i in gated and r.passed:
                r.points, r.passed, r.feedback, r.withheld = 0.0, False, PROPERTY_GATE, True
    status: ReportStatus
    if all_not_implemented:
        for r in results:
            r.feedback = "not implemented yet"
        status = "not implemented"
    else:
        status = "passed" if all(r.passed for r in results) else "failed"
    return Report(exercise.name, results, status, list(notes))


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


def zero_report(exercise: Exercise, status: ReportStatus, note: str, seed: int | None = None) -> Report:
    """A report with every test failed for one reason (forbidden call, missing function)."""
    results = [TestResult(c.name, c.checks, 0.0, c.points, False, note) for c in exercise.cases(seed)]
    return Report(exercise.name, results, status, [note])
