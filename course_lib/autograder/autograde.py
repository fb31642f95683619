"""Grade one submitted notebook: notebook bytes and assignment in, result record out.

:func:`grade_submission` is a self-contained job: it reads the notebook (never executing it
here), parses every cell once, finds forbidden calls reachable from the graded functions and
notebook-wide use of introspection (the static layer, :mod:`course_lib.grading.forbidden`),
has a sandbox (:class:`course_lib.autograder.sandbox.Runner`) run the readable cells and make
the calls, one at a time and watched (the runtime layer), and judges the plain arrays that
come back in this process. The record it returns (:class:`.record.Record`) is plain data, so the same job can run
on another machine and send its record back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..grading.charging import static_charges
from ..grading.exercise_spec import Exercise
from ..grading.forbidden import NotebookScan
from ..grading.judging import judge, zero_report
from ..grading.model import Outcome
from ..grading.registry import ASSIGNMENTS, exercise, exercises_of
from ..grading.report import Report
from ..grading.standins import composed, static_callees
from .compared import compared_sources
from .notebook import NotebookError, code_cells, function_sources, think_answers
from .record import Record, RecordStatus
from .sandbox.jobs import Arguments
from .sandbox_adapter import Outcomes, StandInHook
from .skip_demos import skip_demos
from .untrusted_text import clean_record, student_message

if TYPE_CHECKING:
    from .sandbox import Job, Runner, RunResult

__all__ = [
    "grade_submission",
    "grade_or_fail",
    "failure_reason",
    "refused_record",
    "failed_record",
    "checker_version",
    "checker_files",
    "REFERENCE_MODULES",
    "sha256",
    "make_job",
    "split_outcomes",
]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: The reference modules the checks call (the graded functions' modules and what they import),
#: relative to ``course_lib/``. With every file of the student-side checks (``grading/``) they
#: are what a grade depends on besides the notebook, and all that :func:`checker_version`
#: hashes: editing the CLI, the sandbox, a benchmark or a model regrades nothing.
#: ``tests/autograder/test_checker_version.py`` fails when a graded function's module (or one
#: it imports) is missing here.
REFERENCE_MODULES = (
    "assignments.py",  # which functions each assignment grades
    "_validation.py",
    "scores.py",
    "pooling.py",
    "softmax.py",
    "attention.py",
    "multihead.py",
    "positional.py",
    "layernorm.py",
    "masks.py",
    "feedforward.py",
    "losses.py",
    "efficient.py",
)


def checker_files(package: Path | None = None) -> list[Path]:
    """The files :func:`checker_version` hashes: :data:`REFERENCE_MODULES` and every ``*.py``
    of the student-side checks (``course_lib/grading``), in a fixed order."""
    package = package or Path(__file__).resolve().parents[1]
    return [package / name for name in REFERENCE_MODULES] + sorted((package / "grading").rglob("*.py"))


def checker_version(package: Path | None = None) -> str:
    """A hash of what grades depend on (:func:`checker_files`): a change means regrade.

    Args:
        package: the ``course_lib`` folder to hash (default: this one).
    """
    package = package or Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in checker_files(package):
        h.update(path.relative_to(package).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def make_job(
    cells: list[str],
    exercises: list[Exercise],
    seed: int | None = None,
    callees: dict[str, list[str]] | None = None,
    forbidden: dict[str, list[str]] | None = None,
    judged: Judged | None = None,
) -> Job:
    """The sandbox job: the cells to run, every call of every case per function (drawn from
    ``seed`` when given), and what the runtime layer watches per function.

    For a function that calls graded ``callees`` (function name -> callee names), a second run
    of its calls with the references standing in for them, after every function's own calls,
    made only when the function fails some of its own tests and one of those callees fails its
    own (or is forbidden). ``judged`` keeps the reports judged for that decision, for the record."""
    from .sandbox import Job

    judged = judged or Judged(seed)

    calls: dict[str, list[Arguments]] = {
        ex.name: [c for case in ex.cases(seed) for c in case.calls] for ex in exercises
    }
    job = Job(cells=cells, calls=calls, watch={ex.name: ex.watch() for ex in exercises})
    if callees:
        hook = StandInHook({}, {}, judged.outcomes)
        for name, names in callees.items():
            key = standin_key(name)
            job.calls[key] = list(calls[name])
            job.standins[key] = (name, list(names))
            hook.references.update({c: exercise(c).reference for c in names})
            hook.decisions[key] = _some_callee_fails(name, names, judged, forbidden or {})
        job.hook = hook
    return job


def standin_key(name: str) -> str:
    """The job's key for the run of ``name`` with references standing in for its callees."""
    return f"{name} (references standing in)"


