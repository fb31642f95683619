"""Which isolation works here, and the zygote's command line for each.

* :func:`detect_isolation` / :func:`probe`: the strongest level that works, found by running
  the worker's own jail recipe (``--probe``) under it.
* :func:`allowlist`: the sandbox's read-only file system (what Python, numpy, torch and
  matplotlib need; never the course's source, nor the folders the caller hides).
* :func:`command`: the worker's command line and environment under ``bubblewrap``,
  ``namespaces`` or ``none``.
* :data:`spawner`: starts those processes from one long-lived thread.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from .jobs import WatchLists
from .worker.protocol import BOOTSTRAP, SCRATCH

__all__ = ["ISOLATION_LEVELS", "detect_isolation", "probe", "allowlist", "command", "spawner", "killpg", "under"]

T = TypeVar("T")
WORKER = Path(__file__).resolve().parent / "worker"  # the worker package, bound read-only into the jail
ISOLATION_LEVELS = ("bubblewrap", "namespaces", "none")

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
                if probe(level):
                    _detected = level
                    break
        return _detected


def probe(isolation: str) -> bool:
    """Whether ``isolation`` works here: a real run of the jobs' jail recipe (``--probe``)."""
    if isolation == "bubblewrap" and not shutil.which("bwrap"):
        return False
    if sys.platform != "linux":
        return False
    try:
        cmd, env, _ = command(isolation, [], None)
        out = spawner.run(cmd, env=env, timeout=60)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return out.returncode == 0 and "probe-ok" in out.stdout


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or lies inside it (no file system access)."""
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def _site_dirs() -> list[str]:
    """Where numpy, torch and matplotlib (and their dependencies) are installed."""
    import site

    import matplotlib

    dirs: list[str] = []
    for mod in (np, torch, matplotlib):
        d = str(Path(str(mod.__file__)).parent.parent)
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


def allowlist(hide: list[str]) -> list[list[str]]:
    """The sandbox's file system: read-only binds of what Python needs, nothing else."""
    spec: list[list[str]] = []
    roots: list[str] = ["/usr"]
    for d in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(d):
            spec.append(["symlink", os.readlink(d), d])
        elif os.path.isdir(d):
            roots.append(d)
    for p in (
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/nsswitch.conf",
        "/etc/passwd",
        "/etc/group",
        "/etc/hosts",
        "/etc/fonts",
        "/etc/mime.types",
    ):
        if os.path.exists(p):
            roots.append(p)
    py = [
        sys.base_prefix,
        sys.base_exec_prefix,
        sys.prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *_site_dirs(),
    ]
    roots += [os.path.normpath(p) for p in py if p and os.path.exists(p)]
    kept: list[str] = []
    for p in sorted(set(roots), key=len):
        if not any(under(p, k) for k in kept):
            kept.append(p)
    spec += [["ro", os.path.realpath(p), p] for p in sorted(kept)]
    # Never the course's source (its reference implementations), nor what the caller hides,
    # should one of them lie inside an allowed folder.
    package = str(Path(__file__).resolve().parents[2])  # course_lib
    hidden = [package, str(Path(package).parent / "solutions"), *hide]
    for h in hidden:
        h = os.path.normpath(os.path.abspath(h))
        if any(under(h, k) and h != k for k in kept) and os.path.isdir(h):
            spec.append(["tmpfs", h])
    spec += [["dev", "/dev"], ["proc", "/proc"]]
    return spec


