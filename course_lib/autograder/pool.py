"""Grading processes: notebooks graded by forked copies of the grading process.

Grading a notebook in the grader's own process is Python work (sending the calls, checking
and comparing the results, judging mistakes) while the student's code runs in the sandbox.
Python threads share one interpreter lock: two grading threads in one process spent about a
third more CPU per notebook than one alone, and a Dask worker's own threads (its event
loop, heartbeats, profiler, memory monitor) slowed the grading in its task thread by about
a quarter. So the grading runs in a :class:`GradingProcess` of its own, with one warm sandbox
:class:`~course_lib.autograder.sandbox.Runner` (whose zygote is a separate process, as
always: no student code runs in a grading process):

- ``grade_all`` with ``jobs >= 2`` forks ``jobs`` of them (:class:`.backends.ForkPool`, :func:`grade_in_processes`);
- each Dask worker forks one (:class:`~course_lib.autograder.cluster.GraderPlugin`), and
  its task thread only hands it the job and waits.

Forking, not spawning: a child starts with everything the parent has (torch and the grader
imported, each exercise's cases and reference outputs computed), so it is ready at once. A
local child is given only the index of its next job (the notebooks' bytes are in its copy of
memory); a worker's child is sent the job. Each sends back the record; the parent alone
writes the gradebook.

A grading process that dies (killed, out of memory, a fault in the grader) takes only the
job it was grading: locally, that submission is recorded as failed with the reason (the next
run grades it again) and a fresh process takes its place, so the batch always finishes; only
processes that keep dying before they take a job stop the batch, with an error, rather than
fork forever. A process that cannot start its runner (no sandbox where one is required)
sends the error, which is raised in the parent as it would be in one process. A grading
process is forked from the sandbox's spawner thread (which lives as long as its process)
and dies with its parent.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, Pipe, wait
from typing import Any

from .pacing import NO_WATCH, Watch
from .record import Record
from .sandbox import isolation as iso

__all__ = ["GradingProcess", "grade_in_processes"]

_MAX_IDLE_DEATHS = 3  # grading processes that died in a row before they took a job
_JOIN_SECONDS = 10.0


class GradingProcess:
    """One forked grading process with a runner of its own, graded one job at a time.

    Args:
        start: ``start(slot)`` makes the runner, in the child.
        grade: ``grade(runner, job)`` -> the record, in the child; must not raise for
            anything a submission does.
        slot: the runner's slot (its uid and cgroup).
        jobs: what :meth:`give` refers to by index (read in the child's copy, never sent).
        siblings: other grading processes of this parent, whose ends the child closes.
    """

    def __init__(
        self,
        start: Callable[[int], Any],
        grade: Callable[[Any, Any], Record],
        slot: int,
        jobs: Sequence[Any] = (),
        siblings: Sequence[GradingProcess] = (),
    ):
        self.slot = slot
        self.job: int | None = None  # the index of the job it was given last
        self.isolation = self.memory_limit = "unknown"
        self._lock = threading.Lock()
        self.conn, theirs = Pipe()
        parent = os.getpid()
        ends = [self.conn] + [s.conn for s in siblings]

        def child() -> None:
            for end in ends:
                end.close()
            _serve(theirs, parent, slot, jobs, start, grade)

        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = iso.spawner.call(lambda: _fork(child))
        theirs.close()
        self.exitcode: int | None = None

    def give(self, i: int | None, job: Any = None) -> None:
        """Ask for job ``i`` (``jobs[i]``, or ``job`` if given); None: finish and exit."""
        self.job = i
        try:
            self.conn.send(None if i is None else (i, job))
        except OSError:  # it died: seen as the end of its stream
            pass

    def recv(self) -> tuple | None:
        """Its next message (``ready``, ``error`` or ``done``); None once it has died."""
        try:
            message = self.conn.recv()
        except (EOFError, OSError):
            return None
        if message[0] == "ready":
            self.isolation, self.memory_limit = message[1], message[2]
        return message

    def started(self) -> None:
        """Wait for its runner: raise what ``start`` raised there, or why it died."""
        message = self.recv()
        if message is None:
            raise RuntimeError(f"the grading process did not start: {self.end()}")
        if message[0] == "error":
            self.stop()
            raise message[1]

    def grade(self, job: Any) -> tuple[Record, float]:
        """Grade ``job`` and wait: the record and the seconds it took (RuntimeError if the
        process died meanwhile). One job at a time, whatever the calling thread."""
        with self._lock:
            self.give(0, job)
            message = self.recv()
            if message is None or message[0] != "done":
                raise RuntimeError(self.end())
            return message[2], message[3]

    def alive(self) -> bool:
        return self._wait(os.WNOHANG) is None

    def _wait(self, flags: int) -> int | None:
        if self.exitcode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere
                self.exitcode = -signal.SIGKILL
                return self.exitcode
            if pid:
                self.exitcode = os.waitstatus_to_exitcode(status)
        return self.exitcode

    def end(self) -> str:
        """Why it ended, once it has (for the record of the job it took with it)."""
        deadline = time.monotonic() + _JOIN_SECONDS
        while self._wait(os.WNOHANG) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        code = self.exitcode
        if code is None:
            return "the grading process stopped answering"
        if code < 0:
            try:
                return f"the grading process was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"the grading process was killed by signal {-code}"
        return f"the grading process ended with exit status {code}"

    def stop(self, now: bool = False) -> None:
        """End it: after its job (``now``: at once; it still closes its runner)."""
        if self.alive():
            if now:
                os.kill(self.pid, signal.SIGTERM)
            else:
                self.give(None)
            self.end()
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self._wait(0)
        self.conn.close()


def _fork(child: Callable[[], None]) -> int:
    """Fork; the child runs ``child()`` and exits without returning here."""
    pid = os.fork()
    if pid:
        return pid
    code = 0
    try:
        child()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:  # noqa: BLE001 - the child must never return into the parent's code
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    return 0  # not reached


def _serve(
    conn: Connection,
    parent: int,
    slot: int,
    jobs: Sequence[Any],
    start: Callable[[int], Any],
    grade: Callable[[Any, Any], Record],
) -> None:
    """A grading process: start a runner on ``slot``, then grade each job the parent asks
    for, until it sends None."""
    from .sandbox.worker.syscalls import PR_SET_PDEATHSIG, prctl

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # when the parent's spawner thread ends: with its process
    if os.getppid() != parent:  # the parent ended before that
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
            asked = conn.recv()
            if asked is None:
                return
            i, job = asked
            t0 = time.perf_counter()
            record = grade(runner, jobs[i] if job is None else job)
            conn.send(("done", i, record, time.perf_counter() - t0))
    except (EOFError, BrokenPipeError):  # the parent is gone
        return
    finally:
        runner.close()


def grade_in_processes(
    jobs: Sequence[Any],
    processes: int,
    start: Callable[[int], Any],
    grade: Callable[[Any, Any], Record],
    save: Callable[[Any, Record, float], None],
    lost: Callable[[Any, str, str], Record],
    watch: Watch | None = None,
) -> tuple[str, str]:
    """Grade ``jobs`` in ``processes`` forked grading processes; ``save(job, record, seconds)``
    each record here as it comes back. Each process asks for its next job as soon as it is
    done, so a slow job holds only its own process, never the records of the others.

    Args:
        jobs: what to grade, read by index in the children (forked: never sent).
        processes: how many grading processes (at least 1).
        start: ``start(slot)`` makes a process's runner, in that process; slots are
            ``0 .. processes - 1``, and a process replacing a dead one takes its slot.
        grade: ``grade(runner, job)`` -> the record, in a grading process; must not raise
            for anything a submission does.
        save: called here, in the order the records come back.
        lost: ``lost(job, reason, isolation)`` -> the record of a job whose grading process
            died (``isolation``: that process's runner's).
        watch: told when a job is handed to a process and when its record is back.

    Returns:
        The runners' isolation and memory limit, as the first process to start reports them.

    Raises:
        Whatever ``start`` raised in a grading process; RuntimeError if grading processes
        keep dying before they take a job.
    """
    if processes < 1:
        raise ValueError(f"grade_in_processes: processes must be >= 1, got {processes}")
    todo = list(range(len(jobs)))
    todo.reverse()  # popped from the end: in order
    described: tuple[str, str] | None = None
    idle_deaths = 0
    watch = watch or NO_WATCH
    running: dict[Any, GradingProcess] = {}  # by its connection

    def fork(slot: int) -> None:
        p = GradingProcess(start, grade, slot, jobs, list(running.values()))
        running[p.conn] = p

    try:
        for slot in range(processes):
            fork(slot)
        while running:
            for ready in wait(list(running)):
                p = running[ready]
                message = p.recv()
                if message is None:  # it died
                    del running[p.conn]
                    reason = p.end()
                    p.conn.close()
                    if p.job is not None:  # it took a job with it: every death ends a job
                        watch.finished(jobs[p.job])
                        save(jobs[p.job], lost(jobs[p.job], reason, p.isolation), 0.0)
                    else:  # it died starting: not forever
                        idle_deaths += 1
                        if idle_deaths >= _MAX_IDLE_DEATHS:
                            raise RuntimeError(f"grading processes keep dying as they start ({reason})")
                    if todo:
                        fork(p.slot)
                    continue
                if message[0] == "error":
                    raise message[1]
                if message[0] == "ready":
                    described = described or (p.isolation, p.memory_limit)
                else:  # done
                    _, i, record, seconds = message
                    idle_deaths = 0
                    watch.finished(jobs[i])
                    save(jobs[i], record, seconds)
                if todo:
                    i = todo.pop()
                    watch.began(jobs[i])
                    p.give(i)
                else:
                    del running[p.conn]
                    p.stop()
    finally:
        for p in running.values():  # only after an error: the rest may be mid-job
            p.stop(now=True)
    return described or ("unknown", "unknown")
