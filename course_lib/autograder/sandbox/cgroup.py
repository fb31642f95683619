"""A memory cgroup around one sandbox: a real limit on all of a submission's processes together.

Per-process limits (``RLIMIT_AS``) let a student fork 32 processes of 1 GB each; a cgroup
counts them together. Each runner gets its own cgroup, created under the grader's own, that
holds the warm worker and every process of the student. Its limit is the
worker's footprint (measured once it is warm) plus the submission's ``memory_mb``; the student's
processes are the first the kernel's OOM killer picks (``oom_score_adj`` 1000), so a submission
over the limit is killed, never the worker.

Both cgroup versions work: v2 (a ``cgroup2`` mount whose ``memory`` controller is enabled for
the grader's cgroup's children) and v1's ``memory`` hierarchy. Where neither is writable (no
root, no delegation) :meth:`MemoryCgroup.create` returns None and the per-process rlimits are
the limit; the grading summary says which.

A grader removes its cgroups when it ends, SIGTERM included (the CLI turns it into an orderly
exit); one killed outright cannot, so each new cgroup first removes the empty ones of graders
that no longer run (:func:`sweep`).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MemoryCgroup", "sweep"]


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, filesystem type, super options) of every mount, from /proc/self/mountinfo."""
    out = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields, rfields = left.split(), right.split()
                if len(fields) >= 5 and len(rfields) >= 3:
                    out.append((fields[4].replace("\\040", " "), rfields[0], rfields[2]))
    except OSError:
        pass
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    for controller in parts[1].split(",") if parts[1] else [""]:
                        out[controller] = parts[2]
    except OSError:
        pass
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's, alive
    return True


def sweep(parent: Path) -> list[str]:
    """Remove the cgroups under ``parent`` that a grader which no longer runs left behind
    (``course-lib-<pid>-...``, killed before it could remove them); returns their names. A
    cgroup that still holds a process stays."""
    removed: list[str] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        parts = entry.name.split("-")
        if len(parts) < 3 or parts[:2] != ["course", "lib"] or not parts[2].isdigit() or _alive(int(parts[2])):
            continue
        try:
            os.rmdir(entry)
            removed.append(entry.name)
        except OSError:
            pass
    return removed


class MemoryCgroup:
    """One cgroup with a memory limit (see the module docstring)."""

    def __init__(self, path: Path, version: int):
        self.path = path
        self.version = version
        self._oom_at_start = 0

    # ---------------------------------------------------------------- creation
    @classmethod
    def create(cls, name: str) -> MemoryCgroup | None:
        """A new cgroup ``name`` under this process's own, or None where that is not possible."""
        own = _own_cgroups()
        for mount, fstype, options in _mounts():
            try:
                if fstype == "cgroup2" and "" in own:
                    parent = Path(mount + own[""])
                    if "memory" in (parent / "cgroup.subtree_control").read_text().split():
                        return cls._make(parent / name, 2)
                elif fstype == "cgroup" and "memory" in options.split(",") and "memory" in own:
                    return cls._make(Path(mount + own["memory"]) / name, 1)
            except OSError:
                continue
        return None

    @classmethod
    def _make(cls, path: Path, version: int) -> MemoryCgroup | None:
        sweep(path.parent)
        try:
            path.mkdir(exist_ok=True)
            cg = cls(path, version)
            if version == 2:
                (path / "memory.swap.max").write_text("0") if (path / "memory.swap.max").exists() else None
            cg._oom_at_start = cg.oom_kills()
            return cg
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return None

    # ---------------------------------------------------------------- use
    @property
    def procs(self) -> str:
        """The file a process writes its pid to, to move itself in."""
        return str(self.path / "cgroup.procs")

    def wrap(self, cmd: list[str]) -> list[str]:
        """``cmd`` started inside this cgroup (a shell moves itself in, then becomes ``cmd``),
        so that every process it starts is inside from its first instruction."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs, *cmd]

    def usage(self) -> int:
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text().split()[0])

    def set_limit(self, limit_bytes: int) -> None:
        limit = str(int(limit_bytes))
        if self.version == 2:
            (self.path / "memory.max").write_text(limit)
        else:
            memsw = self.path / "memory.memsw.limit_in_bytes"
            # memsw (memory + swap) must stay >= the memory limit: raise the one that allows it first
            current = int((self.path / "memory.limit_in_bytes").read_text())
            if memsw.exists() and int(limit) > current:
                memsw.write_text(limit)
                (self.path / "memory.limit_in_bytes").write_text(limit)
            else:
                (self.path / "memory.limit_in_bytes").write_text(limit)
                if memsw.exists():
                    memsw.write_text(limit)

    def limit(self) -> int:
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        text = (self.path / name).read_text().strip()
        return 1 << 62 if text == "max" else int(text)

    def oom_kills(self) -> int:
        """How many processes the OOM killer has killed in this cgroup so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        if self.version == 1:
            try:
                return int((self.path / "memory.failcnt").read_text())  # older kernels: hits of the limit
            except (OSError, ValueError):
                pass
        return 0

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def remove(self) -> None:
        """Remove the cgroup (once its processes are gone)."""
        try:
            os.rmdir(self.path)
        except OSError:
            pass

    def __repr__(self) -> str:
        return f"MemoryCgroup({str(self.path)!r}, v{self.version})"
