"""Run untrusted notebook code in a sandbox, and get back only plain arrays.

The grader never runs a student's code in its own process. A :class:`Runner` keeps one warm
worker ("zygote", :mod:`course_lib.autograder.sandbox.worker`) that has already imported torch; for
each submission the zygote forks a fresh process, handed three pipes of the grader's own, that
reads the job from the grader (the zygote never holds a byte of any submission), runs the
notebook's cells and then answers the grader's calls one at a time, inside these walls:

* **bubblewrap** (when ``bwrap`` works here): the zygote runs in an allowlisted, read-only
  file system (the system libraries, the Python install and its packages; never the course's
  own source, the submissions or the gradebook), with no network, its own PID, IPC and UTS
  namespaces, and only the capabilities the per-submission step needs.
* **namespaces** (no bwrap, but root and Linux namespaces): the zygote builds the same
  allowlisted root itself (``unshare`` + ``pivot_root``) and a new network namespace.
* per submission, in both: the student's process is PID 1 of a fresh PID namespace (when it
  ends, every process it started ends: fork bombs, daemons) with its own mount, IPC, UTS and
  network namespaces, a size-limited scratch ``tmpfs`` as its only writable place, a fresh
  ``/proc``, rlimits (address space, processes, file size, open files, CPU time, no core
  dumps), an unprivileged uid (``60000 + slot``) without capabilities, ``no_new_privs``, a
  seccomp filter (no kernel keyrings, ptrace, namespaces or mounts; during the calls no new
  threads or processes), stdin from ``/dev/null``, and the submission's wall-clock limit
  enforced by SIGKILL.
* a **memory cgroup** per runner where the machine lets us make one
  (:mod:`course_lib.autograder.sandbox.cgroup`): all of a submission's processes together stay under
  ``memory_mb`` on top of the warm worker.
* **none** (``mode="off"``): still a fresh forked process with rlimits and seccomp per
  submission, but no walls; only for trusted code.

The channel (see :mod:`course_lib.autograder.sandbox.worker`): a job runs in phases
(:func:`plan_phases`, :mod:`.worker.phases`), each in a process of its own that the job's
keeper forks from its pristine state; the functions of a later phase are answered with the
aten operators they forbid refused. Every frame carries a sequence number and an HMAC, under
the key the keeper announced for the phase (the keeper's own frames under keys no phase's
process holds), and is accepted only in its place: the keeper's phase announcement, cell
events, then ``cells_done`` (``ready`` in a later phase), then exactly one reply per call the
grader sends, then the keeper's end of the phase.
No call's inputs are sent before the cells have all run; then each function's calls go out
together, and the next function's only once they are answered. Anything else (a forged or
out-of-order frame, bytes that break the framing) is a *violation*: the job is stopped and the
submission is held for review. How the process ended comes from the zygote over its own
socket, which no student code can write to.

Time limits: each cell gets ``cell_seconds`` of wall-clock time, each call ``call_seconds``
of CPU time (robust to a busy machine; a wall-clock backstop of 5x catches a call that
sleeps), the whole submission ``submission_seconds`` of wall-clock time. A cell or call over
its limit is interrupted (the rest of the notebook still runs); code that blocks or ignores
the signals is killed at the submission limit, and the calls not made by then are reported
as not run.

What comes back is parsed here as JSON and ``.npy`` bytes only (never unpickled), checked
(dtypes, shapes, sizes), each array decoded at most once and all of a submission's arrays
within a fixed budget, and rebuilt into plain tensors; objects made by student code never
reach the grader.
"""

from __future__ import annotations

import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import asdict
from typing import IO, Any

from ..notebook import python_source
from ..untrusted_text import valid_utf8
from . import isolation as iso
from .cgroup import MemoryCgroup
from .conversation import _Conversation, _Ending
from .jobs import Job, Limits, Reply, RunResult, SandboxUnavailable, WatchLists, _Lost, _NotSent, _Pipes, plan_phases
from .worker.protocol import recv_packet, send_packet

__all__ = ["Limits", "Job", "Reply", "RunResult", "Runner", "SandboxUnavailable", "WatchLists", "plan_phases"]

BASE_UID = 60000
_READY_SECONDS = 180.0  # a cold start imports torch; a loaded machine can be slow
_WATCHDOG_GRACE = 30.0  # the zygote enforces the limit; this only catches a stuck worker
_CGROUP_HEADROOM = 128 << 20  # the copy-on-write pages of a fork


# --------------------------------------------------------------------------- runner


