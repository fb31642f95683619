"""Feedback a student can act on, and forbidden calls that hide (issue 13, parts 3 and 5).

Each test writes a student's function the way students and public code write it, runs it
through ``check`` (the notebook's path) and reads the report as the student would.
"""

from __future__ import annotations

import math

import torch
from conftest import assert_diagnosed, assert_forbidden

import course_lib
from course_lib.grading import check, exercise, judge, run_calls
from course_lib.grading.feedback import error_hint, mistakes_of
from course_lib.grading.forbidden import NotebookScan, violations_in_function
from course_lib.grading.model import Call

# -- forbidden calls that hide (part 3) ------------------------------------------------------


def test_a_forbidden_call_in_a_notebook_helper_is_found_statically_as_the_autograder_reads_it():
    cells = [
        "import torch\n",
        "def my_helper(x, dim):\n    return torch.softmax(x, dim)\n",
        "def softmax(x, dim=-1):\n    return my_helper(x, dim)\n",
    ]
    assert any("torch.softmax" in v for v in NotebookScan(cells).violations("softmax", ("torch.softmax",)))


def test_a_function_made_with_exec_is_checked_through_its_bytecode():
    ns: dict = {"torch": torch}
    exec("def softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n", ns)
    assert_forbidden(check(ns["softmax"]), "read from its bytecode")


def test_a_function_made_with_exec_that_calls_a_helper_is_followed_into_the_helper():
    ns: dict = {"torch": torch}
    exec("def helper(x, dim):\n    return x.softmax(dim)\n\ndef softmax(x, dim=-1):\n    return helper(x, dim)\n", ns)
    assert any(".softmax()" in n for n in check(ns["softmax"]).notes)


# two lambdas on one line: the source cannot say which is which, the bytecode can
ok_lambda, bad_lambda = (lambda x, dim=-1: x.exp() / x.exp().sum(dim, keepdim=True), lambda x, dim=-1: x.softmax(dim))


def test_a_lambda_sharing_its_line_is_checked_by_its_own_bytecode():
    assert violations_in_function(bad_lambda, ("torch.softmax", "method:softmax"))
    assert not violations_in_function(ok_lambda, ("torch.softmax", "method:softmax"))


def multi_head_attention(*args):  # as a notebook defines it, at the top level
    raise NotImplementedError


_mha = multi_head_attention


def multi_head_attention_sum_form(*args):
    return _mha(*args)[0]


def test_a_graded_rule_refuses_a_call_of_the_notebooks_own_graded_function_however_aliased():
    notes = violations_in_function(multi_head_attention_sum_form, ("graded:multi_head_attention",))
    assert any("calls your own multi_head_attention" in n for n in notes), notes
    cells = [
        "def multi_head_attention(*a):\n    pass\n",
        "f = multi_head_attention\ndef multi_head_attention_sum_form(*a):\n    return f(*a)[0]\n",
    ]
    scan = NotebookScan(cells)
    assert scan.violations("multi_head_attention_sum_form", ("graded:multi_head_attention",))
    assert not scan.violations("multi_head_attention", ("graded:multi_head_attention",))


# -- a student's exception (part 5) ----------------------------------------------------------


def my_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - m.masked_fill(~torch.isfinite(m), 0.0))
    s = e.sum(dim=dim, keepdim=True)
    return e / s.masked_fill(s == 0, 1.0)


def softmax_without_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


def sdpa_with_dot_t(q, k, v, mask=None):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = my_softmax(scores, dim=-1)
    return w @ v, w


def test_an_exception_shows_the_failing_line_the_inputs_shapes_and_a_hint():
    report = check(softmax_without_keepdim, name="softmax")
    failed = [r for r in report.results if not r.passed]
    assert failed
    fb = failed[0].feedback + " " + failed[0].error  # the test's inputs; the error, said once for its tests
    assert "raised RuntimeError" in fb
    assert "in your line `return e / e.sum(dim=dim)`" in fb, fb
    assert "Inputs of this test: x (" in fb, fb
    assert "keepdim=True" in fb, fb


def test_k_dot_t_on_a_batch_gets_the_transpose_hint():
    ex = exercise("scaled_dot_product_attention")
    report = judge(ex, run_calls(sdpa_with_dot_t, ex))  # run_calls: the reference stands in nowhere
    fb = " ".join(r.feedback + " " + r.error for r in report.results)
    assert "k.transpose(-2, -1)" in fb or "must match the size" in fb, report
    assert "Inputs of this test: q (" in fb


def test_error_hints_know_the_common_shape_errors():
    assert "keepdim" in error_hint("raised RuntimeError: The size of tensor a (3) must match the size of tensor b (4)")
    assert "reshape" in error_hint("raised RuntimeError: view size is not compatible with input tensor's size")
    assert error_hint("raised ValueError: something else") == ""


