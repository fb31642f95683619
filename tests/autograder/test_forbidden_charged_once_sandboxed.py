"""A forbidden call costs points once in the sandboxed grader too, as in ``check()`` (issue 30, item 6).

The notebooks are those of ``tests/grading/test_forbidden_charged_once.py``, graded end to end
with fresh inputs: the function that makes the forbidden call scores 0 and is the one flagged;
its honest graded callers, whose phase refuses the operator their student's callee runs, are
graded with the reference standing in and keep full marks; a caller that routes the call
through a graded callee still scores 0.
"""

from __future__ import annotations

import pytest
from conftest import HONEST_SOFTMAX, notebook

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading.feedback import composition_lines

pytestmark = pytest.mark.sandbox

SEED = 20261127
SETUP = "import math\nimport torch\nimport torch.nn.functional as F\n"
FORBIDDEN_SOFTMAX = "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"
HONEST_ATTENTION = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ v, w

def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
"""
FORBIDDEN_LAYER_NORM = """
def layer_norm(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)

def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    return layer_norm(x + sublayer_output, gamma, beta, eps)
"""
#: an honest student's own style: a helper class, IPython magics and a shell line
IPYTHON_SELF_ATTENTION = """
%matplotlib inline
!echo projecting

class Projection:
    def __init__(self, W):
        self.W = W

    def __call__(self, x):
        return x @ self.W

def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = (Projection(W)(x) for W in (W_q, W_k, W_v))
    return scaled_dot_product_attention(q, k, v, mask)
"""
HONEST_SDPA = HONEST_ATTENTION.split("def self_attention")[0]
SMUGGLING_SOFTMAX = HONEST_SOFTMAX.replace(
    "def softmax(x, dim=-1):",
    "def softmax(x, dim=-1, kv=None):\n    if kv is not None:\n        return F.scaled_dot_product_attention(x, *kv)",
)
SMUGGLED_SELF_ATTENTION = """
def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    w = scaled_dot_product_attention(q, k, v, mask)[1]
    return softmax(q, kv=(k, v, mask)), w
"""


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
            [SETUP, FORBIDDEN_SOFTMAX, HONEST_SDPA, IPYTHON_SELF_ATTENTION],
            "02_self_attention",
            "softmax",
            ["scaled_dot_product_attention", "self_attention"],
        ),
        ([SETUP, FORBIDDEN_LAYER_NORM], "05_layer_norm", "layer_norm", ["add_and_norm"]),
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