class Judged:
    """One job's reports, each function's judged once on its outcomes: the stand-in decisions
    (made while the job runs) and the record use the same reports, judged on the same outcomes
    (``outcomes``: the sandbox's replies, each converted once). ``sources`` (graded name -> the
    source of its ``def``) name an input a function changes in place."""

    def __init__(self, seed: int | None = None, sources: dict[str, str] | None = None):
        self.seed = seed
        self.sources = sources or {}
        self.outcomes = Outcomes()
        self._reports: dict[tuple[str, tuple[int, ...]], tuple[list[Outcome], Report]] = {}

    def report(self, ex: Exercise, flat: list[Outcome]) -> Report:
        """``ex`` judged on its outcomes ``flat`` (in call order)."""
        key = (ex.name, tuple(id(o) for o in flat))
        if key not in self._reports:  # the outcomes are kept with their report: the ids stay theirs
            outcomes = split_outcomes(ex, flat, self.seed)
            self._reports[key] = (flat, judge(ex, outcomes, seed=self.seed, source=self.sources.get(ex.name)))
        return self._reports[key][1]


def _passes(name: str, outcomes: dict[str, list[Outcome | None]], judged: Judged) -> bool:
    outs = outcomes.get(name)
    if outs is None or any(o is None for o in outs):
        return False
    return judged.report(exercise(name), [o for o in outs if o is not None]).passed


def _some_callee_fails(
    name: str, names: list[str], judged: Judged, forbidden: dict[str, list[str]]
) -> Callable[[dict[str, list[Outcome | None]]], bool]:
    """Whether to make the stand-in run of ``name``: it failed some of its own tests, and one
    of its callees ``names`` is forbidden or failed its own (the rule :func:`course_lib.grading.check`
    follows too)."""

    def decide(outcomes: dict[str, list[Outcome | None]]) -> bool:
        if _passes(name, outcomes, judged):
            return False
        return any(forbidden.get(c) or not _passes(c, outcomes, judged) for c in names)

    return decide


def split_outcomes(ex: Exercise, flat: list[Outcome], seed: int | None = None) -> list[list[Outcome]]:
    """Regroup one function's outcomes (in call order) into one list per case."""
    out, i = [], 0
    for case in ex.cases(seed):
        n = len(case.calls)
        part = list(flat[i : i + n])
        while len(part) < n:
            part.append(Outcome("error", message="not run: the notebook stopped before this call"))
        out.append(part)
        i += n
    return out


def _record(
    assignment: str,
    digest: str,
    status: RecordStatus,
    reports: list[Report],
    messages: list[str],
    isolation: str,
    seed: int | None = None,
    flags: list[str] | None = None,
    fallbacks: int = 0,
    written: dict[str, Any] | None = None,
) -> Record:
    """A record made by grading (not stamped yet), every string from the submission made valid UTF-8."""
    text = clean_record(
        {
            "messages": messages,
            "functions": [r.to_dict() for r in reports],
            "flags": flags or [],
            "sources": (written or {}).get("sources", {}),
            "answers": (written or {}).get("answers", []),
        }
    )
    return Record(
        assignment=assignment,
        sha256=digest,
        status=status,
        raw_score=float(sum(r.score for r in reports)),
        max_score=float(sum(r.max_score for r in reports)),
        messages=tuple(text["messages"]),
        functions=tuple(text["functions"]),
        isolation=isolation,
        seed=seed,
        fixed_cases=fallbacks,
        flags=tuple(text["flags"]),
        sources=text["sources"],
        answers=tuple(text["answers"]),
    )


