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

import hmac
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from ...grading.core import CALL_TIME_LIMIT, OUTCOME_STATUSES, Call, Outcome
from ..notebook import python_source
from ..text import student_message, valid_utf8
from . import isolation as iso
from .bounded import bounded_call
from .cgroup import MemoryCgroup
from .codec import BadResult, Budget, decode_value, encode_arg, encode_call
from .worker import protocol
from .worker.zygote import recv_packet, send_packet

__all__ = ["Limits", "Job", "RunResult", "Runner", "SandboxUnavailable"]

BASE_UID = 60000
_READY_SECONDS = 180.0  # a cold start imports torch; a loaded machine can be slow
_MAX_FORWARDED = 10_000  # stand-in calls answered per submission
_STANDIN_BYTES = 512 << 20  # the memory one stand-in call may add to the grading process
_WATCHDOG_GRACE = 30.0  # the zygote enforces the limit; this only catches a stuck worker
_CGROUP_HEADROOM = 128 << 20  # the copy-on-write pages of a fork
_KEEPER_FRAMES = frozenset({"phase", "phase_end", "bye"})  # sent only by the job's keeper process
_DRAIN_SECONDS = 1.0  # after the end packet: for what the student's process wrote before it ended


def plan_phases(job: Job) -> list[tuple[list[str], list[str]]]:
    """The job's phases (:mod:`.worker.phases`): (the aten operators refused, the run keys
    answered), in order. The functions are grouped by the operators they forbid, each group in
    a process of its own that runs the cells; those that forbid none come first (phase 0 then
    refuses nothing), and phase 0 is the one whose cells are reported. Own runs come before the stand-in runs
    (whose need is decided from the own runs' outcomes), and the group the first stand-in run
    shares comes last among the own runs, so that the two merge."""

    def ops(key: str) -> tuple[str, ...]:
        name = job.standins.get(key, (key, []))[0]
        return tuple(sorted(set(job.watch.get(name, {}).get("ops", []))))

    own = [k for k in job.calls if k not in job.standins]
    later = [k for k in job.calls if k in job.standins]
    groups: dict[tuple[str, ...], list[str]] = {(): []}
    for key in own:
        groups.setdefault(ops(key), []).append(key)
    order = list(groups)
    if later and ops(later[0]) in order[1:]:
        order.remove(ops(later[0]))
        order.append(ops(later[0]))
    phases = [(list(group), groups[group]) for group in order]
    for key in later:
        if phases[-1][0] == list(ops(key)):
            phases[-1][1].append(key)
        else:
            phases.append((list(ops(key)), [key]))
    if not phases[0][1] and len(phases) > 1:
        phases.pop(0)  # no function forbids nothing: the first group's phase reports the cells
    return phases


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be had here, or the sandbox cannot start."""


@dataclass
class Limits:
    """Resource limits of one submission (see the module docstring)."""

    call_seconds: float = CALL_TIME_LIMIT  # one call of a student function (CPU time; wall-clock backstop 5x)
    submission_seconds: float = 60.0  # whole submission (cells + all calls), wall clock
    memory_mb: int = 1024  # all the submission's processes together (cgroup), and each (rlimit)
    processes: int = 32  # max processes/threads for the sandboxed uid
    output_bytes: int = 1_000_000  # stdout+stderr kept / file size limit
    scratch_mb: int = 64  # size of the writable scratch tmpfs
    cell_seconds: float | None = None  # one cell, wall clock; None: half the submission limit


@dataclass
class Job:
    """One submission: its code cells (in order; an empty string is a cell not to run), the
    calls to make afterwards, and per function what the runtime layer watches
    (:meth:`course_lib.grading.core.Exercise.watch`)."""

    cells: list[str]
    calls: dict[str, list[Call]]
    watch: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: run key -> (the function to call, the graded callees whose calls are forwarded to the
    #: grader's ``references`` while it runs): a second run of a function, made after every
    #: function's own calls, only when ``when[key]`` says so given the outcomes so far
    standins: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    references: dict[str, Callable[..., Any]] = field(default_factory=dict)
    when: dict[str, Callable[[dict[str, list[Outcome | None]]], bool]] = field(default_factory=dict)


@dataclass
class RunResult:
    """What running one submission gave. ``outcomes`` has the keys and lengths of ``Job.calls``;
    an ``ok`` outcome's value is plain data (tensors, numbers, tuples) rebuilt from arrays, and
    its ``seen`` lists forbidden torch calls that ran."""

    outcomes: dict[str, list[Outcome]]
    missing: list[str]
    cell_errors: list[str]
    reference_access: list[str]
    status: str  # "ok" | "timeout" | "crashed" | "review"
    message: str  # for the student when status != "ok"
    output_tail: str
    seconds: float
    not_own: dict[str, str] = field(default_factory=dict)  # graded name -> what it is instead of a function
    violations: list[str] = field(default_factory=list)  # why the channel was not trusted


def _clip_str(v: Any, limit: int = 500) -> str:
    """A string that came out of the sandbox, made safe to keep (see :mod:`course_lib.autograder.text`)."""
    return student_message(v, limit) if isinstance(v, str) else ""


class _Lost(Exception):
    """The worker died, hung or broke the protocol during a job."""


class _NotSent(_Lost):
    """The job could not be handed to the worker."""


class _Tail:
    """The first ``cap`` bytes printed are kept; the last TAIL_BYTES of those are reported."""

    def __init__(self, cap: int):
        self.cap = cap
        self.total = 0
        self.buf = bytearray()

    def add(self, data: bytes) -> None:
        room = self.cap - self.total
        if room > 0:
            self.buf += data[:room]
            if len(self.buf) > 2 * protocol.TAIL_BYTES:
                del self.buf[: -protocol.TAIL_BYTES]
        self.total += len(data)

    def text(self) -> str:
        s = bytes(self.buf[-protocol.TAIL_BYTES :]).decode("utf-8", "replace")
        if self.total > self.cap:
            s += f"\n[output truncated: {self.total:,} bytes printed, only the first {self.cap:,} kept]"
        return s


class _Pipes:
    """One job's three pipes: requests (grader -> student), results (student -> grader) and
    the student's output. The student's ends go to the zygote with the fork request."""

    def __init__(self, output_bytes: int):
        self.req_r, self.req_w = os.pipe()
        self.res_r, self.res_w = os.pipe()
        self.out_r, self.out_w = os.pipe()
        os.set_blocking(self.req_w, False)
        self.student_ends: list[int] = [self.req_r, self.res_w, self.out_w]
        self.reading = {self.res_r, self.out_r}  # not at the end yet
        self.results = protocol.FrameReader()  # the student's frames: an untrusted stream, capped
        self.broken = False  # the results stream broke the framing: nothing more is read from it
        self.tail = _Tail(output_bytes)

    def handed_over(self) -> None:
        for fd in self.student_ends:
            os.close(fd)
        self.student_ends = []

    def read(self, fd: int) -> None:
        data = os.read(fd, 1 << 20)
        if not data:
            self.reading.discard(fd)
        elif fd == self.out_r:
            self.tail.add(data)
        elif not self.broken:
            try:
                self.results.feed(data)
            except protocol.ProtocolError:
                self.broken = True

    def close(self) -> None:
        """Close the grader's ends (once: a descriptor number closed twice could be another
        thread's by then)."""
        fds, self.student_ends = (self.req_w, self.res_r, self.out_r, *self.student_ends), []
        self.req_w = self.res_r = self.out_r = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


