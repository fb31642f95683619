"""Writing a pure-Python wheel with :mod:`zipfile`, as the wheel spec asks (PEP 427, PEP 491).

``course-lib release`` builds the students' package offline, from files it already holds in
memory, with no build backend: the wheel is a zip of the package's files plus a
``NAME-VERSION.dist-info`` folder with ``METADATA`` (core metadata 2.1), ``WHEEL`` (tag
``py3-none-any``, purelib) and ``RECORD`` (every file's SHA-256, urlsafe base64 without
padding, and size; ``RECORD`` itself without either). Entries are sorted and dated
1980-01-01, so the same files give the same wheel, byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WheelSpec", "wheel_name", "write_wheel"]

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+)*(\+[A-Za-z0-9]+(\.[A-Za-z0-9]+)*)?$")
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class WheelSpec:
    """What a wheel declares: its name and version, what it needs, and a one-line summary."""

    name: str
    version: str
    summary: str
    requires_python: str = ">=3.11"
    requires: tuple[str, ...] = ()


def wheel_name(spec: WheelSpec) -> str:
    """The wheel's file name, ``{name}-{version}-py3-none-any.whl`` with the name normalised."""
    return f"{_escaped(spec.name)}-{spec.version}-py3-none-any.whl"


def _escaped(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _metadata(spec: WheelSpec) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}", f"Summary: {spec.summary}"]
    lines.append(f"Requires-Python: {spec.requires_python}")
    lines += [f"Requires-Dist: {r}" for r in spec.requires]
    return "\n".join(lines) + "\n"


def _wheel_file() -> str:
    return "Wheel-Version: 1.0\nGenerator: course_lib.autograder.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return f"{path},sha256={digest},{len(data)}"


def _check(spec: WheelSpec, files: Mapping[str, bytes]) -> None:
    if not _NAME.match(spec.name):
        raise ValueError(f"write_wheel: name must be letters, digits, '.', '-', '_', got {spec.name!r}")
    if not _VERSION.match(spec.version):
        raise ValueError(f"write_wheel: version must look like 1.2.3 or 1.2.3+local, got {spec.version!r}")
    for path in files:
        if path.startswith("/") or ".." in path.split("/") or "\\" in path or ".dist-info/" in path:
            raise ValueError(f"write_wheel: file paths must be relative, inside the wheel, got {path!r}")


def write_wheel(out_dir: str | Path, spec: WheelSpec, files: Mapping[str, bytes]) -> Path:
    """Write ``out_dir/<wheel_name(spec)>`` holding ``files`` (path inside the wheel -> bytes).

    Args:
        out_dir: the folder to write the wheel in (made if missing).
        spec: the wheel's name, version and requirements.
        files: the installed files, by their path relative to site-packages (``pkg/mod.py``).

    Returns:
        The wheel's path.

    Raises:
        ValueError: a name, version or path the spec does not allow, named with what was given.
    """
    _check(spec, files)
    info = f"{_escaped(spec.name)}-{spec.version}.dist-info"
    entries: list[tuple[str, bytes]] = sorted(files.items())
    entries += [(f"{info}/METADATA", _metadata(spec).encode()), (f"{info}/WHEEL", _wheel_file().encode())]
    record: Sequence[str] = [_record_line(p, d) for p, d in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / wheel_name(spec)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            entry = zipfile.ZipInfo(name, date_time=_EPOCH)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            z.writestr(entry, data)
    return path
