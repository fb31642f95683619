"""Who submitted each file of an LMS download, as the LMS names it.

The layouts, as each LMS writes its download (the tests build files of these exact shapes):

- **Canvas**, Assignments → Download Submissions: one flat zip, each file named
  ``<sortable name>[_LATE]_<user id>_<attachment id>_<file name>``, the sortable name
  lower-case without spaces or punctuation (``smithbob_340934_208490284_02_self_attention.ipynb``);
  a resubmitted file's name may end in ``-1``. The user id is the ``ID`` of Canvas's gradebook
  export; the attachment id grows with each upload (the newest file has the largest).
- **Moodle**, Assignment → View all submissions → Download all submissions: one folder per
  student and plugin, ``<Full Name>_<participant id>_assignsubmission_file_/<file>``, or,
  without "download submissions in folders", flat files ``<Full Name>_<id>_assignsubmission_file_<file>``.
  The participant id is per assignment, so a student is matched by name.
- **Gradescope**, Review Grades → Export Submissions: ``submission_metadata.yml`` (each
  ``submission_<id>:`` with ``:submitters:``, each with ``:name:``, ``:sid:`` and ``:email:``,
  and ``:created_at:``) and one folder ``submission_<id>/`` per submission.
- **folders**: ``<login>/<file>``, one folder per student (what ``course-lib grade`` reads).
- **flat**: ``<login>_<NN_slug>.ipynb`` (or ``-`` or a space between them), all in one folder.

A zip that wraps everything in one top-level folder is read as if that folder were the root.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from ..grading.registry import ASSIGNMENTS
from .lms_downloads import RawFile

__all__ = ["Upload", "LAYOUTS", "detect_layout", "uploads", "parse_gradescope_metadata"]

LAYOUTS = ("canvas", "moodle", "gradescope", "folders", "flat")

_CANVAS = re.compile(r"^(?P<name>[^\W_]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<att>\d+)_(?P<file>.+)$")
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<pid>\d+)_assign(?:submission|feedback)_[a-z]+_(?P<file>.*)$")
_GRADESCOPE_META = "submission_metadata.yml"


@dataclass(frozen=True)
class Upload:
    """A file of the download and what the LMS says about who submitted it.

    Args:
        raw: the file.
        layout: the LMS layout it was read in (one of :data:`LAYOUTS`).
        file_name: the name the student gave it (the LMS's prefix removed).
        name: the student as the LMS names them (Canvas's sortable name, Moodle's full name,
            Gradescope's name, a folder's name); "" when the file names no student.
        lms_id: Canvas's user id, Gradescope's ``sid``.
        email: Gradescope's email.
        submission: the LMS's id of this upload (Canvas's attachment id, Moodle's participant
            id, Gradescope's submission folder).
        submitted_at: the LMS's submission time (Gradescope), "" when it gives none.
        order: a number that grows with each upload (Canvas's attachment id), 0 when unknown.
        late: Canvas marked it ``LATE``.
        why_no_student: why ``name`` is empty.
        read_as: what the LMS's own file was read as (its ``submission_metadata.yml``); such a
            file is no submission.
    """

    raw: RawFile
    layout: str
    file_name: str
    name: str = ""
    lms_id: str = ""
    email: str = ""
    submission: str = ""
    submitted_at: str = ""
    order: int = 0
    late: bool = False
    why_no_student: str = ""
    read_as: str = ""


def _strip_wrapper(files: list[RawFile]) -> tuple[list[RawFile], str]:
    """The files without a top-level folder that holds all of them, if the layout inside it
    still has folders (so one student's folder alone is never taken for a wrapper)."""
    real = [f for f in files if not f.system]
    tops = {f.parts[0] for f in real if len(f.parts) > 1}
    if len(tops) != 1 or any(len(f.parts) == 1 for f in real):
        return files, ""
    top = tops.pop()
    if not any(len(f.parts) > 2 for f in real if f.parts[0] == top):
        return files, ""
    inner = [replace(f, origin="/".join(f.parts[1:])) if f.parts[0] == top and len(f.parts) > 1 else f for f in files]
    return inner, top + "/"


def detect_layout(files: list[RawFile]) -> str:
    """The layout of a download (one of :data:`LAYOUTS`), from its files' names."""
    real = [f for f in files if not f.system]
    if any(f.parts[-1] == _GRADESCOPE_META for f in real):
        return "gradescope"
    if real and sum(bool(_MOODLE.match(f.parts[0])) for f in real) * 2 > len(real):
        return "moodle"
    top = [f for f in real if len(f.parts) == 1]
    if top and sum(bool(_CANVAS.match(f.parts[0])) for f in top) * 2 > len(top):
        return "canvas"
    return "folders" if any(len(f.parts) > 1 for f in real) else "flat"


def uploads(files: list[RawFile], layout: str = "auto") -> tuple[str, list[Upload]]:
    """The layout (``layout``, or the one detected) and one :class:`Upload` per file (Gradescope:
    per file and submitter), in the files' order. Origins keep the download's full paths."""
    if layout not in ("auto", *LAYOUTS):
        raise ValueError(f"--lms: expected one of auto, {', '.join(LAYOUTS)}, got {layout!r}")
    inner, wrapper = _strip_wrapper(files)
    chosen = detect_layout(inner) if layout == "auto" else layout
    parse: dict[str, Callable[[list[RawFile]], list[Upload]]] = {
        "canvas": _canvas,
        "moodle": _moodle,
        "gradescope": _gradescope,
        "folders": _folders,
        "flat": _flat,
    }
    result = parse[chosen](inner)
    if wrapper:
        result = [replace(u, raw=replace(u.raw, origin=wrapper + u.raw.origin)) for u in result]
    return chosen, result


def _canvas(files: list[RawFile]) -> list[Upload]:
    out = []
    for f in files:
        m = _CANVAS.match(f.parts[-1]) if len(f.parts) == 1 else None
        if m is None:
            why = "not named as Canvas names a submission (name_userid_attachmentid_file)"
            out.append(Upload(f, "canvas", f.parts[-1], why_no_student=why))
            continue
        att = m.group("att")
        out.append(
            Upload(
                f,
                "canvas",
                m.group("file"),
                name=m.group("name"),
                lms_id=m.group("uid"),
                submission=att,
                order=int(att),
                late=bool(m.group("late")),
            )
        )
    return out


def _moodle(files: list[RawFile]) -> list[Upload]:
    out = []
    for f in files:
        m = _MOODLE.match(f.parts[0])
        if m is None:
            out.append(Upload(f, "moodle", f.parts[-1], why_no_student="not in a Moodle submission folder"))
            continue
        file_name = f.parts[-1] if len(f.parts) > 1 else m.group("file")
        out.append(Upload(f, "moodle", file_name, name=m.group("name"), submission=m.group("pid")))
    return out


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
        return value.replace("''", "'") if value else value
    return value


def parse_gradescope_metadata(text: str) -> dict[str, dict]:
    """Gradescope's ``submission_metadata.yml`` (the subset it writes): submission folder ->
    ``{"created_at": str, "submitters": [{"name", "sid", "email"}]}``. Other keys (``:score:``,
    ``:history:`` with its own items) are passed over."""
    subs: dict[str, dict] = {}
    current: dict | None = None
    section = ""
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            current = subs.setdefault(_unquote(line.rstrip().rstrip(":")), {"created_at": "", "submitters": []})
            section = ""
            continue
        item = line.strip()
        listed = item.startswith("- ")
        m = re.match(r"^:?(\w+):\s*(.*)$", item[2:].strip() if listed else item)
        if current is None or m is None:
            continue
        key, value = m.group(1), _unquote(m.group(2))
        if not listed and indent <= 2:  # a key of the submission
            section = key if not value else ""
            if key == "created_at":
                current["created_at"] = value
            continue
        if section != "submitters":
            continue
        if listed:
            current["submitters"].append({})
        if key in ("name", "sid", "email") and current["submitters"]:
            current["submitters"][-1][key] = value
    return subs


def _gradescope(files: list[RawFile]) -> list[Upload]:
    meta_file = next((f for f in files if f.parts[-1] == _GRADESCOPE_META and f.data is not None), None)
    meta = parse_gradescope_metadata(meta_file.data.decode("utf-8", "replace")) if meta_file and meta_file.data else {}
    root = meta_file.parts[:-1] if meta_file else ()
    out = []
    for f in files:
        if f is meta_file:
            out.append(Upload(f, "gradescope", f.parts[-1], read_as="Gradescope's list of submissions, read"))
            continue
        rel = f.parts[len(root) :] if f.parts[: len(root)] == root else f.parts
        sub = meta.get(rel[0]) if len(rel) > 1 else None
        if sub is None or not sub["submitters"]:
            why = "not in a submission folder that submission_metadata.yml lists"
            out.append(Upload(f, "gradescope", f.parts[-1], why_no_student=why))
            continue
        for who in sub["submitters"]:
            out.append(
                Upload(
                    f,
                    "gradescope",
                    f.parts[-1],
                    name=who.get("name", ""),
                    lms_id=who.get("sid", ""),
                    email=who.get("email", ""),
                    submission=rel[0],
                    submitted_at=sub["created_at"],
                )
            )
    return out


def _folders(files: list[RawFile]) -> list[Upload]:
    out = []
    for f in files:
        if len(f.parts) == 1:
            out.append(Upload(f, "folders", f.parts[0], why_no_student="not in a student's folder"))
        else:
            out.append(Upload(f, "folders", f.parts[-1], name=f.parts[0]))
    return out


_FLAT = re.compile(
    r"^(?P<name>.+?)[\s_-]+(?P<slug>" + "|".join(re.escape(a) for a in ASSIGNMENTS) + r")\b(?P<rest>.*)$"
)


def _flat(files: list[RawFile]) -> list[Upload]:
    out = []
    for f in files:
        m = _FLAT.match(f.parts[-1])
        if m is None:
            why = "names no student (a flat folder's files are named <login>_<NN_slug>.ipynb)"
            out.append(Upload(f, "flat", f.parts[-1], why_no_student=why))
        else:
            out.append(Upload(f, "flat", m.group("slug") + m.group("rest"), name=m.group("name")))
    return out