def command(isolation: str, hide: list[str], watch: WatchLists | None) -> tuple[list[str], dict[str, str], str | None]:
    """The zygote's command line and environment; the last item is a host temp dir to remove later.

    The worker package is started by :data:`~.worker.protocol.BOOTSTRAP` from the folder that
    holds it (``/sandbox`` under bubblewrap, where it is bound read-only at ``/sandbox/worker``).
    ``watch`` is what the warm worker prepares for the runtime layer (its sources bound
    read-only at ``/sandbox/opwatch.py`` and ``/sandbox/operands.py``); without it, the command
    only probes the jail (``--probe``)."""
    # The sandbox's writable folder is SCRATCH, not /tmp: the course's own files (the venv) may
    # live under /tmp (a CI checkout), and a tmpfs on /tmp would hide them.
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": SCRATCH + "/matplotlib",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "MALLOC_ARENA_MAX": "2",
        # the C heap on transparent huge pages as it grows: fewer page-table entries for every
        # fork to copy (see zygote.huge_pages, which collapses the rest)
        "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1",
    }
    py = [sys.executable, "-S", "-s", "-B", *(["-P"] if sys.version_info >= (3, 11) else []), "-c", BOOTSTRAP]
    args = ["--isolation", isolation]
    if watch is not None:
        args += ["--watch-functions", ",".join(watch.functions), "--watch-ops", ",".join(watch.ops)]
    for d in _site_dirs():
        args += ["--site", d]
    if watch is None:
        args.append("--probe")
    sources = _sources(watch)
    tmp = None
    if isolation == "bubblewrap":
        cmd = _bwrap_command(py, args, hide, sources)
    elif isolation == "namespaces":
        cmd = [*py, str(WORKER.parent), *args, *_source_args(sources), "--root", json.dumps(allowlist(hide))]
    elif isolation == "none":
        tmp = tempfile.mkdtemp(prefix="sandbox-zygote-")
        os.chmod(tmp, 0o711)  # the unprivileged job may enter its own scratch folder, not list the others
        env.update({"HOME": tmp, "TMPDIR": tmp, "MPLCONFIGDIR": os.path.join(tmp, "matplotlib")})
        cmd = [*py, str(WORKER.parent), *args, *_source_args(sources)]
    else:
        raise ValueError(f"unknown isolation {isolation!r}")
    return cmd, env, tmp


def _sources(watch: WatchLists | None) -> dict[str, str]:
    """The sources of the grader's modules the worker runs: its argument (``--opwatch``,
    ``--operands``) -> the file's absolute path on the host (none when probing)."""
    if watch is None:
        return {}
    return {"--opwatch": str(Path(watch.opwatch).resolve()), "--operands": str(Path(watch.operands).resolve())}


def _source_args(sources: dict[str, str]) -> list[str]:
    """The worker's arguments for the ``sources`` (:func:`_sources`)."""
    return [x for arg, path in sources.items() for x in (arg, path)]


def _bwrap_command(py: list[str], args: list[str], hide: list[str], sources: dict[str, str]) -> list[str]:
    """Bubblewrap's command line: new namespaces, the capabilities the zygote needs for each
    job's jail, the allowlisted root (:func:`_bwrap_mounts`), then the worker (``py``, ``args``)."""
    cmd = [
        "bwrap",
        "--die-with-parent",
        "--new-session",
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CAP_SYS_ADMIN",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_KILL",
    ]
    cmd += _bwrap_mounts(allowlist(hide))
    cmd += [
        "--tmpfs",
        SCRATCH,
        "--ro-bind",
        str(WORKER),
        "/sandbox/worker",
        *[x for arg, path in sources.items() for x in ("--ro-bind", path, _bound(arg))],
        "--remount-ro",
        "/",
        "--chdir",
        SCRATCH,
        *py,
        "/sandbox",
        *args,
        *_source_args({arg: _bound(arg) for arg in sources}),
    ]
    return cmd


def _bound(arg: str) -> str:
    """Where bubblewrap binds the source given as ``arg`` (``--opwatch``: ``/sandbox/opwatch.py``)."""
    return f"/sandbox/{arg.removeprefix('--')}.py"


def _bwrap_mounts(spec: list[list[str]]) -> list[str]:
    """Bubblewrap's arguments for the allowlist ``spec`` (see :func:`allowlist`)."""
    cmd: list[str] = []
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
    return cmd


class Spawner:
    """Starts processes from one long-lived thread.

    The zygote dies with the thread that started it (bwrap's --die-with-parent and
    PR_SET_PDEATHSIG follow the parent *thread*), so it must not be started from a grader
    thread that may end while the runner lives on.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._requests: list[tuple[Callable[[], Any], dict[str, Any], threading.Event]] = []
        self._cond = threading.Condition(self._lock)

    def _loop(self) -> None:
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

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, run on the spawner's thread."""
        if threading.current_thread() is self._thread:
            return fn()
        box: dict[str, Any] = {}
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

    def popen(self, cmd: list[str], **kw: Any) -> subprocess.Popen:
        return self.call(lambda: subprocess.Popen(cmd, **kw))

    def run(self, cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
        proc = self.popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            cwd="/",
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            killpg(proc)
            out, err = proc.communicate()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


spawner = Spawner()


def killpg(proc: subprocess.Popen) -> None:
    """SIGKILL to a process started in its own session, and to its group."""
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, OSError):
        pass
