"""The check machinery itself: outcomes, comparison, reports, forbidden calls."""

from __future__ import annotations

import sys
from gc import get_objects
from pathlib import Path
from sys import _getframe as grab_frame

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.functional import softmax as renamed_softmax

import course_lib
from course_lib.grading import Report, check, when_implemented
from course_lib.grading.compare import compare
from course_lib.grading.forbidden import violations_in_function, violations_in_source
from course_lib.grading.model import Call
from course_lib.grading.run import BadReturnType, call_once, to_plain

RULES = ("torch.softmax", "torch.nn.functional.softmax", "method:softmax")


def uses_torch_softmax(x, dim=-1):
    return torch.softmax(x, dim)


def uses_F_softmax(x, dim=-1):
    return F.softmax(x, dim)


def uses_renamed_softmax(x, dim=-1):
    return renamed_softmax(x, dim)


def uses_method_softmax(x, dim=-1):
    return x.softmax(dim)


def uses_getattr_softmax(x, dim=-1):
    return torch.softmax(x, dim)


def uses_eval(x, dim=-1):
    return eval("torch.softmax")(x, dim)


def uses_reference(x, dim=-1):
    return course_lib.softmax(x, dim)


def honest(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize(
    "fn,word",
    [
        (uses_torch_softmax, "torch.softmax"),
        (uses_F_softmax, "F.softmax"),
        (uses_renamed_softmax, "renamed_softmax"),
        (uses_method_softmax, ".softmax()"),
        (uses_getattr_softmax, "torch.softmax"),
        (uses_eval, "eval()"),
        (uses_reference, "reference implementation"),
    ],
)
def test_forbidden_calls_are_found_however_they_are_written(fn, word):
    notes = violations_in_function(fn, RULES)
    assert notes and word in notes[0]
    source = Path(__file__).read_text()
    notes = violations_in_source(source, fn.__name__, RULES)
    assert notes and word in notes[0]


def test_an_honest_function_has_no_forbidden_calls():
    assert violations_in_function(honest, RULES) == []
    assert violations_in_source(Path(__file__).read_text(), "honest", RULES) == []


frames = sys._getframe


def reads_a_frame_through_an_imported_name(x, dim=-1):
    grab_frame(0)
    return honest(x, dim)


def reads_a_frame_through_a_module_level_alias(x, dim=-1):
    frames(0)
    return honest(x, dim)


def lists_every_object_through_an_imported_name(x, dim=-1):
    get_objects()
    return honest(x, dim)


@pytest.mark.parametrize(
    "fn,path",
    [
        (reads_a_frame_through_an_imported_name, "sys._getframe"),
        (reads_a_frame_through_a_module_level_alias, "sys._getframe"),
        (lists_every_object_through_an_imported_name, "gc.get_objects"),
    ],
)
def test_a_frame_or_gc_function_under_another_name_is_found_live_as_statically(fn, path):
    live = violations_in_function(fn, RULES)
    static = violations_in_source(Path(__file__).read_text(), fn.__name__, RULES)
    assert live and f"uses {path} (written " in live[0]
    assert static and f"uses {path} (written " in static[0]


def test_a_forbidden_call_scores_zero_with_the_reason():
    report = check(uses_F_softmax, name="softmax")
    assert report.status == "forbidden" and report.score == 0 and report.max_score > 0
    assert "write yourself" in report.notes[0]


class PretendTensor:
    shape = (2, 3)

    def __eq__(self, other):
        return True

    def __array__(self, *a, **k):
        raise AssertionError("the checker must not call methods of returned objects")


class SubTensor(torch.Tensor):
    pass


@pytest.mark.parametrize("value", [PretendTensor(), torch.zeros(2, 3).as_subclass(SubTensor), "tensor", None, {1: 2}])
def test_objects_that_are_not_plain_tensors_are_refused_without_calling_them(value):
    with pytest.raises(BadReturnType, match="returned a"):
        to_plain(value)
    out = call_once(lambda: value, Call())
    assert out.status == "bad_type"


def test_a_type_error_the_function_raises_is_an_error_even_when_it_reads_like_a_bad_return():
    def pretends():
        raise TypeError("returned a str, expected a torch.Tensor")

    out = call_once(pretends, Call())
    assert out.status == "error" and out.message.startswith("raised TypeError: returned a str")


def test_exceptions_and_not_implemented_are_outcomes_not_crashes():
    def boom():
        raise ValueError("bad")

    def todo():
        raise NotImplementedError()

    assert call_once(boom, Call()).status == "error" and "ValueError: bad" in call_once(boom, Call()).message
    assert call_once(todo, Call()).status == "not_implemented"


def test_a_call_that_loops_forever_times_out():
    def spin():
        while True:
            pass

    out = call_once(spin, Call(), time_limit=0.2)
    assert out.status == "timeout"


def test_arguments_are_fresh_copies_so_in_place_changes_do_not_leak():
    x = torch.ones(3)

    def mutate(t):
        t.mul_(0)
        return t

    call_once(mutate, Call((x,)))
    assert torch.equal(x, torch.ones(3))


@pytest.mark.parametrize(
    "actual,expected,phrase",
    [
        (torch.zeros(2, 3), torch.zeros(3, 2), "shape (2, 3), expected (3, 2)"),
        (torch.full((2,), float("nan")), torch.zeros(2), "NaN"),
        (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.bool), "torch.bool"),
        (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), "1 of 2 entries"),
        ((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), "tuple of 1"),
        (torch.zeros(1), (torch.zeros(1), torch.zeros(1)), "single value"),
    ],
)
def test_compare_says_what_differs(actual, expected, phrase):
    assert phrase in compare(actual, expected)


