"""A sandbox job: its limits, its calls, what it gave, its phases, and the pipes it talks over
(see :mod:`course_lib.autograder.sandbox.runner`).

The sandbox knows no rubric: a job's calls are plain arguments (:class:`Arguments`), what comes
back is a :class:`Reply` each, and whether a stand-in run is needed and what a stand-in's call
answers are asked of the job's :class:`StandIns` hook, which the autograder supplies
(:mod:`course_lib.autograder.sandbox_adapter`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..untrusted_text import student_message
from .worker import protocol

__all__ = [
    "Arguments",
    "CALL_SECONDS",
    "Reply",
    "REPLY_STATUSES",
    "StandIns",
    "WatchLists",
    "Limits",
    "Job",
    "RunResult",
    "SandboxUnavailable",
    "plan_phases",
]

#: Seconds one call of a student's function may take (the grading checks' own limit,
#: :data:`course_lib.grading.run.CALL_TIME_LIMIT`; tests/autograder/test_sandbox.py holds them equal).
CALL_SECONDS = 10.0

#: What a call can come to (the grading checks' outcome statuses, held equal by a test).
REPLY_STATUSES: tuple[str, ...] = ("ok", "not_implemented", "error", "timeout", "bad_type")


class Arguments(Protocol):
    """One call's arguments, plain data only (tensors, numbers, strings, ``None`` and tuples
    of those); :class:`course_lib.grading.model.Call` is one."""

    @property
    def args(self) -> tuple: ...

    @property
    def kwargs(self) -> dict: ...


@dataclass(frozen=True)
class Reply:
    """What one call gave: ``status`` (one of :data:`REPLY_STATUSES`), ``value`` (plain data
    when ``"ok"``), ``message``, ``seen`` (forbidden torch calls that ran, as the runtime layer
    named them), ``largest`` (elements of the largest new float tensor, when measured) and
    ``changed`` (the arguments whose tensors the call changed in place, each as its position or
    keyword, then indices into tuples and lists: a fact, which the grader may judge)."""

    status: str
    value: Any = None
    message: str = ""
    seen: list[str] = field(default_factory=list)
    largest: int = 0
    changed: list[tuple[int | str, ...]] = field(default_factory=list)


class StandIns(Protocol):
    """The autograder's hook for a job's stand-in runs (see :attr:`Job.standins`): the sandbox
    holds no reference function and judges nothing itself."""

    def needed(self, key: str, replies: Mapping[str, Sequence[Reply | None]]) -> bool:
        """Whether to make the stand-in run ``key``, given the replies so far (None: not yet)."""
        ...

    def stands_in(self, name: str) -> bool:
        """Whether the hook answers calls of the graded function ``name``."""
        ...

    def forward(self, name: str, args: tuple, kwargs: dict[str, Any], seconds: float) -> Reply:
        """The reply to a stand-in's call of ``name``, made in the grading process within
        ``seconds``; never raises for anything in the arguments."""
        ...


@dataclass(frozen=True)
class WatchLists:
    """What the warm worker prepares for the runtime layer: the source file of the operator
    watch it loads (``opwatch``: standard library and torch only), the torch functions
    (dotted paths) it resolves and the aten operators whose kernels it wraps, once, so that
    no job pays for it; and the source file of the words for a failing line's operands that
    it loads too (``operands``: standard library only; a reply's ``operands``). The
    autograder computes them from the rules (``watch_lists``)."""

    opwatch: Path
    operands: Path
    functions: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be had here, or the sandbox cannot start."""


@dataclass
class Limits:
    """Resource limits of one submission (see the module docstring)."""

    call_seconds: float = CALL_SECONDS  # one call of a student function (CPU time; wall-clock backstop 5x)
    submission_seconds: float = 60.0  # whole submission (cells + all calls), wall clock
    memory_mb: int = 1024  # all the submission's processes together (cgroup), and each (rlimit)
    processes: int = 32  # max processes/threads for the sandboxed uid
    output_bytes: int = 1_000_000  # stdout+stderr kept / file size limit
    scratch_mb: int = 64  # size of the writable scratch tmpfs
    cell_seconds: float | None = None  # one cell, wall clock; None: half the submission limit

    def __post_init__(self) -> None:
        cell = self.cell_seconds
        if cell is not None and (
            isinstance(cell, bool) or not isinstance(cell, int | float) or not 0 < cell < math.inf
        ):
            raise ValueError(
                f"cell_seconds must be a finite number of seconds > 0 (or None: half of submission_seconds), "
                f"got {cell!r}"
            )


@dataclass
class Job:
    """One submission: its code cells (in order; an empty string is a cell not to run), the
    calls to make afterwards, and per function what the runtime layer watches
    (:meth:`course_lib.grading.exercise_spec.Exercise.watch`)."""

    cells: list[str]
    calls: dict[str, list[Arguments]]
    watch: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: run key -> (the function to call, the graded callees whose calls are forwarded to
    #: ``hook`` while it runs): a second run of a function, made after every function's own
    #: calls, only when ``hook.needed`` says so given the replies so far
    standins: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    hook: StandIns | None = None


@dataclass
class RunResult:
    """What running one submission gave. ``outcomes`` has the keys and lengths of ``Job.calls``
    (less the stand-in runs not needed); an ``ok`` reply's value is plain data (tensors,
    numbers, tuples) rebuilt from arrays, and its ``seen`` lists forbidden torch calls that ran."""

    outcomes: dict[str, list[Reply]]
    missing: list[str]
    cell_errors: list[str]
    reference_access: list[str]
    status: str  # "ok" | "timeout" | "crashed" | "review"
    message: str  # for the student when status != "ok"
    output_tail: str
    seconds: float
    not_own: dict[str, str] = field(default_factory=dict)  # graded name -> what it is instead of a function
    violations: list[str] = field(default_factory=list)  # why the channel was not trusted


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


def _clip_str(v: Any, limit: int = 500) -> str:
    """A string that came out of the sandbox, made safe to keep (see :mod:`course_lib.autograder.untrusted_text`)."""
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
