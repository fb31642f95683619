"""Grading on a Dask cluster: a real ``dask scheduler`` and two ``dask worker`` processes on
localhost, the same records as local grading, a worker killed mid-batch, and a job that kills
its workers every time.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import ROOT

from course_lib.autograder import pacing
from course_lib.autograder.autograde import failed_record
from course_lib.autograder.backends import Job
from course_lib.autograder.batch import Submission, grade_all
from course_lib.autograder.cluster import GraderPlugin, chunk_size, grade_on_cluster, grade_on_worker
from course_lib.autograder.config import GradeConfig
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.record import Record
from course_lib.autograder.sandbox import Limits

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

A = "02_self_attention"
SEED = 20261124
WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"
DASK = str(Path(sys.executable).parent / "dask")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A scheduler and ``n`` one-thread workers (each under a nanny, which restarts it when it dies)."""

    def __init__(self, tmp: Path, n: int = 2, allowed_failures: int = 3):
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        host, port = self.address[len("tcp://") :].split(":")
        log = open(tmp / "scheduler.log", "w")  # closed in close()
        self.logs = [log]
        self.procs = [
            subprocess.Popen(
                [DASK, "scheduler", "--host", host, "--port", port, "--no-dashboard"],
                stdout=log,
                stderr=log,
                env={**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": str(allowed_failures)},
            )
        ]
        time.sleep(1.0)
        for i in range(n):
            wlog = open(tmp / f"worker{i}.log", "w")
            self.logs.append(wlog)
            self.procs.append(
                subprocess.Popen(
                    [DASK, "worker", self.address, "--nthreads", "1", "--no-dashboard", "--name", f"w{i}"],
                    stdout=wlog,
                    stderr=wlog,
                )
            )
        from distributed import Client

        with Client(self.address, timeout="60s") as c:
            c.wait_for_workers(n, timeout=120)

    def worker_pids(self) -> list[int]:
        """The worker processes themselves (the nannies' children)."""
        from distributed import Client

        with Client(self.address, timeout="30s") as c:
            return sorted(c.run(os.getpid).values())

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in self.logs:
            f.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster"))
    yield c
    c.close()


def _class(folder: Path, n: int) -> Path:
    """``n`` students: the solution, the blank notebook and a wrong softmax, in turn."""
    solution = json.loads((ROOT / "solutions" / f"{A}.ipynb").read_text(encoding="utf-8"))
    blank = json.loads((ROOT / "exercises" / f"{A}.ipynb").read_text(encoding="utf-8"))
    wrong = json.loads(json.dumps(solution))
    wrong["cells"].append(
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": WRONG_SOFTMAX}
    )
    for i in range(n):
        nb = json.loads(json.dumps([solution, blank, wrong][i % 3]))
        nb["metadata"]["student"] = i
        (folder / f"s{i:02d}").mkdir(parents=True)
        (folder / f"s{i:02d}" / f"{A}.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    return folder


def _records(db: Path) -> dict[str, Record]:
    """student -> record, without what depends on where and when it ran."""
    with Gradebook(db) as book:
        return {s: replace(r, isolation="") for s, r in book.rows()}


def test_the_cluster_gives_the_same_records_as_local_grading_with_fresh_inputs_too(cluster, tmp_path):
    subs = _class(tmp_path / "subs", 6)
    for seed in (None, SEED):
        local, remote = tmp_path / f"local-{seed}.sqlite", tmp_path / f"cluster-{seed}.sqlite"
        grade_all(subs, local, GradeConfig(jobs=2, sandbox="auto", progress=False, seed=seed))
        on_cluster = GradeConfig(sandbox="auto", progress=False, seed=seed, scheduler=cluster.address, chunk=4)
        summary = grade_all(subs, remote, on_cluster)  # tasks of 4 notebooks and of 2
        assert summary.graded == 6 and not summary.failed
        assert _records(remote) == _records(local)
        assert {r.seed for r in _records(remote).values()} == {seed}


def test_a_rerun_on_the_cluster_skips_what_is_committed(cluster, tmp_path):
    subs = _class(tmp_path / "subs", 3)
    db = tmp_path / "book.sqlite"
    grade_all(subs, db, GradeConfig(sandbox="auto", progress=False, scheduler=cluster.address))
    again = grade_all(subs, db, GradeConfig(sandbox="auto", progress=False, scheduler=cluster.address))
    assert again.skipped == 3 and again.graded == 0


def test_a_worker_killed_mid_batch_loses_nothing_and_each_submission_is_graded_once(cluster, tmp_path):
    n = 12
    subs = _class(tmp_path / "subs", n)
    db = tmp_path / "book.sqlite"
    victim = cluster.worker_pids()[0]
    done: dict = {}

    def run() -> None:
        done["summary"] = grade_all(
            subs, db, GradeConfig(sandbox="auto", progress=False, scheduler=cluster.address, chunk=3)
        )

    t = threading.Thread(target=run)
    t.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill a worker once the first records are in
        if db.exists():
            with Gradebook(db) as book:
                if len(list(book.rows())) >= 2:
                    break
        time.sleep(0.2)
    os.kill(victim, signal.SIGKILL)
    t.join(timeout=300)
    assert not t.is_alive()
    summary = done["summary"]
    rows = _records(db)
    assert sorted(rows) == [f"s{i:02d}" for i in range(n)]  # each once
    assert summary.graded == n and not summary.failed, summary.failures
    assert all(r.status == "graded" for r in rows.values())


def test_a_job_that_kills_its_workers_every_time_is_recorded_as_failed_and_the_batch_finishes(tmp_path):
    c = Cluster(tmp_path, n=2, allowed_failures=1)  # Dask's default is 3: the same, with fewer restarts
    try:
        data = (ROOT / "solutions" / f"{A}.ipynb").read_bytes()

        def deadly(batch: list[tuple[bytes, str]], seed):
            if any(b"KILL-THE-WORKER" in data for data, _ in batch):
                os.kill(os.getpid(), signal.SIGKILL)
            return grade_on_worker(batch, seed)

        subs = [Submission(f"s{i}", A, Path(f"s{i}.ipynb")) for i in range(3)]
        jobs = [
            Job(subs[0], data, "a" * 64),
            Job(subs[1], b"KILL-THE-WORKER" + data, "b" * 64),
            Job(subs[2], data, "c" * 64),
        ]
        saved: dict[str, Record] = {}

        def failed(job, reason):
            return failed_record(job.assignment, reason, job.digest)

        for chunk in (1, 3):  # one task each; one task for all three, split when it keeps failing
            saved.clear()
            grade_on_cluster(
                c.address,
                jobs,
                None,
                GraderPlugin("auto"),
                lambda job, record, seconds: saved.__setitem__(job.submission.student, record),
                failed,
                task=deadly,
                chunk=chunk,
            )
            assert sorted(saved) == ["s0", "s1", "s2"]
            assert saved["s0"].status == saved["s2"].status == "graded"
            assert saved["s1"].status == "error" and "KilledWorker" in saved["s1"].messages[0]
    finally:
        c.close()


def test_tasks_carry_a_few_notebooks_and_every_worker_gets_several_tasks():
    assert chunk_size(200, 2) == 8 and chunk_size(6, 2) == 1 and chunk_size(0, 2) == 1
    for jobs in range(0, 2000, 37):
        for workers in (1, 2, 16, 128):
            size = chunk_size(jobs, workers)
            assert 1 <= size <= 8
            assert size == 1 or -(-jobs // size) >= 8 * workers


def test_a_chunk_that_is_not_a_positive_int_is_refused_before_anything_is_graded():
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="chunk must be an int >= 1"):
            GradeConfig(scheduler="tcp://127.0.0.1:1", chunk=bad)  # type: ignore[arg-type]


def _notebook(assignment: str, extra: str = "") -> str:
    """The solution notebook of ``assignment``, with one more code cell if ``extra``."""
    nb = json.loads((ROOT / "solutions" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    if extra:
        nb["cells"].append(
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": extra}
        )
    return json.dumps(nb)


def test_one_students_two_infinite_loops_cost_one_timeout_and_the_progress_line_names_them(
    cluster, tmp_path, monkeypatch, capsys
):
    subs = tmp_path / "subs"
    (subs / "s0").mkdir(parents=True)
    for assignment in (A, "05_layer_norm"):  # each cell stopped after 2 s, in each of its 2 phases
        (subs / "s0" / f"{assignment}.ipynb").write_text(_notebook(assignment, "while True:\n    pass\n"))
    for i in range(1, 5):
        (subs / f"s{i}").mkdir()
        (subs / f"s{i}" / f"{A}.ipynb").write_text(_notebook(A))
    monkeypatch.setattr(pacing, "SHOW_AFTER", 1.0)
    began: dict[str, float] = {}  # when this process heard that a notebook had run a while
    heard = pacing.Progress.began

    def began_at(self, job):
        began.setdefault(pacing.label(job), time.monotonic())
        heard(self, job)

    monkeypatch.setattr(pacing.Progress, "began", began_at)
    config = GradeConfig(sandbox="auto", limits=Limits(submission_seconds=4.0), scheduler=cluster.address, chunk=3)
    summary = grade_all(subs, tmp_path / "book.sqlite", config)  # tasks of 3: not [s0, s0, s1]
    assert summary.graded == 6 and not summary.failed
    with Gradebook(tmp_path / "book.sqlite") as book:
        rows = {(s, r.assignment): r for s, r in book.rows()}
        took = {a: t for s, a, t in book.conn.execute("SELECT student, assignment, seconds FROM results") if s == "s0"}
    assert all(rows[(f"s{i}", A)].score == rows[(f"s{i}", A)].max_score for i in range(1, 5))  # every honest one
    assert all(r.messages and "stopped after 2 s" in r.messages[0] for (s, _), r in rows.items() if s == "s0")
    (first, first_took), (second, _) = sorted((began[f"s0/{a}"], took[a]) for a in took)
    assert first_took >= 2.0 and second - first < first_took / 2  # side by side, not one after the other
    err = capsys.readouterr().err
    assert "waiting on s0/02_self_attention (" in err or "waiting on s0/05_layer_norm (" in err


def test_a_task_held_by_a_slow_notebook_is_split_and_its_other_notebooks_are_graded_elsewhere(cluster):
    def task(batch, seed):  # a stand-in for the grading: 3 s for the slow notebook, none for the others
        from course_lib.autograder.autograde import refused_record
        from course_lib.autograder.cluster import grade_in_task

        def grade(data, assignment):
            time.sleep(3.0 if data == b"slow" else 0.05)
            return refused_record(assignment, data.decode()), 0.0

        return grade_in_task(batch, grade, Limits(submission_seconds=4.0))

    students = ["slow", "h1", "h2", "h3", "h4", "h5"]
    jobs = [Job(Submission(s, A, Path(f"{s}.ipynb")), s.encode(), s * 10) for s in students]
    saved: list[str] = []
    t0 = time.monotonic()
    grade_on_cluster(
        cluster.address,
        jobs,
        None,
        GraderPlugin("auto", Limits(submission_seconds=4.0)),  # split after 1 s
        lambda job, record, seconds: saved.append(job.submission.student),
        lambda job, reason: failed_record(job.assignment, reason, job.digest),
        task=task,
        chunk=3,  # [slow, h1, h2] and [h3, h4, h5]
    )
    assert sorted(saved) == sorted(students)  # each once
    assert saved[-1] == "slow"  # h1 and h2 did not wait for it
    assert time.monotonic() - t0 < 3.0 + 10.0
