"""Images pasted into a "think about it" answer: which of a cell's attachments a record keeps.

Jupyter (Colab, JupyterLab, Notebook) stores an image pasted into a Markdown cell in the cell's
``attachments`` (``{"image.png": {"image/png": "<base64>"}}``) and writes
``![image.png](attachment:image.png)`` in its text. A record keeps an answer's attachments that
its text references, raster images only (:data:`RASTER_MIMES`: never SVG, which can carry
script), whose base64 decodes and whose bytes start as that format does, within
:data:`MAX_ANSWER_IMAGE_BYTES` per answer and :data:`MAX_RECORD_IMAGE_BYTES` per record.
Standard library only: grading (also on Gradescope) reads them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

__all__ = [
    "RASTER_MIMES",
    "MAX_ANSWER_IMAGE_BYTES",
    "MAX_RECORD_IMAGE_BYTES",
    "raster_image",
    "referenced_attachments",
    "Budget",
    "digest",
    "answer_digest",
    "record_answers",
]

#: The image formats an answer may carry, with the bytes each format's files start with.
RASTER_MIMES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # then 4 bytes of size and "WEBP", checked below
}
#: The decoded bytes of the images one answer keeps, all together.
MAX_ANSWER_IMAGE_BYTES = 1_000_000
#: The decoded bytes of the images one record keeps, all answers together.
MAX_RECORD_IMAGE_BYTES = 4_000_000
#: ``attachment:NAME`` in Markdown: a link destination, bare or in angle brackets (spaces allowed).
_REFERENCE = re.compile(r"<attachment:([^<>\n]+)>|attachment:([^\s()<>\"']+)")
_SPACE = re.compile(r"\s+")


def digest(attachments: Mapping[str, Any]) -> str:
    """A short digest of an answer's attachments ("" for none): two answers whose text reads
    alike but that show other pictures are graded apart (:func:`.answer_groups.group_answers`)."""
    if not attachments:
        return ""
    return hashlib.sha256(json.dumps(attachments, sort_keys=True, default=str).encode()).hexdigest()[:16]


def answer_digest(text: str, attachments: Mapping[str, Any] | None = None, *, pictures: str | None = None) -> str:
    """The digest of an answer as a grader reads it: its text (surrounding whitespace aside) and
    its pasted images (:func:`digest`). A grade given by hand keeps the digest of the answer it
    was given to; a resubmission whose answer has another digest makes that grade pending.

    Args:
        text: the answer's Markdown.
        attachments: its attachments, ``{name: {mime: base64}}`` (None or empty for none).
        pictures: their :func:`digest` when already computed (then ``attachments`` is not read).

    Returns:
        16 hex digits.
    """
    pictures = digest(attachments or {}) if pictures is None else pictures
    data = f"{text.strip()}\0{pictures}".encode("utf-8", "surrogatepass")
    return hashlib.sha256(data).hexdigest()[:16]


def record_answers(entries: Iterable[Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """A record's answers by question id, as graders read them.

    Args:
        entries: the record's ``answers`` (``[{"id", "answer", "attachments"?}]``; a malformed
            entry is left out, malformed attachments count as none).

    Returns:
        Question id -> ``(text, attachments)``, in the record's order; a question asked twice
        in one notebook has its answers joined (texts with a blank line, attachments merged).
    """
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str):
            continue
        text = entry.get("answer")
        text = text if isinstance(text, str) else ""
        attachments = entry.get("attachments")
        attachments = dict(attachments) if isinstance(attachments, Mapping) else {}
        before = out.get(entry["id"])
        if before is not None:
            text = f"{before[0]}\n\n{text}".strip()
            attachments = {**before[1], **attachments}
        out[entry["id"]] = (text, attachments)
    return out


def referenced_attachments(text: str) -> list[str]:
    """The attachments a Markdown text shows.

    Args:
        text: the answer's Markdown.

    Returns:
        The names it references (``attachment:NAME``, bare or in angle brackets, percent-decoded),
        in order, each once.
    """
    names = (unquote(m.group(1) or m.group(2)) for m in _REFERENCE.finditer(text))
    return list(dict.fromkeys(names))


def raster_image(bundle: Any) -> tuple[str, str, int] | None:
    """The first raster image of an attachment's MIME bundle.

    Args:
        bundle: the attachment's ``{mime: base64}`` (a value may be a list of lines, as nbformat allows).

    Returns:
        ``(mime, base64 without whitespace, decoded size in bytes)``, or None when the bundle has
        no image of :data:`RASTER_MIMES` whose base64 decodes to bytes of that format.
    """
    if not isinstance(bundle, Mapping):
        return None
    for mime, data in bundle.items():
        if mime not in RASTER_MIMES:
            continue
        if isinstance(data, list) and all(isinstance(s, str) for s in data):
            data = "".join(data)
        if not isinstance(data, str) or len(data) > 2 * MAX_RECORD_IMAGE_BYTES:
            continue
        b64 = _SPACE.sub("", data)
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            continue
        if raw.startswith(RASTER_MIMES[mime]) and (mime != "image/webp" or raw[8:12] == b"WEBP"):
            return mime, b64, len(raw)
    return None


class Budget:
    """The image bytes a record has left, charged answer by answer (:meth:`keep`).

    Args:
        total: the record's budget in decoded bytes (:data:`MAX_RECORD_IMAGE_BYTES`).
    """

    def __init__(self, total: int = MAX_RECORD_IMAGE_BYTES) -> None:
        self.left = total

    def keep(self, text: str, cells: Iterable[Mapping[str, Any]]) -> tuple[dict[str, dict[str, str]], list[str]]:
        """The attachments one answer keeps, charged to the budget.

        Args:
            text: the answer's text (only the attachments it references are kept).
            cells: the ``attachments`` of the cells the answer was read from, in order (the
                first cell that has a name gives it).

        Returns:
            ``({name: {mime: base64}}, names dropped as too large)``: an image that would take
            the answer over :data:`MAX_ANSWER_IMAGE_BYTES` or the record over its budget is
            dropped (one that is not a valid raster image is left out silently).
        """
        found: dict[str, Any] = {}
        for attachments in cells:
            for name, bundle in attachments.items():
                found.setdefault(name, bundle)
        kept: dict[str, dict[str, str]] = {}
        too_large: list[str] = []
        used = 0
        for name in referenced_attachments(text):
            image = raster_image(found.get(name))
            if image is None:
                continue
            mime, b64, size = image
            if used + size > MAX_ANSWER_IMAGE_BYTES or size > self.left:
                too_large.append(name)
                continue
            used += size
            self.left -= size
            kept[name] = {mime: b64}
        return kept, too_large
