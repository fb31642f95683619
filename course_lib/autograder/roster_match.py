"""Who an LMS's file belongs to: its ids and names matched to a roster's logins.

A roster is read as :func:`.exports.read_roster` reads it (a Canvas gradebook export, or any
CSV with a ``login`` or ``student`` column); its other columns say how else a student can be
named: an id (``ID``, Canvas's user id; ``SIS User ID``; ``sid``; ``ID number``), an email
(``Email``, ``Email address``), a name (``Student``, ``Name``, ``Full name``, or ``First
name`` with ``Last name``). A name is compared with accents, case, punctuation and word
order left out (Canvas writes ``Åberg, Zoë`` in its export and ``abergzoe`` in file names,
Moodle ``Zoë Åberg``); two roster students with the same such name match neither.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from .exports import read_roster
from .identity import identity
from .lms_layouts import Upload

__all__ = ["RosterIndex", "squash_name"]

_ID_COLUMNS = ("id", "sis user id", "sid", "id number", "student id", "user id")
_EMAIL_COLUMNS = ("email", "email address", "e-mail")
_NAME_COLUMNS = ("student", "name", "full name")


def _words(name: str) -> list[str]:
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if not unicodedata.combining(c))
    return [w for w in re.split(r"[\W_]+", kept.casefold()) if w]


def squash_name(name: str) -> frozenset[str]:
    """The forms a name is matched by: its words without accents or case, joined in every
    order (at most four words; more are joined as written)."""
    words = _words(name)
    if not words:
        return frozenset()
    if len(words) > 4:
        return frozenset({"".join(words)})
    return frozenset("".join(p) for p in itertools.permutations(words))


@dataclass
class RosterIndex:
    """A roster's logins by id, email and name.

    Args:
        logins: every login of the roster.
        by_id: an LMS id -> its login.
        by_email: an email (case-folded) -> its login.
        by_name: a squashed name (:func:`squash_name`) -> its login; names two students share
            are left out.
    """

    logins: set[str] = field(default_factory=set)
    by_id: dict[str, str] = field(default_factory=dict)
    by_email: dict[str, str] = field(default_factory=dict)
    by_name: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> RosterIndex:
        """The index of the roster at ``path`` (a :class:`.exports.RosterError` if unreadable)."""
        header, key, students = read_roster(path)
        lower = {h.strip().lower(): h for h in header}
        index = cls()
        shared: set[str] = set()
        for row in students:
            login = row[key]
            index.logins.add(login)
            for col in (lower[c] for c in _ID_COLUMNS if c in lower and lower[c] != key):
                if (row.get(col) or "").strip():
                    index.by_id[identity(row[col])] = login
            for col in (lower[c] for c in _EMAIL_COLUMNS if c in lower):
                if (row.get(col) or "").strip():
                    index.by_email[identity(row[col]).casefold()] = login
            for form in _row_names(row, lower):
                if index.by_name.get(form, login) != login:
                    shared.add(form)
                index.by_name[form] = login
        for form in shared:
            del index.by_name[form]
        return index

    def login_of(self, upload: Upload) -> tuple[str, str]:
        """The roster login of an upload's student and how it was found; ``("", why)`` when
        the roster has no such student."""
        if upload.lms_id and identity(upload.lms_id) in self.by_id:
            return self.by_id[identity(upload.lms_id)], "roster id"
        if upload.email and identity(upload.email).casefold() in self.by_email:
            return self.by_email[identity(upload.email).casefold()], "roster email"
        if identity(upload.name) in self.logins:
            return identity(upload.name), "roster login"
        if upload.email and identity(upload.email) in self.logins:
            return identity(upload.email), "roster login"
        for form in squash_name(upload.name):
            if form in self.by_name:
                return self.by_name[form], "roster name"
        said = ", ".join(x for x in (upload.name, upload.lms_id, upload.email) if x)
        return "", f"no roster student is {said!r}"


def _row_names(row: dict[str, str], lower: dict[str, str]) -> set[str]:
    names = {row.get(lower[c]) or "" for c in _NAME_COLUMNS if c in lower}
    if "first name" in lower and "last name" in lower:
        names.add(f"{row.get(lower['first name']) or ''} {row.get(lower['last name']) or ''}")
    return {form for name in names if name.strip() for form in squash_name(name)}
