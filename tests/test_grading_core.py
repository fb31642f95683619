"""The check machinery itself: outcomes, comparison, reports, forbidden calls."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.functional import softmax as renamed_softmax

import course_lib
from course_lib.grading import Report, check, when_implemented
from course_lib.grading.core import Call, compare, call_once, to_plain
from course_lib.grading.forbidden import violations_in_function, violations_in_source

import pytest

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
    return getattr(torch, "softmax")(x, dim)


def uses_eval(x, dim=-1):
    return eval("torch.softmax")(x, dim)


def uses_reference(x, dim=-1):
    return course_lib.softmax(x, dim)


def honest(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


@pytest.mark.parametrize("fn,word", [(uses_torch_softmax, "torch.softmax"), (uses_F_softmax, "F.softmax"),
                                     (uses_renamed_softmax, "renamed_softmax"), (uses_method_softmax, ".softmax()"),
                                     (uses_getattr_softmax, "torch.softmax"), (uses_eval, "eval()"),
                                     (uses_reference, "reference implementation")])
def test_forbidden_calls_are_found_however_they_are_written(fn, word):
    notes = violations_in_function(fn, RULES)
    assert notes and word in notes[0]
    source = open(__file__).read()
    notes = violations_in_source(source, fn.__name__, RULES)
    assert notes and word in notes[0]


def test_an_honest_function_has_no_forbidden_calls():
    assert violations_in_function(honest, RULES) == []
    assert violations_in_source(open(__file__).read(), "honest", RULES) == []


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
    with pytest.raises(TypeError, match="returned a"):
        to_plain(value)
    out = call_once(lambda: value, Call())
    assert out.status == "bad_type"


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


@pytest.mark.parametrize("actual,expected,phrase", [
    (torch.zeros(2, 3), torch.zeros(3, 2), "shape (2, 3), expected (3, 2)"),
    (torch.full((2,), float("nan")), torch.zeros(2), "NaN"),
    (torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.bool), "torch.bool"),
    (torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5]), "1 of 2 entries"),
    ((torch.zeros(1),), (torch.zeros(1), torch.zeros(1)), "tuple of 1"),
    (torch.zeros(1), (torch.zeros(1), torch.zeros(1)), "single value"),
])
def test_compare_says_what_differs(actual, expected, phrase):
    assert phrase in compare(actual, expected)


def test_compare_accepts_nan_where_expected_and_float64_values():
    assert compare(torch.tensor([float("nan"), 1.0]), torch.tensor([float("nan"), 1.0])) is None
    assert compare(torch.tensor([1.0], dtype=torch.float64), torch.tensor([1.0])) is None


def test_report_shows_as_text_and_html_and_survives_a_round_trip():
    report = check(lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(dim, keepdim=True), name="softmax")
    assert not report.passed and 0 < report.score < report.max_score
    assert "Likely mistake" in str(report) and "<table>" in report._repr_html_()
    again = Report.from_dict(report.to_dict())
    assert str(again) == str(report) and again.score == report.score


def test_check_refuses_an_unknown_name_clearly():
    with pytest.raises(KeyError, match="not a graded function"):
        check(honest, name="nonsense")


def test_when_implemented_turns_not_implemented_into_a_reminder(capsys):
    with when_implemented():
        raise NotImplementedError()
    assert "Not implemented yet" in capsys.readouterr().out
    with pytest.raises(ValueError):
        with when_implemented():
            raise ValueError("a real error still shows")


def imports_inside_the_body(x, dim=-1):
    from course_lib import softmax as mine

    return mine(x, dim)


def test_an_import_inside_the_function_body_is_resolved_too():
    assert "reference implementation" in violations_in_function(imports_inside_the_body, RULES)[0]
    assert "reference implementation" in violations_in_source(open(__file__).read(), "imports_inside_the_body", RULES)[0]
