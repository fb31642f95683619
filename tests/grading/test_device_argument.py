"""A graded function that takes a ``device`` honours it (issue 29, item 3).

``causal_mask(size, device=None)`` is the one graded function with a ``device`` argument (the
notebook says "the ``device`` argument says where to create the tensor"). One of its tests
calls it with ``device="meta"`` (shapes and dtypes, no values: no GPU needed), by keyword and
by position, and expects the mask there. A mask made on the CPU whatever ``device`` says loses
that test's point and is named; a student who passes ``device=device``, builds on the CPU and
moves the result, or fills a mask made on ``device`` keeps full marks, also on fresh sizes.
The sandboxed grader gives the same verdicts (``tests/autograder/test_rules_enforced.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import assert_full_marks

from course_lib.grading import check, exercise, judge, run_calls

IGNORES_DEVICE = "your causal_mask ignores its `device` argument"


def causal_mask_device_keyword(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def causal_mask_built_on_cpu_then_moved(size, device=None):
    mask = torch.from_numpy(np.tril(np.ones((size, size), dtype=bool)))
    return mask.to(device)


def causal_mask_float_tril_then_bool(size, device=None):
    return torch.tril(torch.ones(size, size, device=device)).bool()


def causal_mask_filled_in_a_loop(size, device=None):
    mask = torch.zeros(size, size, dtype=torch.bool, device=device)
    for l in range(size):
        mask[l, : l + 1] = True
    return mask


def causal_mask_moved_only_when_asked(size, device=None):
    pos = torch.arange(size)
    mask = pos[:, None] >= pos[None, :]
    return mask if device is None else mask.to(torch.device(device))


HONEST = [
    causal_mask_device_keyword,
    causal_mask_built_on_cpu_then_moved,
    causal_mask_float_tril_then_bool,
    causal_mask_filled_in_a_loop,
    causal_mask_moved_only_when_asked,
]


def causal_mask_ignoring_device(size, device=None):
    return torch.ones(size, size, dtype=torch.bool).tril()


def causal_mask_ignoring_device_with_arange(size, device=None):
    pos = torch.arange(size)
    return pos[:, None] >= pos[None, :]


@pytest.mark.parametrize("fn", HONEST)
def test_a_causal_mask_made_on_device_scores_full_marks(fn):
    assert_full_marks(check(fn, name="causal_mask"))


@pytest.mark.parametrize("fn", [causal_mask_device_keyword, causal_mask_built_on_cpu_then_moved])
def test_a_causal_mask_made_on_device_scores_full_marks_on_fresh_sizes(fn):
    ex = exercise("causal_mask")
    assert_full_marks(judge(ex, run_calls(fn, ex, seed=7), seed=7))


@pytest.mark.parametrize("fn", [causal_mask_ignoring_device, causal_mask_ignoring_device_with_arange])
def test_a_causal_mask_that_ignores_device_loses_the_device_test_and_is_named(fn):
    report = check(fn, name="causal_mask")
    failed = [r for r in report.results if not r.passed]
    assert [r.name for r in failed] == ["on the given device"], str(report)
    assert report.score == report.max_score - failed[0].max_points
    assert "on the cpu device, but this call passed device='meta'" in failed[0].feedback
    assert report.diagnoses == [failed[0].diagnosis] and failed[0].diagnosis.startswith(IGNORES_DEVICE)
    assert "pass `device=device` to the torch call that creates the tensor" in failed[0].diagnosis


def test_ignoring_device_is_named_on_fresh_sizes_too():
    ex = exercise("causal_mask")
    report = judge(ex, run_calls(causal_mask_ignoring_device, ex, seed=7), seed=7)
    assert [r.name for r in report.results if not r.passed] == ["on the given device"]
    assert len(report.diagnoses) == 1 and report.diagnoses[0].startswith(IGNORES_DEVICE)


def causal_mask_off_by_one_on_device(size, device=None):
    return torch.ones(size, size, dtype=torch.bool, device=device).tril(diagonal=-1)


def test_a_wrong_mask_made_on_device_is_named_for_its_values_alone():
    report = check(causal_mask_off_by_one_on_device, name="causal_mask")
    assert len(report.diagnoses) == 1 and "diagonal is left out" in report.diagnoses[0], report.diagnoses


def test_the_device_test_earns_its_point_only_once_the_values_are_right():
    def empty_on_device(size, device=None):
        return torch.empty(size, size, dtype=torch.bool, device=device)

    report = check(empty_on_device, name="causal_mask")
    device_test = next(r for r in report.results if r.name == "on the given device")
    assert device_test.withheld and device_test.points == 0
