"""Run untrusted notebook code in a sandbox, and get back only plain arrays.

The grader never runs a student's code in its own process. A :class:`Runner` keeps one warm
worker ("zygote", :mod:`course_lib.grading._worker`) that has already imported torch; for
each submission the zygote forks a fresh process that runs the notebook's cells and then
calls the graded functions, inside these walls:

* **bubblewrap** (when ``bwrap`` works here): the zygote runs in an allowlisted, read-only
  file system (the system libraries, the Python install and its packages; never the course's
  own source, the submissions or the gradebook), with no network, its own PID, IPC and UTS
  namespaces, and only the capabilities the per-submission step needs.
* **namespaces** (no bwrap, but root and Linux namespaces): the zygote builds the same
  allowlisted root itself (``unshare`` + ``pivot_root``) and a new network namespace.
* per submission, in both: the child is PID 1 of a fresh PID namespace (when it ends, every
  process it started ends: fork bombs, daemons) with its own mount, IPC, UTS and network
  namespaces, a size-limited scratch ``tmpfs`` as its only writable place, a fresh
  ``/proc``, rlimits (address space, processes, file size, open files, CPU time, no core
  dumps), an unprivileged uid (``60000 + slot``) without capabilities, ``no_new_privs``,
  stdin from ``/dev/null``, and the submission's wall-clock limit enforced by SIGKILL.
* **none** (``mode="off"``): still a fresh forked process with rlimits per submission, but
  no walls; only for trusted code.

Time limits: each cell gets ``cell_seconds`` of wall-clock time, each call ``call_seconds``
of CPU time (robust to a busy machine; a wall-clock backstop of 5x catches a call that
sleeps), the whole submission ``submission_seconds`` of wall-clock time. A cell or call over
its limit is interrupted (the rest of the notebook still runs); code that blocks or ignores
the signals is killed at the submission limit, and the calls not made by then are reported
as not run.

What comes back is parsed here as JSON and ``.npy`` bytes only (never unpickled), checked
(dtypes, shapes, sizes) and rebuilt into plain tensors; objects made by student code never
reach the grader. Results are streamed call by call, so a crash or a hang later in a
submission keeps the results already made.
"""

from __future__ import annotations

import io
import json
import math
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import _worker
from .core import Call, Outcome

__all__ = ["Limits", "Job", "RunResult", "Runner", "SandboxUnavailable", "detect_isolation"]

WORKER = Path(_worker.__file__).resolve()
SCRATCH = "/sandbox/tmp"  # inside the sandbox: the only writable folder (a fresh tmpfs per job)
BASE_UID = 60000
_READY_SECONDS = 180.0       # a cold start imports torch; a loaded machine can be slow
_WATCHDOG_GRACE = 30.0       # the zygote enforces the limit; this only catches a stuck zygote
_OUTCOME_STATUSES = ("ok", "not_implemented", "error", "timeout", "bad_type")
_NPY_DTYPES = {np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                     "uint64", "float16", "float32", "float64")}


class SandboxUnavailable(RuntimeError):
    """The requested isolation cannot be had here, or the sandbox cannot start."""


@dataclass
class Limits:
    """Resource limits of one submission (see the module docstring)."""

    call_seconds: float = 10.0        # one call of a student function (CPU time; wall-clock backstop 5x)
    submission_seconds: float = 60.0  # whole submission (cells + all calls), wall clock
    memory_mb: int = 1024             # extra address space beyond what the warm process already has
    processes: int = 32               # max processes/threads for the sandboxed uid
    output_bytes: int = 1_000_000     # stdout+stderr kept / file size limit
    scratch_mb: int = 64              # size of the writable scratch tmpfs
    cell_seconds: float | None = None  # one cell, wall clock; None: half the submission limit


@dataclass
class Job:
    """One submission: its code cells (in order) and the calls to make afterwards."""

    cells: list[str]
    calls: dict[str, list[Call]]


@dataclass
class RunResult:
    """What running one submission gave. ``outcomes`` has the keys and lengths of ``Job.calls``;
    an ``ok`` outcome's value is plain data (tensors, numbers, tuples) rebuilt from arrays."""

    outcomes: dict[str, list[Outcome]]
    missing: list[str]
    cell_errors: list[str]
    reference_access: list[str]
    status: str                   # "ok" | "timeout" | "crashed"
    message: str                  # for the student when status != "ok"
    output_tail: str
    seconds: float


