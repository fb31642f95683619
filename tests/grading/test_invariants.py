"""What every exercise of every assignment promises, checked over all of them at once.

The assignments and their graded functions come from the one table
(:mod:`course_lib.assignments`); each exercise's named mistakes from its own definition.
A new exercise or mistake is covered here without writing a test for it.
"""

from __future__ import annotations

import importlib

import pytest
from conftest import assert_full_marks

import course_lib
from course_lib.assignments import ASSIGNMENTS, TABLE
from course_lib.grading import check, exercise, exercises_of, judge, run_calls

EXERCISES = [exercise(name) for name in course_lib.GRADED_FUNCTIONS]
MISTAKES = [(ex, m) for ex in EXERCISES for m in ex.mistakes]


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize("assignment", TABLE, ids=lambda a: a.slug)
def test_each_assignment_defines_exactly_its_graded_functions_in_notebook_order(assignment):
    module = importlib.import_module(f"course_lib.grading.rubrics.{assignment.module}")
    assert tuple(ex.name for ex in module.EXERCISES) == assignment.functions
    assert tuple(ex.name for ex in exercises_of(assignment.slug)) == ASSIGNMENTS[assignment.slug]


def test_graded_functions_are_the_packages_exports_and_each_is_graded_once():
    assert len(set(course_lib.GRADED_FUNCTIONS)) == len(course_lib.GRADED_FUNCTIONS)
    assert all(callable(getattr(course_lib, name)) for name in course_lib.GRADED_FUNCTIONS)
    assert set(course_lib.GRADED_FUNCTIONS) <= set(course_lib.__all__)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_cases_have_distinct_names_say_what_they_check_and_give_whole_points(ex):
    cases = ex.cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), names
    assert all(c.checks for c in cases)
    assert all(float(c.points).is_integer() and c.points >= 1 for c in cases)
    assert ex.max_score == sum(c.points for c in cases)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_the_reference_scores_full_marks(ex):
    report = check(getattr(course_lib, ex.name), name=ex.name)
    assert_full_marks(report)
    assert report.diagnoses == []


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_cases_and_reference_outputs_are_computed_once(ex):
    # (a speed claim belongs in a benchmark; what makes check() fast is this caching)
    check(getattr(course_lib, ex.name), name=ex.name)
    cases, expected = ex.cases(), ex.expected()
    check(getattr(course_lib, ex.name), name=ex.name)
    assert ex.cases() is cases and ex.expected() is expected


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_a_stub_scores_zero_as_not_implemented(ex):
    report = check(stub, name=ex.name)
    assert report.status == "not implemented"
    assert report.score == 0
    assert all(r.feedback == "not implemented yet" for r in report.results)


@pytest.mark.parametrize("ex, mistake", MISTAKES, ids=[f"{ex.name}-{i}" for i, (ex, _) in enumerate(MISTAKES)])
def test_every_named_mistake_is_diagnosed_by_its_own_implementation(ex, mistake):
    report = judge(ex, run_calls(mistake.implementation, ex))
    assert report.score < report.max_score, f"{mistake.message}: full marks\n{report}"
    assert mistake.message in report.diagnoses, f"{mistake.message!r} not among {report.diagnoses}\n{report}"


#: The assignments whose cases are all integers or masks: their fresh cases are drawn sizes.
INTEGER_DRAWN = {"ch04", "ch06", "ch07"}
SEEDED_MISTAKES = [
    (ex, m, seed)
    for a in TABLE
    if a.module in INTEGER_DRAWN
    for ex in exercises_of(a.slug)
    for m in ex.mistakes
    for seed in (11, 2024)
]


@pytest.mark.parametrize(
    "ex, mistake, seed",
    SEEDED_MISTAKES,
    ids=[f"{ex.name}-{ex.mistakes.index(m)}-seed{seed}" for ex, m, seed in SEEDED_MISTAKES],
)
def test_every_named_mistake_is_still_named_on_fresh_inputs(ex, mistake, seed):
    report = judge(ex, run_calls(mistake.implementation, ex, seed=seed), seed=seed)
    assert report.score < report.max_score, f"{mistake.message}: full marks\n{report}"
    assert mistake.message in report.diagnoses, f"{mistake.message!r} not among {report.diagnoses}\n{report}"
