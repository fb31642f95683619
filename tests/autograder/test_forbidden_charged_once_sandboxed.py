"""A forbidden call costs points once in the sandboxed grader too, as in ``check()`` (issue 30, item 6).

The notebooks are those of ``tests/grading/test_forbidden_charged_once.py``, graded end to end
with fresh inputs: the function that makes the forbidden call scores 0 and is the one flagged;
its honest graded callers, whose phase refuses the operator their student's callee runs, are
graded with the reference standing in and keep full marks; a caller that routes the call
through a graded callee still scores 0.
"""

from __future__ import annotations

import pytest
from conftest import notebook
from forbidden_cells import (
    FORBIDDEN_LAYER_NORM,
    FORBIDDEN_SOFTMAX,
    HONEST_ADD_AND_NORM,
    HONEST_SDPA,
    HONEST_SELF_ATTENTION,
    HONEST_WITH_IPYTHON,
    SETUP,
    SMUGGLED_SELF_ATTENTION,
    SMUGGLING_SOFTMAX,
)

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading.feedback import composition_lines

pytestmark = pytest.mark.sandbox

SEED = 20261127
HONEST_ATTENTION = HONEST_SDPA + HONEST_SELF_ATTENTION


@pytest.fixture(scope="module")
def runner():
    with Runner(mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()) as r:
        yield r


def _functions(rec) -> dict:
    return {f["function"]: f for f in rec.functions}


@pytest.mark.parametrize(
    "cells, assignment, offender, callers",
    [
        (
            [SETUP, FORBIDDEN_SOFTMAX, HONEST_ATTENTION],
            "02_self_attention",
            "softmax",
            ["scaled_dot_product_attention", "self_attention"],
        ),
        (
            [SETUP, FORBIDDEN_SOFTMAX, HONEST_SDPA, HONEST_WITH_IPYTHON],
            "02_self_attention",
            "softmax",
            ["scaled_dot_product_attention", "self_attention"],
        ),
        ([SETUP, FORBIDDEN_LAYER_NORM, HONEST_ADD_AND_NORM], "05_layer_norm", "layer_norm", ["add_and_norm"]),
    ],
    ids=["softmax", "softmax-ipython-caller", "layer_norm"],
)
def test_the_sandboxed_grader_charges_a_forbidden_call_to_the_function_that_makes_it(
    runner, cells, assignment, offender, callers
):
    rec = grade_submission(notebook(*cells), assignment, runner, seed=SEED)
    assert rec.status == "graded", rec.messages
    fns = _functions(rec)
    assert fns[offender]["status"] == "forbidden" and fns[offender]["score"] == 0
    assert [f for f in rec.flags if f.startswith("forbidden:")] == [
        f"forbidden: {offender} " + fns[offender]["notes"][0]
    ]
    for name in callers:
        f = fns[name]
        assert f["score"] == f["max_score"] > 0 and f["notes"] == [], (name, f)
        lines = composition_lines(name, f["composition"], f["max_score"])
        assert len(lines) == 1 and "forbidden call" in lines[0], (name, lines)
    assert rec.score == rec.max_score - fns[offender]["max_score"]


def test_the_sandboxed_grader_charges_a_call_routed_through_a_graded_callee_to_the_caller(runner):
    rec = grade_submission(
        notebook(SETUP, SMUGGLING_SOFTMAX, HONEST_SDPA, SMUGGLED_SELF_ATTENTION),
        "02_self_attention",
        runner,
        seed=SEED,
    )
    fns = _functions(rec)
    assert fns["softmax"]["score"] == fns["softmax"]["max_score"], fns["softmax"]  # a softmax may call it
    for name in ("scaled_dot_product_attention", "self_attention"):
        assert fns[name]["status"] == "forbidden" and fns[name]["score"] == 0, (name, fns[name])
        assert "scaled_dot_product_attention" in fns[name]["notes"][0]
