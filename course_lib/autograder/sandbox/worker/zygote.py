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

A job in three steps (:meth:`Zygote.job`): :meth:`Zygote._fork` starts the student's process;
:class:`.supervisor.Supervisor` waits for it and kills it when it must; :func:`.supervisor.end_packet`
says how it ended.
"""

from __future__ import annotations

import io
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from . import syscalls as sc
from .protocol import JOB_FDS, SETUP_FD, Header, recv_packet, send_packet, write_all
from .stubs import GraderModules, load_modules
from .student import run_student
from .supervisor import Supervisor, end_packet, kill_quietly

#: Why the zygote stopped a job's student process (an end packet's ``reason``).
REASONS = ("timeout", "memory", "grader_gone", "aborted", "no_process")


class Zygote:
    """The warm process: torch imported once; forks each job's student process, enforces its
    wall-clock limit and reports how it ended. It reads only control packets, never a job."""

    def __init__(self, isolation: str, ctrl: socket.socket, modules: GraderModules):
        self.isolation = isolation
        self.isolated = isolation in ("bubblewrap", "namespaces")
        self.ctrl = ctrl
        self.modules = modules  # loaded (the watch warmed) once, before any job
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
        """One job: fork the student's process (:meth:`_fork`), wait for it under the
        wall-clock limit (:class:`.supervisor.Supervisor`), clean up after it and send the end
        packet (:func:`.supervisor.end_packet`). False when the grader went away."""
        t0 = time.monotonic()
        limits, uid = request.get("limits", {}), int(request.get("uid", -1))
        deadline = t0 + float(limits.get("job_seconds", limits.get("submission_seconds", 60.0)))
        scratch_host = None if self.isolated else _scratch_dir()
        setup_r, setup_w = os.pipe()  # the setup report, closed before student code runs
        pid = self._fork(_StudentStart(limits, uid, req_r, res_w, out_w, setup_r, setup_w, scratch_host))
        if pid is None:
            os.close(setup_r)
            self.send({"t": "end", "status": "crashed", "reason": "no_process", "message": "could not start a process"})
            return True
        student = Supervisor(pid, setup_r, deadline, self.ctrl)
        student.supervise()
        # The student's process is reaped; in isolated modes its whole PID namespace died with it.
        if not self.isolated:
            kill_quietly(os.killpg, pid)
        student.drain_setup()
        os.close(setup_r)
        if scratch_host:
            import shutil

            shutil.rmtree(scratch_host, ignore_errors=True)
        end = end_packet(student, t0)
        if not student.grader_open:
            return False
        try:
            self.send(end)
        except OSError:
            return False
        return True

    def _fork(self, start: _StudentStart) -> int | None:
        """Fork the student's process (in isolated modes PID 1 of a new PID namespace, which the
        zygote leaves again at once) and close the child's ends of the pipes here. Returns its
        pid, or None when no process could be started; the child never returns."""
        if self.isolated:
            sc.unshare(sc.CLONE_NEWPID)  # the next child is PID 1 of a new PID namespace
        try:
            pid: int | None = os.fork()
        except OSError:
            pid = None
        if pid == 0:
            self._become_student(start)
        if self.isolated:
            sc.setns(self.pidns, sc.CLONE_NEWPID)  # later forks (the next job) get a namespace of their own
        for fd in (start.req_r, start.res_w, start.out_w, start.setup_w):
            os.close(fd)
        return pid

    def _become_student(self, s: _StudentStart) -> NoReturn:
        """In the forked child: drop the zygote's descriptors, then set up the jail and run the
        job (:func:`.student.run_student`). A failure is reported (:func:`_report_failure`) and
        never followed by student code. Exits; never returns."""
        code = 72
        try:
            os.close(s.setup_r)
            self.ctrl.close()
            if self.pidns >= 0:
                os.close(self.pidns)
            code = run_student(
                self.isolated, s.limits, s.uid, s.req_r, s.res_w, s.out_w, s.setup_w, s.scratch_host, self.modules
            )
        except BaseException as e:  # noqa: BLE001 - report a failed setup; never run student code then
            _report_failure(f"sandbox setup failed: {type(e).__name__}: {e}\n{traceback.format_exc()}", s.setup_w)
        os._exit(code)


@dataclass(frozen=True)
class _StudentStart:
    """What a job's student process is forked with (see :func:`.student.run_student`)."""

    limits: dict[str, Any]  # the job's limits, as the grader sent them
    uid: int  # the unprivileged uid it runs as (-1: keep the zygote's)
    req_r: int  # the student's ends of the requests, results and output pipes
    res_w: int
    out_w: int
    setup_r: int  # the setup pipe (the zygote's end: closed in the child)
    setup_w: int
    scratch_host: str | None  # mode none: the host folder for its scratch files


def _scratch_dir() -> str:
    """A host folder for a job's scratch files (mode ``none``: no tmpfs of its own)."""
    import tempfile

    return tempfile.mkdtemp(prefix="sandbox-job-")


def _report_failure(message: str, setup_w: int) -> None:
    """In the student's process, a failure of the worker's own: on the setup pipe (fd
    :data:`.protocol.SETUP_FD` once moved there, else ``setup_w``) while the jail is set up, so
    the job ends ``fatal``; once both are closed (student code ran), to the output."""
    for fd in (SETUP_FD, setup_w):
        try:
            write_all(fd, b"F" + message.encode("utf-8", "replace"))
            return
        except OSError:
            continue
    try:
        write_all(2, ("\n[grader] " + message).encode("utf-8", "replace"))
    except OSError:
        pass


def warm_up(opwatch_source: str, operands_source: str, functions: list[str], operators: list[str]) -> GraderModules:
    """Import and exercise the libraries once, so each forked job starts warm; returns the
    grader's modules, run from ``opwatch_source`` and ``operands_source``, the runtime watch's
    with the torch ``functions`` resolved and the kernels of ``operators`` wrapped (torch
    imports its dispatcher tools the first time a mode is used). No ``course_lib`` module is
    left in ``sys.modules``: each job finds only its stubs."""
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
    modules = load_modules(opwatch_source, operands_source)
    watch_module = modules.opwatch
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
    return modules


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
