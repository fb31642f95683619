"""Exceptions explained from the failing line (issue 29, item 2).

When a student's function raises, the report shows the student's line, the shapes and dtypes
of the tensors that line names (read from the failing frame, never values), a hint chosen by
the error, the line and the exercise (no masks where the function takes none), and says each
error once with the tests it affects. Each wrong version is written as a student would.
"""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path

import honest_code
import torch
from conftest import ROOT

from course_lib.grading import check, exercise, judge, run_calls
from course_lib.grading.feedback import BROADCAST, error_hint, error_lines, errors_of, tensor_words
from course_lib.grading.operands import MAX_CHARS, line_names, operand_words, value_words
from course_lib.grading.registry import ASSIGNMENTS
from course_lib.grading.report import Report


def _softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def sdpa_with_dot_t(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.T / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = _softmax(scores)
    return w @ v, w


def cosine_without_keepdim(query, keys, eps=1e-8):
    q = query / query.norm(dim=-1, keepdim=True).clamp_min(eps)
    k = keys / keys.norm(dim=-1).clamp_min(eps)  # (N, S) does not line up with (N, S, D)
    return (k @ q.unsqueeze(-1)).squeeze(-1)


def pool_with_a_reshaped_mask(scores, values, mask=None):
    if mask is not None:
        mask = mask.reshape(-1, 1)  # the mask "made to fit": (N*S, 1)
        scores = scores.masked_fill(~mask, float("-inf"))
    w = _softmax(scores)
    return (w.unsqueeze(-1) * values).sum(-2), w


def tiled_mask_not_sliced(q, k, v, mask=None, block_size=128):
    """Tiled attention as a student writes it first: every block masked with the whole mask."""
    S = k.shape[-2]
    m = torch.full((*q.shape[:-1], 1), -math.inf)
    total = torch.zeros((*q.shape[:-1], 1))
    acc = torch.zeros((*q.shape[:-1], v.shape[-1]))
    for start in range(0, S, block_size):
        kb, vb = k[..., start : start + block_size, :], v[..., start : start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf)
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - safe)
        rescale = torch.exp(torch.where(torch.isfinite(m), m, safe) - safe)
        acc, total, m = acc * rescale + p @ vb, total * rescale + p.sum(-1, keepdim=True), m_new
    return acc / torch.where(total == 0, torch.ones_like(total), total)


def _errors(report: Report) -> list[str]:
    return [error for error, _ in errors_of(report.results)]


# -- the operands of the failing line -------------------------------------------------------