def refused_record(
    assignment: str, reason: str, digest: str = "", isolation: str = "none", seed: int | None = None
) -> Record:
    """The record of a submission that is not graded at all (every function 0), with the reason."""
    msg = f"Not graded: {reason}."
    return _record(
        assignment,
        digest,
        "invalid",
        [zero_report(ex, "error", msg, seed) for ex in exercises_of(assignment)],
        [msg],
        isolation,
        seed,
    )


def failed_record(
    assignment: str, reason: str, digest: str = "", isolation: str = "none", seed: int | None = None
) -> Record:
    """The record of a submission the grader could not grade through no fault of the student's
    (status ``error``): 0 for now, and regraded on the next run."""
    msg = f"Not graded yet: the grader failed ({reason}); it will be graded again."
    return _record(
        assignment,
        digest,
        "error",
        [zero_report(ex, "error", msg) for ex in exercises_of(assignment)],
        [msg],
        isolation,
        seed,
    )


def _code_cell(message: str) -> str:
    """``cell 3: ...`` said as what it is: the third code cell (Markdown cells are not counted)."""
    n = _cell_number(message)
    if not n or not message.startswith(f"cell {n}"):
        return message
    return f"in code cell {n} (counting code cells only){message[len(f'cell {n}') :]}"


def _cell_number(message: str) -> int:
    m = re.match(r"cell (\d+)", message)
    return int(m.group(1)) if m else 0


def grade_submission(data: bytes, assignment: str, runner: Runner, seed: int | None = None) -> Record:
    """Grade one notebook's bytes for ``assignment`` with ``runner`` (a sandbox Runner).

    Args:
        data: the notebook file's bytes.
        assignment: the assignment's name (``02_self_attention``).
        runner: a :class:`course_lib.autograder.sandbox.Runner`.
        seed: the instructor's seed: every input is drawn anew from it (see
            :mod:`course_lib.grading.seeding`); None uses the self-check's inputs.

    Returns:
        The :class:`~course_lib.autograder.record.Record` (not stamped with a submission time
        yet); ``sources`` and ``answers`` are empty when the notebook is not readable. Never raises for anything in the notebook.
    """
    if assignment not in ASSIGNMENTS:
        raise KeyError(f"unknown assignment {assignment!r}; choose from {', '.join(ASSIGNMENTS)}")
    exercises = exercises_of(assignment)
    digest = sha256(bytes(data)) if isinstance(data, (bytes, bytearray)) else ""
    isolation = getattr(runner, "isolation", "none")
    try:
        cells = code_cells(data)
    except NotebookError as e:
        return refused_record(assignment, str(e), digest, isolation, seed)
    scan = NotebookScan(cells)
    sources = function_sources(cells, [ex.name for ex in exercises])
    compared = compared_sources(scan, [ex.name for ex in exercises])  # with the helpers they reach
    written = {"sources": compared, "answers": think_answers(data)}
    fallbacks = sum(ex.unchanged(seed) for ex in exercises) if seed is not None else 0
    review = scan.review_flags()
    if review:
        msg = (
            "Your notebook uses tools that read the grader's own state or replace torch's dispatch ("
            + "; ".join(review[:5])
            + "). Nothing in it is graded: the submission is held for an "
            "instructor to review."
        )
        reports = [
            zero_report(ex, "forbidden", "held for review: the notebook uses introspection", seed) for ex in exercises
        ]
        noted = [f"review: {r}" for r in review]
        return _record(assignment, digest, "review", reports, [msg], isolation, seed, noted, fallbacks, written)
    forbidden = static_charges(scan, assignment)  # a callee's forbidden call is the callee's only
    callees = _callees(scan, exercises, assignment, forbidden)
    runnable = skip_demos(scan.runnable_sources(), [ex.name for ex in exercises])  # demos are not graded
    judged = Judged(seed, sources)  # their sources name an input changed in place
    result = runner.run(make_job(runnable, exercises, seed, callees, forbidden, judged))
    outcomes = {key: [judged.outcomes.of(r) for r in replies] for key, replies in result.outcomes.items()}
    flags: list[str] = []
    messages: list[str] = []
    if result.status != "ok":
        messages.append(result.message)
    if result.status == "review":
        flags += [f"review: {v}" for v in result.violations]
        why = result.violations[0] if result.violations else "the grader could not trust what came back"
        reports = [zero_report(ex, "forbidden", f"held for an instructor to review: {why}", seed) for ex in exercises]
        return _record(assignment, digest, "review", reports, messages, isolation, seed, flags, fallbacks, written)
    _note_run(scan, result, messages, flags)
    reports = []
    for ex in exercises:
        if forbidden[ex.name]:
            reports.append(zero_report(ex, "forbidden", "; ".join(forbidden[ex.name]), seed))
            flags.append(f"forbidden: {ex.name} " + "; ".join(forbidden[ex.name]))
        elif ex.name in result.missing:
            note = (
                f"no function named {ex.name} was defined after running "
                "your notebook (check the name and that its cell runs without errors)"
            )
            reports.append(zero_report(ex, "missing", note, seed))
        elif ex.name in result.not_own:
            note = (
                f"{ex.name} is {result.not_own[ex.name]}; graded functions must be your own code, written "
                "with def in a code cell"
            )
            reports.append(zero_report(ex, "forbidden", note, seed))
            flags.append(f"forbidden: {ex.name} is not the student's own function")
        else:
            reports.append(_judged_report(ex, outcomes, judged, callees, flags))
    status = cast(RecordStatus, "graded" if result.status == "ok" else result.status)
    return _record(assignment, digest, status, reports, messages, isolation, seed, flags, fallbacks, written)


