"""A forbidden call costs points once, in the function that makes it (issue 30, item 6).

A student whose ``softmax`` calls ``torch.softmax`` loses ``softmax``'s points; their honest
``scaled_dot_product_attention`` and ``self_attention``, which only call that ``softmax``, are
graded with the reference standing in for it and keep theirs, in ``check()`` and in the
autograder's static scan alike. A caller that makes a forbidden call itself, through a helper of
its own, or by routing it through a graded callee that may make it, still loses its points.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import pytest
from conftest import assert_forbidden, assert_full_marks
from forbidden_cells import (
    FORBIDDEN_LAYER_NORM,
    FORBIDDEN_SOFTMAX,
    HONEST_ADD_AND_NORM,
    HONEST_SDPA,
    HONEST_SELF_ATTENTION,
    HONEST_WITH_IPYTHON,
    SDPA_THROUGH_OWN_HELPER,
    SETUP,
    SMUGGLED_SELF_ATTENTION,
    SMUGGLING_SOFTMAX,
)

from course_lib.autograder.notebook import python_source
from course_lib.grading import check
from course_lib.grading.charging import static_charges
from course_lib.grading.forbidden import NotebookScan

#: the caller makes the same forbidden call as its callee, in its own code
CALLER_ALSO_FORBIDDEN = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1) if mask is None else softmax(scores, dim=-1)
    return w @ v, w
"""

ATTENTION = ["softmax", "scaled_dot_product_attention", "self_attention"]


def live_notebook(tmp_path: Path, cells: list[str]):
    """The notebook's cells run as a kernel runs them (each cell transformed by IPython), in a
    module written to a file so that ``check()`` can read the functions' source."""
    name = f"nb_{uuid.uuid4().hex}"
    path = tmp_path / f"{name}.py"
    shell = "class _Shell:\n    def __getattr__(self, n):\n        return lambda *a, **k: None\n\n"
    shell += "def _shell():\n    return _Shell()\n\n"
    path.write_text(shell + "\n".join(python_source(c).replace("get_ipython()", "_shell()") for c in cells))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def graded(tmp_path: Path, cells: list[str], assignment: str, names: list[str]):
    """Each function's ``check()`` report, and what the autograder's static scan charges it with."""
    module = live_notebook(tmp_path, cells)
    reports = {n: check(getattr(module, n)) for n in names}
    charged = static_charges(NotebookScan([python_source(c) for c in cells]), assignment)
    return reports, charged


def assert_kept_with_the_reference(report, callee: str) -> None:
    """Full marks, measured with the reference ``callee`` standing in, said in one sentence."""
    assert_full_marks(report)
    assert report.notes == []
    assert report.composition is not None and report.composition.callees == [callee]
    lines = report.composition_lines()
    assert len(lines) == 1 and lines[0].count(".") == 1, lines
    assert f"reference {callee} in its place" in lines[0] and "forbidden call" in lines[0]
    assert str(report).count("forbidden call") == 1


@pytest.mark.parametrize("caller_cells", [[HONEST_SELF_ATTENTION], [HONEST_WITH_IPYTHON]], ids=["plain", "ipython"])
def test_a_forbidden_softmax_costs_softmax_only_and_its_honest_callers_keep_full_marks(tmp_path, caller_cells):
    reports, charged = graded(
        tmp_path, [SETUP, FORBIDDEN_SOFTMAX, HONEST_SDPA, *caller_cells], "02_self_attention", ATTENTION
    )
    assert_forbidden(reports["softmax"], "torch.softmax")
    assert reports["softmax"].notes == ["uses torch.softmax, which this exercise asks you to write yourself"]
    assert_kept_with_the_reference(reports["scaled_dot_product_attention"], "softmax")
    assert_kept_with_the_reference(reports["self_attention"], "scaled_dot_product_attention")
    assert charged == {"softmax": reports["softmax"].notes, "scaled_dot_product_attention": [], "self_attention": []}


def test_a_forbidden_layer_norm_costs_layer_norm_only_and_add_and_norm_keeps_full_marks(tmp_path):
    names = ["layer_norm", "add_and_norm"]
    reports, charged = graded(tmp_path, [SETUP, FORBIDDEN_LAYER_NORM, HONEST_ADD_AND_NORM], "05_layer_norm", names)
    assert_forbidden(reports["layer_norm"], "torch.nn.functional.layer_norm")
    assert_kept_with_the_reference(reports["add_and_norm"], "layer_norm")
    assert charged == {"layer_norm": reports["layer_norm"].notes, "add_and_norm": []}


def test_a_caller_that_reaches_a_forbidden_call_through_its_own_helper_still_loses_its_points(tmp_path):
    reports, charged = graded(
        tmp_path, [SETUP, FORBIDDEN_SOFTMAX, HONEST_SDPA, SDPA_THROUGH_OWN_HELPER], "02_self_attention", ATTENTION
    )
    assert_forbidden(reports["self_attention"], "scaled_dot_product_attention")
    assert charged["self_attention"] == reports["self_attention"].notes
    assert not any("torch.softmax" in n for n in charged["self_attention"])  # softmax's call is softmax's


@pytest.mark.parametrize(
    "softmax_cell",
    [
        SMUGGLING_SOFTMAX,
        SMUGGLING_SOFTMAX.replace("total = e.sum", "e = torch.softmax(x, dim) * 0 + e\n    total = e.sum"),
    ],
    ids=["honest-otherwise", "forbidden-too"],
)
def test_a_forbidden_call_routed_through_a_graded_callee_costs_the_caller(tmp_path, softmax_cell):
    reports, charged = graded(
        tmp_path, [SETUP, softmax_cell, HONEST_SDPA, SMUGGLED_SELF_ATTENTION], "02_self_attention", ATTENTION
    )
    attention = reports["self_attention"]
    assert attention.score == 0 and not attention.passed, attention
    assert_forbidden(attention, "torch.nn.functional.scaled_dot_product_attention")
    assert charged["self_attention"] == attention.notes
    # scaled_dot_product_attention reaches the same call through the same softmax: a graded callee
    # that may make a call its callers may not costs every caller that can reach it
    assert_forbidden(reports["scaled_dot_product_attention"], "torch.nn.functional.scaled_dot_product_attention")


def test_the_smuggling_softmax_is_charged_for_what_softmax_may_not_call_only(tmp_path):
    reports, charged = graded(
        tmp_path, [SETUP, SMUGGLING_SOFTMAX, HONEST_SDPA, SMUGGLED_SELF_ATTENTION], "02_self_attention", ATTENTION
    )
    assert_full_marks(reports["softmax"])  # a softmax may call the attention kernel: it is not one
    assert charged["softmax"] == []


def test_a_caller_that_makes_the_forbidden_call_itself_loses_its_points_too(tmp_path):
    reports, charged = graded(
        tmp_path,
        [SETUP, FORBIDDEN_SOFTMAX, CALLER_ALSO_FORBIDDEN, HONEST_SELF_ATTENTION],
        "02_self_attention",
        ATTENTION,
    )
    assert_forbidden(reports["scaled_dot_product_attention"], "torch.softmax")
    assert charged["scaled_dot_product_attention"] == reports["scaled_dot_product_attention"].notes
    assert_forbidden(reports["softmax"], "torch.softmax")
    assert_kept_with_the_reference(reports["self_attention"], "scaled_dot_product_attention")
    assert charged["self_attention"] == []
