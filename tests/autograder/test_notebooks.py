"""The exercise notebooks: generated from the solutions, solutions full marks, blanks zero.

(`make test` also runs nbval: stored outputs of solutions/ reproduce, exercises/ run
without errors.)
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import pytest
from conftest import ROOT

from course_lib.autograder.assign import AssignError, assign, make_exercise
from course_lib.autograder.notebook import code_cells
from course_lib.grading import ASSIGNMENTS, check, exercise, judge, run_calls

matplotlib.use("Agg")


def _run_cells(path: Path) -> dict:
    namespace: dict = {"__name__": "__main__"}
    for i, src in enumerate(code_cells(path.read_bytes())):
        exec(compile(src, f"{path.name}[cell {i}]", "exec"), namespace)
    import matplotlib.pyplot as plt

    plt.close("all")
    return namespace


def test_there_is_one_solution_and_one_exercise_notebook_per_assignment():
    for slug in ASSIGNMENTS:
        assert (ROOT / "solutions" / f"{slug}.ipynb").is_file(), slug
        assert (ROOT / "exercises" / f"{slug}.ipynb").is_file(), slug


def test_exercise_notebooks_are_up_to_date_with_the_solutions():
    stale = assign(ROOT / "solutions", ROOT / "exercises", check=True)
    assert stale == [], f"run `course-lib assign`: out of date: {[p.name for p in stale]}"


def test_exercise_notebooks_store_no_outputs_and_no_solutions():
    for slug in ASSIGNMENTS:
        nb = json.loads((ROOT / "exercises" / f"{slug}.ipynb").read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            assert "SOLUTION" not in cell["source"]
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None


def test_solution_notebooks_store_their_outputs():
    for slug in ASSIGNMENTS:
        nb = json.loads((ROOT / "solutions" / f"{slug}.ipynb").read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c["execution_count"] is not None for c in code), slug
        assert any(c["outputs"] for c in code), slug


@pytest.mark.parametrize("slug", list(ASSIGNMENTS))
def test_every_solution_function_scores_full_marks(slug):
    ns = _run_cells(ROOT / "solutions" / f"{slug}.ipynb")
    for name in ASSIGNMENTS[slug]:
        report = check(ns[name], name=name)
        assert report.passed and report.score == report.max_score > 0, str(report)


@pytest.mark.parametrize("slug", list(ASSIGNMENTS))
def test_every_solution_function_scores_full_marks_on_fresh_inputs_too(slug):
    # grading with --seed draws every input anew; an honest solution must not notice
    ns = _run_cells(ROOT / "solutions" / f"{slug}.ipynb")
    for seed in (11, 20261123):
        for name in ASSIGNMENTS[slug]:
            ex = exercise(name)
            report = judge(ex, run_calls(ns[name], ex, seed), seed=seed)
            assert report.passed and report.score == report.max_score > 0, f"seed {seed}:\n{report}"


@pytest.mark.parametrize("slug", list(ASSIGNMENTS))
def test_every_blank_stub_scores_zero(slug):
    ns = _run_cells(ROOT / "exercises" / f"{slug}.ipynb")
    for name in ASSIGNMENTS[slug]:
        report = check(ns[name], name=name)
        assert report.score == 0 and report.status == "not implemented", str(report)


def _nb(*cells: tuple[str, str]) -> dict:
    return {
        "cells": [
            {
                "cell_type": t,
                "metadata": {},
                "source": s,
                **(
                    {"outputs": [{"output_type": "stream", "name": "stdout", "text": "x"}], "execution_count": 3}
                    if t == "code"
                    else {}
                ),
            }
            for t, s in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_assign_replaces_solution_regions_keeping_the_indentation():
    nb = _nb(
        (
            "code",
            'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    y = x + 1\n    return y\n'
            "    ### END SOLUTION\n\ncheck(f)",
        ),
        ("markdown", "Why?\n\n<!-- BEGIN SOLUTION -->\nBecause.\n<!-- END SOLUTION -->"),
    )
    out = make_exercise(nb)
    assert out["cells"][0]["source"] == (
        'def f(x):\n    """Doc."""\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\ncheck(f)'
    )
    assert out["cells"][0]["outputs"] == [] and out["cells"][0]["execution_count"] is None
    assert out["cells"][1]["source"] == "Why?\n\n*Your answer here.*"


@pytest.mark.parametrize(
    "source",
    [
        "### BEGIN SOLUTION\nx = 1\n",
        "x = 1\n### END SOLUTION\n",
        "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
    ],
)
def test_assign_refuses_unpaired_markers(source):
    with pytest.raises(AssignError, match="SOLUTION"):
        make_exercise(_nb(("code", source)), "bad.ipynb")


def test_assign_check_mode_reports_a_stale_exercise(tmp_path):
    (tmp_path / "sol").mkdir()
    (tmp_path / "sol" / "a.ipynb").write_text(json.dumps(_nb(("code", "x = 1"))))
    assert [p.name for p in assign(tmp_path / "sol", tmp_path / "ex", check=True)] == ["a.ipynb"]
    assert not (tmp_path / "ex").exists()
    assign(tmp_path / "sol", tmp_path / "ex")
    assert assign(tmp_path / "sol", tmp_path / "ex", check=True) == []