# --------------------------------------------------------------------------- one conversation


class _Conversation:
    """One job's exchange with the worker: verifies every frame of the student's process
    (HMAC, sequence, place in the protocol), sends the calls (one function's together), and
    collects what comes back."""

    def __init__(self, runner: Runner, job: Job, key: bytes, deadline: float, pipes: _Pipes):
        self.runner, self.job, self.key, self.deadline, self.pipes = runner, job, key, deadline, pipes
        self.outcomes: dict[str, list[Outcome | None]] = {n: [None] * len(cs) for n, cs in job.calls.items()}
        self.missing: list[str] = []
        self.not_own: dict[str, str] = {}
        self.cell_errors: list[str] = []
        self.refs: list[str] = []
        self.violations: list[str] = []
        self.p_key, self.p_seq = key, 0  # the keeper's frames (worker/phases.py)
        self.c_key: bytes | None = None  # the current phase's process's frames
        self.c_seq = 0
        self.k = 0  # the next call's id
        self.phases = plan_phases(job)
        self.child_end: dict | None = None  # how a phase's process ended, when not cleanly
        self.lost: set[str] = set()  # functions held for review: the runs of the cells disagree
        self.refused0 = False  # whether phase 0's cells called a refused operator
        self.standin_spent = 0.0  # seconds of stand-in reference calls so far
        self.budget = Budget()
        self.cells_done = False
        self.bye = False
        self.aborted = False
        self.skipped: set[str] = set()  # stand-in runs not needed
        self.forwarded = 0  # stand-in calls answered
        self.frames: list[tuple[protocol.Header, list[bytes], bytes]] = []  # read, not yet taken
        self.end: dict | None = None  # the zygote's end packet, once it came
        self.drain_until = 0.0

    # ---------------------------------------------------------------- frames
    def _next(self) -> dict:
        """The next frame of the student's process (verified), or, once everything it wrote
        before it ended is read, the zygote's end packet (``{"t": "end", "end": {...}}``)."""
        while True:
            if self.frames:
                header, blobs, raw = self.frames.pop(0)
                if self.aborted:
                    continue
                g = self._verify(raw, blobs)
                if g is not None:
                    g["_blobs"] = blobs[:-1]
                    return g
                continue
            if not self.pipes.broken:
                try:
                    self.frames = self.pipes.results.frames()
                except protocol.ProtocolError:
                    self.pipes.broken = True
            if self.pipes.broken:  # only student code writes bytes that break the framing
                self._violation("malformed data on the grader's channel")
            if self.frames:
                continue
            if self.end is not None and (
                self.pipes.res_r not in self.pipes.reading or time.monotonic() > self.drain_until
            ):
                return {"t": "end", "end": self.end}
            self._pump(self.drain_until if self.end is not None else self.deadline)

    def _pump(self, until: float, write: memoryview | None = None) -> int:
        """Wait for the results and output pipes and the control socket until ``until``, and
        read what came; with ``write``, also write the start of it to the requests pipe (the
        bytes written are returned). Raises _Lost when the worker is gone or past the deadline."""
        left = until - time.monotonic()
        if left <= 0:
            if self.end is not None:
                self.drain_until = 0.0
                return 0
            raise _Lost("the sandbox stopped responding")
        ctrl = self.runner._ctrl_fd()
        watch = [*self.pipes.reading, *([ctrl] if self.end is None else [])]
        ready, writable, _ = select.select(watch, [self.pipes.req_w] if write is not None else [], [], left)
        for fd in ready:
            if fd == ctrl:
                got = self.runner._recv()
                if got is None:
                    raise _Lost("the sandbox stopped responding")
                if got.get("t") == "end":
                    self.end = got
                    self.drain_until = time.monotonic() + _DRAIN_SECONDS
            else:
                self.pipes.read(fd)
        if writable and write is not None:
            try:
                return os.write(self.pipes.req_w, write[: 1 << 16])
            except BlockingIOError:
                return 0
        return 0

    def send(self, header: protocol.Header, blobs=()) -> bool:
        """One frame to the student's process (False once it cannot take it: it ended)."""
        view = memoryview(protocol.encode_frame(header, blobs))
        while view:
            if self.end is not None:
                return False
            try:
                view = view[self._pump(self.deadline, view) :]
            except BrokenPipeError:
                return False
        return True

    def _verify(self, raw: bytes, blobs: list[bytes]) -> dict | None:
        """A frame's header if it is the keeper's (under its current key, in its sequence, of
        a kind only it sends) or the current phase process's; else a violation (None)."""
        if not blobs or len(blobs[-1]) != protocol.MAC_BYTES:
            return self._violation("a frame without the grader's signature (written by the notebook's code?)")
        who = None
        for name, key in (("keeper", self.p_key), ("child", self.c_key)):
            if key is not None and hmac.compare_digest(protocol.frame_mac(key, raw, blobs[:-1]), blobs[-1]):
                who = name
                break
        if who is None:
            return self._violation("a frame the grader's harness did not write (forged by the notebook's code?)")
        try:
            header = json.loads(raw)
        except ValueError:
            return self._violation("a frame that is not valid JSON")
        if not isinstance(header, dict) or header.get("seq") != (self.p_seq if who == "keeper" else self.c_seq):
            return self._violation("a frame out of sequence (replayed or forged)")
        if (who == "keeper") != (header.get("t") in _KEEPER_FRAMES):
            return self._violation(f"a {str(header.get('t'))[:30]!r} frame from the wrong process")
        if who == "keeper":
            self.p_seq += 1
            if header["t"] == "phase":
                try:
                    self.c_key, self.c_seq = bytes.fromhex(header["key"]), 0
                    self.p_key = bytes.fromhex(header["end_key"])
                except (KeyError, TypeError, ValueError):
                    return self._violation("a phase announced without its keys")
        else:
            self.c_seq += 1
        return header

    def _violation(self, why: str) -> dict | None:
        """Record why the channel is not trusted, and stop the job (once); always None."""
        if why not in self.violations:
            self.violations.append(why)
        if not self.aborted:
            self.aborted = True
            self.runner._send_ctrl({"t": "abort"})
        return None

    def _event(self, g: dict) -> bool:
        """Handle an event frame (allowed in its phase); False if it is not one."""
        t = g.get("t")
        if t == "tamper":
            self._violation(f"the notebook's code tried {_clip_str(g.get('what'), 200)} (refused)")
            return True
        if t == "cell_error" and not self.cells_done:
            if len(self.cell_errors) < 1000:
                self.cell_errors.append(_clip_str(g.get("msg")))
            return True
        if t == "ref" and not self.bye:
            name = _clip_str(g.get("name"), 200)
            entry = (
                f"course_lib object {name} modified"
                if g.get("kind") == "modified"
                else f"reference implementation {name} accessed"
            )
            if name and entry not in self.refs and len(self.refs) < 100:
                self.refs.append(entry)
            return True
        return False

    # ---------------------------------------------------------------- phases
    def _wait(self, accept) -> dict:
        """Frames until one that ``accept`` takes, or the zygote's end packet (returned).
        Events are handled on the way; anything else is a violation."""
        while True:
            g = self._next()
            if g["t"] == "end":
                return g
            taken = accept(g)
            if taken:
                return g
            if g["t"] == "phase_end":  # the phase's process ended before its work was done
                self.child_end = g
                if not self.aborted:
                    self.send({"t": "finish"})  # the keeper reads what is left, then ends
                while g["t"] != "end":
                    g = self._next()
                return g
            if taken is None:
                continue  # handled by ``accept`` on the way (a stand-in's call)
            if not self._event(g):
                self._violation(
                    f"an unexpected {str(g.get('t'))[:30]!r} frame "
                    + ("after the calls" if self.bye else "while waiting for the harness")
                )

    def run(self) -> dict:
        """Talk the job through, phase by phase (see :mod:`.worker.phases`); returns the
        zygote's end packet."""
        for i, (ops, keys) in enumerate(self.phases):
            if i > 0 and (self.aborted or not self.send({"t": "phase", "ops": ops})):
                break
            g = self._wait(lambda g: g.get("t") == "phase")
            if g["t"] != "end":
                g = self._wait(lambda g, i=i: g.get("t") == ("cells_done" if i == 0 else "ready"))
            if g["t"] == "end":
                return g["end"]
            if i == 0:
                self._cells_done(g)
            self._ready(g, ops, keys)
            end = self._serve(keys)
            if end is not None:
                return end
            if self.aborted or not self.send({"t": "end_phase"}):
                break
            g = self._wait(lambda g: g.get("t") == "phase_end")
            if g["t"] == "end":
                return g["end"]
            if g.get("code") != 0:
                self.child_end = g
                break
        else:
            if not self.aborted and self.send({"t": "finish"}):
                g = self._wait(lambda g: g.get("t") == "bye")
                if g["t"] == "end":
                    return g["end"]
                self.bye = True
        return self._wait(lambda g: False)["end"]

    def _cells_done(self, g: dict) -> None:
        self.cells_done = True
        self.refused0 = g.get("refused") not in (0, None)
        self.missing = [n for n in g.get("missing", []) if n in self.outcomes][:100]
        own = g.get("not_own", {})
        if isinstance(own, dict):
            self.not_own = {n: _clip_str(v, 200) for n, v in own.items() if n in self.outcomes}

    def _ready(self, g: dict, ops: list[str], keys: list[str]) -> None:
        """Whether the phase's functions exist, from its own run of the cells. A run in which no
        refused operator was called is the notebook as written. One in which one was may have
        stopped a cell before a ``def`` (an honest cell that compares with torch's function
        first): a function it did not define is held for review, not scored 0; so is one that
        two runs as written disagree on."""
        gone, own = g.get("missing", []), g.get("not_own", {})
        gone = gone if isinstance(gone, list) else []
        own = own if isinstance(own, dict) else {}
        refused = g.get("refused") not in (0, None)
        for key in keys:
            name = self.job.standins.get(key, (key, []))[0]
            if name in self.lost:
                continue
            here, before = name in gone or name in own, name in self.missing or name in self.not_own
            if here and before and not self.refused0:
                continue  # missing in the notebook as written: reported as such
            self.missing = [n for n in self.missing if n != name]  # defined, or decided below
            self.not_own.pop(name, None)
            if not here:
                continue
            if refused or not before:
                self.lost.add(name)
                self.violations.append(
                    f"{name} was not defined when the cells ran with the operators it may not use refused "
                    f"({', '.join(ops[:3])}...), and a cell called one of them: does a cell that defines it "
                    "call one first?"
                    if refused
                    else f"{name} was defined in one run of the notebook's cells and not in another"
                )
            elif name in own:  # this run is the notebook as written (phase 0's was not)
                self.not_own[name] = _clip_str(own[name], 200)
            else:
                self.missing.append(name)

    def _serve(self, keys: list[str]) -> dict | None:
        """The calls of ``keys`` (one function's together); the end packet if the process ended."""
        for key in keys:
            calls = self.job.calls[key]
            name, standins = self.job.standins.get(key, (key, []))
            if name in self.missing or name in self.not_own or name in self.lost:
                continue
            if key in self.job.when and not self._decide(key):
                self.skipped.add(key)
                continue
            # All of this function's calls go out together: the student's process answers them
            # in order without waiting on this process between them. The next function's are
            # sent only after these replies (whether its stand-in run is made depends on them).
            k, sent = self.k, 0
            for i, call in enumerate(calls):
                header, blobs = encode_call(k + i, name, call)
                if standins:
                    header["standins"] = list(standins)
                if self.aborted or not self.send(header, blobs):
                    break  # it ended (or tampered): what it answered before still counts
                sent += 1
            for i in range(sent):
                g = self._wait(lambda g, k=k + i, s=standins: self._reply_or_forward(g, k, s))
                if g["t"] == "end":
                    return g["end"]
                self.outcomes[key][i] = self._outcome(g)
            self.k = k + len(calls)
            if sent < len(calls):
                return self._wait(lambda g: False)["end"]
        return None

    def _decide(self, key: str) -> bool:
        try:
            return bool(self.job.when[key](self.outcomes))
        except Exception:  # noqa: BLE001 - a failed decision runs the stand-in (it can only help)
            return True

    def _reply_or_forward(self, g: dict, k: int, standins: list[str]) -> bool | None:
        """True for the reply to call ``k``. A stand-in's call (``ref_call``) made while this call
        runs, for one of ``standins``, is answered here by the reference, in the grading process
        (the reference's code never enters the student's process); one made at any other time,
        or for another function, is a violation."""
        if g.get("t") == "reply" and g.get("id") == k:
            return True
        if g.get("t") != "ref_call":
            return False
        name = g.get("fn")
        if name not in standins or name not in self.job.references or self.forwarded >= _MAX_FORWARDED:
            self._violation("a call forwarded to the grader outside the stand-in it was allowed for")
            return None
        self.forwarded += 1
        try:
            args, pairs = decode_value(g.get("value"), g["_blobs"], self.budget, tags=protocol.ARG_TAGS)
            kwargs = {str(k): v for k, v in pairs}
            t0 = time.monotonic()
            out = bounded_call(
                self.job.references[name], Call(tuple(args), kwargs), _STANDIN_BYTES, self._standin_seconds()
            )
            self.standin_spent += time.monotonic() - t0
        except (BadResult, TypeError, ValueError) as e:
            out = Outcome("error", message=f"its arguments could not be read ({_clip_str(str(e), 200)})")
        reply: dict[str, Any] = {"t": "ref_reply", "status": out.status, "msg": out.message}
        blobs: list[bytes] = []
        if out.status == "ok":
            reply["value"] = encode_arg(out.value, blobs)
        self.send(reply, blobs)
        return None

    def _standin_seconds(self) -> float:
        """A stand-in call's time: a student's call's own limit, within what is left of the
        submission's time for all of them together (a call past it is answered with an error)."""
        call = self.runner.limits.call_seconds * protocol.CALL_WALL_FACTOR
        return max(0.0, min(call, self.runner.limits.submission_seconds - self.standin_spent))

    def _outcome(self, g: dict) -> Outcome:
        seen = [_clip_str(s, 120) for s in g.get("seen", [])][:20] if isinstance(g.get("seen"), list) else []
        status = g.get("status")
        if status not in OUTCOME_STATUSES:
            return Outcome("bad_type", message="returned a value that cannot be read", seen=seen)
        largest = g.get("largest")
        largest = largest if type(largest) is int and largest >= 0 else 0
        if status != "ok":
            return Outcome(status, message=_clip_str(g.get("msg")), seen=seen)
        try:
            value = decode_value(g.get("value"), g["_blobs"], self.budget)
        except BadResult as e:
            return Outcome("bad_type", message=str(e), seen=seen)
        except (ValueError, TypeError, OverflowError, MemoryError, RuntimeError) as e:
            return Outcome("bad_type", message=f"returned a value that cannot be read ({type(e).__name__})", seen=seen)
        return Outcome("ok", value=value, seen=seen, largest=largest)


