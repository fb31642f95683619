"""The jailed student process: the notebook's cells, then the grader's calls, in phases.

Forked by the zygote (:mod:`.zygote`) as PID 1 of a new PID namespace, it sets up its jail as
root (:mod:`.jail`), reads its job from the grader's requests pipe, reports "setup done" on a
pipe that it closes before any student code runs (so a failed setup is told apart from
anything a student can do), drops to an unprivileged uid with the seccomp filter, and becomes
the job's *keeper* (:mod:`.phases`): it never runs student code, but forks one process per
phase that runs the cells and answers that phase's calls **one at a time**, in the order sent.
No call's inputs are sent before the cells have all run; then the grader sends all the calls
of one function together (:class:`~course_lib.autograder.sandbox.runner.Runner`).

Every frame carries a sequence number and an HMAC (:func:`.protocol.encode_signed_frame`)
under a key that the keeper announces per phase, so bytes written to the pipe without the
phase's key are told apart; the keeper's own frames use keys its children never hold. What
the student prints goes to a different pipe, so printed text can never pass for a result.
"""

from __future__ import annotations

import builtins
import fcntl
import io
import linecache
import math
import os
import resource
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

from . import audit, phases
from . import syscalls as sc
from .channels import _display, _Out, _Sender
from .jail import drop_privileges, enter_jail
from .protocol import (
    CALL_WALL_FACTOR,
    REQUESTS_FD,
    RESULTS_FD,
    SETUP_FD,
    Header,
    read_frame_blocking,
    write_all,
)
from .shell import get_ipython
from .stubs import GraderModules, _install_stubs
from .timers import _arm, _Deadline, _disarm, _guarded, _timer
from .values import _BadType, _safe_str, _seen, _short, _student_line, _student_operands, _type_name, _Values


def run_student(
    isolated: bool,
    limits: dict[str, Any],
    uid: int,
    req_r: int,
    res_w: int,
    out_w: int,
    setup_w: int,
    scratch_host: str | None,
    modules: GraderModules,
) -> int:
    """The student's process: set up the jail, read the job from the grader, drop privileges,
    run the student's cells and answer the calls. Returns the exit code."""
    scratch = enter_jail(isolated, uid, int(limits["scratch_mb"]), scratch_host)
    # fds: 0 = /dev/null, 1 and 2 = output pipe, 3 = our frames, 4 = requests, 5 = setup; nothing else open.
    devnull = os.open("/dev/null", os.O_RDWR)
    wanted = {0: devnull, 1: out_w, 2: out_w, RESULTS_FD: res_w, REQUESTS_FD: req_r, SETUP_FD: setup_w}
    high = {fd: fcntl.fcntl(src, fcntl.F_DUPFD, SETUP_FD + 1) for fd, src in wanted.items()}
    for fd, src in high.items():  # every source moved above SETUP_FD first: no dup2 clobbers another's
        os.dup2(src, fd)
    os.closerange(SETUP_FD + 1, max(1 << 16, os.sysconf("SC_OPEN_MAX")))
    for fd in (0, 1, 2):
        os.set_inheritable(fd, True)
    job, _ = read_frame_blocking(REQUESTS_FD)  # the grader's, straight from its pipe
    if job.get("t") != "job":
        raise RuntimeError("the grader sent no job")
    with open("/proc/self/statm", "rb") as f:
        vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    as_limit = vm_bytes + int(limits["memory_mb"]) * (1 << 20)
    cpu = math.ceil(float(limits["submission_seconds"])) + 2
    rlimits = (
        (resource.RLIMIT_AS, as_limit),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_FSIZE, int(limits["output_bytes"])),
        (resource.RLIMIT_NOFILE, 256),
        (resource.RLIMIT_NPROC, int(limits["processes"])),
        (resource.RLIMIT_MSGQUEUE, 0),
    )
    harness = StudentHarness(job, limits, modules)  # the watches resolved before any student code runs
    harness.isolated = isolated  # in a PID namespace of its own: kill(-1) reaches only the job
    drop_privileges(isolated, uid, rlimits)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(scratch)
    os.environ.update({"HOME": scratch, "TMPDIR": scratch, "USER": "student", "LOGNAME": "student"})
    import tempfile

    tempfile.tempdir = None
    write_all(SETUP_FD, b"K")
    os.close(SETUP_FD)
    return harness.run()


