"""One job's exchange with the sandbox worker, frame by frame (see
:mod:`course_lib.autograder.sandbox.runner` for the protocol and :mod:`.worker.phases` for the
phases)."""

from __future__ import annotations

import functools
import hmac
import json
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..untrusted_text import operand_message
from .codec import BadResult, Budget, decode_value, encode_arg, encode_call
from .jobs import REPLY_STATUSES, Job, Reply, _clip_str, _Lost, _Pipes, plan_phases
from .worker import protocol

if TYPE_CHECKING:
    from .runner import Runner

_MAX_FORWARDED = 10_000  # stand-in calls answered per submission
_KEEPER_FRAMES = frozenset({"phase", "phase_end", "bye"})  # sent only by the job's keeper process
_DRAIN_SECONDS = 1.0  # after the end packet: for what the student's process wrote before it ended


class _Conversation:
    """One job's exchange with the worker: verifies every frame of the student's process
    (HMAC, sequence, place in the protocol), sends the calls (one function's together), and
    collects what comes back."""

    def __init__(self, runner: Runner, job: Job, key: bytes, deadline: float, pipes: _Pipes):
        self.runner, self.job, self.key, self.deadline, self.pipes = runner, job, key, deadline, pipes
        self.outcomes: dict[str, list[Reply | None]] = {n: [None] * len(cs) for n, cs in job.calls.items()}
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
                _header, blobs, raw = self.frames.pop(0)
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

    def send(self, header: protocol.Header, blobs: Iterable[bytes] = ()) -> bool:
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
    def _wait(self, accept: Callable[[dict], bool | None]) -> dict:
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
            g = self._wait(functools.partial(_has_type, "phase"))
            if g["t"] != "end":
                g = self._wait(functools.partial(_has_type, "cells_done" if i == 0 else "ready"))
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
            if key in self.job.standins and self.job.hook is not None and not self._decide(key):
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
                g = self._wait(functools.partial(self._reply_or_forward, k=k + i, standins=standins))
                if g["t"] == "end":
                    return g["end"]
                self.outcomes[key][i] = self._outcome(g)
            self.k = k + len(calls)
            if sent < len(calls):
                return self._wait(lambda g: False)["end"]
        return None

    def _decide(self, key: str) -> bool:
        """Whether the stand-in run ``key`` is needed, as the job's hook says from the replies so far."""
        assert self.job.hook is not None
        try:
            return bool(self.job.hook.needed(key, self.outcomes))
        except Exception:  # noqa: BLE001 - a failed decision runs the stand-in (it can only help)
            return True

    def _reply_or_forward(self, g: dict, k: int, standins: list[str]) -> bool | None:
        """True for the reply to call ``k``. A stand-in's call (``ref_call``) made while this call
        runs, for one of ``standins``, is answered here by the job's hook (the reference, run in
        the grading process: its code never enters the student's process), within the time left
        for stand-ins; one made at any other time, or for another function, is a violation."""
        if g.get("t") == "reply" and g.get("id") == k:
            return True
        if g.get("t") != "ref_call":
            return False
        name = g.get("fn")
        hook = self.job.hook
        if name not in standins or hook is None or not hook.stands_in(name) or self.forwarded >= _MAX_FORWARDED:
            self._violation("a call forwarded to the grader outside the stand-in it was allowed for")
            return None
        self.forwarded += 1
        try:
            args, pairs = decode_value(g.get("value"), g["_blobs"], self.budget, tags=protocol.ARG_TAGS)
            kwargs = {str(k): v for k, v in pairs}
            t0 = time.monotonic()
            out = hook.forward(name, tuple(args), kwargs, self._standin_seconds())
            self.standin_spent += time.monotonic() - t0
        except (BadResult, TypeError, ValueError) as e:
            out = Reply("error", message=f"its arguments could not be read ({_clip_str(str(e), 200)})")
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

    def _outcome(self, g: dict) -> Reply:
        seen = [_clip_str(s, 120) for s in g.get("seen", [])][:20] if isinstance(g.get("seen"), list) else []
        status = g.get("status")
        if status not in REPLY_STATUSES:
            return Reply("bad_type", message="returned a value that cannot be read", seen=seen)
        largest = g.get("largest")
        largest = largest if type(largest) is int and largest >= 0 else 0
        if status != "ok":
            message = _clip_str(g.get("msg"))
            if status == "error":  # the shapes and dtypes of the failing line's tensors, from the worker
                message += operand_message(g.get("operands"))
            return Reply(status, message=message, seen=seen)
        try:
            value = decode_value(g.get("value"), g["_blobs"], self.budget)
        except BadResult as e:
            return Reply("bad_type", message=str(e), seen=seen)
        except (ValueError, TypeError, OverflowError, MemoryError, RuntimeError) as e:
            return Reply("bad_type", message=f"returned a value that cannot be read ({type(e).__name__})", seen=seen)
        return Reply("ok", value=value, seen=seen, largest=largest, changed=_paths(g.get("changed")))


def _paths(v: Any) -> list[tuple[int | str, ...]]:
    """The arguments a call changed in place (``changed`` of a reply), each a position or a
    keyword, then indices: what does not have that form is dropped (it came from the student's
    side)."""
    if not isinstance(v, list):
        return []
    paths: list[tuple[int | str, ...]] = []
    for p in v[:20]:
        if not isinstance(p, list) or not 1 <= len(p) <= protocol.MAX_DEPTH + 1:
            continue
        head, rest = p[0], p[1:]
        ok_head = (type(head) is int and 0 <= head < 1000) or (
            type(head) is str and len(head) <= 100 and head.isidentifier()
        )
        if ok_head and all(type(i) is int and 0 <= i <= protocol.MAX_ITEMS for i in rest):
            paths.append(tuple(p))
    return paths


def _has_type(t: str, g: dict) -> bool:
    """Whether frame ``g`` is of type ``t`` (what :meth:`_Conversation._wait` waits for)."""
    return g.get("t") == t


@dataclass(frozen=True)
class _Ending:
    """How a job's student process ended, from the zygote's end packet (see
    :mod:`.worker.zygote`): ``kind`` is ``"exit"`` (``detail``: the exit code), ``"signal"``
    (its name), ``"memory"``, ``"timeout"`` (the job's wall clock), ``"cpu"`` (a phase's CPU
    time), ``"review"``, ``"lost"`` (the worker died or hung), or another
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
    def of_phase(end: dict) -> tuple[str, _Ending]:
        """The run's status and the ending, from the ``phase_end`` of a phase's process that
        ended before its work was done: a timeout when its CPU time limit stopped it."""
        if end.get("cpu_out") is True:
            return "timeout", _Ending("cpu")
        return "crashed", _Ending.of_code(end.get("code"))

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
