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
each task), no two of one student's, and a task held by a slow notebook is split: the
notebooks it has not started are sent again as tasks of their own (:mod:`.pacing`). A task
tells the client of a notebook that has run a while, and of its end (events on :data:`TOPIC`),
for the split and the progress line. A worker that dies takes its tasks with it; the scheduler gives them to another
worker. A task that kills workers repeatedly (Dask's ``distributed.scheduler.allowed-failures``,
3 by default) comes back as ``KilledWorker``: its notebooks are sent again one a task, and a
notebook that fails on its own again, alone on the cluster, is recorded as failed with that
reason (:func:`grade_on_cluster`).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distributed import Event, WorkerPlugin

from .pacing import NO_WATCH, Watch, announce_after, split_after, spread
from .record import Record
from .sandbox import Limits, Runner

__all__ = ["GraderPlugin", "grade_on_worker", "grade_in_task", "grade_on_cluster", "chunk_size", "PLUGIN_NAME", "TOPIC"]

PLUGIN_NAME = "course-lib-grader"
#: The topic of the events a task logs about a slow notebook: ``{"key": ..., "at": i}`` once it
#: has run :func:`.pacing.announce_after` seconds, then with ``"done": True`` when it ends.
TOPIC = "course-lib-grading"
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


def grade_on_worker(batch: list[tuple[bytes, str]], seed: int | None) -> list[tuple[Record, float] | str | None]:
    """The task: grade a few notebooks (bytes, assignment) one after another in this worker's
    grading process (see :class:`GraderPlugin`), as :func:`grade_in_task` does."""
    from distributed import get_worker

    plugin: Any = get_worker().plugins[PLUGIN_NAME]
    return grade_in_task(batch, lambda data, assignment: plugin.grade((data, assignment, seed)), plugin.limits)


def grade_in_task(
    batch: list[tuple[bytes, str]], grade: Callable[[bytes, str], tuple[Record, float]], limits: Limits
) -> list[tuple[Record, float] | str | None]:
    """Grade ``batch`` in this task, one notebook after another, telling the client (events on
    :data:`TOPIC`) of each that runs :func:`.pacing.announce_after` seconds and of its end; for
    each, the record and the seconds it took, or why it could not be graded (``grade`` raised
    RuntimeError: its grading process died), or None for the notebooks it left: after a notebook
    the client heard of, it stops if the client has sent the rest of the task again
    (:func:`grade_on_cluster`)."""
    from distributed import get_worker

    worker = get_worker()
    key = str(worker.get_current_task())
    out: list[tuple[Record, float] | str | None] = []
    for i, (data, assignment) in enumerate(batch):
        with _Announce(worker, {"key": key, "at": i, "worker": worker.address}, announce_after(limits)) as announced:
            try:
                out.append(grade(data, assignment))
            except RuntimeError as e:
                out.append(f"RuntimeError: {e}")
        rest = len(batch) - i - 1
        if rest and announced.is_set() and Event(_split_event(key)).is_set():
            return out + [None] * rest
    return out


class _Announce:
    """Log ``msg`` on :data:`TOPIC` once the notebook has run ``after`` seconds, and
    ``msg | {"done": True}`` when it ends if it was: the client hears of slow notebooks only
    (an event for each notebook cost the scheduler about 1 ms)."""

    def __init__(self, worker: Any, msg: dict[str, Any], after: float):
        self.worker, self.msg, self.sent = worker, msg, threading.Event()
        self.timer = threading.Timer(after, self._send)
        self.timer.daemon = True

    def _send(self) -> None:
        self.worker.log_event(TOPIC, self.msg)
        self.sent.set()

    def __enter__(self) -> threading.Event:
        self.timer.start()
        return self.sent

    def __exit__(self, *exc: object) -> None:
        self.timer.cancel()
        self.timer.join()
        if self.sent.is_set():
            self.worker.log_event(TOPIC, {**self.msg, "done": True})