def _judged_as_in_a_notebook(fn, name):
    """``fn`` judged on its calls with warnings shown, not raised (as in a notebook; pytest's
    configuration makes them errors): ``k.T`` on a batch warns, then fails in the product."""
    ex = exercise(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return judge(ex, run_calls(fn, ex))


def test_error_feedback_shows_the_shapes_of_the_operands_on_the_failing_line():
    ex = exercise("scaled_dot_product_attention")
    report = _judged_as_in_a_notebook(sdpa_with_dot_t, ex.name)
    first = report.results[0]
    q, k = ex.cases()[0].calls[0].args[:2]
    shape = lambda t: "(" + ", ".join(map(str, t.shape)) + ")"  # noqa: E731
    assert first.error.startswith("raised RuntimeError: "), first
    assert f", in your line `scores = q @ k.T / math.sqrt(q.shape[-1])`, where `q` is {shape(q)} float32" in first.error
    assert f"`k` is {shape(k)} float32" in first.error, first.error
    assert "math" not in first.error.partition(", where")[2], "a module is no operand"


def test_operands_are_the_names_the_line_reads_not_attributes_keywords_or_targets():
    assert line_names("scores = q @ k.transpose(-2, -1) / math.sqrt(d)") == ["q", "k", "math", "d"]
    assert line_names("x = x.masked_fill(~mask, value=-math.inf)") == ["x", "mask", "math"]
    assert line_names("acc += p @ v_block") == ["acc", "p", "v_block"]
    assert line_names("out = torch.einsum('...ld,...sd->...ls', q,") == ["torch", "q"]  # a line cut short
    assert line_names("return None if mask is None else w") == ["mask", "w"]


def test_operand_words_never_show_a_tensors_values_nor_a_floats():
    secret = torch.full((2, 3), 1234.5678)
    words = operand_words("y = secret * scale + n", [{"secret": secret, "scale": 0.8765, "n": 3}], tensor_words)
    assert words == ", where `secret` is (2, 3) float32, `scale` is a float and `n` is an int", words
    assert "1234" not in words and "0.87" not in words


# -- hints chosen by the error, the line and the exercise -----------------------------------


def test_the_transpose_of_a_batch_gets_the_transpose_hint_and_not_the_broadcast_one():
    errors = _errors(_judged_as_in_a_notebook(sdpa_with_dot_t, "scaled_dot_product_attention"))
    assert errors
    for error in errors:  # a failed broadcast, or a batched product of the wrong sizes
        hint = error.partition("Hint: ")[2]
        assert "`.transpose(-2, -1)`" in hint, error
        assert "keepdim" not in hint and "mask" not in hint, hint


def test_broadcast_hint_never_mentions_masks_in_an_exercise_without_one():
    report = check(cosine_without_keepdim, name="cosine_score")
    [error] = _errors(report)
    hint = error.partition("Hint: ")[2]
    assert "keepdim=True" in hint, error
    assert "mask" not in hint and "scores" not in hint, hint


def test_no_exercise_without_a_mask_parameter_gets_a_mask_in_any_hint():
    message = (
        "raised RuntimeError: The size of tensor a (4) must match the size of tensor b (5), in your line `y = a / b`"
    )
    for names in ASSIGNMENTS.values():
        for name in names:
            ex = exercise(name)
            takes_mask = "mask" in inspect.signature(ex.reference).parameters
            hint = error_hint(message, ex.error_hints, mask=takes_mask)
            assert ("mask" in hint) == takes_mask, (name, hint)


def cached_step_grown_along_the_last_dim(q, k, v, cache=None):
    if cache is not None:
        k, v = torch.cat([cache[0], k], dim=-1), torch.cat([cache[1], v], dim=-1)  # the feature dim, not time
    w = _softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    return w @ v, (k, v)


def test_a_cache_grown_along_the_wrong_dim_gets_the_time_axis_hint():
    errors = _errors(check(cached_step_grown_along_the_last_dim, name="cached_attention_step"))
    # (with a cache of one position the concatenation succeeds, and the product after it fails)
    cat = [e for e in errors if "Sizes of tensors must match except in dimension" in e]
    assert cat and all("`torch.cat([K, k], dim=-2)`" in e.partition("Hint: ")[2] for e in cat), errors


def test_no_exercise_but_the_cached_step_gets_a_cache_in_a_hint():
    message = "raised RuntimeError: Sizes of tensors must match except in dimension 1. Expected size 3 but got size 1"
    for names in ASSIGNMENTS.values():
        for name in names:
            ex = exercise(name)
            hint = error_hint(message, ex.error_hints, mask="mask" in inspect.signature(ex.reference).parameters)
            assert "`torch.cat`" in hint or name == "cached_attention_step", (name, hint)
            assert ("cache" in hint) == (name == "cached_attention_step"), (name, hint)


def test_broadcast_hint_speaks_of_the_mask_where_the_function_takes_one():
    report = check(pool_with_a_reshaped_mask, name="attention_pool")
    errors = _errors(report)
    assert errors and all("a mask must broadcast to the scores' shape as given" in e for e in errors), errors


def test_a_tiled_mask_not_sliced_per_block_gets_the_block_mask_hint_and_no_other():
    report = check(tiled_mask_not_sliced, name="tiled_attention")
    errors = _errors(report)
    assert errors, report
    for error in errors:
        assert "in your line `s = s.masked_fill(~mask, -math.inf)`" in error, error
        hint = error.partition("Hint: ")[2]
        assert "`mask[..., start:start + block_size]`" in hint, hint
        assert "keepdim" not in hint and "reshaped" not in hint, hint
    # the tests without a mask ran and are judged on their values, not on an error
    assert any(r.passed for r in report.results), report


def test_a_broadcast_error_on_a_line_without_the_mask_keeps_the_general_hint_in_tiled_attention():
    message = "raised RuntimeError: The size of tensor a (8) must match the size of tensor b (5), in your line `acc = acc * r + p @ vb`"
    hint = error_hint(message, exercise("tiled_attention").error_hints, mask=True)
    assert "keepdim" in hint and "block_size]" not in hint, hint


# -- one report of a repeated error ---------------------------------------------------------


def test_a_repeated_error_is_reported_once_with_its_tests():
    report = check(cosine_without_keepdim, name="cosine_score")
    failed = [r.name for r in report.results if not r.passed]
    assert len(failed) > 1
    [(error, tests)] = errors_of(report.results)
    assert tests == failed
    text = str(report)
    assert text.count("must match the size of tensor b") == 1, text
    assert text.count("Hint: ") == 1, text
    assert error_lines(report.results) == [f"Error (tests {', '.join(repr(t) for t in failed)}): {error}"]
    html = report._repr_html_()
    assert html.count("must match the size of tensor b") == 1 and html.count('class="course-lib-error"') == 1
    assert html.count(">Hint</summary>") == 1  # the hint, folded, once
    for r in report.results:  # each test still names the exception and its own inputs
        assert r.feedback.startswith("raised RuntimeError (") and "Inputs of this test: query (" in r.feedback, r


def test_the_same_line_failing_on_inputs_of_other_ranks_is_one_error():
    report = _judged_as_in_a_notebook(sdpa_with_dot_t, "scaled_dot_product_attention")
    broadcast = [(e, tests) for e, tests in errors_of(report.results) if "must match the size of tensor b" in e]
    assert len(broadcast) == 1, broadcast
    tests = broadcast[0][1]
    assert "extra batch dims" in tests and "L != S, Dv != D" in tests, tests  # 4-D and 3-D inputs


def test_an_older_record_without_errors_still_renders_its_feedback():
    old = {
        "function": "cosine_score",
        "status": "failed",
        "score": 0.0,
        "max_score": 2.0,
        "results": [
            {
                "name": n,
                "checks": "c",
                "points": 0.0,
                "max_points": 1.0,
                "passed": False,
                "feedback": f,
                "diagnosis": "",
            }
            for n, f in (
                ("a", "raised RuntimeError: boom. Inputs of this test: x (2)"),
                ("b", "raised ... (the same error as test 'a')"),
            )
        ],
    }
    report = Report.from_dict(old)
    assert "raised RuntimeError: boom" in str(report) and "Error (" not in str(report)
    assert errors_of(old["results"]) == [] and Report.from_dict(report.to_dict()).to_dict() == report.to_dict()


# -- honest students and odd operands -------------------------------------------------------


def test_an_honest_solution_that_raises_nothing_is_unaffected():
    report = check(honest_code.tiled_attention, name="tiled_attention")
    assert report.passed and report.score == report.max_score, report
    assert all(r.error == "" for r in report.results) and "Error (" not in str(report)


class Loud(torch.Tensor):
    """A tensor subclass whose shape would lie and count being asked."""

    asked = 0

    @property
    def shape(self):
        Loud.asked += 1
        raise RuntimeError("shape asked")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        Loud.asked += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_line_naming_a_tensor_subclass_or_a_huge_list_does_not_break_the_feedback():
    asked_when_raised = []

    def cosine_with_odd_operands(query, keys, eps=1e-8):
        loud = torch.zeros(3).as_subclass(Loud)
        blocks = [torch.zeros(2, 2)] * 100_000
        nested = [blocks, (1, "x")]
        try:
            return query @ keys + loud + len(blocks) + len(nested)
        finally:
            asked_when_raised.append(Loud.asked)

    ex = exercise("cosine_score")  # judged straight from its calls: check() refuses __torch_function__ first
    report = judge(ex, run_calls(cosine_with_odd_operands, ex))
    assert Loud.asked == asked_when_raised[-1], "describing the operands ran the subclass's code"
    errors = _errors(report)
    assert errors, report
    for error in errors:
        where = error.partition(", where ")[2].partition(" Hint: ")[0]
        assert "`loud` is a Loud (a subclass of torch.Tensor)" in where, error
        assert (
            "`blocks` is a list of ((2, 2) float32, (2, 2) float32, (2, 2) float32, (2, 2) float32, ... (100000 items))"
            in where
        )
        assert len(", where " + where) <= MAX_CHARS and where.endswith("..."), where  # `nested` cut off
    assert (
        value_words([[0] * 100_000, (1, "x")], tensor_words) == "a list of (a list of 100000 items, a tuple of 2 items)"
    )


def test_the_sandbox_describes_operands_with_check_s_own_file():
    from course_lib.autograder.sandbox_adapter import watch_lists
    from course_lib.grading import operands

    assert watch_lists().operands == Path(operands.__file__).resolve()  # its source, run by the worker
    assert not Path(ROOT, "course_lib", "autograder", "sandbox", "worker", "operands.py").exists(), "a second copy"


def test_a_transpose_warning_raised_as_an_error_gets_the_transpose_hint_too():
    message = (
        "raised UserWarning: The use of `x.T` on tensors of dimension other than 2 to reverse their shape is "
        "deprecated, in your line `scores = q @ k.T`"
    )
    assert "transpose(-2, -1)`" in error_hint(message, mask=True)


def test_the_broadcast_phrase_is_what_torch_says():
    try:
        torch.zeros(2, 3) + torch.zeros(4)
    except RuntimeError as e:
        assert BROADCAST in str(e)


def sdpa_with_dot_t_on_its_own_line(q, k, v, mask=None, dropout_p=0.0):
    kt = k.T  # reverses every dim of the batch of keys
    scores = q @ kt / math.sqrt(q.shape[-1])
    w = _softmax(scores)
    return w @ v, w


def sdpa_with_a_2d_transpose_and_a_reduction_without_keepdim(q, k, v, mask=None, dropout_p=0.0):
    eye = torch.eye(q.shape[-1]).T  # .T on a 2-D tensor: honest
    scores = (q @ eye) @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    m = scores.amax(-1)
    w = torch.exp(scores - m)  # the row max without keepdim: a broadcast error
    w = w / w.sum(-1, keepdim=True)
    return w @ v, w


def test_a_transpose_of_a_batch_on_an_earlier_line_gets_the_transpose_hint_not_the_keepdim_one():
    # the failing line is `q @ kt`: the `.T` is on the line that made `kt`, a 3-D tensor
    fn, ex = sdpa_with_dot_t_on_its_own_line, exercise("scaled_dot_product_attention")
    with warnings.catch_warnings():  # as in a notebook: `k.T` on a batch warns, then the product fails
        warnings.simplefilter("ignore")
        report = judge(ex, run_calls(fn, ex), source=inspect.getsource(fn))
    errors = errors_of(report.results)
    assert errors, report
    for error, _ in errors:
        assert "in your line `scores = q @ kt" in error
        assert ".transpose(-2, -1)`" in error and "keepdim" not in error, error


def test_a_2d_transpose_earlier_does_not_take_the_keepdim_hint_from_a_real_keepdim_bug():
    report = check(sdpa_with_a_2d_transpose_and_a_reduction_without_keepdim, name="scaled_dot_product_attention")
    errors = errors_of(report.results)
    assert errors, report
    for error, _ in errors:
        assert "keepdim=True" in error and ".mT" not in error, error
