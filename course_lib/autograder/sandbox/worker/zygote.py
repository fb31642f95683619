"""The zygote (the warm worker), which forks and supervises each job's student process.

Processes and channels, for one submission::

    grader ==(control socket)== zygote --unshare(CLONE_NEWPID); fork--> student
       |                        (warm: torch imported;                  (PID 1 of a new PID namespace;
       |                        never reads a byte of a job)             own mount, IPC, UTS, network
       +------(three pipes, handed over with the fork request)-------->  namespaces; scratch tmpfs, new
              requests (grader -> student), results (student ->          /proc, rlimits, unprivileged
              grader), output (the student's stdout and stderr)          uid, no_new_privs, seccomp; runs
                                                                         the cells, then answers calls)

The control socket (``AF_UNIX``, ``SOCK_SEQPACKET``: one packet per message) is the zygote's
stdin and stdout. The grader sends ``fork`` (the job's limits and uid, with the student's ends
of the three pipes attached as ``SCM_RIGHTS``), ``abort`` and ``exit``; the zygote sends
``ready`` once warm and one *end* packet per job. The job itself (cells, calls, inputs) goes
from the grader straight into the student's requests pipe, so the zygote, which every later
job is forked from, never holds a byte of any submission or of the grader's inputs: a job that
scans its own memory finds nothing of the student graded before it.

The end packet: ``{"t": "end", "status": "exited"|"timeout"|"crashed"|"fatal", ...}`` with, for
``exited``, ``exit_code`` or ``signal`` (how the student's process ended), for ``crashed``,
``reason`` (one of :data:`REASONS`) and ``message``, for ``fatal`` (the jail could not be set up,
before any student code ran), ``message``; always ``seconds``.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
import types
from typing import Any

from . import syscalls as sc
from .protocol import SETUP_FD, Header, write_all
from .stubs import load_opwatch
from .student import run_student

#: Why the zygote stopped a job's student process (an end packet's ``reason``).
REASONS = ("timeout", "memory", "grader_gone", "aborted", "no_process")
PACKET_BYTES = 1 << 16  # the largest control packet
JOB_FDS = 3  # the student's ends of the requests, results and output pipes


def send_packet(sock: socket.socket, message: Header, fds: list[int] | tuple[int, ...] = ()) -> None:
    """One control message (JSON), with file descriptors attached."""
    data = json.dumps(message, separators=(",", ":")).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_packet(sock: socket.socket) -> tuple[Header, list[int]] | None:
    """One control message and the descriptors that came with it; None at the end of the stream.
    A packet that is not a JSON object reads as ``{}``."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, PACKET_BYTES, JOB_FDS + 1)
    except ConnectionError:
        return None
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    return (message if isinstance(message, dict) else {}), list(fds)