class StudentHarness(_Values):
    """The student process's Python side, after the jail is set up.

    :meth:`run` runs the notebook's cells in a fresh ``__main__`` (each under the cell time
    limit, with fake ``course_lib`` modules and capped output), kills what they left running,
    then answers the grader's calls one at a time, in this process if it has no other
    thread, else in a single-threaded forked child
    (:meth:`_serve_calls`: no call's inputs arrive before the cells have run; each call runs
    under the call limits and the runtime watch; its result is encoded as plain arrays). Every
    frame goes out signed through :class:`_Sender`.
    """

    def __init__(self, job: Header, limits: dict[str, Any], modules: GraderModules):
        import numpy
        import torch

        self.np, self.torch = numpy, torch
        self._Tensor = torch.Tensor
        # What encodes a result, taken now from torch's immutable C base class (student code may
        # replace torch.Tensor's methods, never these) and run with torch's modes off (a mode a
        # call leaves behind never sees it)
        base = torch._C.TensorBase
        self._t = types.SimpleNamespace(
            **{n: getattr(base, n) for n in ("detach", "cpu", "to", "is_complex", "resolve_conj", "resolve_neg")},
            **{n: getattr(base, n) for n in ("contiguous", "numpy", "new_zeros")},
            **{n: base.__dict__[n].__get__ for n in ("layout", "device", "dtype", "is_quantized", "shape")},
            Parameter=torch.nn.Parameter,
            strided=torch.strided,
            bfloat16=torch.bfloat16,
            float32=torch.float32,
            no_modes=(torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch),
        )
        self._from_numpy = torch.from_numpy
        fmt = numpy.lib.format
        self._write_header, self._descr = fmt.write_array_header_1_0, fmt.dtype_to_descr
        self._frombuffer = numpy.frombuffer
        self._dtypes: dict[str, Any] = {}  # numpy dtype string -> dtype
        self._preambles: dict[tuple[Any, tuple[int, ...]], bytes] = {}  # (dtype, shape) -> .npy preamble
        self._FunctionType = types.FunctionType
        self.cells = list(job["cells"])
        self.names = list(job["names"])
        watch_module = modules.opwatch
        self.watches = {n: watch_module.OpWatch(**spec) for n, spec in job.get("watch", {}).items()}
        self._operand_words = modules.operands.operand_words  # taken before any student code runs
        self.limits = limits
        self.call_seconds = float(limits["call_seconds"])
        self.cell_seconds = float(limits["cell_seconds"])
        self.sender = _Sender(RESULTS_FD, bytes.fromhex(job["key"]))  # each phase's process's, rekeyed per phase
        self.psender = _Sender(RESULTS_FD, bytes.fromhex(job["key"]))  # this process's own (phases.py)
        self.refuse, self.refusals = watch_module.refuse_operators, watch_module.refusals
        first = job.get("ops0")  # the first phase's refused operators (phases.py)
        self.ops0 = [o for o in first if isinstance(o, str)][:500] if isinstance(first, list) else []
        self.silent = False
        self.audit = job.get("audit") is not False
        self.isolated = False  # set by run_student
        from torch.overrides import TorchFunctionMode
        from torch.utils._python_dispatch import TorchDispatchMode

        # the audit hook, armed in each phase's process before its first student line
        native = [f.__code__ for f in vars(sc).values() if type(f) is types.FunctionType]
        self.policy = audit.install(native, [TorchFunctionMode, TorchDispatchMode])
        self.channel = (os.fstat(RESULTS_FD).st_ino, os.fstat(REQUESTS_FD).st_ino)
        self.result_bytes = 0
        self.queued: list[tuple[Header, list[bytes]]] = []  # requests read while a stand-in waited

    def _request(self) -> tuple[Header, list[bytes]]:
        """The grader's next request: one a stand-in read past, else the next from the pipe."""
        if self.queued:
            return self.queued.pop(0)
        return read_frame_blocking(REQUESTS_FD)

    # ------------------------------------------------------------ helpers
    def _kill_strays(self, wait: float = 2.0) -> None:
        """Kill every other process in this PID namespace (fork bombs, daemons, leftovers) and
        reap them (for up to ``wait`` seconds: until reaped they still count against the uid's
        process limit). The kill is repeated while any is left: a process forked while the
        first went round is killed by the next. From a phase's process (the keeper, PID 1, is
        its parent) the kill spares the keeper and itself, and the keeper reaps the orphans."""
        in_namespace = self.isolated and os.getuid() != 0 and (os.getpid() == 1 or os.getppid() == 1)
        if in_namespace:
            until = time.monotonic() + wait
            while True:
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    if time.monotonic() > until:
                        break
                    time.sleep(0.002)

    @staticmethod
    def _threads() -> int:
        """How many threads this process has (0 if that cannot be read: then the calls fork)."""
        try:
            return len(os.listdir("/proc/self/task"))
        except OSError:
            return 0

    def _own_function(self, fn: Any) -> str | None:
        """The graded object is a function written in a notebook cell (possibly decorated); else
        what it is instead, in words."""
        f = fn
        for _ in range(8):
            if type(f) is self._FunctionType:
                code = f.__code__
                if type(code.co_filename) is str and code.co_filename.startswith("<cell "):
                    return None
            try:
                f = object.__getattribute__(f, "__wrapped__")
            except BaseException:  # noqa: BLE001
                break
        return f"a {_type_name(type(fn))}, not a function defined with def in a notebook cell"

    # ------------------------------------------------------------ phases
    def run(self) -> int:
        """The job's phases (:mod:`.phases`); returns the exit code."""
        _install_stubs(self.sender)
        return phases.run(self)

    def report_tamper(self, what: str) -> None:
        """Tell the grader what the audit hook refused (it holds the submission for review)."""
        self.sender.send({"t": "tamper", "what": _short(what, 200)})

    def run_notebook(self, silent: bool) -> dict[str, Any]:
        """The cells, in a fresh ``__main__`` with fake ``course_lib`` modules and capped
        output (``silent``: their errors are not reported); returns the namespace."""
        torch = self.torch
        import random

        import numpy

        self.silent = silent
        counter = [0]
        cap = int(self.limits["output_bytes"])
        sys.stdout = _Out(1, counter, cap, "<stdout>")
        sys.stderr = _Out(2, counter, cap, "<stderr>")
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        main.__dict__["display"] = _display
        main.__dict__["get_ipython"] = get_ipython  # what IPython's transformed cells call
        sys.modules["__main__"] = main
        ns = main.__dict__
        random.seed(0)
        numpy.random.seed(0)
        torch.manual_seed(0)
        submission_end = time.monotonic() + float(self.limits["submission_seconds"])
        for i, src in enumerate(self.cells, 1):
            if src:
                self._run_cell(i, src, ns, submission_end)
        return ns

    def serve(self, ns: dict[str, Any], first: bool) -> int:
        """Answer this phase's calls; returns the exit code.

        No code of the cells may run while the calls are answered. With this thread alone
        (the usual case) the calls run here: no thread can start once the calls' filter is
        installed, and no timer is left to interrupt them. When the cells left threads
        behind, the calls run in a fork of this process from this thread, where those
        threads do not exist; this process then closes its end of the channel and waits."""
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        self._kill_strays()  # what the cells left running
        if self._threads() == 1:
            return self._serve_calls(ns, first)
        for _attempt in range(50):
            try:
                pid = os.fork()
                break
            except BlockingIOError:  # the uid's process limit
                time.sleep(0.01)
        else:
            return 75
        if pid == 0:
            code = 0
            try:
                code = self._serve_calls(ns, first)
            except BaseException:  # noqa: BLE001 - a harness failure; the grader sees the calls unanswered
                code = 71
            os._exit(code)
        os.closerange(3, max(1 << 16, os.sysconf("SC_OPEN_MAX")))
        status = os.waitpid(pid, 0)[1]
        return os.waitstatus_to_exitcode(status) & 0xFF

    def _serve_calls(self, ns: dict[str, Any], first: bool) -> int:
        os.closerange(REQUESTS_FD + 1, max(1 << 16, os.sysconf("SC_OPEN_MAX")))
        if (os.fstat(RESULTS_FD).st_ino, os.fstat(REQUESTS_FD).st_ino) != self.channel:
            return 73  # the cells replaced the channel's file descriptors: no calls are answered
        self.torch.set_num_threads(1)
        sc.forbid_new_processes()
        missing: list[str] = []
        not_own: dict[str, str] = {}
        for name in self.names:
            fn = ns.get(name)
            try:
                ok = fn is not None and callable(fn)
            except BaseException:  # noqa: BLE001
                ok = False
            if not ok:
                missing.append(name)
            else:
                why = self._own_function(fn)
                if why:
                    not_own[name] = why
        kind = "cells_done" if first else "ready"
        self.sender.send({"t": kind, "missing": missing, "not_own": not_own, "refused": self.refusals()})
        while True:
            try:
                header, blobs = self._request()
            except (EOFError, ValueError, OSError):
                return 74
            t = header.get("t")
            if t == "end_phase":
                return 0
            if t != "call":
                continue
            name = str(header.get("fn"))
            fn = ns.get(name) if name not in missing and name not in not_own else None
            reply: Header
            out: list[bytes]
            standins = header.get("standins")
            if fn is None:
                reply, out = {"status": "error", "msg": "not run: no such function"}, []
            elif isinstance(standins, list) and standins:
                # a callee whose cell failed (so it does not exist) is stood in for too
                names = [n for n in standins if isinstance(n, str) and n.isidentifier()]
                saved = {n: ns[n] for n in names if n in ns}
                ns.update({n: self._standin(n) for n in names})
                try:
                    reply, out = self._call(fn, header, blobs, self.watches.get(name))
                finally:
                    for n in names:
                        if n not in saved:
                            ns.pop(n, None)
                    ns.update(saved)
            else:
                reply, out = self._call(fn, header, blobs, self.watches.get(name))
            reply.update({"t": "reply", "id": header.get("id")})
            self.sender.send(reply, out)

    def _standin(self, name: str) -> Callable[..., Any]:
        """What stands in for the student's graded function ``name`` during one call of a
        function that calls it: each call is sent to the grader, which answers with the
        reference's result (the reference's code never comes into this process)."""
        harness = self

        def stand_in(*args: Any, **kwargs: Any) -> Any:
            blobs: list[bytes] = []
            try:
                value = harness._encode_arg((args, tuple(kwargs.items())), blobs)
            except _BadType as e:
                why = e.args[0].replace("returned", "was given", 1)
                raise TypeError(f"{name} (the reference, standing in for yours) {why}") from None
            harness.sender.send({"t": "ref_call", "fn": name, "value": value}, blobs)
            while True:  # the function's later calls, sent with this one, come first: kept for later
                try:
                    reply, reply_blobs = read_frame_blocking(REQUESTS_FD)
                except (EOFError, ValueError, OSError):
                    os._exit(74)
                if reply.get("t") != "call":
                    break
                harness.queued.append((reply, reply_blobs))
            if reply.get("t") != "ref_reply":
                os._exit(74)  # the grader stopped the job
            if reply.get("status") != "ok":
                msg = _short(reply.get("msg", ""), 300)
                raise RuntimeError(f"{name} (the reference, standing in for yours) {msg}")
            return harness._decode_arg(reply.get("value"), reply_blobs)

        stand_in.__name__ = stand_in.__qualname__ = name
        return stand_in

    def _run_cell(self, i: int, src: str, ns: dict[str, Any], submission_end: float) -> None:
        fname = f"<cell {i}>"
        try:
            linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
            code = compile(src, fname, "exec", dont_inherit=True)
        except SyntaxError as e:
            where = f" (line {e.lineno})" if e.lineno else ""
            self._cell_error(i, f"{type(e).__name__}: {_short(e.msg)}{where}")
            return
        except BaseException as e:  # noqa: BLE001 - e.g. a cell too deeply nested to compile
            self._cell_error(i, f"{type(e).__name__}: {_safe_str(e)}")
            return
        limit = min(self.cell_seconds, max(0.05, submission_end - time.monotonic()))
        try:
            try:
                _arm(limit)
                exec(code, ns)
            finally:
                _disarm()
        except _Deadline:
            self._kill_strays()
            self._cell_error(i, f"stopped after {limit:g} s (an infinite loop, or waiting for something?)")
        except BaseException as e:  # noqa: BLE001 - every student error is a cell error
            err = e
            self._cell_error(i, _guarded(lambda: self._describe_cell_exception(err), _type_name(type(err))))
            tb = err.__traceback__.tb_next if err.__traceback__ is not None else None
            text = _guarded(lambda: "".join(traceback.format_exception(type(err), err, tb)), "")
            _guarded(lambda: sys.stderr.write(text), None)

    def _describe_cell_exception(self, e: BaseException) -> str:
        name = type(e).__name__
        msg = _safe_str(e)
        text = f"{name}: {msg}" if msg else name
        if isinstance(e, SystemExit):
            text += " (exit() was called; the rest of that cell was skipped)"
        elif isinstance(e, EOFError):
            text += " (input() cannot be answered while grading)"
        elif isinstance(e, MemoryError):
            text += f" (more than {self.limits['memory_mb']} MB of memory)"
        return text

    def _cell_error(self, i: int, text: str) -> None:
        if self.silent:
            return
        self.sender.send({"t": "cell_error", "msg": f"cell {i}: {text}"})

    def _call(
        self, fn: Callable[..., Any], header: Header, arg_blobs: list[bytes], watch: Any
    ) -> tuple[Header, list[bytes]]:
        blobs: list[bytes] = []
        try:
            args = tuple(self._decode_arg(a, arg_blobs) for a in header["args"])
            kwargs = {k: self._decode_arg(v, arg_blobs) for k, v in header["kwargs"]}
        except Exception as e:  # noqa: BLE001 - the grader's own data: should never happen
            bad = e
            _guarded(lambda: sys.stderr.write(f"could not rebuild the arguments: {_safe_str(bad)}\n"), None)
            return {"status": "error", "msg": "not run: the grader could not send this test's inputs"}, []
        limit = self.call_seconds
        if watch is not None:
            watch.seen, watch.largest = [], 0
        try:
            try:
                _arm(max(limit * CALL_WALL_FACTOR, limit + 5.0), cpu=limit)
                if watch is not None:
                    with watch:
                        value = fn(*args, **kwargs)
                else:
                    value = fn(*args, **kwargs)
                tree = self._encode(value, blobs)
                changed = self._changed_args(header, arg_blobs, args, kwargs)  # after the watch
            finally:
                _disarm()
            if _timer["fired"]:
                raise _Deadline()
            largest = int(watch.largest) if watch is not None else 0
            seen = list(watch.seen) if watch else []
            return {"status": "ok", "value": tree, "seen": seen, "largest": largest, "changed": changed}, blobs
        except _Deadline:
            return {"status": "timeout", "msg": f"took longer than {limit:g} s", "seen": _seen(watch)}, []
        except _BadType as e:
            return {"status": "bad_type", "msg": _short(e.args[0]), "seen": _seen(watch)}, []
        except NotImplementedError:
            return {"status": "not_implemented", "msg": "not implemented yet", "seen": _seen(watch)}, []
        except RecursionError:
            return {"status": "error", "msg": "raised RecursionError (infinite recursion?)", "seen": _seen(watch)}, []
        except MemoryError:
            mb = self.limits["memory_mb"]
            return {
                "status": "error",
                "msg": f"raised MemoryError (more than {mb} MB of memory)",
                "seen": _seen(watch),
            }, []
        except BaseException as e:  # noqa: BLE001 - any student error is a graded outcome
            err = e
            msg = _guarded(lambda: f"raised {type(err).__name__}: {_safe_str(err)}", "raised an exception")
            msg += _guarded(lambda: _student_line(err), "")
            operands = _guarded(lambda: _student_operands(err, self._tensor_words, self._operand_words), "")
            return {"status": "error", "msg": msg, "operands": operands, "seen": _seen(watch)}, []
