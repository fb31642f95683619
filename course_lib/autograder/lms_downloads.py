"""Read what an instructor downloads from an LMS: a zip or a folder, as a list of files.

Runs in the grader's process on untrusted input, so it only reads bytes, never extracts: a
zip member's name is data (it names nothing on disk; :mod:`.collect` writes only to paths it
makes itself), and every member is checked before it is read. A member that is a link, is
encrypted, leaves the download (``../x``, ``/etc/x``), is larger than a notebook may be, is
compressed more than :data:`MAX_RATIO` to one (a zip bomb) or cannot be decompressed is
kept as a :class:`RawFile` with its ``problem``: it becomes an ``invalid`` record, never a
silent loss. A zip with more than :data:`MAX_MEMBERS` members, or more than
:data:`MAX_TOTAL_BYTES` in all, is refused whole (:class:`CollectError`).
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from .notebook import MAX_NOTEBOOK_BYTES

__all__ = ["RawFile", "CollectError", "read_download", "MAX_MEMBERS", "MAX_TOTAL_BYTES", "MAX_RATIO"]

#: More members than this and the zip is refused (an LMS download of a large class has thousands).
MAX_MEMBERS = 50_000
#: The uncompressed bytes of all members together, at most.
MAX_TOTAL_BYTES = 4_000_000_000
#: A member over 1 MB that expands more than this many times is a zip bomb (notebooks compress
#: about 3 to 10 times).
MAX_RATIO = 200
_BOMB_FLOOR = 1_000_000
#: Files an archiver adds that no student submitted: read as nothing, recorded as ``ignored``.
SYSTEM_FILES = ("__MACOSX/", ".DS_Store", "Thumbs.db", "desktop.ini")


class CollectError(ValueError):
    """A download that cannot be read at all (not a zip or folder, or a zip refused whole)."""


@dataclass(frozen=True)
class RawFile:
    """One file of a download.

    Args:
        origin: its path inside the download, ``/``-separated (as the zip or folder names it).
        data: its bytes; None when it could not be read.
        problem: why it could not be read (empty when it was).
        modified: its time in the zip or on disk (ISO 8601, UTC), "" when unknown.
    """

    origin: str
    data: bytes | None
    problem: str = ""
    modified: str = ""

    @property
    def parts(self) -> tuple[str, ...]:
        return PurePosixPath(self.origin).parts

    @property
    def system(self) -> bool:
        """Whether an archiver or a file browser made it (``__MACOSX/``, ``.DS_Store``)."""
        return self.origin.startswith("__MACOSX/") or "/__MACOSX/" in self.origin or self.parts[-1] in SYSTEM_FILES


def read_download(path: str | Path) -> list[RawFile]:
    """Every file of the download at ``path`` (a ``.zip`` file or a folder), sorted by origin.

    Raises:
        CollectError: ``path`` is neither a folder nor a readable zip, or the zip is refused
            whole (too many members, too large in all).
    """
    path = Path(path)
    if path.is_dir():
        return sorted(_read_folder(path), key=lambda f: f.origin)
    if not path.is_file():
        raise CollectError(
            f"DOWNLOAD: expected an LMS download (a .zip file or a folder), got {str(path)!r}, which does not exist"
        )
    return sorted(_read_zip(path), key=lambda f: f.origin)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_folder(root: Path) -> list[RawFile]:
    """A folder's files, links not followed (a link is a file with a problem)."""
    files = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        for d in [d for d in dirs if (here / d).is_symlink()]:
            dirs.remove(d)
            names.append(d)
        for name in names:
            path = here / name
            origin = path.relative_to(root).as_posix()
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                kind = "a link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                files.append(RawFile(origin, None, f"{kind}: not read"))
            elif st.st_size > MAX_NOTEBOOK_BYTES:
                files.append(RawFile(origin, None, _too_large(st.st_size), _iso(st.st_mtime)))
            else:
                files.append(RawFile(origin, path.read_bytes(), "", _iso(st.st_mtime)))
    return files


def _too_large(size: int) -> str:
    return f"{size:,} bytes, more than a notebook may be ({MAX_NOTEBOOK_BYTES:,}): not read"


def _member_name(info: zipfile.ZipInfo) -> str:
    """The member's name as text: UTF-8 when the zip says so; else the raw bytes tried as UTF-8
    (what most tools write without saying), then as code page 437 (what the zip format says)."""
    if info.flag_bits & 0x800:
        return info.filename
    try:
        return info.filename.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return info.filename


def _unsafe(name: str) -> str:
    """Why a member's name is refused ("" when it is fine)."""
    posix = name.replace("\\", "/")
    if "\0" in name:
        return "its name has a NUL character"
    if posix.startswith("/") or (len(posix) > 1 and posix[1] == ":"):
        return f"its path {name!r} is absolute: refused"
    if ".." in posix.split("/"):
        return f"its path {name!r} leaves the download: refused"
    return ""


def _member_problem(info: zipfile.ZipInfo, name: str) -> str:
    """Why a member is not read, from its header alone ("" when it may be read)."""
    mode = info.external_attr >> 16
    if _unsafe(name):
        return _unsafe(name)
    if stat.S_ISLNK(mode):
        return "a link: not read"
    if info.flag_bits & 0x1:
        return "encrypted: not read"
    if info.file_size > MAX_NOTEBOOK_BYTES:
        return _too_large(info.file_size)
    if info.file_size > _BOMB_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        return (
            f"expands {info.file_size / max(info.compress_size, 1):,.0f} times ({info.compress_size:,} to "
            f"{info.file_size:,} bytes): a zip bomb, not read"
        )
    return ""


def _read_zip(path: Path) -> list[RawFile]:
    """A zip's members (see the module's docstring for what is refused)."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise CollectError(f"DOWNLOAD: {path.name} is not a readable zip file ({e})") from None
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        if len(infos) > MAX_MEMBERS:
            raise CollectError(f"DOWNLOAD: {path.name} has {len(infos):,} files, more than {MAX_MEMBERS:,}: refused")
        total = sum(i.file_size for i in infos)
        if total > MAX_TOTAL_BYTES:
            raise CollectError(
                f"DOWNLOAD: {path.name} expands to {total:,} bytes, more than {MAX_TOTAL_BYTES:,}: refused (a zip bomb?)"
            )
        return [_read_member(zf, info) for info in infos]


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> RawFile:
    name = _member_name(info)
    try:
        modified = datetime(*info.date_time, tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        modified = ""
    problem = _member_problem(info, name)
    origin = name.replace("\\", "/").lstrip("/")
    if problem:
        return RawFile(origin, None, problem, modified)
    try:
        with zf.open(info) as f:
            data = f.read(MAX_NOTEBOOK_BYTES + 1)  # the header's size is not trusted
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError, OSError) as e:
        return RawFile(origin, None, f"cannot be read from the zip ({type(e).__name__}: {e})", modified)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return RawFile(origin, None, _too_large(len(data)), modified)
    return RawFile(origin, data, "", modified)
