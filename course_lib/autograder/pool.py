"""Local grading processes: a batch's notebooks graded by forked copies of the grading process.

Grading a notebook in the grader's own process is Python work (sending the calls, checking
and comparing the results, judging mistakes) while the student's code runs in the sandbox.
Two grading *threads* share one interpreter lock, so on 2 cores a batch graded with two
threads spent about a third more CPU per notebook than one thread alone. ``grade_all`` with
``jobs >= 2`` therefore forks ``jobs`` grading processes, each with one warm sandbox
:class:`~course_lib.autograder.sandbox.Runner` of its own (its zygote is a separate process,
as always: no student code runs in a grading process).

Forking, not spawning: a child starts with everything the parent has (torch and the grader
imported, each exercise's cases and reference outputs computed), so it is ready at once; it
is given only the index of its next job (the notebooks' bytes are in its copy of memory) and
sends back the record. The parent alone writes the gradebook, as on a Dask cluster.

A grading process that dies (killed, out of memory, a fault in the grader) takes only the
job it was grading: that submission is recorded as failed with the reason (the next run
grades it again) and a fresh process takes its place, so the batch always finishes. Only
grading processes that keep dying before they take a job stop the batch, with an error,
rather than fork forever. A process that
cannot start its runner (no sandbox where one is required) sends the error, which is raised
here as it would be in a single process. Every grading process dies with the parent.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

__all__ = ["grade_in_processes"]

_MAX_IDLE_DEATHS = 3  # grading processes that died in a row before they took a job
_JOIN_SECONDS = 10.0


def _die_with_parent() -> None:
    """SIGTERM to this process when the one that forked it ends (even by SIGKILL)."""
    from .sandbox.worker.syscalls import PR_SET_PDEATHSIG, prctl

    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _serve(
    conn: Connection,
    parent: int,
    slot: int,
    jobs: Sequence[Any],
    start: Callable[[int], Any],
    grade: Callable[[Any, Any], dict],
) -> None:
    """A grading process: start a runner on ``slot``, then grade the job whose index the
    parent sends, until it sends None."""

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    _die_with_parent()
    if os.getppid() != parent:  # the parent ended before the line above
        return
    import torch

    torch.set_num_threads(1)  # tiny tensors; and no OpenMP pool carried over a fork
    try:
        runner = start(slot)
    except Exception as e:  # noqa: BLE001 - raised in the parent
        conn.send(("error", e))
        return
    try:
        conn.send(("ready", runner.isolation, runner.memory_limit))
        while True:
            i = conn.recv()
            if i is None:
                return
            t0 = time.perf_counter()
            record = grade(runner, jobs[i])
            conn.send(("done", i, record, time.perf_counter() - t0))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):  # the parent is gone or stopping
        return
    finally:
        runner.close()


class _Process:
    """The parent's end of one grading process."""

    def __init__(self, ctx: Any, slot: int, jobs: Sequence[Any], start: Callable, grade: Callable):
        self.conn, theirs = ctx.Pipe()
        self.slot = slot
        self.job: int | None = None
        self.proc = ctx.Process(
            target=_serve, args=(theirs, os.getpid(), slot, jobs, start, grade), name=f"grader-{slot}", daemon=True
        )
        self.proc.start()
        theirs.close()

    def give(self, i: int | None) -> None:
        self.job = i
        try:
            self.conn.send(i)
        except OSError:  # it died: seen as the end of its stream
            pass

    def end(self) -> str:
        """Why it ended, once it has (for the record of the job it took with it)."""
        self.proc.join(_JOIN_SECONDS)
        code = self.proc.exitcode
        if code is None:
            return "the grading process stopped answering"
        if code < 0:
            try:
                return f"the grading process was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"the grading process was killed by signal {-code}"
        return f"the grading process ended with exit status {code}"

    def stop(self, now: bool = False) -> None:
        """End it: after its job (``now``: at once; its runner is still closed)."""
        if self.proc.is_alive():
            if now:
                self.proc.terminate()
            else:
                self.give(None)
            self.proc.join(_JOIN_SECONDS)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def grade_in_processes(
    jobs: Sequence[Any],
    processes: int,
    start: Callable[[int], Any],
    grade: Callable[[Any, Any], dict],
    save: Callable[[Any, dict, float], None],
    lost: Callable[[Any, str], dict],
) -> tuple[str, str]:
    """Grade ``jobs`` in ``processes`` forked grading processes; ``save(job, record, seconds)``
    each record here as it comes back.

    Args:
        jobs: what to grade, read by index in the children (forked: never pickled).
        processes: how many grading processes (at least 1).
        start: ``start(slot)`` makes a process's runner, in that process; slots are
            ``0 .. processes - 1``, and a process replacing a dead one takes its slot.
        grade: ``grade(runner, job)`` -> the record, in a grading process; must not raise
            for anything a submission does.
        save: called here, in the order the records come back.
        lost: ``lost(job, reason)`` -> the record of a job whose grading process died.

    Returns:
        The runners' isolation and memory limit, as the first process to start reports them.

    Raises:
        Whatever ``start`` raised in a grading process; RuntimeError if grading processes
        keep dying before they take a job.
    """
    if processes < 1:
        raise ValueError(f"grade_in_processes: processes must be >= 1, got {processes}")
    ctx = multiprocessing.get_context("fork")
    todo = list(range(len(jobs)))
    todo.reverse()  # popped from the end: in order
    described: tuple[str, str] | None = None
    idle_deaths = 0
    sys.stdout.flush()
    sys.stderr.flush()
    running = {p.conn: p for p in (_Process(ctx, s, jobs, start, grade) for s in range(processes))}
    try:
        while running:
            for ready in wait(list(running)):
                p = running[ready]
                conn = p.conn
                message: Any
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    message = None
                if message is None:  # it died
                    del running[conn]
                    reason = p.end()
                    conn.close()
                    if p.job is not None:  # it took a job with it: every death ends a job
                        save(jobs[p.job], lost(jobs[p.job], reason), 0.0)
                    else:  # it died starting: not forever
                        idle_deaths += 1
                        if idle_deaths >= _MAX_IDLE_DEATHS:
                            raise RuntimeError(f"grading processes keep dying as they start ({reason})")
                    if todo:
                        fresh = _Process(ctx, p.slot, jobs, start, grade)
                        running[fresh.conn] = fresh
                    continue
                kind = message[0]
                if kind == "error":
                    raise message[1]
                if kind == "ready":
                    described = described or (message[1], message[2])
                else:  # done
                    _, i, record, seconds = message
                    idle_deaths = 0
                    save(jobs[i], record, seconds)
                if todo:
                    p.give(todo.pop())
                else:
                    del running[conn]
                    p.stop()
    finally:
        for p in running.values():  # only after an error: the rest may be mid-job
            p.stop(now=True)
    return described or ("unknown", "unknown")