class Runner:
    """One warm sandbox worker; runs submissions one at a time (one grader thread per runner).

    Args:
        mode: ``"auto"`` (strongest isolation available), ``"required"`` (raise
            :class:`SandboxUnavailable` unless bubblewrap or namespaces work) or ``"off"``
            (no isolation: trusted code only).
        limits: the resource limits of each submission.
        slot: distinguishes runners used in parallel (each gets its own uid, ``60000 + slot``).
        hide: folders the sandbox must never see (submissions, gradebook); they are never
            mounted, and covered should they lie inside an allowed folder.
        isolation: force one isolation level (``"bubblewrap"``, ``"namespaces"`` or
            ``"none"``) instead of choosing by ``mode``; refused if it does not work here.
        watch: what the warm worker prepares for the runtime layer (the operator watch's
            source, the torch functions and operators every rule can forbid); the autograder
            computes it (:func:`course_lib.autograder.sandbox_adapter.watch_lists`).
    """

    def __init__(
        self,
        mode: str = "auto",
        limits: Limits | None = None,
        slot: int = 0,
        hide: list[str] | None = None,
        isolation: str | None = None,
        *,
        watch: WatchLists,
    ):
        if mode not in ("auto", "required", "off"):
            raise ValueError(f"sandbox mode must be 'auto', 'required' or 'off', not {mode!r}")
        self.limits = limits if limits is not None else Limits()
        self.slot = int(slot)
        if not 0 <= self.slot < 5000:
            raise ValueError("slot must be between 0 and 4999")
        self.uid = BASE_UID + self.slot
        self.hide = [str(h) for h in (hide or [])]
        self.watch = watch
        if isolation is not None:
            if isolation not in iso.ISOLATION_LEVELS:
                raise ValueError(f"unknown isolation {isolation!r}")
            if isolation != "none" and not iso.probe(isolation):
                raise SandboxUnavailable(f"{isolation} isolation does not work on this machine")
        elif mode == "off":
            isolation = "none"
        else:
            isolation = iso.detect_isolation()
            if mode == "required" and isolation not in ("bubblewrap", "namespaces"):
                raise SandboxUnavailable(
                    "no sandbox is available here (needs bubblewrap, or root with Linux namespaces); "
                    "refusing to run student code without one (use --sandbox auto or off to allow it)"
                )
        self.isolation = isolation
        #: arm the student process's audit hook (worker/audit.py); tests of the walls beneath it
        #: turn it off, nothing else should
        self.audit_hook = True
        self.cgroup: MemoryCgroup | None = None
        self._proc: subprocess.Popen | None = None
        self._ctrl: socket.socket | None = None
        self._ready = False
        self._log: IO[bytes] | None = None
        self._tmp: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, Runner._cleanup, [None, None, None])
        self._start()

    @property
    def memory_limit(self) -> str:
        """How the memory of one submission is limited, in words (for the grading summary)."""
        if self.cgroup is not None:
            return f"cgroup v{self.cgroup.version} ({self.limits.memory_mb} MB for all of a submission's processes)"
        return f"rlimit ({self.limits.memory_mb} MB of address space per process; no cgroup here)"

    # ------------------------------------------------------------ process
    @staticmethod
    def _cleanup(state: list) -> None:
        proc, tmp, cgroup = state
        if proc is not None and proc.poll() is None:
            iso.killpg(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if cgroup is not None:
            for _ in range(50):
                if not cgroup.pids():
                    break
                time.sleep(0.02)
            cgroup.remove()

    def _start(self) -> None:
        cmd, env, tmp = iso.command(self.isolation, self.hide, self.watch)
        if self.cgroup is None:
            self.cgroup = MemoryCgroup.create(f"course-lib-{os.getpid()}-slot{self.slot}")
        if self.cgroup is not None:
            self.cgroup.set_limit(1 << 40)  # no limit until the worker is warm and measured
            cmd = self.cgroup.wrap(cmd)
        self._log = tempfile.TemporaryFile()
        self._tmp = tmp
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = iso.spawner.popen(
                cmd,
                env=env,
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=self._log,
                start_new_session=True,
                cwd="/",
                close_fds=True,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._ctrl = ours
        self._ready = False
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, Runner._cleanup, [self._proc, tmp, self.cgroup])

    def _stop(self) -> None:
        proc, tmp = self._proc, self._tmp
        self._proc, self._tmp, self._ready = None, None, False
        if proc is not None:
            iso.killpg(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self._ctrl is not None:
            self._ctrl.close()
            self._ctrl = None
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _ctrl_fd(self) -> int:
        """The control socket's descriptor (ValueError once stopped)."""
        if self._ctrl is None:
            raise ValueError("the sandbox worker is not running")
        return self._ctrl.fileno()

    def _recv(self, deadline: float | None = None) -> dict | None:
        """The zygote's next packet (waiting until ``deadline`` if given); None at the end of
        the stream or past the deadline. Descriptors (the zygote never sends any) are closed."""
        try:
            fd = self._ctrl_fd()
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
            assert self._ctrl is not None
            got = recv_packet(self._ctrl)
        except (OSError, ValueError):
            return None
        if got is None:
            return None
        for extra in got[1]:
            os.close(extra)
        return got[0]

    def _send_ctrl(self, message: dict, fds: list[int] | None = None) -> bool:
        try:
            assert self._ctrl is not None
            send_packet(self._ctrl, message, fds or ())
            return True
        except (OSError, AssertionError):
            return False

    def _log_tail(self) -> str:
        try:
            assert self._log is not None
            self._log.seek(0)
            return self._log.read().decode("utf-8", "replace")[-2000:]
        except (OSError, ValueError, AttributeError):
            return ""

    def _ensure_ready(self) -> None:
        for attempt in range(2):
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._start()
            if self._ready:
                return
            packet = self._recv(time.monotonic() + _READY_SECONDS)
            if packet is not None and packet.get("t") == "ready":
                self._ready = True
                if self.cgroup is not None:  # the warm worker's footprint, plus the submission's share
                    self.cgroup.set_limit(self.cgroup.usage() + (self.limits.memory_mb << 20) + _CGROUP_HEADROOM)
                return
            log = self._log_tail()
            self._stop()
            if attempt == 1:
                raise SandboxUnavailable(
                    f"the sandbox worker ({self.isolation}) did not start" + (f":\n{log}" if log.strip() else "")
                )
            self._start()

    def _begin(self, pipes: _Pipes, n_phases: int = 1) -> _Pipes:
        """Hand one job to the worker: a fork request with the student's ends of ``pipes``
        (the zygote never reads a job); the job itself goes down the requests pipe. Its
        wall-clock limit is the submission's once per phase (each runs the cells)."""
        limits = dict(self._limits(), job_seconds=self.limits.submission_seconds * n_phases)
        if not self._send_ctrl({"t": "fork", "limits": limits, "uid": self.uid}, pipes.student_ends):
            pipes.close()
            raise _NotSent("the sandbox stopped responding")
        pipes.handed_over()
        return pipes

    def _limits(self) -> dict[str, Any]:
        lim = asdict(self.limits)
        if lim.get("cell_seconds") is None:
            lim["cell_seconds"] = self.limits.submission_seconds / 2
        return lim

    def _job_frame(self, job: Job, key: bytes) -> dict:
        """The job for the student's process: its cells, the graded names, the runtime watch,
        the limits and the key it signs its frames with."""
        return {
            "t": "job",
            "cells": [valid_utf8(python_source(c)) for c in job.cells],
            "names": list(job.calls),
            "watch": job.watch,
            "limits": self._limits(),
            "key": key.hex(),
            "audit": self.audit_hook,
            "ops0": plan_phases(job)[0][0],
        }

    # ------------------------------------------------------------ public
    def run(self, job: Job) -> RunResult:
        """Run one submission; never raises for anything the student's code does."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Runner is closed")
            t0 = time.monotonic()
            self._ensure_ready()
            n_phases = len(plan_phases(job))  # each runs the cells (worker/phases.py)
            deadline = t0 + self.limits.submission_seconds * n_phases + _WATCHDOG_GRACE
            oom_before = self.cgroup.oom_kills() if self.cgroup is not None else 0
            lost = "the sandbox stopped responding"
            conv = _Conversation(self, job, secrets.token_bytes(32), deadline, _Pipes(self.limits.output_bytes))
            end: dict | None = None
            try:
                try:
                    conv.pipes = self._begin(conv.pipes, n_phases)
                except _NotSent:
                    # the worker had died before taking the job (no student code ran): once more
                    self._stop()
                    self._ensure_ready()
                    conv.pipes = self._begin(_Pipes(self.limits.output_bytes), n_phases)
                conv.send(self._job_frame(job, conv.key))  # if it could not all go, the end tells why
                end = conv.run()
            except _Lost as e:
                lost, end = str(e), None
            except BaseException:
                # interrupted mid-job (KeyboardInterrupt...): the worker may still be talking
                # about this job, so it must not serve the next one
                conv.pipes.close()
                self._stop()
                raise
            conv.pipes.close()
            oom = self.cgroup is not None and self.cgroup.oom_kills() > oom_before
            if end is None:
                # The worker died or hung: restart it; this submission counts as crashed.
                self._stop()
                try:
                    self._start()
                except OSError:
                    pass
                status, why_ended, tail = "crashed", _Ending("lost", lost), ""
            else:
                if end.get("status") == "fatal":
                    self._stop()
                    raise SandboxUnavailable(valid_utf8(end.get("message"))[:2000])
                status, why_ended = _Ending.of(end, conv.bye)
                if conv.child_end is not None:  # a phase's process ended first: that is what happened
                    status, why_ended = _Ending.of_phase(conv.child_end)
                tail = valid_utf8(conv.pipes.tail.text())[-8000:]
            if conv.violations:
                status, why_ended = "review", _Ending("review", "; ".join(conv.violations))
            elif oom and status == "crashed":
                why_ended = _Ending("memory")
            message = self._message(status, why_ended)
            why = {
                "timeout": f"the notebook was stopped after {self.limits.submission_seconds:g} s (timed out)",
                "crashed": "the notebook's process crashed",
                "review": "the submission is held for review",
            }.get(status, "no result came back")
            return RunResult(
                outcomes=_final_outcomes(job, conv, why),
                missing=conv.missing,
                cell_errors=conv.cell_errors,
                reference_access=conv.refs,
                status=status,
                message=message,
                output_tail=tail,
                seconds=time.monotonic() - t0,
                not_own=conv.not_own,
                violations=conv.violations,
            )

    def _message(self, status: str, ending: _Ending) -> str:
        """The sentence for the student about how the notebook's process ended."""
        if status == "ok":
            return ""
        lim = self.limits
        rest = " Calls that had not run yet count as failed."
        kind, detail = ending.kind, ending.detail
        if status == "review":
            return (
                "The grader could not trust or settle what your notebook's runs gave (" + detail + "). Nothing "
                "it sent is graded yet: the submission is held for an instructor to review."
            )
        if status == "timeout":
            spent = " of CPU time" if kind == "cpu" else ""
            return (
                f"Your notebook was stopped after {lim.submission_seconds:g} s{spent}, the time limit for a "
                f"whole submission (an infinite loop, or code that ignores the {lim.call_seconds:g} s limit "
                f"per call?).{rest}"
            )
        if kind == "exit":
            return (
                f"Your notebook's process exited (exit code {detail}) before grading finished "
                f"(os._exit(), or a library that crashed).{rest}"
            )
        if kind == "memory":
            return (
                f"Your notebook was stopped for using more memory than allowed ({lim.memory_mb} MB for all its "
                f"processes together).{rest}"
            )
        if kind == "signal" and detail == "SIGKILL":
            return (
                "Your notebook's process was killed before grading finished, most likely for using too "
                f"much memory (limit {lim.memory_mb} MB) or CPU time.{rest}"
            )
        if kind == "signal":
            return f"Your notebook's process crashed ({detail}) before grading finished.{rest}"
        if kind == "protocol":
            return f"Your notebook's process sent malformed results and was stopped.{rest}"
        return f"Your notebook's process stopped unexpectedly ({detail or 'no details'}).{rest}"

    def close(self) -> None:
        """Stop the worker (also done at interpreter exit and by ``with``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            proc = self._proc
            if proc is not None and proc.poll() is None and self._ready:
                try:
                    self._send_ctrl({"t": "exit"})
                    proc.wait(timeout=2)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._stop()
            self._finalizer.detach()
            Runner._cleanup([None, None, self.cgroup])

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Runner(isolation={self.isolation!r}, slot={self.slot}, limits={self.limits})"


def _final_outcomes(job: Job, conv: _Conversation, why: str) -> dict[str, list[Reply]]:
    """Each graded key's outcomes (the stand-in runs not needed left out), a call that got no
    answer failed with the reason it did not run (``why``: how the job ended, where no reason
    of the function's own applies)."""
    final: dict[str, list[Reply]] = {}
    for key, outs in conv.outcomes.items():
        if key in conv.skipped:
            continue
        n = job.standins.get(key, (key, []))[0]
        final[key] = []
        for o in outs:
            if o is None:
                if n in conv.missing:
                    o = Reply("error", message=f"not run: no function named {n} was defined")
                elif n in conv.not_own:
                    o = Reply("error", message=f"not run: {n} is {conv.not_own[n]}")
                elif n in conv.lost:
                    o = Reply("error", message=f"not run: {n} is held for review (see the note)")
                else:
                    o = Reply("error", message=f"not run: {why}")
            final[key].append(o)
    return final