def _split_event(key: str) -> str:
    return f"{key}-split"


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
    task: Callable[..., list[tuple[Record, float] | str | None]] = grade_on_worker,
    chunk: int | None = None,
    watch: Watch | None = None,
) -> tuple[str, str]:
    """Send ``jobs`` (:class:`.backends.Job`: ``submission``, ``data``, ``digest``,
    ``assignment``) to the cluster at ``scheduler``, at most ``chunk`` notebooks a task
    (default :func:`chunk_size`) and no two of one student (:func:`.pacing.spread`), and
    ``save(job, record, seconds)`` each record as its task completes; ``watch`` is told which
    notebook each task is grading. Returns the workers' isolation and memory limit, as the
    first worker reports them. Waits up to two minutes for a first worker.

    A task whose notebook has run longer than :func:`.pacing.split_after` is split: its
    notebooks not started yet are sent again one a task, and the task stops after the slow one;
    a notebook graded twice that way is saved once, the first time. A task that fails as a
    whole (its worker died under it, too often: ``KilledWorker``) is sent again one notebook a
    task. A one-notebook task that fails too may only have shared a worker with the notebook
    at fault, so it is sent once more at the end, alone on the cluster: a notebook is saved as
    ``failed(job, reason)`` only when it fails there, or when its own grading process died
    under it."""
    from distributed import Client

    with Client(scheduler, timeout="30s") as client:
        client.wait_for_workers(1, timeout=120)
        client.register_plugin(plugin, name=PLUGIN_NAME)
        info = client.run(_describe_runner)
        isolation, memory = next(iter(info.values()), ("unknown", "unknown"))
        size = chunk or chunk_size(len(jobs), len(info))
        run = _ClusterRun(client, jobs, seed, task, save, failed, watch or NO_WATCH, plugin.limits)
        run.grade(spread(jobs, size, lambda job: job.submission.student))
    return isolation, memory


@dataclass
class _Task:
    """A task sent: its key, its jobs (indices), the slow one it is grading (None: none) and
    since when (as this process heard), and whether its jobs after that one were sent again."""

    key: str
    group: list[int]
    at: int | None = None
    since: float = 0.0
    split: bool = False
    worker: str = ""  # where the slow one runs


