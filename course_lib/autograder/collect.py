"""``course-lib collect``: an LMS download into the folders ``course-lib grade`` reads.

Every file of the download (:mod:`.lms_downloads`) gets a student from its layout
(:mod:`.lms_layouts`) and the roster (:mod:`.roster_match`), and an assignment from its
content: the ``metadata["course_lib"]["assignment"]`` a release stamps into each notebook, or
else its name with ``Copy of``, `` (1)``, ``-Copy1`` and Canvas's ``-1`` taken off. It is then
written to ``OUT/<login>/<NN_slug>.ipynb``, or kept as a record of why not, in the manifest
``OUT/collect-manifest.json`` (:class:`Manifest`): every file is one :class:`ManifestEntry`,
``collected``, ``superseded`` (the same student's older file for the same assignment),
``unmatched`` (no student or no assignment), ``invalid`` (unreadable) or ``ignored`` (an
archiver's own file, ``__MACOSX/``). ``course-lib grade`` reads the manifest and records the
unmatched and invalid ones with the graded (:mod:`.ungraded`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from ..grading.registry import ASSIGNMENTS
from .identity import code_points, identity, near_duplicates
from .lms_downloads import read_download
from .lms_layouts import Upload, uploads
from .roster_match import RosterIndex

__all__ = ["ManifestEntry", "Manifest", "collect", "assignment_from_name", "stamped_assignment", "MANIFEST"]

#: The manifest's file name, in the submissions folder.
MANIFEST = "collect-manifest.json"
#: ``metadata[STAMP_KEY]["assignment"]``: the assignment a released notebook belongs to.
STAMP_KEY = "course_lib"

_COPY = re.compile(r"^(copy of |copia de |kopie von |copie de )+", re.I)
_SUFFIX = re.compile(r"(\s*\(\d+\)|-copy\d*|\s+copy\d*|-\d+)+$", re.I)


@dataclass(frozen=True)
class ManifestEntry:
    """What ``collect`` did with one file of a download (one per submitter on Gradescope).

    Args:
        origin: the file's path inside the download.
        source: the download's file or folder name.
        status: ``collected``, ``superseded``, ``unmatched``, ``invalid`` or ``ignored``.
        reason: why it is not collected ("" when it is).
        student: the login it was filed under ("" when unknown).
        assignment: its assignment ("" when unknown).
        matched_by: how the assignment and the student were found.
        lms: the download's layout.
        lms_name: the student as the LMS names them.
        lms_id: the LMS's id of the student (Canvas user id, Gradescope sid).
        submission: the LMS's id of the upload.
        submitted_at: the LMS's time of the upload ("" when unknown).
        late: the LMS marked it late.
        sha256: the file's hash ("" when unread).
        path: where it was written, relative to the submissions folder ("" when not).
    """

    origin: str
    source: str
    status: str
    reason: str = ""
    student: str = ""
    assignment: str = ""
    matched_by: str = ""
    lms: str = ""
    lms_name: str = ""
    lms_id: str = ""
    submission: str = ""
    submitted_at: str = ""
    late: bool = False
    sha256: str = ""
    path: str = ""


@dataclass
class Manifest:
    """Every file ``collect`` saw, over every download collected into one submissions folder.

    Args:
        entries: one per file (and submitter), in the order collected.
        warnings: what the instructor should look at (near-identical names, students not in
            the roster).
    """

    entries: list[ManifestEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"entries": [asdict(e) for e in self.entries], "warnings": list(self.warnings)}

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        names = {f.name for f in fields(ManifestEntry)}
        entries = [ManifestEntry(**{k: v for k, v in e.items() if k in names}) for e in data.get("entries", [])]
        return cls(entries, list(data.get("warnings", [])))

    @classmethod
    def load(cls, folder: str | Path) -> Manifest | None:
        """The manifest in ``folder``, or None where there is none (a ValueError if unreadable)."""
        path = Path(folder) / MANIFEST
        if not path.is_file():
            return None
        try:
            return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}: not a collect manifest ({e})") from None

    def save(self, folder: str | Path) -> None:
        text = json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n"
        (Path(folder) / MANIFEST).write_text(text, encoding="utf-8")

    def count(self, status: str, source: str | None = None) -> int:
        return sum(e.status == status and (source is None or e.source == source) for e in self.entries)


def assignment_from_name(file_name: str) -> str:
    """The assignment a file's name says, or "": ``Copy of 02_self_attention (1).ipynb``,
    ``02_self_attention-Copy1.ipynb`` and ``02 Self Attention.ipynb`` are ``02_self_attention``."""
    stem = file_name[: -len(".ipynb")] if file_name.lower().endswith(".ipynb") else file_name.rsplit(".", 1)[0]
    stem = _SUFFIX.sub("", _COPY.sub("", identity(stem)))
    key = re.sub(r"[\s.-]+", "_", stem.strip()).lower()
    if key in ASSIGNMENTS:
        return key
    # a prefix no layout took off (``smith_john_12345_67890_05_layer_norm``): one assignment's end
    found = [slug for slug in ASSIGNMENTS if key.endswith("_" + slug)]
    return found[0] if len(found) == 1 else ""


def stamped_assignment(data: bytes) -> str:
    """The assignment stamped into a notebook's metadata, or "" (none, or not a notebook)."""
    if not data.lstrip()[:1] == b"{":
        return ""
    try:
        nb = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return ""
    meta = nb.get("metadata") if isinstance(nb, dict) else None
    stamp = meta.get(STAMP_KEY) if isinstance(meta, dict) else None
    slug = stamp.get("assignment") if isinstance(stamp, dict) else None
    return slug if isinstance(slug, str) and slug in ASSIGNMENTS else ""


