"""Who a student is: the one form in which folder names, roster logins and LMS ids are compared.

A student's id comes from three places the grader does not control: their folder's name under
``SUBMISSIONS/`` (macOS writes accented names decomposed, NFD; a zip tool may keep a trailing
space), the roster and ``timestamps.csv`` (usually composed, NFC). Every one of them goes
through :func:`identity` before it is compared or stored, so ``zoë`` is one student however it
was written. A timestamp row that still matches no submission is a warning
(:func:`unmatched_timestamps`), with the code points of both spellings when it looks like a
near miss.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

__all__ = ["identity", "unmatched_timestamps", "code_points", "near_duplicates"]


def identity(name: str) -> str:
    """``name`` in Unicode NFC with surrounding whitespace removed: the form every comparison
    of student ids (and assignment names) uses."""
    return unicodedata.normalize("NFC", name).strip()


def _loose(name: str) -> str:
    """A form for spotting near misses: compatibility-decomposed, accents, case, whitespace
    and invisible format characters dropped."""
    decomposed = unicodedata.normalize("NFKD", name)
    kept = (c for c in decomposed if not unicodedata.combining(c) and unicodedata.category(c) != "Cf")
    return "".join("".join(kept).casefold().split())


def code_points(name: str) -> str:
    """``'bob'`` as ``U+0062 U+006F U+0062``."""
    return " ".join(f"U+{ord(c):04X}" for c in name)


def unmatched_timestamps(
    times: Iterable[tuple[str, str]], submissions: Iterable[tuple[str, str]], assignments: Iterable[str]
) -> list[str]:
    """A warning for each ``(student, assignment)`` of ``times`` (for one of ``assignments``)
    that no submission has; one that matches a submission once accents, case, whitespace and
    invisible characters are ignored also shows the code points of both."""
    have = set(submissions)
    wanted = set(assignments)
    loose: dict[tuple[str, str], str] = {(_loose(s), a): s for s, a in sorted(have)}
    notes = []
    for student, assignment in sorted(times):
        if assignment not in wanted or (student, assignment) in have:
            continue
        note = f"timestamps: {student!r} ({assignment}) matches no submission; its time is not used"
        near = loose.get((_loose(student), assignment))
        if near is not None:
            note += (
                f" (it looks like the folder {near!r}: the timestamp's {code_points(student)}"
                f" vs the folder's {code_points(near)})"
            )
        notes.append(note)
    return notes


def near_duplicates(names: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs of distinct ``names`` that are the same once accents, case, whitespace and
    invisible characters are ignored (``zoë`` and ``zoe``, ``Bob`` and ``bob``), sorted."""
    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        groups.setdefault(_loose(name), []).append(name)
    return [(a, b) for group in groups.values() for i, a in enumerate(group) for b in group[i + 1 :]]
