"""A job in phases: each group of graded functions is answered by a process that never ran a
line of student code without its forbidden operators refused.

The jailed process that reads the job (PID 1 of its namespace, "the keeper") never runs student
code itself. For each phase (:func:`course_lib.autograder.sandbox.runner.plan_phases`), it forks
a fresh process from its own pristine state:

* in **every phase** the process first makes the kernels of its functions' forbidden aten
  operators refuse to run (:func:`course_lib.grading.opwatch.refuse_operators`, held by an
  audit hook where no code can reach them, :mod:`.audit`), then runs the notebook's cells,
  then answers its functions' calls. A forbidden operator cannot run in that process at all:
  not in a call, not when its result is encoded, not in a helper, a thread, a mode left behind
  or a table filled while the cells ran;
* **phase 0** reports the cells (their errors and output are what the grader tells the
  student): it refuses nothing when it answers the functions that forbid nothing, else the
  first group's operators; the later phases run the cells silently.

The grader is told how often a refused operator was called while the cells ran: when it was,
a function that the run did not define may exist as the student wrote it (an honest cell that
compares with ``torch.softmax`` before its ``def``), and it is held for review, not scored 0.

Between phases the keeper waits for the phase's process to end, kills whatever it left
running, and only then tells the grader the phase is over; the next phase's inputs are sent
only after that. Its frames are signed with keys its children never held: a new key for
each phase's process is announced, and the keeper's next key with it, before that process
may run anything (it waits on a pipe until then), so no student code can forge the end of a
phase or read the next one's inputs.
"""

from __future__ import annotations

import os
import resource
import signal
from typing import Any

from . import audit
from .protocol import REQUESTS_FD, read_frame_blocking

#: Why a refused operator is refused, in its error message.
WHY = "the exercise asks you to write this yourself"


def run(h: Any) -> int:
    """The keeper's loop (``h``: the :class:`~.student.StudentHarness`); returns the exit code."""
    i, ops = 0, h.ops0
    while True:
        code = _phase(h, i, ops)
        if code != 0:
            return code
        try:
            header, _ = read_frame_blocking(REQUESTS_FD)
        except (EOFError, ValueError, OSError):
            return 74
        t = header.get("t")
        if t == "finish":
            h.psender.send({"t": "bye"})
            return 0
        if t != "phase":
            return 74
        raw = header.get("ops")
        ops = [o for o in raw if isinstance(o, str)][:500] if isinstance(raw, list) else []
        i += 1


def _fork(h: Any) -> int | None:
    for _attempt in range(50):
        try:
            return os.fork()
        except BlockingIOError:  # the uid's process limit, while killed processes are reaped
            h._kill_strays(0.1)
    return None


def _phase(h: Any, i: int, ops: list[str]) -> int:
    """Fork phase ``i``'s process, announce it, wait for it, clean up after it; returns 0, or
    the exit code the whole job ends with."""
    h.sender.rekey(os.urandom(32), restart=True)  # the child's key: it signs all its frames with it
    go_r, go_w = os.pipe()
    pid = _fork(h)
    if pid is None:
        return 75
    if pid == 0:
        code = 71
        try:
            os.close(go_w)
            os.read(go_r, 1)  # until the keeper has announced this phase
            os.close(go_r)
            code = _child(h, i, ops)
        except BaseException:  # noqa: BLE001 - a harness failure; the grader sees the calls unanswered
            code = 71
        os._exit(code)
    os.close(go_r)
    end_key = os.urandom(32)  # made after the fork: the child never has it
    h.psender.send({"t": "phase", "i": i, "key": h.sender.key_hex(), "end_key": end_key.hex()})
    h.psender.rekey(end_key, restart=False)
    os.write(go_w, b"g")
    os.close(go_w)
    status, cpu = _wait_for(pid)
    h._kill_strays()
    code = os.waitstatus_to_exitcode(status)
    end: dict[str, Any] = {"t": "phase_end", "i": i, "code": code, "cpu_out": _out_of_cpu(code, cpu)}
    h.psender.send(end)
    return 0 if code == 0 else (code & 0xFF) or 70


def _wait_for(pid: int) -> tuple[int, float]:
    """The wait status of child ``pid`` and the CPU seconds it used, reaping on the way the
    orphans of the phase (the processes its cells started are reparented to the keeper)."""
    while True:
        try:
            got, status, usage = os.wait4(-1, 0)
        except ChildProcessError:
            return 0, 0.0
        if got == pid:
            return status, usage.ru_utime + usage.ru_stime


def _out_of_cpu(code: int, cpu: float) -> bool:
    """Whether a phase's process that ended with exit code ``code`` after ``cpu`` seconds of CPU
    was stopped by its CPU time limit (the keeper's own, which every child inherits): the
    kernel sends SIGXCPU at the soft limit and SIGKILL at the hard one. Its CPU time is the
    kernel's count, out of the student's reach; a kill for memory well before the limit is not
    taken for one."""
    if code not in (-signal.SIGKILL, -signal.SIGXCPU):
        return False
    soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
    return soft != resource.RLIM_INFINITY and cpu >= soft - 0.5


def _child(h: Any, i: int, ops: list[str]) -> int:
    """Phase ``i``'s process: refuse ``ops`` for good, run the cells, answer the calls."""
    if ops:
        libraries = h.refuse(ops, WHY)
        audit.keep(libraries)
        del libraries
    silent = i > 0
    if silent:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.close(devnull)
    if h.audit:
        h.policy.arm(h.report_tamper)
    ns = h.run_notebook(silent)
    return h.serve(ns, first=not silent)