def _is_notebook(data: bytes) -> bool:
    try:
        nb = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(nb, dict) and isinstance(nb.get("cells"), list)


def _assignment(up: Upload) -> tuple[str, str, str]:
    """(assignment, how it was found, why not)."""
    data = up.raw.data or b""
    by_stamp, by_name = stamped_assignment(data), assignment_from_name(up.file_name)
    if by_stamp:
        other = f"; its name says {by_name}" if by_name and by_name != by_stamp else ""
        return by_stamp, f"notebook metadata{other}", ""
    if not up.file_name.lower().endswith(".ipynb"):
        kind = {
            ".py": "a Python file",
            ".zip": "a zip inside the download, not opened (unzip it and collect that)",
        }.get(Path(up.file_name).suffix.lower(), "not a notebook (.ipynb)")
        said = f" (its name says {by_name})" if by_name else ""
        return "", "", f"{kind}{said}: ask the student for the .ipynb notebook"
    if by_name:
        return by_name, "file name", ""
    if not _is_notebook(data):
        return "", "", "not a Jupyter notebook, and its name names no assignment"
    return "", "", f"a notebook without an assignment stamp whose name names no assignment ({', '.join(ASSIGNMENTS)})"


def _student(up: Upload, roster: RosterIndex | None) -> tuple[str, str, str]:
    """(login, how it was found, why not)."""
    if not up.name and not up.lms_id and not up.email:
        return "", "", up.why_no_student or "names no student"
    if roster is not None:
        login, how = roster.login_of(up)
        if login:
            return login, how, ""
        return "", "", how
    login = identity(up.email or up.name or up.lms_id)
    if not login or "/" in login or "\\" in login or login.startswith(".") or "\0" in login:
        return "", "", f"the student's name {login!r} cannot be a folder name"
    return login, f"{up.layout} name", ""