@dataclass(frozen=True)
class _Ending:
    """How a job's student process ended, from the zygote's end packet (see
    :mod:`.worker.zygote`): ``kind`` is ``"exit"`` (``detail``: the exit code), ``"signal"``
    (its name), ``"memory"``, ``"review"``, ``"lost"`` (the worker died or hung), or another
    reason of the zygote's, with ``detail`` in words."""

    kind: str
    detail: str = ""

    @staticmethod
    def of_code(code: Any) -> _Ending:
        """How a phase's process ended, from its exit status as the keeper saw it."""
        if type(code) is not int:
            return _Ending("protocol")
        if code >= 0:
            return _Ending("exit", str(code))
        try:
            return _Ending("signal", signal.Signals(-code).name)
        except ValueError:
            return _Ending("signal", str(-code))

    @staticmethod
    def of(end: dict, bye: bool) -> tuple[str, _Ending]:
        """The run's status and the ending, from an end packet (``bye``: the calls all ended)."""
        status = end.get("status")
        if status == "exited":
            code, sig = end.get("exit_code"), end.get("signal")
            if type(code) is int:
                return ("ok" if bye and code == 0 else "crashed"), _Ending("exit", str(code))
            if isinstance(sig, str):
                return "crashed", _Ending("signal", _clip_str(sig, 40))
            return "crashed", _Ending("other", _clip_str(end.get("message"), 2000))
        if status == "timeout":
            return "timeout", _Ending("timeout")
        if status == "crashed":
            reason = end.get("reason")
            kind = reason if reason == "memory" else "other"
            return "crashed", _Ending(kind, _clip_str(end.get("message"), 2000))
        return "crashed", _Ending("protocol")


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
    """

    def __init__(
        self,
        mode: str = "auto",
        limits: Limits | None = None,
        slot: int = 0,
        hide: list[str] | None = None,
        isolation: str | None = None,
    ):
        if mode not in ("auto", "required", "off"):
            raise ValueError(f"sandbox mode must be 'auto', 'required' or 'off', not {mode!r}")
        self.limits = limits if limits is not None else Limits()
        self.slot = int(slot)
        if not 0 <= self.slot < 5000:
            raise ValueError("slot must be between 0 and 4999")
        self.uid = BASE_UID + self.slot
        self.hide = [str(h) for h in (hide or [])]
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
        cmd, env, tmp = iso.command(self.isolation, self.hide)
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
                    status, why_ended = "crashed", _Ending.of_code(conv.child_end.get("code"))
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
            final: dict[str, list[Outcome]] = {}
            for key, outs in conv.outcomes.items():
                if key in conv.skipped:
                    continue
                n = job.standins.get(key, (key, []))[0]
                final[key] = []
                for o in outs:
                    if o is None:
                        if n in conv.missing:
                            o = Outcome("error", message=f"not run: no function named {n} was defined")
                        elif n in conv.not_own:
                            o = Outcome("error", message=f"not run: {n} is {conv.not_own[n]}")
                        elif n in conv.lost:
                            o = Outcome("error", message=f"not run: {n} is held for review (see the note)")
                        else:
                            o = Outcome("error", message=f"not run: {why}")
                    final[key].append(o)
            return RunResult(
                outcomes=final,
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
            return (
                f"Your notebook was stopped after {lim.submission_seconds:g} s, the time limit for a whole "
                f"submission (an infinite loop, or code that ignores the {lim.call_seconds:g} s limit per "
                f"call?).{rest}"
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

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Runner(isolation={self.isolation!r}, slot={self.slot}, limits={self.limits})"