class _ClusterRun:
    """One run of :func:`grade_on_cluster` on a connected ``client``."""

    def __init__(
        self,
        client: Any,
        jobs: Sequence[Any],
        seed: int | None,
        task: Callable[..., Any],
        save: Callable[[Any, Record, float], None],
        failed: Callable[[Any, str], Record],
        watch: Watch,
        limits: Limits,
    ):
        self.client, self.jobs, self.seed, self.task = client, jobs, seed, task
        self._save, self.failed, self.watch, self.split_seconds = save, failed, watch, split_after(limits)
        self.announced = announce_after(limits)
        self.tasks: dict[Any, _Task] = {}  # by future
        self.by_key: dict[str, _Task] = {}
        self.running: dict[str, _Task] = {}  # by key: those grading a slow notebook
        self.saved: set[int] = set()
        self.spares: dict[int, Any] = {}  # job -> the future of its own task, sent by a split
        self.split_keys: list[str] = []
        self.events: queue.SimpleQueue[tuple[str, int, bool, float, str]] = queue.SimpleQueue()
        self.token, self.sent = uuid.uuid4().hex[:12], itertools.count()  # every task its own key
        self.pending: Any = None  # the as_completed of the tasks sent

    def send(self, group: list[int], priority: int = 0, workers: list[str] | None = None) -> Any:
        """Submit ``group`` as a task (``workers``: where it should go, if any is free)."""
        key = f"grade-{self.token}-{next(self.sent)}"
        batch = [(self.jobs[j].data, self.jobs[j].assignment) for j in group]
        where = {"workers": workers, "allow_other_workers": True} if workers else {}
        future = self.client.submit(self.task, batch, self.seed, pure=False, key=key, priority=priority, **where)
        self.tasks[future] = self.by_key[key] = _Task(key, group)
        return future

    def grade(self, groups: list[list[int]]) -> None:
        """Grade ``groups`` (a task each), then the suspects, alone."""
        from distributed import as_completed

        self.client.subscribe_topic(TOPIC, self._heard)
        try:
            self.pending = pending = as_completed([self.send(group) for group in groups])
            suspects: list[int] = []
            while not pending.is_empty():
                for future in pending.next_batch(block=False):
                    suspects += self._finished(future)
                self._follow()
                if not pending.has_ready():
                    with pending.thread_condition:
                        pending.thread_condition.wait(0.1)
            for j in suspects:  # alone on the cluster: a failure now is its own
                if j not in self.saved:
                    self._alone(j)
        finally:
            self.client.unsubscribe_topic(TOPIC)
            for key in self.split_keys:
                Event(_split_event(key), client=self.client).clear()  # the scheduler forgets it

    def _heard(self, event: tuple[float, Any]) -> None:
        """In the client's event loop: a task's notebook has run a while, or ended."""
        msg = event[1]
        if isinstance(msg, dict) and isinstance(msg.get("key"), str) and isinstance(msg.get("at"), int):
            since = time.monotonic() - self.announced
            self.events.put((msg["key"], msg["at"], bool(msg.get("done")), since, str(msg.get("worker", ""))))

    def _follow(self) -> None:
        """Note which slow notebook each task grades now (the watch is told); split those held."""
        while not self.events.empty():
            key, at, done, since, worker = self.events.get()
            t = self.by_key.get(key)
            if t is None or not 0 <= at < len(t.group):
                continue
            if t.at is not None:
                self.watch.finished(self.jobs[t.group[t.at]])
            t.at, t.since, t.worker = (None, 0.0, "") if done else (at, since, worker)
            if done:
                self.running.pop(key, None)
            else:
                self.running[key] = t
                self.watch.began(self.jobs[t.group[at]])
        now = time.monotonic()
        for t in list(self.running.values()):
            if not t.split and t.at is not None and t.at < len(t.group) - 1 and now - t.since > self.split_seconds:
                self._split(t)

    def _split(self, t: _Task) -> None:
        """Send ``t``'s jobs after the one it grades again, a task each, ahead of the queue;
        tell it to stop after that one."""
        assert t.at is not None
        t.split = True
        self.split_keys.append(t.key)
        Event(_split_event(t.key), client=self.client).set()
        slow = {r.worker for r in self.running.values() if r.at is not None}
        others = [w for w in self.client.scheduler_info()["workers"] if w not in slow]  # not behind a slow one
        for j in t.group[t.at + 1 :]:
            if j not in self.saved and j not in self.spares:
                self.spares[j] = self.send([j], priority=1, workers=others)
                self.pending.add(self.spares[j])

    def _finished(self, future: Any) -> list[int]:
        """Save what a completed task gave; resend a failed one's jobs one a task. Its
        one-notebook jobs that failed: to try alone at the end."""
        t = self.tasks.pop(future, None)
        if t is None:  # cancelled: its job was saved from another task
            future.release()
            return []
        del self.by_key[t.key]
        self.running.pop(t.key, None)
        if t.at is not None:
            self.watch.finished(self.jobs[t.group[t.at]])
        try:
            results = future.result()
        except Exception:  # noqa: BLE001 - KilledWorker, a lost worker, the task's own error
            future.release()
            if len(t.group) == 1:
                self.spares.pop(t.group[0], None)
                return [j for j in t.group if j not in self.saved]
            for j in t.group:  # which one? each on its own (but those a split sent already)
                if j in self.saved or j in self.spares:
                    continue
                self.pending.add(self.send([j]))
            return []
        future.release()
        self._save_all(t.group, results, future)
        return []

    def _save_all(self, group: list[int], results: Any, source: Any) -> None:
        if not isinstance(results, list) or len(results) != len(group):
            results = ["the task returned no result for it"] * len(group)
        for j, result in zip(group, results, strict=True):
            if result is None:  # left to a task of its own
                if j not in self.saved and j not in self.spares:
                    self.spares[j] = self.send([j], priority=1)
                    self.pending.add(self.spares[j])
            elif j not in self.saved:
                self._save_one(j, result, source)

    def _save_one(self, j: int, result: tuple[Record, float] | str, source: Any) -> None:
        self.saved.add(j)
        spare = self.spares.pop(j, None)
        if spare is not None and spare is not source and spare in self.tasks:  # not needed now
            key = self.tasks.pop(spare).key
            self.by_key.pop(key, None)
            self.running.pop(key, None)
            spare.cancel()
        job = self.jobs[j]
        self.watch.finished(job)
        if isinstance(result, str):
            self._save(job, self.failed(job, f"the cluster could not grade it ({result})"[:500]), 0.0)
        else:
            self._save(job, *result)

    def _alone(self, j: int) -> None:
        future = self.send([j])
        self.watch.began(self.jobs[j])
        try:
            results = future.result()
        except Exception as e:  # noqa: BLE001
            results = [f"{type(e).__name__}: {e}"]
        key = self.tasks.pop(future).key
        self.by_key.pop(key, None)
        self.running.pop(key, None)
        self._save_all([j], results, future)
        future.release()


def _describe_runner(dask_worker: Any) -> tuple[str, str]:
    process = dask_worker.plugins[PLUGIN_NAME].process
    return process.isolation, process.memory_limit