def test_compare_accepts_nan_where_expected_and_float64_values():
    assert compare(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])) is None
    assert compare(torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0])) is None


def test_report_shows_as_text_and_html_and_survives_a_round_trip():
    report = check(lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(dim, keepdim=True), name="softmax")
    assert not report.passed and 0 < report.score < report.max_score
    assert "Likely mistake" in str(report) and "<table " in report._repr_html_()
    again = Report.from_dict(report.to_dict())
    assert str(again) == str(report) and again.score == report.score


def test_check_refuses_an_unknown_name_clearly():
    with pytest.raises(KeyError, match="not a graded function"):
        check(honest, name="nonsense")


def test_when_implemented_turns_not_implemented_into_a_reminder_and_an_error_into_one_line(capsys):
    with when_implemented():
        raise NotImplementedError()
    assert "Not implemented yet" in capsys.readouterr().out
    with when_implemented():  # Run All goes on: the error is one line (tests/grading/test_demos.py)
        raise ValueError("a real error is shown")
    assert (
        capsys.readouterr().out
        == "This demo stopped: it could not use what your functions returned (ValueError: a real error is shown); see the checks above.\n"
    )


def imports_inside_the_body(x, dim=-1):
    from course_lib import softmax as mine

    return mine(x, dim)


def test_an_import_inside_the_function_body_is_resolved_too():
    assert "reference implementation" in violations_in_function(imports_inside_the_body, RULES)[0]
    assert (
        "reference implementation"
        in violations_in_source(Path(__file__).read_text(), "imports_inside_the_body", RULES)[0]
    )


# -- the ways of hiding a forbidden call, seen by check() in a notebook ------------

_sm = torch.softmax
_TABLE: dict = {}


def _normalise(x, dim):
    return F.softmax(x, dim=dim)


def hidden_by_alias(x, dim=-1):
    return _sm(x, dim)


def hidden_in_a_helper(x, dim=-1):
    return _normalise(x, dim)


hidden_in_a_lambda = lambda x, dim=-1: torch.softmax(x, dim)  # noqa: E731


def hidden_by_a_built_name(x, dim=-1):
    return getattr(torch, "soft" + "max")(x, dim)


class _Normaliser:
    def __call__(self, x, dim):
        return x.softmax(dim)


_normaliser = _Normaliser()


def hidden_in_an_object(x, dim=-1):
    return _normaliser(x, dim)


def _fill_table():
    _TABLE["f"] = torch.softmax


def hidden_in_a_table_filled_at_run_time(x, dim=-1):
    if not _TABLE:
        _fill_table()
    return _TABLE["f"](x, dim)


