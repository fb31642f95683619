"""Look-alike submissions of one assignment: the students' graded functions (with the helpers
they reach, as records store them) compared with
:func:`course_lib.autograder.lookalike.find_lookalikes`, the starter code (with every code cell
of the exercise notebook: provided text) and the solution (with its helpers) read from the
repository's notebooks (``exercises/NN_x.ipynb`` and ``solutions/NN_x.ipynb``,
found like ``course-lib assign`` finds them: relative to the current folder by default).

The solution's source is used for the comparison only: nothing here returns it for display.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...grading.forbidden.notebook import NotebookScan
from ..compared import compared_sources
from ..lookalike import REFERENCE, Pair, find_lookalikes
from ..notebook import NotebookError, code_cells, function_sources
from .data import ReportError, Row

__all__ = ["notebook_functions", "release_code", "lookalikes", "assignment_lookalikes", "student_sources"]


def notebook_functions(
    folder: str | Path, assignment: str, functions: list[str], option: str, *, helpers: bool = False
) -> dict[str, str]:
    """The graded functions' sources in ``folder/<assignment>.ipynb``.

    Args:
        folder: ``exercises`` (the starter code) or ``solutions``.
        assignment: the assignment's name.
        functions: its graded functions.
        option: the command-line option that names ``folder``, for the error message.
        helpers: each function followed by the notebook's own helpers it reaches, as records
            store a student's (:func:`~course_lib.autograder.compared.compared_sources`).

    Raises:
        ReportError: the notebook is missing or unreadable.
    """
    cells = release_code(folder, assignment, option)
    return compared_sources(NotebookScan(cells), functions) if helpers else function_sources(cells, functions)


def release_code(folder: str | Path, assignment: str, option: str) -> list[str]:
    """Every code cell of ``folder/<assignment>.ipynb`` (for the exercises: the provided text).

    Raises:
        ReportError: the notebook is missing or unreadable.
    """
    path = Path(folder) / f"{assignment}.ipynb"
    if not path.is_file():
        raise ReportError(
            f"{option}: no notebook {path} (the look-alike search needs the course's exercise and solution "
            f"notebooks; run the report from the repository's root or pass {option} DIR)"
        )
    try:
        return code_cells(path.read_bytes())
    except NotebookError as err:
        raise ReportError(f"{option}: {path} is not readable: {err}") from None


def student_sources(rows: list[Row]) -> dict[str, dict[str, str]]:
    """Student -> graded function -> source, for the records that carry sources."""
    out = {}
    for student, record in rows:
        sources = record.sources
        if sources:
            out[student] = {str(k): str(v) for k, v in sources.items()}
    return out


def lookalikes(
    rows: list[Row],
    starter: dict[str, str],
    solution: dict[str, str],
    threshold: float | None = None,
    provided: Sequence[str] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The look-alike pairs of one assignment, most similar first, and a summary.

    Students are passed to the search under neutral keys, so no student id can pose as
    :data:`~course_lib.autograder.lookalike.REFERENCE`.

    Args:
        rows: the assignment's records.
        starter: graded function -> the exercise notebook's stub.
        solution: graded function -> the solution notebook's source (with its helpers).
        threshold: the smallest similarity reported (None: the search's default).
        provided: the exercise notebook's code cells: provided text, never shared.

    Returns:
        ``(pairs, summary)``: each pair as :meth:`~course_lib.autograder.lookalike.Pair.to_dict`
        with the students' ids and ``reference`` (True when ``b`` is the solution, then
        :data:`~course_lib.autograder.lookalike.REFERENCE`); the summary has ``compared``
        (students with sources), ``student_pairs`` and ``reference_pairs``.
    """
    sources = student_sources(rows)
    names = list(sources)
    keys = {f"{i:09d}": name for i, name in enumerate(names)}
    keyed = {key: sources[name] for key, name in keys.items()}
    kwargs: dict[str, Any] = {} if threshold is None else {"threshold": threshold}
    pairs: list[Pair] = find_lookalikes(keyed, starter=starter, solution=solution, provided=provided, **kwargs)
    out = []
    for p in pairs:
        d = p.to_dict()
        d["a"] = keys[p.a]
        d["reference"] = p.b == REFERENCE
        d["b"] = REFERENCE if d["reference"] else keys[p.b]
        out.append(d)
    summary = {
        "compared": len(sources),
        "student_pairs": sum(1 for d in out if not d["reference"]),
        "reference_pairs": sum(1 for d in out if d["reference"]),
    }
    return out, summary


def assignment_lookalikes(
    rows: list[Row],
    assignment: str,
    functions: list[str],
    *,
    exercises: str | Path,
    solutions: str | Path,
    threshold: float | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """:func:`lookalikes` of one assignment with its release read from the notebooks: the starter
    stubs and every code cell of ``exercises/<assignment>.ipynb`` (provided text), the solution
    with its helpers from ``solutions/<assignment>.ipynb``: the one search the class report and
    the review app (``course-lib review``) both run.

    Args:
        rows: the assignment's records.
        assignment: its name.
        functions: its graded functions.
        exercises: folder of the exercise notebooks.
        solutions: folder of the solution notebooks (compared with, never returned).
        threshold: the smallest similarity reported (None: the search's default).

    Returns:
        ``(pairs, summary)`` as :func:`lookalikes` returns them.

    Raises:
        ReportError: a notebook is missing or unreadable.
    """
    provided = release_code(exercises, assignment, "--exercises")
    starter = function_sources(provided, functions)
    solution = notebook_functions(solutions, assignment, functions, "--solutions", helpers=True)
    return lookalikes(rows, starter, solution, threshold, provided)