def _judged_report(
    ex: Exercise, outcomes: dict[str, list[Outcome]], judged: Judged, callees: dict[str, list[str]], flags: list[str]
) -> Report:
    """``ex``'s report, judged from its calls' ``outcomes`` (run key -> outcomes; where a callee
    failed, its mistake is charged there only); a forbidden use it shows is added to ``flags``."""
    report = judged.report(ex, outcomes.get(ex.name, []))
    key = standin_key(ex.name)
    if key in outcomes:  # a callee failed: its mistake is charged there only
        stand_in = judged.report(ex, outcomes[key])
        report = composed(report, stand_in, callees[ex.name])
    if report.status == "forbidden":
        flags.append(f"forbidden: {ex.name} " + "; ".join(report.notes))
    return report


def _callees(
    scan: NotebookScan, exercises: list[Exercise], assignment: str, forbidden: dict[str, list[str]]
) -> dict[str, list[str]]:
    """Graded function -> the assignment's other graded functions it calls (read from the
    source), for the functions that have such callees and break no rule."""
    callees: dict[str, list[str]] = {}
    unreadable = [c.source for c in scan.cells if c.tree is None]  # a callee's def may be there
    for ex in exercises:
        names = static_callees(scan.env, ex.name, [n for n in ASSIGNMENTS[assignment] if n != ex.name], unreadable)
        if names and not forbidden[ex.name]:
            callees[ex.name] = names
    return callees


def _note_run(scan: NotebookScan, result: RunResult, messages: list[str], flags: list[str]) -> None:
    """Add to ``messages`` (for the student) and ``flags`` (for the instructor) what the run
    of the notebook (``result``) showed: the cells' errors, the reaches for the references."""
    errors = sorted(scan.problems + [student_message(e) for e in result.cell_errors], key=_cell_number)
    messages += [f"Error while running your notebook, {_code_cell(e)}" for e in errors[:10]]
    if len(errors) > 10:
        messages.append(f"... and {len(errors) - 10} more cells with errors")
    for access in result.reference_access[:5]:
        messages.append(
            f"Your notebook tried to use the course's reference implementations ({access}); "
            "graded code must be your own, and they are not available while grading."
        )
        flags.append(f"reference: {access}")


def failure_reason(e: BaseException) -> str:
    """A fault on the grader's side, said in one short line fit for a record."""
    return student_message(f"{type(e).__name__}: {e}", 200)


def grade_or_fail(runner: Any, data: bytes, assignment: str, seed: int | None, digest: str) -> Record:
    """The record of one notebook (:func:`grade_submission`) or, should the grader itself fail
    on it, a failed record with the reason (regraded on the next run)."""
    try:
        return grade_submission(data, assignment, runner, seed=seed)
    except Exception as e:  # noqa: BLE001 - a fault on the grader's side: recorded, regraded next run
        return failed_record(assignment, failure_reason(e), digest, runner.isolation, seed)
