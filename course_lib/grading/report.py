"""What a check returns: a :class:`Report` of per-test results, and how it is shown.

A report is data (kept in gradebooks as :meth:`Report.to_dict`) and is shown as text
(``str(report)``) or, in a notebook, as HTML (:mod:`.rendering`): the score, then each named
mistake once with the tests it explains and its fix, then the failing tests, the passing ones
folded (the wording: :mod:`.feedback`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

from .feedback import composition_lines, mistakes_of
from .rendering import as_html, as_text

__all__ = ["ReportStatus", "REPORT_STATUSES", "TestResult", "Composition", "Report"]

#: A function's verdict (:class:`Report`), shown to students and kept in gradebooks, hence
#: the words: ``"not implemented"`` here is the report of a function whose calls all had
#: the outcome ``"not_implemented"``.
ReportStatus = Literal["passed", "failed", "not implemented", "forbidden", "missing", "error"]
REPORT_STATUSES: tuple[str, ...] = get_args(ReportStatus)


@dataclass
class TestResult:
    """The result of one test: points, and feedback when it failed.

    ``diagnosis`` is the first named mistake whose outputs match the student's on this test,
    ``diagnoses`` all of them (see :func:`~course_lib.grading.judging.judge`). ``error`` is the
    error the test's call raised, in full (said once for all the tests it affects:
    :func:`~course_lib.grading.feedback.error_lines`); older records have none."""

    name: str
    checks: str
    points: float
    max_points: float
    passed: bool
    feedback: str = ""
    diagnosis: str = ""
    withheld: bool = False  # it passed, but its points wait for the function's value tests
    diagnoses: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class Composition:
    """How the student's function scored with the student's own graded functions as its
    callees, when the report's score comes from a run with the references standing in."""

    callees: list[str]
    score: float
    status: str
    failed: list[str]


@dataclass
class Report:
    """The result of checking one function: per-test results, score and feedback.

    Shown in a notebook as HTML; ``str(report)`` gives the same as text, in the same order
    (:mod:`.rendering`). Each named mistake is said once, before the failing tests, with the
    tests it explains.
    """

    function: str
    results: list[TestResult]
    status: ReportStatus
    notes: list[str] = field(default_factory=list)
    max_points: float | None = None
    composition: Composition | None = None

    @property
    def score(self) -> float:
        return float(sum(r.points for r in self.results))

    @property
    def max_score(self) -> float:
        if self.max_points is not None:
            return float(self.max_points)
        return float(sum(r.max_points for r in self.results))

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def diagnoses(self) -> list[str]:
        """The distinct mistakes recognised, in the order first seen."""
        return [m for m, _ in mistakes_of(self.results)]

    def to_dict(self) -> dict:
        return {
            "function": self.function,
            "status": self.status,
            "score": self.score,
            "max_score": self.max_score,
            "notes": list(self.notes),
            "results": [asdict(r) for r in self.results],
            "composition": asdict(self.composition) if self.composition else None,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        comp = d.get("composition")
        return cls(
            function=d["function"],
            results=[TestResult(**r) for r in d["results"]],
            status=d["status"],
            notes=list(d.get("notes", [])),
            max_points=d.get("max_score"),
            composition=Composition(**comp) if comp else None,
        )

    def headline(self) -> str:
        """``function: score/max points, verdict``: the report's first line."""
        words = {
            "passed": "all tests passed",
            "failed": "some tests failed",
            "not implemented": "not implemented yet",
            "forbidden": "uses a call this exercise forbids",
            "missing": "function not found",
            "error": "could not be checked",
        }[self.status]
        return f"{self.function}: {_format_points(self.score)}/{_format_points(self.max_score)} points, {words}"

    def composition_lines(self) -> list[str]:
        return composition_lines(self.function, self.composition, self.max_score)

    def __str__(self) -> str:
        return as_text(self)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        return as_html(self)


def _format_points(x: float) -> str:
    return f"{x:g}"