# --------------------------------------------------------------------------- isolation

_detected: str | None = None
_detect_lock = threading.Lock()


def detect_isolation() -> str:
    """The strongest isolation that works here: ``"bubblewrap"``, ``"namespaces"`` or ``"none"``.

    Probed once per process (a real run of the per-submission isolation, without torch).
    """
    global _detected
    with _detect_lock:
        if _detected is None:
            _detected = "none"
            for level in ("bubblewrap", "namespaces"):
                if _probe(level):
                    _detected = level
                    break
        return _detected


def _probe(isolation: str) -> bool:
    if isolation == "bubblewrap" and not shutil.which("bwrap"):
        return False
    if sys.platform != "linux":
        return False
    try:
        cmd, env, _ = _command(isolation, [], probe=True)
        out = _spawner.run(cmd, env=env, timeout=60)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return out.returncode == 0 and "probe-ok" in out.stdout


def _under(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _site_dirs() -> list[str]:
    """Where numpy, torch and matplotlib (and their dependencies) are installed."""
    import site

    import matplotlib

    dirs: list[str] = []
    for mod in (np, torch, matplotlib):
        d = str(Path(mod.__file__).parent.parent)
        if d not in dirs:
            dirs.append(d)
    try:
        extra = site.getsitepackages()
    except AttributeError:
        extra = []
    for d in extra:
        if os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    return dirs


def _allowlist(hide: list[str]) -> list[list[str]]:
    """The sandbox's file system: read-only binds of what Python needs, nothing else."""
    spec: list[list[str]] = []
    roots: list[str] = ["/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            spec.append(["symlink", os.readlink(d), d])
        elif os.path.isdir(d):
            roots.append(d)
    for p in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/nsswitch.conf",
              "/etc/passwd", "/etc/group", "/etc/hosts", "/etc/fonts", "/etc/mime.types"):
        if os.path.exists(p):
            roots.append(p)
    py = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
          os.path.dirname(os.path.realpath(sys.executable)), *_site_dirs()]
    roots += [os.path.normpath(p) for p in py if p and os.path.exists(p)]
    kept: list[str] = []
    for p in sorted(set(roots), key=len):
        if not any(_under(p, k) for k in kept):
            kept.append(p)
    spec += [["ro", os.path.realpath(p), p] for p in sorted(kept)]
    # Never the course's source (its reference implementations), nor what the caller hides,
    # should one of them lie inside an allowed folder.
    package = str(Path(__file__).resolve().parents[1])
    hidden = [package, str(Path(package).parent / "solutions"), *hide]
    for h in hidden:
        h = os.path.normpath(os.path.abspath(h))
        if any(_under(h, k) and h != k for k in kept) and os.path.isdir(h):
            spec.append(["tmpfs", h])
    spec += [["dev", "/dev"], ["proc", "/proc"]]
    return spec


def _command(isolation: str, hide: list[str], probe: bool = False) -> tuple[list[str], dict, str | None]:
    """The zygote's command line and environment; the last item is a host temp dir to remove later."""
    # The sandbox's writable folder is SCRATCH, not /tmp: the course's own files (the venv) may
    # live under /tmp (a CI checkout), and a tmpfs on /tmp would hide them.
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SCRATCH, "TMPDIR": SCRATCH, "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "MPLBACKEND": "Agg", "MPLCONFIGDIR": SCRATCH + "/matplotlib", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MALLOC_ARENA_MAX": "2"}
    py = [sys.executable, "-S", "-s", "-B"] + (["-P"] if sys.version_info >= (3, 11) else [])
    args = ["--isolation", isolation]
    for d in _site_dirs():
        args += ["--site", d]
    if probe:
        args.append("--probe")
    tmp = None
    if isolation == "bubblewrap":
        cmd = ["bwrap", "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-pid", "--unshare-net",
               "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox",
               "--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETUID",
               "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL"]
        spec = _allowlist(hide)
        parents: list[str] = ["/sandbox"]
        for item in spec:  # bwrap would make missing parent folders 0700: unreadable after the uid drop
            if item[0] == "ro":
                a = os.path.dirname(item[2])
                while a not in ("/", "") and a not in parents:
                    parents.append(a)
                    a = os.path.dirname(a)
        for a in sorted(parents, key=lambda p: p.count("/")):
            cmd += ["--perms", "0755", "--dir", a]
        for item in spec:
            if item[0] == "ro":
                cmd += ["--ro-bind", item[1], item[2]]
            elif item[0] == "symlink":
                cmd += ["--symlink", item[1], item[2]]
            elif item[0] == "tmpfs":
                cmd += ["--tmpfs", item[1], "--remount-ro", item[1]]
            elif item[0] == "dev":
                cmd += ["--dev", item[1]]
            elif item[0] == "proc":
                cmd += ["--proc", item[1]]
        cmd += ["--tmpfs", SCRATCH, "--ro-bind", str(WORKER), "/sandbox/worker.py", "--remount-ro", "/",
                "--chdir", SCRATCH, *py, "/sandbox/worker.py", *args]
    elif isolation == "namespaces":
        cmd = [*py, str(WORKER), *args, "--root", json.dumps(_allowlist(hide))]
    elif isolation == "none":
        tmp = tempfile.mkdtemp(prefix="sandbox-zygote-")
        os.chmod(tmp, 0o711)  # the unprivileged job may enter its own scratch folder, not list the others
        env.update({"HOME": tmp, "TMPDIR": tmp, "MPLCONFIGDIR": os.path.join(tmp, "matplotlib")})
        cmd = [*py, str(WORKER), *args]
    else:
        raise ValueError(f"unknown isolation {isolation!r}")
    return cmd, env, tmp