def through_torch_ops(x, dim=-1):
    return torch.ops.aten._softmax(x, dim, False)


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (hidden_by_alias, "torch.softmax"),
        (hidden_in_a_helper, "torch.nn.functional.softmax"),
        (hidden_in_a_lambda, "torch.softmax"),
        (hidden_by_a_built_name, "getattr() with a computed name"),
        (hidden_in_an_object, ".softmax()"),
        (hidden_in_a_table_filled_at_run_time, "torch.softmax"),
        (through_torch_ops, "torch.ops"),
    ],
    ids=lambda v: getattr(v, "__name__", None) if callable(v) else None,
)
def test_check_finds_a_forbidden_call_however_it_is_hidden(fn, phrase):
    report = check(fn, name="softmax")
    assert report.status == "forbidden" and report.score == 0
    assert any(phrase in n for n in report.notes), report.notes


def test_the_runtime_layer_sees_an_operator_reached_past_torch_functions():
    from course_lib.grading.opwatch import OpWatch

    watch = OpWatch(functions=["torch.softmax"], ops=["aten::_softmax"])
    with watch:
        with torch._C.DisableTorchFunction():  # hides the call from the function layer
            torch.softmax(torch.zeros(2, 3), -1)
    assert watch.seen == ["the operator aten::_softmax"]


def test_static_scan_reads_every_cell_on_its_own_and_fails_closed():
    from course_lib.grading.forbidden import NotebookScan

    scan = NotebookScan(
        [
            "import torch",
            "def broken(:\n    pass",
            "x = '\ud800'",
            "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)",
        ]
    )
    assert [p.split(":")[0] for p in scan.problems] == ["cell 2", "cell 3"]
    assert scan.runnable_sources()[1:3] == ["", ""]  # what cannot be read is not run either
    assert scan.violations("softmax", RULES)


def test_introspection_anywhere_in_a_notebook_is_held_for_review():
    from course_lib.grading.forbidden import NotebookScan

    for code in (
        "import ctypes\nctypes.string_at(0, 1)",
        "import sys\nf = sys._getframe()",
        "import gc\nobjs = gc.get_objects()",
        "def f():\n    pass\nf.__globals__",
        "import torch\ntorch._C._set_grad_enabled",
        "exec('1')",
        "__import__('ctypes')",
    ):
        assert NotebookScan(["import torch", code]).review_flags(), code
    honest = NotebookScan(["import gc, torch\ngc.collect()", "def softmax(x, dim=-1):\n    return x.exp()"])
    assert honest.review_flags() == []


_VALUES = st.sampled_from([0.0, 1.0, -1.0, 1e-5, 2.5e-4, 1e30, float("nan"), float("inf"), float("-inf")])


@given(
    st.lists(st.tuples(_VALUES, _VALUES, st.floats(-1e-3, 1e-3)), min_size=1, max_size=6),
    st.sampled_from([torch.float32, torch.float64]),
    st.sampled_from([(1e-4, 1e-4), (1e-6, 0.0), (float("inf"), 0.0), (0.0, 1e-3)]),
)
@settings(max_examples=300, deadline=None)
def test_compare_matches_exactly_where_isclose_in_float64_does(entries, dtype, tolerance):
    """compare's shortcut (per expected tensor: its allowed errors, kept) and its full path agree
    with torch.isclose(equal_nan=True) in float64, entry values and tolerances of every kind,
    asked twice (the second time from the kept allowed errors)."""
    atol, rtol = tolerance
    actual = torch.tensor([a + d for a, _, d in entries], dtype=dtype)
    expected = torch.tensor([e for _, e, _ in entries], dtype=dtype)
    close = bool(torch.isclose(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True).all())
    for _ in range(2):
        assert (compare(actual, expected, atol, rtol) is None) == close
        assert (compare(actual, expected, atol, rtol, detail=False) is None) == close
        assert compare(expected, expected, atol, rtol) is None


def test_a_mismatch_without_detail_only_says_that_the_outputs_differ():
    a, e = torch.zeros(3), torch.tensor([0.0, 1.0, 2.0])
    assert compare(a, e) == "the output differs from the expected one in 2 of 3 entries (largest error 2)"
    assert compare(a, e, detail=False) == "the output differs from the expected one"
    assert compare((a, a), (a, e), names=("out", "w"), detail=False) == "the w differs from the expected one"
