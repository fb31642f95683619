"""The zygote (the warm worker) and the supervisor of each job.

Processes, for one submission::

    grader --(pipes)--> zygote --fork--> supervisor --unshare(CLONE_NEWPID); fork--> student
                        (warm: torch     (one per job: reads     (PID 1 of a new PID namespace;
                        imported; never  the job, relays the     own mount, IPC, UTS, network
                        sees job data)   student's frames,       namespaces; scratch tmpfs, new
                                         enforces the wall-      /proc, rlimits, unprivileged uid,
                                         clock limit)            no_new_privs, seccomp; runs the
                                                                 cells, then answers calls)

The supervisor's last frame for a job is its *end frame*: ``{"t": "end", "status":
"exited"|"timeout"|"crashed"|"fatal", ...}`` with, for ``exited``, ``exit_code`` or
``signal`` (how the student's process ended), for ``crashed``, ``reason`` (one of
:data:`REASONS`) and ``message``, for ``fatal`` (the jail could not be set up, before any
student code ran), ``message``; always ``tail`` (the end of what was printed), ``printed``
and ``seconds``.
"""

from __future__ import annotations

import io
import os
import select
import signal
import sys
import time
import traceback
import types
from collections.abc import Iterable
from typing import Any

from . import syscalls as sc
from .protocol import (
    SETUP_FD,
    TAIL_BYTES,
    FrameReader,
    Header,
    ProtocolError,
    encode_frame,
    read_frame_blocking,
    write_all,
)
from .student import load_opwatch, run_student

#: Why the supervisor stopped a job's student process (an end frame's ``reason``).
REASONS = ("timeout", "memory", "protocol", "grader_gone", "aborted", "no_process")


class Zygote:
    """The warm process: torch imported once, forks one :class:`Supervisor` per job.

    It only ever reads bare ``fork`` (and ``exit``) frames from the grader; the job itself is
    read by the forked supervisor, so the zygote, which every later job is forked from, never
    holds a byte of any submission: a job that scans its own memory finds nothing of the
    student graded before it.
    """

    def __init__(self, isolation: str, in_fd: int, out_fd: int, watch_module: types.ModuleType):
        self.isolation = isolation
        self.isolated = isolation in ("bubblewrap", "namespaces")
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.watch_module = watch_module  # loaded and warmed once, before any job

    def send(self, header: Header, blobs: Iterable[bytes] = ()) -> None:
        write_all(self.out_fd, encode_frame(header, blobs))

    def serve(self) -> None:
        """Fork a supervisor per ``fork`` request, until ``exit`` or the end of the stream."""
        while True:
            try:
                header, _ = read_frame_blocking(self.in_fd)
            except EOFError:
                return
            t = header.get("t")
            if t == "exit":
                return
            if t != "fork":
                continue  # a request that arrived after its job ended: dropped
            pid = os.fork()
            if pid == 0:
                code = 70
                try:
                    code = Supervisor(self).run()
                except BaseException:  # noqa: BLE001 - the supervisor's own failure, reported below
                    traceback.print_exc()
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                # the supervisor failed: the grader's stream may be out of step with us; end, and
                # let the grader start a fresh zygote
                return


