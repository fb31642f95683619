"""Grade one submitted notebook: notebook bytes and assignment in, result record out.

:func:`grade_submission` is a self-contained job: it reads the notebook (never executing it
here), finds forbidden calls in the graded functions' source, has a sandbox
(:class:`course_lib.grading.sandbox.Runner`) run the cells and make the calls, and judges
the plain arrays that come back in this process. The record it returns is plain JSON data,
so the same job can run on another machine and send its record back.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .core import Exercise, Outcome, Report, judge, zero_report
from .forbidden import violations_in_source
from .notebook import NotebookError, code_cells
from .registry import ASSIGNMENTS, exercises_of

__all__ = ["grade_submission", "refused", "checker_version", "sha256", "make_job", "split_outcomes"]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checker_version(root: Path | None = None) -> str:
    """A hash of course_lib's code (the checks, the exercises and the reference implementations
    they compare with): a change means regrade."""
    h = hashlib.sha256()
    root = root or Path(__file__).resolve().parent.parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def make_job(cells: list[str], exercises: list[Exercise]):
    """The sandbox job: the notebook's cells and every call of every case, per function."""
    from .sandbox import Job

    calls = {ex.name: [c for case in ex.cases() for c in case.calls] for ex in exercises}
    return Job(cells=cells, calls=calls)


def split_outcomes(ex: Exercise, flat: list[Outcome]) -> list[list[Outcome]]:
    """Regroup one function's outcomes (in call order) into one list per case."""
    out, i = [], 0
    for case in ex.cases():
        n = len(case.calls)
        part = list(flat[i:i + n])
        while len(part) < n:
            part.append(Outcome("error", message="not run: the notebook stopped before this call"))
        out.append(part)
        i += n
    return out


def _record(assignment: str, digest: str, status: str, reports: list[Report], messages: list[str],
            isolation: str) -> dict[str, Any]:
    return {
        "assignment": assignment,
        "sha256": digest,
        "status": status,
        "score": float(sum(r.score for r in reports)),
        "max_score": float(sum(r.max_score for r in reports)),
        "messages": messages,
        "functions": [r.to_dict() for r in reports],
        "isolation": isolation,
    }


def refused(assignment: str, reason: str, digest: str = "", isolation: str = "none") -> dict[str, Any]:
    """The record of a submission that is not graded at all (every function 0), with the reason."""
    msg = f"Not graded: {reason}."
    return _record(assignment, digest, "invalid", [zero_report(ex, "error", msg) for ex in exercises_of(assignment)],
                   [msg], isolation)


def grade_submission(data: bytes, assignment: str, runner) -> dict[str, Any]:
    """Grade one notebook's bytes for ``assignment`` with ``runner`` (a sandbox Runner).

    Returns:
        A JSON-serialisable record: ``assignment``, ``sha256``, ``status`` (``graded``,
        ``invalid``, ``timeout`` or ``crashed``), ``score``, ``max_score``, ``messages``
        (notebook-level feedback), ``functions`` (one report per graded function) and
        ``isolation``. Never raises for anything in the notebook.
    """
    if assignment not in ASSIGNMENTS:
        raise KeyError(f"unknown assignment {assignment!r}; choose from {', '.join(ASSIGNMENTS)}")
    exercises = exercises_of(assignment)
    digest = sha256(bytes(data)) if isinstance(data, (bytes, bytearray)) else ""
    isolation = getattr(runner, "isolation", "none")
    try:
        cells = code_cells(data)
    except NotebookError as e:
        return refused(assignment, str(e), digest, isolation)
    source = "\n\n".join(cells)
    forbidden = {ex.name: violations_in_source(source, ex.name, ex.forbidden) for ex in exercises}
    result = runner.run(make_job(cells, exercises))
    messages: list[str] = []
    if result.status != "ok":
        messages.append(result.message)
    messages += [f"Error while running your notebook, {e}" for e in result.cell_errors[:10]]
    if len(result.cell_errors) > 10:
        messages.append(f"... and {len(result.cell_errors) - 10} more cells with errors")
    for access in result.reference_access[:5]:
        messages.append(f"Your notebook tried to use the course's reference implementations ({access}); "
                        "graded code must be your own, and they are not available while grading.")
    reports = []
    for ex in exercises:
        if forbidden[ex.name]:
            reports.append(zero_report(ex, "forbidden", "; ".join(forbidden[ex.name])))
        elif ex.name in result.missing:
            reports.append(zero_report(ex, "missing", f"no function named {ex.name} was defined after running "
                                       "your notebook (check the name and that its cell runs without errors)"))
        else:
            reports.append(judge(ex, split_outcomes(ex, result.outcomes.get(ex.name, []))))
    status = "graded" if result.status == "ok" else result.status
    return _record(assignment, digest, status, reports, messages, isolation)


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, ensure_ascii=False)
