"""The record of one graded submission: what the gradebook stores and every export reads.

A :class:`Record` is made by grading (:func:`.autograde.grade_submission`), stamped by the
batch with its submission time and late penalty (:func:`.deadlines.apply_late`), and stored
as JSON (:meth:`Record.to_json`, the gradebook's ``record`` column). :meth:`Record.from_json`
reads every record a gradebook has held: keys that records written before they existed lack
(``isolation``, ``seed``, ``fixed_cases``, ``flags``, ``sources``, ``answers``, and the stamp's
``submitted_at``, ``raw_score`` and ``late``) get defaults and stay absent when the record is
written back, so rewriting an old record changes only what the rewrite means to change.

The per-function reports (``functions``) stay the JSON of
:meth:`course_lib.grading.report.Report.to_dict`. Every string from a submission is made valid
UTF-8 once, when grading makes the record (:func:`.autograde.grade_submission`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from .history import Adjustment
from .manual_points import ManualPoints

__all__ = ["Late", "Record", "RecordStatus", "STATUSES", "LEGACY_KEYS", "STAMP_KEYS"]

#: What a record's ``status`` can be: the notebook was graded, refused as not a notebook,
#: stopped at its time limit, crashed, held for an instructor's review (it tampered with the
#: grading), or could not be graded because of a fault on the grader's side (regraded on the
#: next run).
RecordStatus = Literal["graded", "invalid", "timeout", "crashed", "review", "error"]
STATUSES: tuple[str, ...] = get_args(RecordStatus)

#: Keys that records graded before they existed lack.
LEGACY_KEYS = frozenset({"isolation", "seed", "fixed_cases", "flags", "sources", "answers"})
#: Keys a record gets when the batch stamps it; a record not stamped yet lacks them.
STAMP_KEYS = frozenset({"submitted_at", "raw_score", "late"})


@dataclass(frozen=True)
class Late:
    """A late submission's penalty: ``days`` started days after ``deadline``, ``fraction`` of
    the raw score (``rate`` a day, at most ``cap``), ``points`` taken off.

    Args:
        days: started days after the deadline (at least 1).
        fraction: the share of the raw score taken off.
        points: the points taken off (rounded to 6 decimals).
        submitted: the submission time (ISO 8601).
        deadline: the deadline (ISO 8601).
        rate: the policy's share per started day.
        cap: the policy's largest share.
    """

    days: int
    fraction: float
    points: float
    submitted: str
    deadline: str
    rate: float
    cap: float

    def to_json(self) -> dict[str, Any]:
        return {
            "days": self.days,
            "fraction": self.fraction,
            "points": self.points,
            "submitted": self.submitted,
            "deadline": self.deadline,
            "rate": self.rate,
            "cap": self.cap,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Late:
        return cls(**{k: data[k] for k in ("days", "fraction", "points", "submitted", "deadline", "rate", "cap")})


@dataclass(frozen=True)
class Record:
    """One graded submission.

    Args:
        assignment: the assignment's name (``02_self_attention``).
        sha256: the notebook file's hash (empty when it could not be read).
        status: one of :data:`STATUSES`.
        raw_score: the checks' points, before any late penalty.
        max_score: the assignment's points.
        messages: notebook-level feedback.
        functions: one report per graded function (``Report.to_dict()``).
        isolation: the sandbox's isolation (``bubblewrap``, ``namespaces``, ``none``).
        seed: the instructor's seed the inputs were drawn from; None: the self-check's inputs.
        fixed_cases: cases whose inputs under ``seed`` equal the self-check's.
        flags: forbidden calls, tampering, use of the reference (for the instructor).
        sources: graded function -> the source of its last top-level ``def``, then the
            notebook's own helpers it reaches (:mod:`~.compared`; records graded before that
            carry the ``def`` alone).
        answers: the "think about it" answers, ``[{"id", "answer"}]``.
        submitted_at: the submission time (ISO 8601), None when unknown (on time).
        late: the late penalty, None when on time.
        absent: the keys of :data:`LEGACY_KEYS` and :data:`STAMP_KEYS` the stored JSON lacks
            (an older gradebook's record, or one not stamped yet); :meth:`to_json` leaves them out.
        adjustment: the instructor's override or review resolution that counts, as the
            gradebook reads it back from the history (:mod:`.history`); never stored in the
            record's JSON.
        manual: the points graders gave by hand to its answers (:mod:`.manual_points`), as
            the gradebook reads them back; None when its assignment has no question graded
            by hand. Never stored in the record's JSON.
    """

    assignment: str
    sha256: str
    status: RecordStatus
    raw_score: float
    max_score: float
    messages: tuple[str, ...] = ()
    functions: tuple[dict[str, Any], ...] = ()
    isolation: str = "none"
    seed: int | None = None
    fixed_cases: int = 0
    flags: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    answers: tuple[dict[str, Any], ...] = ()
    submitted_at: str | None = None
    late: Late | None = None
    absent: frozenset[str] = STAMP_KEYS
    adjustment: Adjustment | None = None
    manual: ManualPoints | None = None

    @property
    def graded_score(self) -> float:
        """The grading's score: the raw score less any late penalty."""
        return self.raw_score if self.late is None else self.raw_score - self.late.points

    @property
    def manual_score(self) -> float:
        """The points given by hand, less the late penalty's share (0 without any)."""
        if self.manual is None:
            return 0.0
        return self.manual.points * (1.0 if self.late is None else 1.0 - self.late.fraction)

    @property
    def score(self) -> float:
        """The score that counts: 0 for a review rejected; else an instructor's adjustment's
        points (else :attr:`graded_score`) plus the points given by hand (:attr:`manual_score`)."""
        if self.adjustment is not None and self.adjustment.kind == "rejected":
            return 0.0
        checked = self.graded_score if self.adjustment is None else self.adjustment.points
        return checked + self.manual_score

    @property
    def points_possible(self) -> float:
        """The assignment's points: the checks' (:attr:`max_score`) and the questions graded by hand."""
        return self.max_score + (0.0 if self.manual is None else self.manual.max_points)

    @property
    def all_flags(self) -> tuple[str, ...]:
        """The grading's flags, then the adjustment's (``override: 30 points (reason)``), then
        ``manual grading pending: N`` while answers wait for a grader."""
        flags = self.flags if self.adjustment is None else (*self.flags, self.adjustment.flag())
        pending = 0 if self.manual is None else self.manual.pending
        return (*flags, f"manual grading pending: {pending}") if pending else flags

    @property
    def stamped(self) -> bool:
        """Whether the batch stamped it with a submission time and a late penalty."""
        return not STAMP_KEYS & self.absent

    def stamp(self, submitted_at: str | None, late: Late | None) -> Record:
        """The record with this submission time and late penalty."""
        return replace(self, submitted_at=submitted_at, late=late, absent=self.absent - STAMP_KEYS)

    def to_json(self) -> dict[str, Any]:
        """The gradebook's JSON, the keys in :attr:`absent` left out."""
        data: dict[str, Any] = {
            "assignment": self.assignment,
            "sha256": self.sha256,
            "status": self.status,
            "score": self.graded_score,
            "max_score": self.max_score,
            "messages": list(self.messages),
            "functions": list(self.functions),
            "isolation": self.isolation,
            "seed": self.seed,
            "fixed_cases": self.fixed_cases,
            "flags": list(self.flags),
            "sources": self.sources,
            "answers": list(self.answers),
            "submitted_at": self.submitted_at,
            "raw_score": self.raw_score,
            "late": None if self.late is None else self.late.to_json(),
        }
        return {k: v for k, v in data.items() if k not in self.absent}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        """A stored record, of any gradebook written so far (see the module's docstring)."""
        late = data.get("late")
        return cls(
            assignment=data["assignment"],
            sha256=data["sha256"],
            status=data["status"],
            raw_score=data.get("raw_score", data["score"]),
            max_score=data["max_score"],
            messages=tuple(data["messages"]),
            functions=tuple(data["functions"]),
            isolation=data.get("isolation", "none"),
            seed=data.get("seed"),
            fixed_cases=data.get("fixed_cases", 0),
            flags=tuple(data.get("flags", ())),
            sources=dict(data.get("sources", {})),
            answers=tuple(data.get("answers", ())),
            submitted_at=data.get("submitted_at"),
            late=None if not late else Late.from_json(late),
            absent=frozenset(k for k in LEGACY_KEYS | STAMP_KEYS if k not in data),
        )
