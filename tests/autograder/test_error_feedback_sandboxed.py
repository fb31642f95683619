"""The grader explains an exception as ``check`` does (issue 29, item 2).

The worker reads the shapes and dtypes of the failing line's tensors in the student's process
and sends them apart from the message; the grader keeps their sizes (a 4-D shape is not taken
for leaked tensor contents) and says each error once, with the tests it affects, in the record
and in Gradescope's results and the feedback files; an older record, without errors of its
own, renders as it did.
"""

from __future__ import annotations

import linecache
import warnings
from dataclasses import replace

import pytest
from conftest import notebook

from course_lib.autograder.autograde import grade_submission, refused_record
from course_lib.autograder.exports import gradescope_results
from course_lib.autograder.feedback_files import feedback_html, feedback_markdown
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.autograder.untrusted_text import operand_message
from course_lib.grading import check
from course_lib.grading.feedback import errors_of

SETUP = "import math\nimport torch\nfrom course_lib.grading import check\n"
SDPA_WITH_DOT_T = """
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    w = e / e.sum(dim=-1, keepdim=True)
    return w @ v, w
"""


def _checked_in_a_notebook(source: str, name: str):
    """``check`` on the function a cell defines, its lines known as a notebook's are."""
    filename, cell = "<notebook cell>", SETUP + source
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    namespace: dict = {}
    exec(compile(cell, filename, "exec"), namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check(namespace[name], name=name)


@pytest.mark.sandbox
def test_the_sandboxed_grader_shows_the_operands_of_the_failing_line_once_like_check():
    with Runner(
        mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()
    ) as runner:
        rec = grade_submission(notebook(SETUP, SDPA_WITH_DOT_T), "02_self_attention", runner)
    [sdpa] = [f for f in rec.functions if f["function"] == "scaled_dot_product_attention"]
    errors = errors_of(sdpa["results"])
    assert errors, sdpa["results"]
    texts = " ".join(e for e, _ in errors)
    assert "in your line `scores = q @ k.T / math.sqrt(q.shape[-1])`, where `q` is (" in texts, texts
    assert "`q` is (2, 3, " in texts, "a 4-D shape keeps its sizes: " + texts
    assert all("`.transpose(-2, -1)`" in e and "mask" not in e.partition("Hint: ")[2] for e, _ in errors), texts
    tests = [t for _, ts in errors for t in ts]
    assert len(tests) == len(set(tests)) > len(errors), "each error once, with every test it affects"
    assert all(
        r["feedback"].startswith("raised ") and "Inputs of this test: q (" in r["feedback"] for r in sdpa["results"]
    )
    # the same errors as check() in the notebook, word for word
    local = _checked_in_a_notebook(SDPA_WITH_DOT_T, "scaled_dot_product_attention")
    assert [(e.partition(", in your line")[2], t) for e, t in errors] == [
        (e.partition(", in your line")[2], t) for e, t in errors_of(local.results)
    ]
    # Gradescope: the error in full on its first test, referred to on the others
    outputs = [t["output"] for t in gradescope_results(rec)["tests"] if t["name"].startswith("scaled_dot_product")]
    full = [o for o in outputs if "Hint: " in o]
    assert len(full) == len(errors), outputs
    assert sum("Error: the one shown in test '" in o for o in outputs) == len(tests) - len(errors), outputs


COSINE_WITHOUT_KEEPDIM = """
def cosine_score(query, keys, eps=1e-8):
    q = query / query.norm(dim=-1, keepdim=True).clamp_min(eps)
    k = keys / keys.norm(dim=-1).clamp_min(eps)
    return (k @ q.unsqueeze(-1)).squeeze(-1)
"""


def _record_of(*reports: dict):
    return replace(refused_record("01_seq2seq_attention", "stand-in"), status="graded", functions=reports, messages=())


def test_the_feedback_files_say_an_error_once_and_an_older_record_renders_as_it_did():
    report = _checked_in_a_notebook(COSINE_WITHOUT_KEEPDIM, "cosine_score").to_dict()
    [(error, tests)] = errors_of(report["results"])
    rec = _record_of(report)
    for text in (feedback_markdown("ana", [rec]), feedback_html("ana", [rec])):
        assert text.count("must match the size of tensor b") == 1, text
    outputs = [t["output"] for t in gradescope_results(rec)["tests"]]
    assert sum("must match the size of tensor b" in o for o in outputs) == 1, outputs
    assert f"Error (also tests {', '.join(repr(t) for t in tests[1:])}): {error}" in outputs[0], outputs[0]
    # a record stored before errors were said once: its feedback, on every test, as before
    old = dict(report, results=[{k: v for k, v in r.items() if k != "error"} for r in report["results"]])
    for r in old["results"]:
        r["feedback"] = "raised RuntimeError: an older message, in your line `k = keys / keys.norm(dim=-1)`"
    old_rec = _record_of(old)
    assert feedback_markdown("ana", [old_rec]).count("an older message") == len(tests)
    assert all("an older message" in t["output"] for t in gradescope_results(old_rec)["tests"][: len(tests)])


def test_the_operands_keep_their_shapes_but_never_a_run_of_values():
    words = ", where `mask` is (2, 1, 16, 24) bool and `x` is a list of ((3) float32, (3) float32)"
    assert operand_message(words) == words
    forged = ", where `x` is (1, 2) float32 and 0.1235, 0.9876, 0.5555, 0.4444 follow"
    assert "0.1235" not in operand_message(forged) and "(1, 2) float32" in operand_message(forged)
    assert operand_message("raised ValueError: 1, 2, 3, 4") == ""  # not the worker's words
    assert operand_message(None) == "" and len(operand_message(", where `x` is " + "a" * 1000)) == 300