def _entry(up: Upload, source: str, roster: RosterIndex | None) -> ManifestEntry:
    """One upload's manifest entry, ``collected`` when it has a student and an assignment."""
    raw = up.raw
    base = ManifestEntry(
        origin=raw.origin,
        source=source,
        status="collected",
        lms=up.layout,
        lms_name=up.name,
        lms_id=up.lms_id,
        submission=up.submission,
        submitted_at=up.submitted_at or "",
        late=up.late,
        sha256=hashlib.sha256(raw.data).hexdigest() if raw.data is not None else "",
    )
    if raw.system:
        return _with(base, status="ignored", reason="made by an archiver or a file browser, not by a student")
    if up.read_as:
        return _with(base, status="ignored", reason=up.read_as)
    if raw.data is None:
        return _with(base, status="invalid", reason=raw.problem)
    student, found_student, no_student = _student(up, roster)
    assignment, found_assignment, no_assignment = _assignment(up)
    matched = "; ".join(x for x in (found_assignment and f"assignment by {found_assignment}", found_student) if x)
    base = _with(base, student=student, assignment=assignment, matched_by=matched)
    if no_student or no_assignment:
        return _with(base, status="unmatched", reason="; ".join(x for x in (no_student, no_assignment) if x))
    return base


def _with(e: ManifestEntry, **changes: object) -> ManifestEntry:
    return replace(e, **changes)  # type: ignore[arg-type]


def _newest_first(entries: list[tuple[ManifestEntry, Upload]]) -> list[tuple[ManifestEntry, Upload]]:
    """The LMS's time, else its upload order, else the zip's time, else the origin: newest first."""
    return sorted(entries, key=lambda p: (p[0].submitted_at, p[1].order, p[1].raw.modified, p[0].origin), reverse=True)


def collect(download: str | Path, out: str | Path, roster: str | Path | None = None, lms: str = "auto") -> Manifest:
    """Collect the download at ``download`` into ``out`` (see the module's docstring).

    Returns the manifest of ``out``: its earlier entries (a download collected again replaces
    its own) and this download's. Raises :class:`.lms_downloads.CollectError` for a download
    that cannot be read, :class:`.exports.RosterError` for a roster that cannot.
    """
    download, out = Path(download), Path(out)
    index = RosterIndex.read(roster) if roster is not None else None
    _, ups = uploads(read_download(download), lms)
    source = download.name
    pairs = [(_entry(up, source, index), up) for up in ups]
    groups: dict[tuple[str, str], list[tuple[ManifestEntry, Upload]]] = {}
    for e, up in pairs:
        if e.status == "collected":
            groups.setdefault((e.student, e.assignment), []).append((e, up))
    final: dict[int, ManifestEntry] = {}
    for (student, assignment), group in groups.items():
        keep, *older = _newest_first(group)
        rel = f"{student}/{assignment}.ipynb"
        target = out / student / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(keep[1].raw.data or b"")
        final[id(keep[0])] = _with(keep[0], path=rel)
        for e, _ in older:
            final[id(e)] = _with(e, status="superseded", reason=f"an older file than {keep[0].origin}")
    new = [final.get(id(e), e) for e, _ in pairs]
    manifest = _merge(Manifest.load(out) if out.is_dir() else None, new, source)
    manifest.warnings = [w for w in manifest.warnings if not w.startswith(f"{source}: ")] + _warnings(
        new, source, index
    )
    out.mkdir(parents=True, exist_ok=True)
    manifest.save(out)
    return manifest


def _merge(old: Manifest | None, new: list[ManifestEntry], source: str) -> Manifest:
    """The earlier manifest without this download's entries, with those this download's files
    replace marked superseded, then this download's entries."""
    if old is None:
        return Manifest(list(new))
    written = {e.path for e in new if e.path}
    kept = []
    for e in old.entries:
        if e.source == source:
            continue
        if e.path in written:
            e = _with(e, status="superseded", reason=f"replaced by {source}", path="")
        kept.append(e)
    return Manifest(kept + list(new), list(old.warnings))


def _warnings(entries: list[ManifestEntry], source: str, roster: RosterIndex | None) -> list[str]:
    """Near-identical student names, with their code points, and the roster's absence."""
    names = sorted({e.student for e in entries if e.student} | {identity(e.lms_name) for e in entries if e.lms_name})
    warnings = [
        f"{source}: near-identical names {a!r} ({code_points(a)}) and {b!r} ({code_points(b)}): one student or two?"
        for a, b in near_duplicates(names)
    ]
    if roster is None and any(e.student for e in entries):
        warnings.append(f"{source}: no --roster: students are filed under the names the download gives them")
    return warnings
