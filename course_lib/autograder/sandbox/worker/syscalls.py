"""Thin wrappers of the C library's system calls, and the seccomp filters (standard library only).

Seccomp: syscalls no notebook needs are refused with EPERM: the kernel keyrings (a uid's
keyring outlives the job, so a key added by one job would be found by the next on the same
slot), ptrace and cross-process memory access, new namespaces, mounts, and kernel interfaces
with a large attack surface. clone3 answers ENOSYS, so the C library falls back to clone(2),
whose flags a filter can read; prctl(PR_SET_DUMPABLE) is refused so the process stays
undumpable (its memory unreadable to its own children).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

# Linux constants
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 4, 22, 38
SECCOMP_MODE_FILTER = 2
MADV_COLLAPSE = 25  # Linux 6.1+

libc = ctypes.CDLL(None, use_errno=True)


def check(ret: int, what: str) -> None:
    """OSError with errno's message unless ``ret`` is 0."""
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    check(libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else os.fsencode(s)

    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    check(libc.umount2(os.fsencode(target), ctypes.c_int(flags)), f"umount {target}")


def setns(fd: int, nstype: int) -> None:
    check(libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def sethostname(name: bytes) -> None:
    check(libc.sethostname(name, len(name)), "sethostname")


def drop_capabilities() -> None:
    """Empty effective, permitted and inheritable capability sets (capset, version 3)."""
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    check(libc.capset(header, data), "capset")


def prctl(option: int, arg: int) -> None:
    check(
        libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)),
        "prctl",
    )


def collapse(start: int, length: int) -> bool:
    """Back ``length`` bytes at ``start`` (huge-page aligned) with huge pages now
    (``madvise(MADV_COLLAPSE)``); False where the kernel cannot (too old, THP off, no memory)."""
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), ctypes.c_int(MADV_COLLAPSE)) == 0


def pivot_root(new_root: str, put_old: str) -> None:
    nr = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}[os.uname().machine]
    check(libc.syscall(ctypes.c_long(nr), os.fsencode(new_root), os.fsencode(put_old)), "pivot_root")


def denied_syscall_refused(name: str) -> bool:
    """Whether the filter refuses syscall ``name`` (with EPERM); True on an unknown machine."""
    table = SYSCALLS.get(os.uname().machine)
    if table is None:
        return True
    return libc.syscall(ctypes.c_long(table["deny"][name]), 0, 0, 0, 0, 0) == -1 and ctypes.get_errno() == 1


# --------------------------------------------------------------------------- seccomp

SYSCALLS: dict[str, dict[str, Any]] = {
    "x86_64": {
        "arch": 0xC000003E,
        "clone": 56,
        "clone3": 435,
        "prctl": 157,
        "x32": True,
        "deny": {
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "perf_event_open": 298,
            "bpf": 321,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "name_to_handle_at": 303,
            "open_by_handle_at": 304,
            "fanotify_init": 300,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "acct": 163,
            "quotactl": 179,
            "syslog": 103,
            "vhangup": 153,
            "lookup_dcookie": 212,
        },
    },
    "aarch64": {
        "arch": 0xC00000B7,
        "clone": 220,
        "clone3": 435,
        "prctl": 167,
        "x32": False,
        "deny": {
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "perf_event_open": 241,
            "bpf": 280,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "name_to_handle_at": 264,
            "open_by_handle_at": 265,
            "fanotify_init": 262,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "acct": 89,
            "quotactl": 60,
            "syslog": 116,
            "vhangup": 58,
            "lookup_dcookie": 18,
        },
    },
}
_NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]] | None:
    """The classic-BPF filter for ``machine`` as (code, jt, jf, k) tuples, or None if unknown."""
    table = SYSCALLS.get(machine)
    if table is None:
        return None
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [
        (ld, 0, 0, 4),  # A = arch
        (jeq, 1, 0, table["arch"]),  # native ABI: skip the next instruction
        (ret, 0, 0, eperm),  # any other ABI (32-bit calls from 64-bit code): refused
        (ld, 0, 0, 0),
    ]  # A = syscall number
    if table["x32"]:
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]  # the x32 ABI's numbers
    for nr in sorted(table["deny"].values()):
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog += [
        (jeq, 0, 1, table["clone3"]),
        (ret, 0, 0, enosys),
        (jeq, 0, 4, table["prctl"]),
        (ld, 0, 0, 16),  # A = low half of argument 0
        (jeq, 0, 1, PR_SET_DUMPABLE),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
        (jeq, 0, 4, table["clone"]),
        (ld, 0, 0, 16),
        (jset, 0, 1, _NAMESPACE_FLAGS),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
        (ret, 0, 0, allow),
    ]
    return prog


def install_seccomp() -> bool:
    """Install the filter in this process (after no_new_privs); False if this machine is unknown."""
    prog = seccomp_program(os.uname().machine)
    if prog is None:
        return False
    _load_filter(prog)
    return True


def forbid_new_processes() -> None:
    """A second filter, for the calls phase: no new threads or processes (clone, fork, vfork),
    so nothing a graded function starts can run outside the watched call."""
    table = SYSCALLS.get(os.uname().machine)
    if table is None:
        return
    ld, jeq, ret = 0x20, 0x15, 0x06
    allow, eperm = 0x7FFF0000, 0x00050000 | 1
    calls = [table["clone"], *([57, 58] if os.uname().machine == "x86_64" else [])]  # clone, fork, vfork
    prog = [(ld, 0, 0, 0)]
    for nr in calls:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog.append((ret, 0, 0, allow))
    _load_filter(prog)


def _load_filter(prog: list[tuple[int, int, int, int]]) -> None:
    filters = (_SockFilter * len(prog))(*[_SockFilter(*ins) for ins in prog])
    fprog = _SockFprog(len(prog), filters)
    check(
        libc.prctl(
            ctypes.c_int(PR_SET_SECCOMP),
            ctypes.c_ulong(SECCOMP_MODE_FILTER),
            ctypes.c_void_p(ctypes.addressof(fprog)),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        "seccomp",
    )
