"""Fresh inputs under ``--seed``: every case of every exercise is drawn anew, integer-only cases
included, and the count of unchanged cases in the record is true.

The self-check's inputs are public (its notebook prints them, and anyone can call the cases),
so a table of the reference's outputs on them is an attack: under a seed it must earn nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import course_lib
from course_lib.assignments import TABLE
from course_lib.grading import Call, Case, Exercise, exercise, judge, run_calls
from course_lib.grading.rubrics._common import fresh_int, rng
from course_lib.grading.seeding import current_seed, public, same_inputs

SEEDS = (11, 2024)
EXERCISES = [exercise(name) for a in TABLE for name in a.functions]
INTEGER_ONLY = ["sinusoidal_positional_encoding", "relative_position_matrix", "causal_mask", "sliding_window_mask"]


def unchanged_cases(ex: Exercise, seed: int) -> list[str]:
    """The names of the cases whose inputs under ``seed`` are the self-check's."""
    plain = ex.cases()
    return [b.name for b, f in zip(plain, ex.cases(seed), strict=True) if same_inputs(b, f) or public(f, plain)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_every_case_of_every_exercise_gets_inputs_other_than_the_self_checks(ex, seed):
    assert unchanged_cases(ex, seed) == []
    assert ex.unchanged(seed) == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_the_unchanged_count_is_the_number_of_cases_with_the_self_checks_inputs(ex, seed):
    assert ex.unchanged(seed) == len(unchanged_cases(ex, seed))
    assert ex.fallbacks(seed) <= ex.unchanged(seed)


# --- the count does not trust the drawing: cases that ignore the seed are counted ---------------


def square(n: int) -> torch.Tensor:
    return torch.ones(n, n)


def toy(make_cases) -> Exercise:
    return Exercise(name="toy_square", reference=square, make_cases=make_cases)


def fixed_sizes() -> list[Case]:
    """Integer-only cases written out, as chapter 4's were: the same under every seed."""
    return [Case("two", "a 2 x 2 square", [Call((2,))]), Case("three", "a 3 x 3 square", [Call((3,))])]


def drawn_sizes() -> list[Case]:
    g = rng(5)
    return [
        Case("small", "a small square", [Call((fresh_int(g, 2, (2, 3, 4)),))]),
        Case("one", "a 1 x 1 square", [Call((1,))]),  # nothing to draw: stays the self-check's
    ]


def swapped_sizes() -> list[Case]:
    """Under a seed, each case makes the other's call: no case equals its own, all are public."""
    a, b = (3, 2) if current_seed() is not None else (2, 3)
    return [Case("first", "a square", [Call((a,))]), Case("second", "a square", [Call((b,))])]


def size_of_the_other_case() -> list[Case]:
    """A drawn size that may repeat the other case's public size (3), or be new (4)."""
    g = rng(6)
    return [Case("drawn", "a square", [Call((fresh_int(g, 2, (3, 4)),))]), Case("three", "3 x 3", [Call((3,))])]


@pytest.mark.parametrize("seed", SEEDS)
def test_cases_that_ignore_the_seed_are_all_counted_unchanged(seed):
    ex = toy(fixed_sizes)
    assert ex.unchanged(seed) == 2
    assert [c.calls[0].args for c in ex.cases(seed)] == [(2,), (3,)]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_drawn_integer_is_never_the_self_checks_and_a_written_one_is_counted(seed):
    ex = toy(drawn_sizes)
    assert ex.cases()[0].calls[0].args == (2,)
    assert ex.cases(seed)[0].calls[0].args[0] in (3, 4)
    assert ex.unchanged(seed) == 1


@pytest.mark.parametrize("seed", SEEDS)
def test_a_case_made_of_calls_the_self_check_makes_elsewhere_is_counted_unchanged(seed):
    ex = toy(swapped_sizes)
    assert ex.unchanged(seed) == 2  # a table of the self-check's calls answers both
    assert ex.fallbacks(seed) == 2  # no draw gives a call the self-check does not make


@pytest.mark.parametrize("seed", (*SEEDS, 1, 2, 3))
def test_a_drawn_case_that_repeats_a_public_call_is_drawn_again(seed):
    ex = toy(size_of_the_other_case)
    assert ex.cases(seed)[0].calls[0].args == (4,)
    assert ex.unchanged(seed) == 1  # only the written-out case


def test_fresh_int_leaves_the_self_checks_generator_untouched():
    g = rng(5)
    before = g.get_state()
    assert fresh_int(g, 7, range(20)) == 7
    assert torch.equal(g.get_state(), before)


def test_two_calls_with_equal_values_of_another_dtype_are_not_the_same_inputs():
    a = Case("a", "a", [Call((torch.tensor([1, 2]),))])
    b = Case("b", "b", [Call((torch.tensor([1.0, 2.0]),))])
    assert not same_inputs(a, b)
    assert same_inputs(a, Case("c", "c", [Call((torch.tensor([1, 2]),))]))
    assert not same_inputs(Case("d", "d", [Call((1,), {"window": 2})]), Case("e", "e", [Call((1,), {"window": 3})]))


# --- the cheater: a table of the self-check's outputs -------------------------------------------


def _key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), tuple(value.flatten().tolist()))
    if isinstance(value, (tuple, list)):
        return tuple(_key(v) for v in value)
    return value


def lookup_table(ex: Exercise):
    """The reference's outputs on the public self-check, looked up by the call's inputs."""
    table = {}
    for case, outs in zip(ex.cases(), ex.expected(), strict=True):
        for call, out in zip(case.calls, outs, strict=True):
            table[_key((call.args, sorted(call.kwargs.items())))] = out

    def looked_up(*args, **kwargs):
        return table[_key((args, sorted(kwargs.items())))]

    return looked_up


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.name)
def test_a_table_of_the_self_checks_outputs_earns_full_marks_without_a_seed_and_nothing_with_one(ex):
    cheat = lookup_table(ex)
    assert judge(ex, run_calls(cheat, ex)).score == ex.max_score  # the attack is real
    for seed in SEEDS:
        assert judge(ex, run_calls(cheat, ex, seed=seed), seed=seed).score == 0


@pytest.mark.parametrize("seed", (3, *SEEDS))
@pytest.mark.parametrize("name", [*INTEGER_ONLY, "padding_mask"])
def test_the_reference_earns_full_marks_on_the_fresh_integer_cases(name, seed):
    ex = exercise(name)
    report = judge(ex, run_calls(getattr(course_lib, name), ex, seed=seed), seed=seed)
    assert report.score == report.max_score, str(report)
    assert report.diagnoses == []
