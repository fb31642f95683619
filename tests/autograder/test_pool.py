"""Local grading processes (course_lib.autograder.pool): every job graded once, a dead grading
process costs only its own job, errors reach the caller, and no process outlives the batch."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT

from course_lib.autograder import autograde
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.batch import grade_all
from course_lib.autograder.config import GradeConfig
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.pool import grade_in_processes
from course_lib.autograder.sandbox import SandboxUnavailable, isolation

A = "02_self_attention"


class _Stub:
    """Stands in for a runner (the pool only passes it to ``grade``)."""

    isolation, memory_limit = "stub", "none"

    def __init__(self, slot: int):
        self.slot = slot

    def close(self) -> None:
        pass


def _pool(jobs, processes, grade, start=_Stub):
    saved, lost = [], []

    def save(job, record, seconds):
        saved.append((job, record))

    def on_lost(job, reason, isolation):
        assert isolation == "stub"  # the dead process's runner's
        lost.append((job, reason))
        return {"lost": reason}

    described = grade_in_processes(jobs, processes, start, grade, save, on_lost)
    return described, saved, lost


def test_every_job_is_graded_once_and_saved_in_the_calling_process():
    jobs = [f"nb{i}" for i in range(40)]
    described, saved, lost = _pool(jobs, 3, lambda runner, job: {"job": job, "pid": os.getpid(), "slot": runner.slot})
    assert described == ("stub", "none") and lost == []
    assert sorted(job for job, _ in saved) == sorted(jobs)
    assert all(record["job"] == job for job, record in saved)
    pids = {record["pid"] for _, record in saved}
    assert os.getpid() not in pids and 1 <= len(pids) <= 3  # graded elsewhere, by at most 3 processes
    assert {record["slot"] for _, record in saved} <= {0, 1, 2}
    assert multiprocessing.active_children() == []


def test_a_grading_process_that_dies_loses_only_its_job_and_a_fresh_one_takes_its_slot():
    def grade(runner, job):
        if job in ("killed", "exits"):
            os.kill(os.getpid(), signal.SIGKILL) if job == "killed" else os._exit(7)
        return {"job": job, "slot": runner.slot}

    jobs = ["a", "killed", "b", "c", "exits", "d", "e", "f"]
    _, saved, lost = _pool(jobs, 2, grade)
    assert sorted(job for job, _ in saved) == sorted(jobs)  # every job has its record, once
    assert dict(lost) == {
        "killed": "the grading process was killed by SIGKILL",
        "exits": "the grading process ended with exit status 7",
    }
    records = dict(saved)
    assert records["killed"] == {"lost": "the grading process was killed by SIGKILL"}
    assert all(records[j]["slot"] in (0, 1) for j in "abcdef")  # replacements reuse the slots
    assert multiprocessing.active_children() == []


def test_a_runner_that_cannot_start_raises_its_own_error_in_the_caller():
    def start(slot):
        raise SandboxUnavailable("no sandbox here")

    with pytest.raises(SandboxUnavailable, match="no sandbox here"):
        _pool(["a", "b", "c"], 2, lambda runner, job: {}, start=start)
    assert multiprocessing.active_children() == []


def test_grading_processes_that_keep_dying_as_they_start_stop_the_batch_with_an_error():
    def start(slot):
        os._exit(3)

    with pytest.raises(RuntimeError, match=r"keep dying as they start .*exit status 3"):
        _pool(["a", "b"], 2, lambda runner, job: {}, start=start)
    assert multiprocessing.active_children() == []


def _running(pid: int) -> bool:
    """A process by that id exists and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_grading_processes_die_with_the_process_that_forked_them(tmp_path):
    pids = tmp_path / "pids"
    script = f"""
import os, time
from course_lib.autograder.pool import grade_in_processes

class Stub:
    isolation = memory_limit = "stub"
    def close(self): pass

def start(slot):
    with open({str(pids)!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    return Stub()

def grade(runner, job):
    time.sleep(600)

grade_in_processes(list(range(4)), 2, start, grade, lambda *a: None, lambda *a: {{}})
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
        time.sleep(0.05)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2
    proc.kill()  # SIGKILL: the parent cannot clean up
    proc.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_running(p) for p in children):
        time.sleep(0.05)
    survivors = [p for p in children if _running(p)]
    for p in survivors:  # not left behind by a failing run
        os.kill(p, signal.SIGKILL)
    assert not survivors


def _write(folder: Path, student: str, data: bytes) -> None:
    (folder / student).mkdir(parents=True)
    (folder / student / f"{A}.ipynb").write_bytes(data)


def test_a_submission_whose_grading_process_dies_is_recorded_as_failed_and_regraded_next_run(tmp_path, monkeypatch):
    subs = tmp_path / "subs"
    for i in range(6):
        _write(subs, f"s{i}", json.dumps({"victim": i == 3, "i": i}).encode())

    def stand_in(data, assignment, runner, seed=None):  # kills its own grading process for s3
        if json.loads(data)["victim"] and os.environ.get("KILL_THE_GRADER"):
            os.kill(os.getpid(), signal.SIGKILL)
        return replace(refused_record(assignment, "x", sha256(data)), status="graded", raw_score=30.0)

    monkeypatch.setattr(autograde, "grade_submission", stand_in)
    monkeypatch.setenv("KILL_THE_GRADER", "1")
    db = tmp_path / "g.sqlite"
    first = grade_all(subs, db, GradeConfig(jobs=2, sandbox="auto", progress=False))
    assert (first.graded, first.failed) == (6, 1)
    assert first.failures == [
        "s3/02_self_attention: Not graded yet: the grader failed (the grading process was killed by SIGKILL); "
        "it will be graded again."
    ]
    with Gradebook(db) as book:
        records = dict(book.rows())
    assert records["s3"].status == "error" and records["s3"].score == 0
    assert records["s3"].isolation == first.isolation == isolation.detect_isolation()  # the dead process's
    assert all(records[f"s{i}"].status == "graded" for i in (0, 1, 2, 4, 5))
    monkeypatch.delenv("KILL_THE_GRADER")
    second = grade_all(subs, db, GradeConfig(jobs=2, sandbox="off", progress=False))
    assert (second.graded, second.skipped, second.failed) == (1, 5, 0)


def test_grading_processes_give_the_records_of_one_process(tmp_path):
    solution = (ROOT / "solutions" / f"{A}.ipynb").read_bytes()
    blank = (ROOT / "exercises" / f"{A}.ipynb").read_bytes()
    wrong = json.loads(solution)
    wrong["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n",
        }
    )
    subs = tmp_path / "subs"
    for i, data in enumerate([solution, blank, json.dumps(wrong).encode()] * 2):
        _write(subs, f"s{i}", data)
    rows = {}
    for jobs in (1, 2):
        db = tmp_path / f"g{jobs}.sqlite"
        summary = grade_all(subs, db, GradeConfig(jobs=jobs, sandbox="auto", progress=False))
        assert summary.graded == 6 and not summary.failed and summary.isolation == isolation.detect_isolation()
        with Gradebook(db) as book:
            rows[jobs] = dict(book.rows())
    assert rows[1] == rows[2]
    assert len({r.score for r in rows[2].values()}) == 3


def test_a_dask_workers_grading_process_that_dies_fails_its_job_and_is_replaced(tmp_path):
    from course_lib.autograder.cluster import GraderPlugin

    plugin = GraderPlugin(sandbox="off")
    plugin.setup(worker=None)
    try:
        blank = (ROOT / "exercises" / f"{A}.ipynb").read_bytes()
        record, seconds = plugin.grade((blank, A, None))
        assert record.status == "graded" and record.score == 0 and seconds > 0
        first = plugin.process.pid
        os.kill(first, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="killed by SIGKILL"):
            plugin.grade((blank, A, None))
        assert plugin.process.pid != first and not _running(first)
        record, _ = plugin.grade((blank, A, None))
        assert record.status == "graded"
    finally:
        plugin.teardown(worker=None)
    assert not _running(plugin.process.pid)