def test_a_judge_that_fails_on_odd_outputs_never_shows_its_internal_error():
    def returns_nested_tuples(q, k, v, mask=None):
        return ((q,), (k,))

    report = check(returns_nested_tuples, name="scaled_dot_product_attention")
    text = str(report)
    assert "has no attribute" not in text and "object is not" not in text, text
    assert report.score == 0


# -- each likely mistake once, with the tests it explains (part 5) ---------------------------


def sdpa_unscaled(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = my_softmax(scores, dim=-1)
    return w @ v, w


def test_a_likely_mistake_is_said_once_per_function_with_the_tests_it_explains():
    report = check(sdpa_unscaled, name="scaled_dot_product_attention")
    assert_diagnosed(report, "not scaling the scores")
    text = str(report)
    assert text.count("not scaling the scores") == 1, text
    (_message, tests), *_ = mistakes_of(report.results)
    assert len(tests) > 1 and all(t in text for t in tests)


def softmax_nan_on_all_minus_inf(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def test_the_overflow_hint_is_not_given_when_the_large_input_test_passes():
    report = check(softmax_nan_on_all_minus_inf, name="softmax")
    assert_diagnosed(report, "entirely -inf gives NaN")
    assert not any("without subtracting the max" in d for d in report.diagnoses), report


def softmax_unstable(x, dim=-1):
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def test_the_overflow_hint_stays_when_large_inputs_fail_too():
    assert_diagnosed(check(softmax_unstable, name="softmax"), "without subtracting the max")


def test_every_mistake_whose_outputs_match_is_listed():
    # on a case where two named mistakes give the same outputs as the student's, both are named
    ex = exercise("scaled_dot_product_attention")
    report = check(sdpa_unscaled, name="scaled_dot_product_attention")
    for r in report.results:
        assert r.diagnosis == (r.diagnoses[0] if r.diagnoses else "")
    assert len(ex.mistake_runs()) == len(ex.mistakes)


def test_a_report_round_trips_with_its_diagnoses():
    report = check(sdpa_unscaled, name="scaled_dot_product_attention")
    again = type(report).from_dict(report.to_dict())
    assert again.diagnoses == report.diagnoses and str(again) == str(report)


def test_the_call_object_is_what_describes_inputs():
    from course_lib.grading.feedback import describe_inputs

    text = describe_inputs(course_lib.scaled_dot_product_attention, Call((torch.zeros(2, 3, 4),), {"mask": None}))
    assert text == "q (2, 3, 4) float32, mask=None"


# -- a mistake costs points once (part 4) ---------------------------------------------------


def softmax(x, dim=-1):  # the notebook's softmax: right
    return my_softmax(x, dim)


def scaled_dot_product_attention(q, k, v, mask=None):  # the notebook's: forgets sqrt(d_k)
    return sdpa_unscaled(q, k, v, mask)


def self_attention(x, W_q, W_k, W_v, mask=None):  # right, but calls the wrong function above
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)


def test_a_callee_mistake_is_charged_to_the_callee_only_and_the_feedback_shows_both_runs():
    callee = check(scaled_dot_product_attention)
    assert_diagnosed(callee, "not scaling the scores")
    report = check(self_attention)
    assert report.passed and report.score == report.max_score, report
    assert report.composition is not None and report.composition.callees == ["scaled_dot_product_attention"]
    assert report.composition.score < report.max_score and report.composition.failed
    text = str(report)
    assert "With your own scaled_dot_product_attention, self_attention scores" in text
    assert "costs points once" in text
    assert scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"  # put back afterwards
    assert globals()["scaled_dot_product_attention"] is scaled_dot_product_attention


def test_a_right_callee_leaves_the_students_own_composition_graded():
    report = check(scaled_dot_product_attention)  # its callee softmax passes
    assert report.composition is None


def test_callees_are_found_through_helpers_and_in_a_notebooks_source():
    from course_lib.grading.forbidden import NotebookScan
    from course_lib.grading.standins import live_callees, static_callees

    def project(x, W):
        return x @ W

    assert live_callees(self_attention, ["softmax", "scaled_dot_product_attention"]) == ["scaled_dot_product_attention"]
    cells = [
        "def softmax(x, dim=-1):\n    pass\n",
        "def _attend(q, k, v, mask):\n    return softmax(q @ k.transpose(-2, -1))\n",
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    return _attend(q, k, v, mask)\n",
    ]
    env = NotebookScan(cells).env
    assert static_callees(env, "scaled_dot_product_attention", ["softmax", "self_attention"]) == ["softmax"]
    assert static_callees(env, "softmax", ["scaled_dot_product_attention"]) == []
