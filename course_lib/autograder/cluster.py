"""Grade on a Dask cluster: the same job (notebook bytes -> record) on the workers of a scheduler.

``course-lib grade SUBMISSIONS --scheduler tcp://HOST:8786`` sends each submission to a Dask
``distributed`` cluster instead of local grading processes. The submitting process keeps the gradebook:
it commits each record as its future completes (``as_completed``), so a crash loses only the
jobs in flight and a rerun skips what was committed, as in local grading.

Each worker grades as local grading does: :class:`GraderPlugin` forks one grading process
per worker (:class:`~course_lib.autograder.pool.GradingProcess`) with a warm sandbox
:class:`~course_lib.autograder.sandbox.Runner` (its zygote a separate process: student code
never runs in the worker's process or the grading process), and ends it with the worker.
The task only hands the job to that process and waits for the record.
Start workers with one thread each, for example::

    dask worker tcp://HOST:8786 --nthreads 1 --nworkers 2

A task carries a few notebooks (:func:`chunk_size`: the scheduler spends about 10 ms of CPU on
each task). A worker that dies takes its tasks with it; the scheduler gives them to another
worker. A task that kills workers repeatedly (Dask's ``distributed.scheduler.allowed-failures``,
3 by default) comes back as ``KilledWorker``: its notebooks are sent again one a task, and a
notebook that fails on its own again, alone on the cluster, is recorded as failed with that
reason (:func:`grade_on_cluster`).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from distributed import WorkerPlugin

from .record import Record
from .sandbox import Limits, Runner

__all__ = ["GraderPlugin", "grade_on_worker", "grade_on_cluster", "chunk_size", "PLUGIN_NAME"]

PLUGIN_NAME = "course-lib-grader"
_MAX_CHUNK = 8  # notebooks a task


class GraderPlugin(WorkerPlugin):
    """A Dask worker plugin: one grading process per worker (forked from it, with a warm
    sandbox runner on a slot no other runner on the host holds: a lock file per slot),
    ended when the worker closes. The worker's task thread only hands it each job and waits,
    so the worker's own threads never compete with the grading (:mod:`..pool`).

    Args:
        sandbox: ``auto``, ``required`` or ``off``, as ``course-lib grade --sandbox``.
        limits: each submission's limits (None: the defaults).
        hide: folders the sandbox must not show (the submissions, the gradebook's folder).
    """

    name = PLUGIN_NAME

    def __init__(self, sandbox: str = "auto", limits: Limits | None = None, hide: Iterable[str] = ()):
        self.sandbox, self.limits, self.hide = sandbox, limits or Limits(), list(hide)
        self.process: Any = None
        self._lock: Any = None

    def setup(self, worker: Any) -> None:
        slot, self._lock = _claim_slot()
        self.process = self._fork(slot)

    def _fork(self, slot: int) -> Any:
        from .pool import GradingProcess

        process = GradingProcess(self._start, _grade, slot)
        process.started()
        return process

    def _start(self, slot: int) -> Runner:
        from .sandbox_adapter import watch_lists

        return Runner(mode=self.sandbox, limits=self.limits, slot=slot, hide=self.hide, watch=watch_lists())

    def grade(self, job: tuple[bytes, str, int | None]) -> tuple[Record, float]:
        """The record of ``job`` (notebook bytes, assignment, seed) and the seconds it took.
        A grading process that died is replaced for the next job; this one raises."""
        try:
            return self.process.grade(job)
        except RuntimeError:
            self.process.stop()
            self.process = self._fork(self.process.slot)
            raise

    def teardown(self, worker: Any) -> None:
        if self.process is not None:
            self.process.stop()
        if self._lock is not None:
            self._lock.close()


def _grade(runner: Any, job: tuple[bytes, str, int | None]) -> Record:
    """In the grading process: the record of one notebook."""
    from .autograde import grade_or_fail, sha256

    data, assignment, seed = job
    return grade_or_fail(runner, data, assignment, seed, sha256(data))


def _claim_slot(first: int = 1000, count: int = 4000) -> tuple[int, Any]:
    """A runner slot (its uid and cgroup) that no other process on this host holds: the first
    free one from a start that depends on the process id, held by an exclusive lock file."""
    folder = os.path.join(tempfile.gettempdir(), "course-lib-slots")
    os.makedirs(folder, exist_ok=True)
    start = os.getpid() % count
    for i in range(count):
        slot = first + (start + i) % count
        f = open(os.path.join(folder, f"{slot}.lock"), "w")  # held open: the lock lives with it
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        return slot, f
    raise RuntimeError("no free runner slot on this host")


def grade_on_worker(batch: list[tuple[bytes, str]], seed: int | None) -> list[tuple[Record, float] | str]:
    """The task: grade a few notebooks (bytes, assignment) one after another in this worker's
    grading process (see :class:`GraderPlugin`); for each, the record and the seconds it took,
    or why it could not be graded (its grading process died: the next one gets a fresh one)."""
    from distributed import get_worker

    plugin: Any = get_worker().plugins[PLUGIN_NAME]
    out: list[tuple[Record, float] | str] = []
    for data, assignment in batch:
        try:
            out.append(plugin.grade((data, assignment, seed)))
        except RuntimeError as e:
            out.append(f"RuntimeError: {e}")
    return out


def chunk_size(jobs: int, workers: int) -> int:
    """Notebooks a task: a few, so that the scheduler handles fewer tasks (each costs it about
    10 ms of CPU, a sixth of a notebook's grading), while every worker still gets at least 8
    tasks to balance the load."""
    return max(1, min(_MAX_CHUNK, jobs // (8 * max(workers, 1))))


def grade_on_cluster(
    scheduler: str,
    jobs: Sequence[Any],
    seed: int | None,
    plugin: GraderPlugin,
    save: Callable[[Any, Record, float], None],
    failed: Callable[[Any, str], Record],
    task: Callable[..., list[tuple[Record, float] | str]] = grade_on_worker,
    chunk: int | None = None,
) -> tuple[str, str]:
    """Send ``jobs`` (:class:`.backends.Job`: ``data``, ``digest``, ``assignment``) to the
    cluster at ``scheduler``, ``chunk`` notebooks a task (default :func:`chunk_size`), and
    ``save(job, record, seconds)`` each record as its task completes. Returns the workers' isolation and memory limit, as the first worker reports
    them. Waits up to two minutes for a first worker.

    A task that fails as a whole (its worker died under it, too often: ``KilledWorker``) is
    sent again one notebook a task. A one-notebook task that fails too may only have shared a
    worker with the notebook at fault, so it is sent once more at the end, alone on the
    cluster: a notebook is saved as ``failed(job, reason)`` only when it fails
    there, or when its own grading process died under it."""
    from distributed import Client, as_completed

    with Client(scheduler, timeout="30s") as client:
        client.wait_for_workers(1, timeout=120)
        client.register_plugin(plugin, name=PLUGIN_NAME)
        info = client.run(_describe_runner)
        isolation, memory = next(iter(info.values()), ("unknown", "unknown"))
        size = chunk or chunk_size(len(jobs), len(info))
        futures: dict[Any, list[Any]] = {}
        sent = itertools.count()  # every task its own key: one sent again is a new task

        def send(group: list[Any]) -> Any:
            batch = [(job.data, job.assignment) for job in group]
            key = f"grade-{group[0].digest[:16]}-{id(group[0].submission)}-{next(sent)}"
            future = client.submit(task, batch, seed, pure=False, key=key)
            futures[future] = group
            return future

        def save_all(group: list[Any], results: Any) -> None:
            if not isinstance(results, list) or len(results) != len(group):
                results = ["the task returned no result for it"] * len(group)
            for job, result in zip(group, results, strict=True):
                if isinstance(result, str):
                    save(job, failed(job, f"the cluster could not grade it ({result})"[:500]), 0.0)
                else:
                    save(job, *result)

        suspects: list[Any] = []
        pending = as_completed([send(list(jobs[i : i + size])) for i in range(0, len(jobs), size)])
        for future in pending:
            group = futures.pop(future)
            try:
                results = future.result()
            except Exception:  # noqa: BLE001 - KilledWorker, a lost worker, the task's own error
                if len(group) > 1:  # which one? each on its own
                    for job in group:
                        pending.add(send([job]))
                else:
                    suspects.append(group[0])
                future.release()
                continue
            save_all(group, results)
            future.release()
        for job in suspects:  # alone on the cluster: a failure now is its own
            future = send([job])
            try:
                results = future.result()
            except Exception as e:  # noqa: BLE001
                results = [f"{type(e).__name__}: {e}"]
            futures.pop(future)
            save_all([job], results)
            future.release()
    return isolation, memory


def _describe_runner(dask_worker: Any) -> tuple[str, str]:
    process = dask_worker.plugins[PLUGIN_NAME].process
    return process.isolation, process.memory_limit