class Zygote:
    """The warm process: torch imported once; forks each job's student process, enforces its
    wall-clock limit and reports how it ended. It reads only control packets, never a job."""

    def __init__(self, isolation: str, ctrl: socket.socket, watch_module: types.ModuleType):
        self.isolation = isolation
        self.isolated = isolation in ("bubblewrap", "namespaces")
        self.ctrl = ctrl
        self.watch_module = watch_module  # loaded and warmed once, before any job
        # to leave each job's PID namespace again after forking into it
        self.pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) if self.isolated else -1

    def send(self, message: Header) -> None:
        send_packet(self.ctrl, message)

    def serve(self) -> None:
        """Run a job per ``fork`` request, until ``exit`` or the end of the stream."""
        while True:
            got = recv_packet(self.ctrl)
            if got is None:
                return
            message, fds = got
            t = message.get("t")
            if t == "fork" and len(fds) == JOB_FDS:
                if not self.job(message, *fds):
                    return  # the grader went away
                continue
            for fd in fds:
                os.close(fd)
            if t == "exit":
                return
            # anything else (an abort that arrived after its job ended) is dropped

    def job(self, request: Header, req_r: int, res_w: int, out_w: int) -> bool:
        """One job: fork the student's process into a new PID namespace, wait for it under the
        wall-clock limit, send the end packet. False when the grader went away."""
        t0 = time.monotonic()
        limits, uid = request.get("limits", {}), int(request.get("uid", -1))
        deadline = t0 + float(limits.get("job_seconds", limits.get("submission_seconds", 60.0)))
        scratch_host = None
        if not self.isolated:
            import tempfile

            scratch_host = tempfile.mkdtemp(prefix="sandbox-job-")
        setup_r, setup_w = os.pipe()  # the setup report, closed before student code runs
        if self.isolated:
            sc.unshare(sc.CLONE_NEWPID)  # the next child is PID 1 of a new PID namespace
        try:
            pid: int | None = os.fork()
        except OSError:
            pid = None
        if pid == 0:  # the student's process
            code = 72
            try:
                os.close(setup_r)
                self.ctrl.close()
                if self.pidns >= 0:
                    os.close(self.pidns)
                code = run_student(
                    self.isolated, limits, uid, req_r, res_w, out_w, setup_w, scratch_host, self.watch_module
                )
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
        if self.isolated:
            sc.setns(self.pidns, sc.CLONE_NEWPID)  # later forks (the next job) get a namespace of their own
        for fd in (req_r, res_w, out_w, setup_w):
            os.close(fd)
        if pid is None:
            os.close(setup_r)
            self.send({"t": "end", "status": "crashed", "reason": "no_process", "message": "could not start a process"})
            return True
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pidfd = None  # no pidfd: poll waitpid instead
        killed: tuple[str, str] | None = None
        grader_open = True
        setup = bytearray()
        setup_open = True

        def read_setup() -> None:
            nonlocal setup_open
            data = os.read(setup_r, 1 << 16)
            setup_open = bool(data)
            if len(setup) < 1 << 16:
                setup.extend(data)

        mem_check = 0.0
        exited: int | None = None

        def kill(reason: str, detail: str = "") -> None:
            nonlocal killed
            if killed is None:
                killed = (reason, detail)
            try:
                os.kill(pid, signal.SIGKILL)  # PID 1 of its namespace: everything it started dies too
            except (ProcessLookupError, PermissionError):
                pass

        while exited is None:
            now = time.monotonic()
            if now >= deadline and killed is None:
                kill("timeout")
            wait = 0.25 if pidfd is not None else 0.02
            if killed is None:
                wait = max(0.0, min(wait, deadline - now))
            watch = [setup_r] if setup_open else []
            if pidfd is not None:
                watch.append(pidfd)
            if grader_open:
                watch.append(self.ctrl.fileno())
            try:
                ready, _, _ = select.select(watch, [], [], wait)
            except InterruptedError:
                continue
            if self.ctrl.fileno() in ready:
                got = recv_packet(self.ctrl)
                if got is None:
                    grader_open = False
                    kill("grader_gone", "the grader went away")
                else:
                    for fd in got[1]:
                        os.close(fd)
                    if got[0].get("t") == "abort":
                        kill("aborted", "aborted by the grader")
            if setup_r in ready:
                read_setup()
            if pidfd is None or pidfd in ready:
                got_pid, status = os.waitpid(pid, os.WNOHANG)
                if got_pid:
                    exited = status
            if killed is None and time.monotonic() - mem_check > 0.25:
                mem_check = time.monotonic()
                if _low_memory():
                    kill("memory")
        if pidfd is not None:
            os.close(pidfd)
        # The student's process is reaped; in isolated modes its whole PID namespace died with it.
        if not self.isolated:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        while setup_open and select.select([setup_r], [], [], 0.2)[0]:
            read_setup()
        os.close(setup_r)
        if scratch_host:
            import shutil

            shutil.rmtree(scratch_host, ignore_errors=True)
        end: Header = {"t": "end", "message": ""}
        if setup[:1] == b"F":  # only the student process's setup, before any student code, can report this
            end.update(status="fatal", message=bytes(setup[1:]).decode("utf-8", "replace")[-8000:])
        elif killed is not None and killed[0] == "timeout":
            end.update(status="timeout")
        elif killed is not None:
            end.update(status="crashed", reason=killed[0], message=killed[1])
        else:
            end.update(status="exited", **_how_it_ended(exited))
        end["seconds"] = time.monotonic() - t0
        if grader_open:
            try:
                self.send(end)
            except OSError:
                grader_open = False
        return grader_open


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


def warm_up(opwatch_source: str, functions: list[str], operators: list[str]) -> types.ModuleType:
    """Import and exercise the libraries once, so each forked job starts warm; returns the
    runtime-watch module, loaded from ``opwatch_source`` with the torch ``functions`` resolved
    and the kernels of ``operators`` wrapped (torch imports its dispatcher tools the first time
    a mode is used). No ``course_lib`` module is left in ``sys.modules``: each job finds only
    its stubs."""
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
    for path in functions:
        watch_module.resolve(path)
    watch_module.wrap_operators(operators)
    for name in [n for n in sys.modules if n == "course_lib" or n.startswith("course_lib.")]:
        del sys.modules[name]
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
    43,000 entries for each job's fork. Backed by 2 MB pages it is 85, and a fork and exit
    costs a third as much (17.7 ms -> 5.8 ms, measured on the 2-core machine). A page the
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
    """The zygote's first packet, once warm."""
    import torch

    return {
        "t": "ready",
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "pid": os.getpid(),
        "seccomp": sc.seccomp_program(os.uname().machine) is not None,
    }
