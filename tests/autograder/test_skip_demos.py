"""Demo blocks (``with when_implemented():``) are left out of grading, and only when nothing needs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_autograder import HONEST, SETUP, notebook

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.record import Record
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.autograder.skip_demos import skip_demos

IMPORT = "from course_lib.grading import check, when_implemented\n"
GRADED = ["softmax", "scaled_dot_product_attention", "self_attention"]
DEMO = "with when_implemented():\n    x = torch.randn(3)\n    print(softmax(x))\n"


def test_a_demo_block_becomes_pass_and_keeps_the_cells_line_numbers():
    cells = [IMPORT, "y = 1\n" + DEMO + "z = 2\n"]
    out = skip_demos(cells, GRADED)
    assert out[0] == IMPORT
    assert out[1].split("\n") == ["y = 1", "pass", "", "", "z = 2", ""]


def test_a_demo_that_defines_a_graded_function_runs():
    cells = [IMPORT, "with when_implemented():\n    def softmax(x, dim=-1):\n        return x\n"]
    assert skip_demos(cells, GRADED) == cells


def test_a_demo_binding_a_name_read_by_later_top_level_code_runs():
    cells = [IMPORT, DEMO, "print(x)\n"]
    assert skip_demos(cells, GRADED) == cells


def test_a_demo_binding_a_global_that_a_graded_function_reads_runs():
    cells = [IMPORT, "with when_implemented():\n    SCALE = 2.0\n", "def softmax(x, dim=-1):\n    return x * SCALE\n"]
    assert skip_demos(cells, GRADED) == cells


def test_a_demo_importing_a_module_a_helper_uses_runs():
    cells = [IMPORT, "with when_implemented():\n    import math\n", "def helper(d):\n    return math.sqrt(d)\n"]
    assert skip_demos(cells, GRADED) == cells


def test_a_name_a_function_uses_only_as_its_own_local_does_not_keep_a_demo():
    cells = [IMPORT, "def softmax(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)\n", DEMO]
    assert skip_demos(cells, GRADED)[2].startswith("pass\n")


def test_a_demo_needed_by_a_demo_that_must_run_runs_too():
    first = "with when_implemented():\n    a = 1\n"
    second = "with when_implemented():\n    b = a + 1\n"
    cells = [IMPORT, first, second, "print(b)\n"]
    assert skip_demos(cells, GRADED) == cells


def test_demos_that_only_feed_each_other_are_both_skipped():
    cells = [IMPORT, "with when_implemented():\n    a = 1\n", "with when_implemented():\n    print(a)\n"]
    out = skip_demos(cells, GRADED)
    assert out[1].startswith("pass") and out[2].startswith("pass")


@pytest.mark.parametrize(
    "binding",
    [
        "def when_implemented():\n    return open('/dev/null')\n",
        "when_implemented = lambda: open('/dev/null')\n",
        "from contextlib import nullcontext as when_implemented\n",
        "import contextlib as when_implemented\n",
        "from course_lib.grading import check as when_implemented\n",
    ],
)
def test_a_notebook_that_binds_when_implemented_itself_runs_every_block(binding):
    cells = [IMPORT, binding, DEMO]
    assert skip_demos(cells, GRADED) == cells


@pytest.mark.parametrize(
    "block",
    [
        "with when_implemented() as w:\n    print(1)\n",
        "with when_implemented(), open('f') as f:\n    print(1)\n",
        "with when_implemented(1):\n    print(1)\n",
        "if True:\n    with when_implemented():\n        print(1)\n",
    ],
)
def test_only_a_plain_top_level_demo_block_is_skipped(block):
    cells = [IMPORT, block]
    assert skip_demos(cells, GRADED) == cells


def test_a_one_line_demo_block_is_skipped_too():
    cells = [IMPORT, "with when_implemented(): print(softmax(torch.ones(2)))\ny = 1\n"]
    assert skip_demos(cells, GRADED)[1] == "pass\ny = 1\n"


def test_a_demo_naming_the_functions_it_uses_is_skipped_too():
    cells = [IMPORT, "with when_implemented(softmax, self_attention):\n    print(softmax(torch.ones(2)))\n"]
    assert skip_demos(cells, GRADED)[1] == "pass\n\n"


def test_unreadable_cells_are_left_as_they_are():
    cells = [IMPORT, "def broken(:\n", "", DEMO]
    out = skip_demos(cells, GRADED)
    assert out[:3] == cells[:3] and out[3].startswith("pass")


# --------------------------------------------------------------------------------------
# Graded in the sandbox
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner():
    with Runner(mode="required", limits=Limits(submission_seconds=60.0), watch=watch_lists()) as r:
        yield r


def _grade(runner, *cells: str) -> Record:
    return grade_submission(notebook(*cells), "02_self_attention", runner)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_demo_that_would_fail_is_not_run_while_grading(runner):
    crash = "with when_implemented():\n    raise RuntimeError('demo crashed')\n"
    record = _grade(runner, SETUP + IMPORT, HONEST, crash)
    assert record.score == record.max_score
    assert not any("demo crashed" in m for m in record.messages)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_definition_after_a_skipped_demo_in_the_same_cell_counts(runner):
    cell = "with when_implemented():\n    raise RuntimeError('demo crashed')\n" + HONEST
    record = _grade(runner, SETUP + IMPORT, cell)
    assert record.score == record.max_score


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_demo_that_must_run_and_fails_prints_one_line_and_its_cell_goes_on(runner):
    demo = "with when_implemented():\n    SHIFT = 0.0\n    raise RuntimeError('demo crashed')\n"
    uses_shift = HONEST.replace("def softmax(x, dim=-1):\n", "def softmax(x, dim=-1):\n    x = x + SHIFT\n", 1)
    assert uses_shift != HONEST  # SHIFT is read by softmax: the demo binding it must run
    record = _grade(runner, SETUP + IMPORT, demo + uses_shift)
    assert record.score == record.max_score
    assert not any("demo crashed" in m for m in record.messages)


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_helper_defined_inside_a_demo_is_still_there_for_the_graded_functions(runner):
    helper = "with when_implemented():\n    def _shift(x, dim):\n        return x.amax(dim=dim, keepdim=True)\n"
    softmax = (
        "def softmax(x, dim=-1):\n    m = _shift(x, dim)\n"
        "    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))\n"
        "    total = e.sum(dim=dim, keepdim=True)\n"
        "    return e / torch.where(total == 0, torch.ones_like(total), total)\n"
    )
    record = _grade(runner, SETUP + IMPORT, helper, softmax)
    assert record.functions[0]["function"] == "softmax"
    assert record.functions[0]["score"] == record.functions[0]["max_score"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_solution_notebooks_lose_no_point_without_their_demos(runner):
    root = Path(__file__).resolve().parents[2]
    data = (root / "solutions" / "02_self_attention.ipynb").read_bytes()
    assert any("with when_implemented(" in "".join(c["source"]) for c in json.loads(data)["cells"])
    record = grade_submission(data, "02_self_attention", runner)
    assert record.status == "graded" and record.score == record.max_score