class Supervisor:
    """One job: reads it from the grader, forks the student's process into a new PID
    namespace, relays frames both ways, enforces the wall-clock limit, and reports how the
    student's process ended (the end frame). Never runs student code."""

    def __init__(self, zygote: Zygote):
        self.z = zygote
        self.isolated = zygote.isolated
        self.killed: tuple[str, str] | None = None  # (reason, detail) once the student's process is killed
        self.bad_stream = False
        self.grader_open = True
        self.pending = bytearray()  # the grader's requests not yet taken by the student's process
        self.reader = FrameReader()
        self.pid = 0

    def send(self, header: Header, blobs: Iterable[bytes] = ()) -> None:
        write_all(self.z.out_fd, encode_frame(header, blobs))

    def _end(self, status: str, t0: float, tail: _Tail | None = None, **fields: Any) -> None:
        self.send(
            {
                "t": "end",
                "status": status,
                "message": "",
                **fields,
                "tail": tail.text() if tail else "",
                "printed": tail.total if tail else 0,
                "seconds": time.monotonic() - t0,
            }
        )

    def _kill(self, reason: str, detail: str = "") -> None:
        if self.killed is None:
            self.killed = (reason, detail)
        try:
            os.kill(self.pid, signal.SIGKILL)  # PID 1 of its namespace: everything it started dies too
        except (ProcessLookupError, PermissionError):
            pass

    def _from_student(self, data: bytes) -> None:
        if self.bad_stream:
            return
        try:
            self.reader.feed(data)
            for _header, blobs, raw in self.reader.frames():
                self.send({"t": "g"}, [raw, *blobs])  # verified by the grader (HMAC, order)
        except ProtocolError as e:
            self.bad_stream = True
            self._kill("protocol", str(e))

    def _from_grader(self) -> None:
        try:
            header, blobs = read_frame_blocking(self.z.in_fd)
        except (EOFError, ValueError):
            self.grader_open = False
            self._kill("grader_gone", "the grader went away")
            return
        t = header.get("t")
        if t in ("call", "ref_reply", "finish"):  # ref_reply: the answer to a stand-in's call
            self.pending.extend(encode_frame(header, blobs))
        elif t == "abort":
            self._kill("aborted", "aborted by the grader")

    def run(self) -> int:
        """The whole job; returns the supervisor's exit code (0 unless the stream broke)."""
        t0 = time.monotonic()
        job, _ = read_frame_blocking(self.z.in_fd)
        if job.get("t") != "job":
            self._end("crashed", t0, reason="protocol", message="no job")
            return 1
        limits = job["limits"]
        scratch_host = None
        if not self.isolated:
            import tempfile

            scratch_host = tempfile.mkdtemp(prefix="sandbox-job-")
        res_r, res_w = os.pipe()  # student -> supervisor: the student process's frames
        req_r, req_w = os.pipe()  # supervisor -> student: the grader's requests
        out_r, out_w = os.pipe()  # the student's stdout and stderr
        setup_r, setup_w = os.pipe()  # the setup report, closed before student code runs
        deadline = t0 + float(limits["submission_seconds"])
        if self.isolated:
            sc.unshare(sc.CLONE_NEWPID)  # the next child is PID 1 of a new PID namespace
        try:
            pid: int | None = os.fork()
        except OSError:
            pid = None
        if pid == 0:  # the student's process
            code = 72
            try:
                for fd in (res_r, req_w, out_r, setup_r, self.z.in_fd, self.z.out_fd):
                    os.close(fd)
                code = run_student(self.isolated, job, res_w, req_r, out_w, setup_w, scratch_host, self.z.watch_module)
            except BaseException as e:  # noqa: BLE001 - report a failed setup; never run student code then
                msg = f"sandbox setup failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
                for fd in (SETUP_FD, setup_w):
                    try:
                        write_all(fd, b"F" + msg.encode("utf-8", "replace"))
                        break
                    except OSError:
                        continue
                else:  # after the setup: a worker error while running the student's code
                    try:
                        write_all(2, ("\n[grader] " + msg).encode("utf-8", "replace"))
                    except OSError:
                        pass
            os._exit(code)
        for fd in (res_w, req_r, out_w, setup_w):
            os.close(fd)
        if pid is None:
            for fd in (res_r, req_w, out_r, setup_r):
                os.close(fd)
            self._end("crashed", t0, reason="no_process", message="could not start a process")
            return 0
        self.pid = pid
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None  # no pidfd: poll waitpid instead
        os.set_blocking(req_w, False)
        tail = _Tail(int(limits["output_bytes"]))
        setup = bytearray()
        open_fds = {res_r, out_r, setup_r}
        mem_check = 0.0
        exited: int | None = None

        def take(fd: int) -> None:
            data = os.read(fd, 1 << 16)
            if not data:
                open_fds.discard(fd)
            elif fd == res_r:
                self._from_student(data)
            elif fd == out_r:
                tail.add(data)
            elif len(setup) < 1 << 16:
                setup.extend(data)

        while exited is None:
            now = time.monotonic()
            if now >= deadline and self.killed is None:
                self._kill("timeout")
            wait = 0.25 if pidfd is not None else 0.02
            if self.killed is None:
                wait = max(0.0, min(wait, deadline - now))
            watch = [*open_fds, *([pidfd] if pidfd is not None else []), *([self.z.in_fd] if self.grader_open else [])]
            try:
                ready, writable, _ = select.select(watch, [req_w] if self.pending else [], [], wait)
            except InterruptedError:
                continue
            if writable and self.pending:
                try:
                    n = os.write(req_w, self.pending[: 1 << 16])
                    del self.pending[:n]
                except BlockingIOError:
                    pass
                except OSError:
                    self.pending.clear()  # the student's process closed its end: it is ending
            for fd in ready:
                if fd == pidfd:
                    continue
                if fd == self.z.in_fd:
                    self._from_grader()
                    continue
                take(fd)
            if pidfd is None or pidfd in ready:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    exited = status
            if self.killed is None and time.monotonic() - mem_check > 0.25:
                mem_check = time.monotonic()
                if _low_memory():
                    self._kill("memory")
        if pidfd is not None:
            os.close(pidfd)
        # The student's process is reaped; in isolated modes its whole PID namespace died with
        # it: read what is left.
        if not self.isolated:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        drain_until = time.monotonic() + 1.0
        while open_fds and time.monotonic() < drain_until:
            ready, _, _ = select.select(list(open_fds), [], [], max(0.0, drain_until - time.monotonic()))
            for fd in ready:
                take(fd)
        for fd in (res_r, req_w, out_r, setup_r):
            os.close(fd)
        if scratch_host:
            import shutil

            shutil.rmtree(scratch_host, ignore_errors=True)
        if setup[:1] == b"F":  # only the student process's setup, before any student code, can report this
            self._end("fatal", t0, tail, message=bytes(setup[1:]).decode("utf-8", "replace"))
        elif self.killed is not None and self.killed[0] == "timeout":
            self._end("timeout", t0, tail)
        elif self.killed is not None:
            self._end("crashed", t0, tail, reason=self.killed[0], message=self.killed[1])
        else:
            self._end("exited", t0, tail, **_how_it_ended(exited))
        return 0


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
            if len(self.buf) > 2 * TAIL_BYTES:
                del self.buf[:-TAIL_BYTES]
        self.total += len(data)

    def text(self) -> str:
        s = bytes(self.buf[-TAIL_BYTES:]).decode("utf-8", "replace")
        if self.total > self.cap:
            s += f"\n[output truncated: {self.total:,} bytes printed, only the first {self.cap:,} kept]"
        return s


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


