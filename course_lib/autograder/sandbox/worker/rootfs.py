"""Namespaces mode: the zygote's allowlisted, read-only root file system, built without bubblewrap.

What bubblewrap does from its command line, done here from the grader's allowlist
(``--root``): new mount, network, IPC and UTS namespaces, the allowed folders bound
read-only into a fresh tmpfs, a minimal ``/dev``, a fresh ``/proc``, a scratch tmpfs at
:data:`~.protocol.SCRATCH`, then ``pivot_root`` into it. The course's own folder is never
bound, so after this the worker's own source is gone too: the worker imports all its
modules before.
"""

from __future__ import annotations

import os

from . import syscalls as sc
from .protocol import SCRATCH


def _unescape_mount_path(p: str) -> str:
    """Undo /proc/self/mountinfo's octal escapes (\\040 for a space...), without importing codecs."""
    out, i = [], 0
    while i < len(p):
        if p[i] == "\\" and i + 3 < len(p) and p[i + 1 : i + 4].isdigit():
            out.append(chr(int(p[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(p[i])
            i += 1
    return "".join(out)


def build_root(spec: list[list[str]]) -> None:
    """Namespaces mode: an allowlisted, read-only root (what bwrap does), then pivot_root into it.

    ``spec`` is a list of ``["ro", src, dst]``, ``["symlink", target, dst]``, ``["tmpfs", dst]``,
    ``["dev", dst]``, ``["proc", dst]``.
    """
    sc.unshare(sc.CLONE_NEWNS | sc.CLONE_NEWNET | sc.CLONE_NEWIPC | sc.CLONE_NEWUTS)
    sc.mount(None, "/", None, sc.MS_REC | sc.MS_PRIVATE)
    base = "/tmp"
    sc.mount("tmpfs", base, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "size=1m,mode=0755")
    os.mkdir(base + "/newroot", 0o755)
    os.mkdir(base + "/oldroot", 0o755)
    sc.pivot_root(base, base + "/oldroot")
    os.chdir("/")
    old = "/oldroot"
    new = "/newroot"
    sc.mount("tmpfs", new, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "size=1m,mode=0755")
    ro_targets: list[str] = []
    for item in spec:
        _mount_item(item, old, new, ro_targets)
    _remount_read_only(old, new, ro_targets)
    _ensure(new + SCRATCH, True)
    sc.mount("tmpfs", new + SCRATCH, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "size=64m,mode=0755")
    os.chdir(new)
    sc.pivot_root(".", ".")
    sc.umount(".", sc.MNT_DETACH)
    os.chdir("/")
    sc.mount(None, "/", None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV)
    try:
        sc.sethostname(b"sandbox")
    except OSError:
        pass


def _ensure(path: str, is_dir: bool) -> None:
    """Make ``path`` (a folder, or an empty file) and its parents, where missing."""
    parent = os.path.dirname(path)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    if is_dir:
        os.makedirs(path, mode=0o755, exist_ok=True)
    elif not os.path.exists(path):
        with open(path, "w"):
            pass


def _mount_item(item: list[str], old: str, new: str, ro_targets: list[str]) -> None:
    """One item of :func:`build_root`'s ``spec``, from the old root (``old``) into the new one
    (``new``); the mounts to make read-only afterwards are added to ``ro_targets``."""
    kind = item[0]
    if kind == "ro":
        src, dst = old + item[1], new + item[2]
        _ensure(dst, os.path.isdir(src))
        sc.mount(src, dst, None, sc.MS_BIND | sc.MS_REC)
        ro_targets.append(dst)
    elif kind == "symlink":
        dst = new + item[2]
        os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)
        os.symlink(item[1], dst)
    elif kind == "tmpfs":
        dst = new + item[1]
        _ensure(dst, True)
        sc.mount("tmpfs", dst, "tmpfs", sc.MS_NOSUID | sc.MS_NODEV, "size=1m,mode=0755")
        ro_targets.append(dst)
    elif kind == "dev":
        _mount_dev(new + item[1], old)
    elif kind == "proc":
        dst = new + item[1]
        _ensure(dst, True)
        sc.mount("proc", dst, "proc", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC)


def _mount_dev(dst: str, old: str) -> None:
    """A minimal, read-only ``/dev`` at ``dst``: the harmless devices of the old root, bound."""
    _ensure(dst, True)
    sc.mount("tmpfs", dst, "tmpfs", sc.MS_NOSUID, "size=64k,mode=0755")
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists(old + "/dev/" + name):
            _ensure(dst + "/" + name, False)
            sc.mount(old + "/dev/" + name, dst + "/" + name, None, sc.MS_BIND)
    os.mkdir(dst + "/shm", 0o755)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, dst + "/" + name)
    sc.mount(None, dst, None, sc.MS_REMOUNT | sc.MS_NOSUID | sc.MS_RDONLY)


def _remount_read_only(old: str, new: str, ro_targets: list[str]) -> None:
    """Every mount made from the allowlist (``ro_targets``, and any mount below them) read-only;
    ``/dev``'s device binds are left as they are."""
    with open(old + "/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in points:
        point = _unescape_mount_path(point)
        if any(point == t or point.startswith(t.rstrip("/") + "/") for t in ro_targets):
            if point.startswith(new + "/dev/"):
                continue
            try:
                sc.mount(None, point, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID | sc.MS_NODEV)
            except OSError:
                sc.mount(None, point, None, sc.MS_REMOUNT | sc.MS_BIND | sc.MS_RDONLY | sc.MS_NOSUID)
