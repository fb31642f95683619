"""The zygote's watch over one job's student process, and the end packet that reports how it ended.

The zygote (:mod:`.zygote`) forks the student's process, then hands it to a :class:`Supervisor`,
which waits until the process is reaped and kills it when it must (past the job's wall-clock
limit, on the grader's ``abort``, when the grader goes away, when the machine runs low on
memory). :func:`end_packet` then says how it ended; the packet's fields are described in
:mod:`.zygote`.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from .protocol import Header, recv_packet


class Supervisor:
    """One job's student process, watched by the zygote until it is reaped: killed past the
    deadline, on the grader's ``abort``, when the grader goes away or when the machine runs
    low on memory; its setup report (the setup pipe) is collected on the way.

    Args:
        pid: the student's process (in isolated modes PID 1 of its namespace).
        setup_r: the read end of its setup pipe (closed by the caller).
        deadline: the job's wall-clock limit, on :func:`time.monotonic`'s clock.
        ctrl: the control socket, for ``abort`` packets and the grader's end of the stream.
    """

    def __init__(self, pid: int, setup_r: int, deadline: float, ctrl: socket.socket):
        self.pid, self.setup_r, self.deadline, self.ctrl = pid, setup_r, deadline, ctrl
        self.pidfd: int | None = None  # None: poll waitpid instead
        self.killed: tuple[str, str] | None = None  # the first (reason, detail) it was killed for
        self.grader_open = True
        self.setup = bytearray()  # the setup report: b"F" and a message when the setup failed
        self.setup_open = True
        self.exited: int | None = None  # the wait status, once reaped
        self.mem_check = 0.0  # when the machine's memory was last looked at

    def supervise(self) -> None:
        """Wait until the process is reaped (see the class)."""
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        while self.exited is None:
            wait = self._enforce_deadline()
            try:
                ready, _, _ = select.select(self._watched(), [], [], wait)
            except InterruptedError:
                continue
            if self.ctrl.fileno() in ready:
                self._read_control()
            if self.setup_r in ready:
                self._read_setup()
            if self.pidfd is None or self.pidfd in ready:
                got_pid, status = os.waitpid(self.pid, os.WNOHANG)
                if got_pid:
                    self.exited = status
            self._check_memory()
        if self.pidfd is not None:
            os.close(self.pidfd)

    def drain_setup(self) -> None:
        """Read what is left of the setup report (after the process was reaped)."""
        while self.setup_open and select.select([self.setup_r], [], [], 0.2)[0]:
            self._read_setup()

    def _kill(self, reason: str, detail: str = "") -> None:
        if self.killed is None:
            self.killed = (reason, detail)
        kill_quietly(os.kill, self.pid)  # PID 1 of its namespace: everything it started dies too

    def _enforce_deadline(self) -> float:
        """Kill the process past the deadline; returns how long the next wait may be."""
        now = time.monotonic()
        if now >= self.deadline and self.killed is None:
            self._kill("timeout")
        wait = 0.25 if self.pidfd is not None else 0.02
        if self.killed is None:
            wait = max(0.0, min(wait, self.deadline - now))
        return wait

    def _watched(self) -> list[int]:
        watch = [self.setup_r] if self.setup_open else []
        if self.pidfd is not None:
            watch.append(self.pidfd)
        if self.grader_open:
            watch.append(self.ctrl.fileno())
        return watch

    def _read_control(self) -> None:
        """One control packet: the grader's ``abort``, or the end of its stream (it went away)."""
        got = recv_packet(self.ctrl)
        if got is None:
            self.grader_open = False
            self._kill("grader_gone", "the grader went away")
            return
        for fd in got[1]:
            os.close(fd)
        if got[0].get("t") == "abort":
            self._kill("aborted", "aborted by the grader")

    def _read_setup(self) -> None:
        data = os.read(self.setup_r, 1 << 16)
        self.setup_open = bool(data)
        if len(self.setup) < 1 << 16:
            self.setup.extend(data)

    def _check_memory(self) -> None:
        if self.killed is None and time.monotonic() - self.mem_check > 0.25:
            self.mem_check = time.monotonic()
            if _low_memory():
                self._kill("memory")


def end_packet(student: Supervisor, t0: float) -> Header:
    """The job's end packet (its fields: :mod:`.zygote`), from how ``student`` ended; ``t0``:
    when the job began."""
    end: Header = {"t": "end", "message": ""}
    killed = student.killed
    if student.setup[:1] == b"F":  # only the student process's setup, before any student code, can report this
        end.update(status="fatal", message=bytes(student.setup[1:]).decode("utf-8", "replace")[-8000:])
    elif killed is not None and killed[0] == "timeout":
        end.update(status="timeout")
    elif killed is not None:
        end.update(status="crashed", reason=killed[0], message=killed[1])
    else:
        end.update(status="exited", **_how_it_ended(student.exited))
    end["seconds"] = time.monotonic() - t0
    return end


def kill_quietly(kill: Callable[[int, int], None], pid: int) -> None:
    """``kill(pid, SIGKILL)`` (:func:`os.kill` or :func:`os.killpg`), where it is already gone too."""
    try:
        kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _low_memory() -> bool:
    """True when the machine is close to running out of memory (guard against fork x memory bombs)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            info = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        total = int(info[b"MemTotal"].split()[0]) * 1024
        avail = int(info[b"MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return False
    return avail < max(256 << 20, total // 50)


def _how_it_ended(status: int | None) -> dict[str, Any]:
    """An exited end frame's fields: ``exit_code`` or ``signal`` (its name), else a message."""
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return {"signal": name}
    if status is not None and os.WIFEXITED(status):
        return {"exit_code": os.WEXITSTATUS(status)}
    return {"message": "the notebook's process ended without reporting"}
