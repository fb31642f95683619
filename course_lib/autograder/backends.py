"""Where a batch's notebooks are graded: one :class:`Backend` protocol, three ways.

- :class:`InProcess`: one sandbox runner in this process, one notebook after another.
- :class:`ForkPool`: forked grading processes, each with its runner (:mod:`.pool` says why).
- :class:`Dask`: the workers of a Dask cluster (:mod:`.cluster`); this process still writes
  every record.

Each grades a list of :class:`Job` and hands every record to ``save`` in this process, as it
comes back, tells a :class:`.pacing.Watch` (the progress line) when each starts and stops
running, and returns the runners' isolation and memory limit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from ..grading.registry import exercises_of
from .autograde import failed_record, grade_or_fail
from .pacing import NO_WATCH, Watch
from .pool import grade_in_processes
from .record import Record
from .sandbox import Limits, Runner
from .sandbox_adapter import watch_lists

__all__ = ["Job", "Save", "Backend", "InProcess", "ForkPool", "Dask", "backend_for"]


@dataclass(frozen=True)
class Job:
    """One notebook to grade.

    Args:
        submission: the :class:`.batch.Submission` it is (student, assignment, path).
        data: the notebook file's bytes.
        digest: their hash.
    """

    submission: Any
    data: bytes
    digest: str

    @property
    def assignment(self) -> str:
        return str(self.submission.assignment)


#: ``save(job, record, seconds)``: called in this process for every graded job.
Save = Callable[[Job, Record, float], None]


class Backend(Protocol):
    """Grades jobs somewhere and hands each record back here."""

    def run(self, jobs: Sequence[Job], save: Save, watch: Watch | None = None) -> tuple[str, str]:
        """Grade ``jobs``, ``save`` each record as it comes back (``watch`` is told when each
        starts and stops running); the runners' isolation and memory limit."""
        ...


@dataclass(frozen=True)
class _Runners:
    """How to start a sandbox runner: its mode, limits and the folders it must not show."""

    sandbox: str
    limits: Limits
    hide: tuple[str, ...]

    def start(self, slot: int) -> Runner:
        return Runner(mode=self.sandbox, limits=self.limits, slot=slot, hide=list(self.hide), watch=watch_lists())


@dataclass(frozen=True)
class InProcess:
    """One runner in this process."""

    runners: _Runners
    seed: int | None

    def run(self, jobs: Sequence[Job], save: Save, watch: Watch | None = None) -> tuple[str, str]:
        watch = watch or NO_WATCH
        with _one_torch_thread():
            runner = self.runners.start(0)
            try:
                for job in jobs:
                    t0 = time.perf_counter()
                    watch.began(job)
                    record = grade_or_fail(runner, job.data, job.assignment, self.seed, job.digest)
                    watch.finished(job)
                    save(job, record, time.perf_counter() - t0)
            finally:
                runner.close()
        return runner.isolation, runner.memory_limit


@dataclass(frozen=True)
class ForkPool:
    """``processes`` forked grading processes (:func:`.pool.grade_in_processes`)."""

    runners: _Runners
    seed: int | None
    processes: int

    def run(self, jobs: Sequence[Job], save: Save, watch: Watch | None = None) -> tuple[str, str]:
        with _one_torch_thread():
            return grade_in_processes(
                jobs, self.processes, self.runners.start, self._grade, save, self._lost, watch=watch
            )

    def _grade(self, runner: Runner, job: Job) -> Record:
        return grade_or_fail(runner, job.data, job.assignment, self.seed, job.digest)

    def _lost(self, job: Job, reason: str, isolation: str) -> Record:
        return failed_record(job.assignment, reason, job.digest, isolation, self.seed)


@dataclass(frozen=True)
class Dask:
    """The workers of the Dask scheduler at ``scheduler``, ``chunk`` notebooks a task."""

    runners: _Runners
    seed: int | None
    scheduler: str
    chunk: int | None

    def run(self, jobs: Sequence[Job], save: Save, watch: Watch | None = None) -> tuple[str, str]:
        try:
            from .cluster import GraderPlugin, grade_on_cluster
        except ImportError:
            raise ValueError("--scheduler needs Dask's distributed: pip install 'course-lib[cluster]'") from None
        plugin = GraderPlugin(self.runners.sandbox, self.runners.limits, self.runners.hide)
        return grade_on_cluster(
            self.scheduler, jobs, self.seed, plugin, save, self._failed, chunk=self.chunk, watch=watch
        )

    def _failed(self, job: Job, reason: str) -> Record:
        # isolation "none": what the cluster's failed records have said since the start
        return failed_record(job.assignment, reason, job.digest, seed=self.seed)


class _one_torch_thread:
    """The grading process's torch work (judging, references standing in) is on tiny tensors
    while the sandboxes keep every core busy: with several intra-op threads an op waits for a
    thread the scheduler put aside (a 7 x 7 triu took 2 ms, not 15 us). One thread, put back after."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.threads)


def backend_for(
    jobs: Sequence[Job],
    *,
    sandbox: str,
    limits: Limits,
    seed: int | None,
    hide: Sequence[str | Path],
    processes: int,
    scheduler: str | None = None,
    chunk: int | None = None,
) -> Backend:
    """The backend for ``jobs``: Dask with a ``scheduler`` (when there is work), else a fork
    pool of up to ``processes``, else (one process, or no work) this process. Each
    assignment's cases and reference outputs are computed first, here, so forked grading
    processes start with them (a Dask worker's grading process computes its own named
    mistakes)."""
    runners = _Runners(sandbox, limits, tuple(str(h) for h in hide))
    local = scheduler is None or not jobs
    for slug in {job.assignment for job in jobs}:
        for ex in exercises_of(slug):
            ex.expected(seed)  # the cases and the reference's outputs
            if local:
                ex.mistake_runs(seed)  # the named mistakes' outputs
                ex.gated()
    if not local:
        assert scheduler is not None
        return Dask(runners, seed, scheduler, chunk)
    n = min(processes, max(len(jobs), 1))
    return InProcess(runners, seed) if n == 1 else ForkPool(runners, seed, n)
