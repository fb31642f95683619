"""Deadlines: when a submission is late, and by how much its score is reduced.

A :class:`LatePolicy` (``--deadline`` and ``--late-penalty``) takes a share of the raw score
per started day after the deadline, up to a cap; submission times come from an LMS's
``timestamps.csv`` (:func:`read_timestamps`). :meth:`LatePolicy.penalty` computes a record's late
penalty from its stored raw score, so a rerun with another deadline or rate updates every
penalty without running a notebook again (:mod:`course_lib.autograder.batch` calls it).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .identity import identity
from .record import Late

__all__ = ["LatePolicy", "PENALTY_FORM", "parse_time", "read_timestamps"]

_PENALTY = re.compile(r"(\d+(?:\.\d+)?)%/day(?:,max=(\d+(?:\.\d+)?)%)?")
PENALTY_FORM = "RATE%/day or RATE%/day,max=CAP% (e.g. 10%/day,max=50%)"


def parse_time(text: str, what: str) -> datetime:
    """An ISO 8601 time with its timezone (``2026-11-23T23:59:00+01:00`` or ``...Z``).

    Raises:
        ValueError: not ISO 8601, or without a timezone (a deadline must not depend on the
            grader's clock settings); the message names ``what``.
    """
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{what}: expected an ISO 8601 time with a timezone, e.g. 2026-11-23T23:59:00+01:00, got {text!r}"
        ) from None
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError(f"{what}: {text!r} has no timezone; add one, e.g. {text.strip()}+00:00 or Z")
    return t


@dataclass(frozen=True)
class LatePolicy:
    """A deadline and its penalty: ``rate`` of the raw score per started day after the deadline,
    at most ``cap`` (fractions: 0.1 is 10%)."""

    deadline: datetime
    rate: float
    cap: float = 1.0

    @classmethod
    def parse(cls, deadline: str, penalty: str) -> LatePolicy:
        """From ``--deadline`` and ``--late-penalty`` (:data:`PENALTY_FORM`); a ValueError names the
        argument that is wrong and the form it expects."""
        when = parse_time(deadline, "--deadline")
        m = _PENALTY.fullmatch(penalty.strip().replace(" ", ""))
        if not m:
            raise ValueError(f"--late-penalty: expected {PENALTY_FORM}, got {penalty!r}")
        rate = float(m.group(1)) / 100
        cap = float(m.group(2)) / 100 if m.group(2) is not None else 1.0
        if not 0 < rate <= 1 or not 0 < cap <= 1:
            raise ValueError(f"--late-penalty: the rate and the cap must be between 0% and 100%, got {penalty!r}")
        return cls(when, rate, cap)

    def describe(self) -> str:
        cap = "" if self.cap >= 1 else f", at most {self.cap:.0%}"
        return f"deadline {self.deadline.isoformat()}, {self.rate * 100:g}% per started day late{cap}"

    def to_json(self) -> dict[str, Any]:
        return {"deadline": self.deadline.isoformat(), "rate": self.rate, "cap": self.cap}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LatePolicy:
        return cls(datetime.fromisoformat(data["deadline"]), float(data["rate"]), float(data["cap"]))

    def days_late(self, submitted: datetime) -> int:
        """Started days after the deadline: 1 second late is 1 day, 24 h 1 s late is 2."""
        seconds = (submitted - self.deadline).total_seconds()
        return 0 if seconds <= 0 else math.ceil(seconds / 86400)

    def penalty(self, raw_score: float, submitted: str | None) -> Late | None:
        """The penalty on ``raw_score`` of a submission at ``submitted`` (ISO 8601): None when
        on time or without a time. Computed from the raw score each time, so a new deadline or
        rate never compounds an old penalty."""
        days = self.days_late(datetime.fromisoformat(submitted)) if submitted else 0
        if days == 0:
            return None
        fraction = min(self.rate * days, self.cap)
        return Late(
            days,
            fraction,
            round(raw_score * fraction, 6),
            submitted or "",
            self.deadline.isoformat(),
            self.rate,
            self.cap,
        )


def read_timestamps(path: str | Path) -> dict[tuple[str, str], str]:
    """``(student, assignment) -> ISO time`` from a CSV with the columns ``student``,
    ``assignment`` and ``submitted_at`` (an ISO 8601 time with a timezone; an LMS download
    provides them). Ids are in the form folder names are compared in (:func:`.identity.identity`). A ValueError names the file and line of a bad row."""
    times: dict[tuple[str, str], str] = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        need = {"student", "assignment", "submitted_at"}
        if not need <= set(reader.fieldnames or ()):
            raise ValueError(
                f"--timestamps: {path} needs the columns student, assignment, submitted_at; "
                f"it has {', '.join(reader.fieldnames or ()) or 'none'}"
            )
        for row in reader:
            where = f"--timestamps: {path} line {reader.line_num}"
            when = parse_time(row["submitted_at"] or "", where)
            times[(identity(row["student"] or ""), identity(row["assignment"] or ""))] = when.isoformat()
    return times