class _Spawner:
    """Starts processes from one long-lived thread.

    The zygote dies with the thread that started it (bwrap's --die-with-parent and
    PR_SET_PDEATHSIG follow the parent *thread*), so it must not be started from a grader
    thread that may end while the runner lives on.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: list = []
        self._cond = threading.Condition(self._lock)

    def _loop(self):
        while True:
            with self._cond:
                while not self._requests:
                    self._cond.wait()
                fn, box, done = self._requests.pop(0)
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box["error"] = e
            done.set()

    def call(self, fn):
        if threading.current_thread() is self._thread:
            return fn()
        box: dict = {}
        done = threading.Event()
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="sandbox-spawner", daemon=True)
                self._thread.start()
            self._requests.append((fn, box, done))
            self._cond.notify()
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def popen(self, cmd, **kw) -> subprocess.Popen:
        return self.call(lambda: subprocess.Popen(cmd, **kw))

    def run(self, cmd, env, timeout) -> subprocess.CompletedProcess:
        proc = self.popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True, cwd="/")
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _killpg(proc)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


_spawner = _Spawner()


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, OSError):
        pass


# --------------------------------------------------------------------------- encoding


def _encode_arg(v: Any, blobs: list[bytes], depth: int = 0) -> dict:
    if depth > 16:
        raise TypeError("call argument nested too deeply")
    if isinstance(v, torch.Tensor):
        x = v.detach().cpu()
        dtype = str(x.dtype)
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        buf = io.BytesIO()
        np.save(buf, x.resolve_conj().resolve_neg().contiguous().numpy(), allow_pickle=False)
        blobs.append(buf.getvalue())
        return {"t": "tensor", "b": len(blobs) - 1, "dtype": dtype}
    if v is None:
        return {"t": "none"}
    if type(v) is bool:
        return {"t": "bool", "v": v}
    if type(v) is int:
        return {"t": "int", "v": v}
    if type(v) is float:
        return {"t": "float", "v": v if math.isfinite(v) else repr(v)}
    if type(v) is str:
        return {"t": "str", "v": v}
    if type(v) in (tuple, list):
        return {"t": type(v).__name__, "items": [_encode_arg(a, blobs, depth + 1) for a in v]}
    raise TypeError("call arguments must be tensors, numbers, strings, None or tuples of those, "
                    f"not {type(v).__name__}")


def _encode_job(job: Job, limits: Limits, uid: int) -> tuple[dict, list[bytes]]:
    blobs: list[bytes] = []
    calls = []
    for name, cs in job.calls.items():
        calls.append([str(name), [{"args": [_encode_arg(a, blobs) for a in c.args],
                                   "kwargs": [[str(k), _encode_arg(v, blobs)] for k, v in c.kwargs.items()]}
                                  for c in cs]])
    lim = asdict(limits)
    if lim.get("cell_seconds") is None:
        lim["cell_seconds"] = limits.submission_seconds / 2
    return {"t": "job", "cells": [str(c) for c in job.cells], "calls": calls, "limits": lim, "uid": uid}, blobs


class _Lost(Exception):
    """The zygote died, hung or broke the protocol during a job."""


class _NotSent(_Lost):
    """The job could not be handed to the zygote."""


class _BadResult(Exception):
    """A result that cannot be turned into plain data: the call counts as bad_type."""


def _load_npy(data: bytes) -> np.ndarray:
    """An array from ``.npy`` bytes, checked before anything is allocated; never unpickles."""
    fp = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=10000)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=10000)
        else:
            raise ValueError("unknown .npy version")
    except (ValueError, OSError, SyntaxError, TypeError) as e:
        raise _BadResult(f"returned data that is not a readable array ({e})") from None
    if dtype.newbyteorder("=") not in _NPY_DTYPES or dtype.hasobject or dtype.fields:
        raise _BadResult(f"returned a tensor of dtype {dtype}, expected real numbers or booleans")
    if not isinstance(shape, tuple) or len(shape) > 32 or not all(type(s) is int and s >= 0 for s in shape):
        raise _BadResult("returned a tensor of an invalid shape")
    count = math.prod(shape)
    offset = fp.tell()
    if count * dtype.itemsize != len(data) - offset:
        raise _BadResult("returned a tensor whose data does not match its shape")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    arr = arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
    return arr.astype(dtype.newbyteorder("="), order="C", copy=True)  # (np.ascontiguousarray makes 0-d 1-d)


def _decode_value(node: Any, blobs: list[bytes], depth: int = 0) -> Any:
    if depth > 16 or not isinstance(node, dict):
        raise _BadResult("returned a value of an unexpected form")
    t = node.get("t")
    if t == "tensor":
        b = node.get("b")
        if type(b) is not int or not 0 <= b < len(blobs):
            raise _BadResult("returned a value of an unexpected form")
        x = torch.from_numpy(_load_npy(blobs[b]).copy())
        if node.get("dtype") == "torch.bfloat16" and x.dtype == torch.float32:
            x = x.to(torch.bfloat16)
        return x
    if t == "tuple":
        items = node.get("items")
        if not isinstance(items, list) or len(items) > 1024:
            raise _BadResult("returned a value of an unexpected form")
        return tuple(_decode_value(v, blobs, depth + 1) for v in items)
    v = node.get("v")
    if t == "bool" and type(v) is bool:
        return v
    if t == "int" and type(v) is int:
        return v
    if t == "float":
        if type(v) in (int, float):
            return float(v)
        if v in ("nan", "inf", "-inf"):
            return float(v)
    raise _BadResult("returned a value of an unexpected form")


def _text(v: Any, limit: int = 500) -> str:
    s = v if isinstance(v, str) else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


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
    """

    def __init__(self, mode: str = "auto", limits: Limits | None = None, slot: int = 0,
                 hide: list[str] | None = None, _force: str | None = None):
        if mode not in ("auto", "required", "off"):
            raise ValueError(f"sandbox mode must be 'auto', 'required' or 'off', not {mode!r}")
        self.limits = limits if limits is not None else Limits()
        self.slot = int(slot)
        if not 0 <= self.slot < 5000:
            raise ValueError("slot must be between 0 and 4999")
        self.uid = BASE_UID + self.slot
        self.hide = [str(h) for h in (hide or [])]
        if _force is not None:
            if _force not in ("bubblewrap", "namespaces", "none"):
                raise ValueError(f"unknown isolation {_force!r}")
            if _force != "none" and not _probe(_force):
                raise SandboxUnavailable(f"{_force} isolation does not work on this machine")
            isolation = _force
        elif mode == "off":
            isolation = "none"
        else:
            isolation = detect_isolation()
            if mode == "required" and isolation not in ("bubblewrap", "namespaces"):
                raise SandboxUnavailable(
                    "no sandbox is available here (needs bubblewrap, or root with Linux namespaces); "
                    "refusing to run student code without one (use --sandbox auto or off to allow it)")
        self.isolation = isolation
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self._log = None
        self._tmp: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer = weakref.finalize(self, Runner._cleanup, [None, None])
        self._start()

    # ------------------------------------------------------------ process
    @staticmethod
    def _cleanup(state: list) -> None:
        proc, tmp = state
        if proc is not None and proc.poll() is None:
            _killpg(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    def _start(self) -> None:
        cmd, env, tmp = _command(self.isolation, self.hide)
        self._log = tempfile.TemporaryFile()
        self._tmp = tmp
        self._proc = _spawner.popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=self._log, start_new_session=True, cwd="/", close_fds=True)
        os.set_blocking(self._proc.stdin.fileno(), False)
        self._reader = _worker.FrameReader(max_header=64 << 20, max_total=1 << 62)
        self._ready = False
        self._pending: list = []
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, Runner._cleanup, [self._proc, tmp])

    def _stop(self) -> None:
        proc, tmp = self._proc, self._tmp
        self._proc, self._tmp, self._ready = None, None, False
        if proc is not None:
            _killpg(proc)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for f in (proc.stdin, proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self) -> str:
        try:
            self._log.seek(0)
            return self._log.read().decode("utf-8", "replace")[-2000:]
        except (OSError, ValueError, AttributeError):
            return ""

    def _read_frame(self, deadline: float) -> tuple[dict, list[bytes]] | None:
        """The zygote's next frame, or None at EOF or past the deadline."""
        fd = self._proc.stdout.fileno()
        while True:
            if self._pending:
                return self._pending.pop(0)
            got = self._reader.frames()
            if got:
                self._pending = got
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            data = os.read(fd, 1 << 20)
            if not data:
                return None
            self._reader.feed(data)

    def _write(self, data: bytes, deadline: float) -> bool:
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _, ready, _ = select.select([], [fd], [], left)
            if not ready:
                continue
            try:
                n = os.write(fd, view[: 1 << 16])
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                return False
            view = view[n:]
        return True

    def _ensure_ready(self) -> None:
        for attempt in range(2):
            if self._proc is None or self._proc.poll() is not None:
                self._stop()
                self._start()
            if self._ready:
                return
            self._pending = []
            frame = self._read_frame(time.monotonic() + _READY_SECONDS)
            if frame is not None and frame[0].get("t") == "ready":
                self._ready = True
                return
            log = self._log_tail()
            self._stop()
            if attempt == 1:
                raise SandboxUnavailable(f"the sandbox worker ({self.isolation}) did not start" +
                                         (f":\n{log}" if log.strip() else ""))
            self._start()

    # ------------------------------------------------------------ public
    def run(self, job: Job) -> RunResult:
        """Run one submission; never raises for anything the student's code does."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Runner is closed")
            t0 = time.monotonic()
            self._ensure_ready()
            header, blobs = _encode_job(job, self.limits, self.uid)
            names = list(job.calls)
            outcomes: dict[str, list[Outcome | None]] = {n: [None] * len(job.calls[n]) for n in names}
            missing: list[str] = []
            cell_errors: list[str] = []
            refs: list[str] = []
            end: dict | None = None
            deadline = t0 + self.limits.submission_seconds + _WATCHDOG_GRACE
            self._pending = []
            self._reader = _worker.FrameReader(max_header=1 << 20, max_total=_worker.MAX_RESULT_BYTES + (8 << 20))
            lost = "the sandbox stopped responding"
            try:
                try:
                    end = self._exchange(header, blobs, deadline, outcomes, missing, cell_errors, refs)
                except _NotSent:
                    # the zygote had died before taking the job (no student code ran): once more
                    self._stop()
                    self._ensure_ready()
                    self._pending = []
                    self._reader = _worker.FrameReader(max_header=1 << 20,
                                                       max_total=_worker.MAX_RESULT_BYTES + (8 << 20))
                    end = self._exchange(header, blobs, deadline, outcomes, missing, cell_errors, refs)
            except _Lost as e:
                lost, end = str(e), None
            except BaseException:
                # interrupted mid-job (KeyboardInterrupt...): the zygote may still be talking
                # about this job, so it must not serve the next one
                self._stop()
                raise
            if end is None:
                # The zygote died or hung: restart it; this submission counts as crashed.
                self._stop()
                try:
                    self._start()
                except OSError:
                    pass
                status, message, tail = "crashed", lost, ""
            else:
                status = end.get("status")
                if status == "fatal":
                    self._stop()
                    raise SandboxUnavailable(_text(end.get("message"), 2000))
                message, tail = _text(end.get("message"), 2000), _text(end.get("tail"), 8000)
                if status not in ("ok", "timeout", "crashed"):
                    status, message = "crashed", "protocol"
            message = self._message(status, message)
            why = {"timeout": f"the notebook was stopped after {self.limits.submission_seconds:g} s (timed out)",
                   "crashed": "the notebook's process crashed"}.get(status, "no result came back")
            final: dict[str, list[Outcome]] = {}
            for n in names:
                final[n] = []
                for o in outcomes[n]:
                    if o is None:
                        if n in missing:
                            o = Outcome("error", message=f"not run: no function named {n} was defined")
                        else:
                            o = Outcome("error", message=f"not run: {why}")
                    final[n].append(o)
            return RunResult(outcomes=final, missing=missing, cell_errors=cell_errors, reference_access=refs,
                             status=status, message=message, output_tail=tail, seconds=time.monotonic() - t0)

    def _exchange(self, header, blobs, deadline, outcomes, missing, cell_errors, refs) -> dict:
        """Send one job, collect its frames until the zygote's "end" frame (returned)."""
        try:
            sent = self._write(_worker.encode_frame(header, blobs), deadline)
        except (OSError, ValueError):
            sent = False
        if not sent:
            raise _NotSent("the sandbox stopped responding")
        while True:
            try:
                frame = self._read_frame(deadline)
            except _worker.ProtocolError as e:
                raise _Lost(f"the sandbox sent malformed data ({e})") from None
            if frame is None:
                raise _Lost("the sandbox stopped responding")
            h, b = frame
            t = h.get("t")
            if t == "end":
                return h
            if t == "result":
                self._take_result(h, b, outcomes)
            elif t == "cell_error" and len(cell_errors) < 1000:
                cell_errors.append(_text(h.get("msg")))
            elif t == "missing" and h.get("name") in outcomes and h["name"] not in missing:
                missing.append(h["name"])
            elif t == "ref" and len(refs) < 100:
                name = _text(h.get("name"), 200)
                entry = (f"course_lib object {name} modified" if h.get("kind") == "modified"
                         else f"reference implementation {name} accessed")
                if name and entry not in refs:
                    refs.append(entry)

    def _take_result(self, h: dict, blobs: list[bytes], outcomes: dict[str, list[Outcome | None]]) -> None:
        name, i = h.get("fn"), h.get("i")
        if name not in outcomes or type(i) is not int or not 0 <= i < len(outcomes[name]):
            return
        if outcomes[name][i] is not None:
            return  # the first answer counts
        status = h.get("status")
        if status not in _OUTCOME_STATUSES:
            return
        if status != "ok":
            outcomes[name][i] = Outcome(status, message=_text(h.get("msg")))
            return
        try:
            value = _decode_value(h.get("value"), blobs)
        except _BadResult as e:
            outcomes[name][i] = Outcome("bad_type", message=str(e))
            return
        except (ValueError, TypeError, OverflowError, MemoryError, RuntimeError) as e:
            outcomes[name][i] = Outcome("bad_type",
                                        message=f"returned a value that cannot be read ({type(e).__name__})")
            return
        outcomes[name][i] = Outcome("ok", value=value)

    def _message(self, status: str, detail: str) -> str:
        if status == "ok":
            return ""
        lim = self.limits
        rest = " Calls that had not run yet count as failed."
        if status == "timeout":
            return (f"Your notebook was stopped after {lim.submission_seconds:g} s, the time limit for a whole "
                    f"submission (an infinite loop, or code that ignores the {lim.call_seconds:g} s limit per "
                    f"call?).{rest}")
        if detail.startswith("exit:"):
            return (f"Your notebook's process exited (exit code {detail[5:]}) before grading finished "
                    f"(os._exit(), or a library that crashed).{rest}")
        if detail == "signal:SIGKILL":
            return ("Your notebook's process was killed before grading finished, most likely for using too "
                    f"much memory (limit {lim.memory_mb} MB) or CPU time.{rest}")
        if detail.startswith("signal:"):
            return f"Your notebook's process crashed ({detail[7:]}) before grading finished.{rest}"
        if detail == "memory":
            return (f"Your notebook was stopped because the machine was running out of memory (limit "
                    f"{lim.memory_mb} MB per process).{rest}")
        if detail.startswith("protocol"):
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
                    self._write(_worker.encode_frame({"t": "exit"}), time.monotonic() + 1.0)
                    proc.stdin.close()
                    proc.wait(timeout=2)
                except (OSError, ValueError, subprocess.TimeoutExpired):
                    pass
            self._stop()
            self._finalizer.detach()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Runner(isolation={self.isolation!r}, slot={self.slot}, limits={self.limits})"