def warm_up(opwatch_source: str, operators: list[str]) -> types.ModuleType:
    """Import and exercise the libraries once, so each forked job starts warm; returns the
    runtime-watch module, loaded from ``opwatch_source`` with the kernels of ``operators``
    wrapped (torch imports its dispatcher tools the first time a mode is used)."""
    import importlib.machinery  # noqa: F401 - imported here so that no job pays for these imports
    import random  # noqa: F401
    import tempfile  # noqa: F401

    import numpy
    import numpy.random
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.show = lambda *a, **k: None
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    w = torch.randn(8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.softmax(x @ w / 2.0, dim=-1)
    y = torch.nn.functional.layer_norm(y, (8,))
    torch.nn.functional.cross_entropy(y, torch.tensor([0, 1, 2, 3]))
    torch.tril(torch.ones(4, 4, dtype=torch.bool)).masked_fill(torch.zeros(4, 4, dtype=torch.bool), 0)
    torch.nn.Linear(8, 8)(x).relu().sum()
    fig = plt.figure(figsize=(2, 2))
    plt.plot([0, 1], [1, 0])
    plt.imshow(y.numpy())
    fig.savefig(io.BytesIO(), format="png")
    plt.close("all")
    figures_cost_nothing()
    numpy.save(io.BytesIO(), numpy.zeros(3), allow_pickle=False)
    watch_module = load_opwatch(opwatch_source)
    watch_module.wrap_operators(operators)
    watch = watch_module.OpWatch(functions=["torch.softmax"], methods=["softmax"], ops=["aten::_softmax"], largest=True)
    with watch:
        torch.softmax(x, dim=-1)
    import gc

    gc.collect()
    gc.freeze()  # keep the warm objects out of the children's collections (fewer copied pages)
    huge_pages()
    return watch_module


def huge_pages() -> int:
    """Back the warm process's anonymous memory (the C heap, Python's arenas) with huge pages;
    returns the bytes collapsed (0 where the kernel cannot).

    A fork copies one page-table entry per page of the parent's anonymous memory, and the
    child's exit frees them again: with about 170 MB of it after importing torch, that is
    43,000 entries per fork, and a job forks three times. Backed by 2 MB pages it is 85, and
    a fork and exit costs a third as much (measured in ``benchmarks/grading.py``). A page the
    child writes to is split and copied 4 kB at a time, as before.
    """
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            size = int(f.read())
    except (OSError, ValueError):
        size = 2 << 20
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return 0
    done = 0
    for line in maps:
        fields = line.split()
        if len(fields) < 5 or fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue  # anonymous, private and writable only
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        lo, hi = -(-lo // size) * size, hi // size * size
        if hi > lo and sc.collapse(lo, hi - lo):
            done += hi - lo
    return done


def figures_cost_nothing() -> None:
    """Make figures free to grade: they are built (so plotting code runs, and a definition in a
    plotting cell still counts) but never laid out, drawn or saved. Laying out text is most of a
    notebook's time (``tight_layout`` measures every label), and nobody sees the figures."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    def nothing(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    Figure.tight_layout = nothing  # type: ignore[method-assign]
    Figure.savefig = nothing  # type: ignore[method-assign]
    FigureCanvasAgg.draw = nothing  # type: ignore[method-assign]


def ready_frame() -> Header:
    """The zygote's first frame, once warm."""
    import torch

    return {
        "t": "ready",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "pid": os.getpid(),
        "seccomp": sc.seccomp_program(os.uname().machine) is not None,
    }
