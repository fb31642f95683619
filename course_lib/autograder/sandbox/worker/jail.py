"""The per-job jail, written once: used by every job's student process and by the probe.

As root, :func:`enter_jail` gives the process new mount, IPC, UTS and network namespaces, a
private size-limited scratch tmpfs, a size-limited ``/dev/shm`` and a fresh ``/proc``;
:func:`drop_privileges` then sets the rlimits, drops to the job's unprivileged uid without
capabilities, sets ``no_new_privs`` and installs the seccomp filter. :func:`probe` runs this
same recipe (PID namespace included) without torch, to tell whether an isolation level works.
"""

from __future__ import annotations

import os
import resource
import signal
import traceback
from collections.abc import Iterable

from . import syscalls as sc
from .protocol import SCRATCH

PROBE_UID = 60999


def enter_jail(isolated: bool, uid: int, scratch_mb: int, scratch_host: str | None = None) -> str:
    """As root: new mount, IPC, UTS and network namespaces, a private scratch tmpfs owned by
    ``uid``, a size-limited /dev/shm, a fresh /proc. Returns the scratch folder (in mode
    ``none``: ``scratch_host``, a host folder made for the job)."""
    os.setsid()
    if not isolated:
        assert scratch_host is not None
        if os.geteuid() == 0:  # no namespaces, but never run student code as root: kill(-1) would reach everything
            os.chown(scratch_host, uid, uid)
        return scratch_host
    sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS | sc.CLONE_NEWNET)
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    sc.mount(
        "tmpfs",
        SCRATCH,
        "tmpfs",
        sc.MS_NOSUID | sc.MS_NODEV,
        f"size={scratch_mb}m,nr_inodes={max(256, scratch_mb * 64)},mode=0700,uid={uid},gid={uid}",
    )
    if os.path.isdir("/dev/shm"):
        sc.mount(
            "tmpfs",
            "/dev/shm",
            "tmpfs",
            sc.MS_NOSUID | sc.MS_NODEV,
            f"size={max(1, scratch_mb // 4)}m,nr_inodes=256,mode=0700,uid={uid},gid={uid}",
        )
    sc.mount("proc", "/proc", "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)
    try:
        sc.sethostname(b"sandbox")
    except OSError:
        pass
    return SCRATCH


def drop_privileges(isolated: bool, uid: int, rlimits: Iterable[tuple[int, int]]) -> None:
    """Set the rlimits, become ``uid`` with no capabilities, no_new_privs, not dumpable, an
    OOM-killer target, killed with the zygote; then the seccomp filter."""
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # if memory runs out, the student's processes go first
    except OSError:
        pass
    for res, val in rlimits:
        resource.setrlimit(res, (val, val))
    if isolated or os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise RuntimeError("still root after setresuid")
        sc.drop_capabilities()
    sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)
    sc.prctl(sc.PR_SET_DUMPABLE, 0)
    sc.prctl(sc.PR_SET_PDEATHSIG, signal.SIGKILL)
    sc.install_seccomp()


def probe(isolation: str) -> int:
    """Run the jobs' own jail recipe twice, without torch: PID 1 of a new PID namespace,
    :func:`enter_jail`, :func:`drop_privileges` (seccomp included), a write to the scratch
    folder, a keyring call refused. Prints ``probe-ok`` on success; returns the exit code."""
    isolated = isolation in ("bubblewrap", "namespaces")
    ok = 0
    for _ in range(2):
        r, w = os.pipe()
        scratch_host = None
        pidns_fd = -1
        if not isolated:
            import tempfile

            scratch_host = tempfile.mkdtemp(prefix="sandbox-probe-")
        if isolated:
            pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            sc.unshare(sc.CLONE_NEWPID)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                scratch = enter_jail(isolated, PROBE_UID, 1, scratch_host)
                drop_privileges(isolated, PROBE_UID, ((resource.RLIMIT_CORE, 0),))
                with open(scratch + "/x", "w") as f:
                    f.write("x")
                keyring_refused = sc.denied_syscall_refused("keyctl")  # EPERM from the filter
                jailed = os.getpid() == 1 and os.listdir("/proc").count("1") == 1 if isolated else True
                if jailed and os.getuid() == PROBE_UID and keyring_refused:
                    os.write(w, b"ok")
                    code = 0
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
            os._exit(code)
        if isolated:
            sc.setns(pidns_fd, sc.CLONE_NEWPID)
            os.close(pidns_fd)
        os.close(w)
        os.waitpid(pid, 0)
        ok += os.read(r, 2) == b"ok"
        os.close(r)
        if scratch_host:
            import shutil

            shutil.rmtree(scratch_host, ignore_errors=True)
    print("probe-ok" if ok == 2 else "probe-failed", flush=True)
    return 0 if ok == 2 else 1
