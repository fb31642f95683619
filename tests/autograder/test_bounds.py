"""What the grading process does on a student's behalf is bounded: stand-in reference calls, memory cgroups."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest
import torch
from test_sandbox import LEVELS, LIMITS, uid_processes

from course_lib.autograder.sandbox.cgroup import MemoryCgroup
from course_lib.autograder.sandbox.runner import Job, Runner
from course_lib.autograder.sandbox_adapter import StandInHook, watch_lists
from course_lib.autograder.standin_calls import bounded_call
from course_lib.grading.model import Call

SLOTS = {"bubblewrap": 48, "namespaces": 49}


def scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return (q * k).softmax(-1)


def test_a_reference_call_that_would_build_a_huge_broadcast_is_an_error_not_an_oom():
    n = 40_000  # 320 KB of inputs, 6.4 GB of scores
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    limit = resource.getrlimit(resource.RLIMIT_AS)
    out = bounded_call(scores, Call((torch.randn(n, 1, 1, 1), torch.randn(1, n, 1, 1))), 256 << 20, 5.0)
    assert out.status == "error" and "needed more than 256 MB" in out.message, out
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 << 10  # KB: nothing near 6 GB
    assert resource.getrlimit(resource.RLIMIT_AS) == limit  # put back


def test_a_reference_call_past_its_time_is_stopped_between_operators():
    def slow(x):
        while True:
            x = x + 1

    t0 = time.monotonic()
    out = bounded_call(slow, Call((torch.ones(2),)), 256 << 20, 0.3)
    assert out.status == "error" and "longer than 0.3 s" in out.message
    assert time.monotonic() - t0 < 3


def test_a_reference_call_within_its_bounds_gives_the_reference_answer():
    q, k = torch.randn(3, 1, 4), torch.randn(1, 5, 4)
    out = bounded_call(scores, Call((q, k)), 256 << 20, 5.0)
    assert out.status == "ok"
    torch.testing.assert_close(out.value, scores(q, k))


@pytest.fixture(scope="module", params=LEVELS)
def runner(request):
    r = Runner(mode="auto", limits=LIMITS, slot=SLOTS[request.param], isolation=request.param, watch=watch_lists())
    yield r
    r.close()


@pytest.mark.sandbox
def test_a_stand_in_asked_for_n_squared_work_answers_with_an_error_and_the_batch_goes_on(runner):
    # review item 8: about 100 KB of broadcast inputs made the grading process build n-squared
    # tensors for a stand-in, and the OOM killer ended the grader
    cells = [
        "import torch\ndef scores(q, k):\n    return q\n"
        "def attend(n):\n    return scores(torch.ones(n, 1, 1, 1), torch.ones(1, n, 1, 1)).sum()"
    ]
    job = Job(
        cells=cells,
        calls={"attend": [Call((12_000,)), Call((3,))]},
        standins={"attend": ("attend", ["scores"])},
        hook=StandInHook({"scores": scores}),
    )
    res = runner.run(job)
    big, small = res.outcomes["attend"]
    assert big.status == "error" and "needed more than" in big.message, res
    assert small.status == "ok" and small.value.item() == pytest.approx(9.0)  # 3 x 3 rows of a softmax over 1
    assert uid_processes(runner.uid) == []


def _cgroups(parent) -> set[str]:
    return {p.name for p in parent.iterdir() if p.name.startswith("course-lib-")}


def test_a_new_cgroup_removes_those_left_by_graders_that_no_longer_run():
    probe = MemoryCgroup.create(f"course-lib-{os.getpid()}-probe")
    assert probe is not None  # this machine has a writable memory cgroup (CI too)
    try:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        stale = probe.path.parent / f"course-lib-{dead.pid}-slot7"
        stale.mkdir()
        again = MemoryCgroup.create(f"course-lib-{os.getpid()}-probe2")
        assert again is not None and not stale.exists()
        again.remove()
    finally:
        probe.remove()
