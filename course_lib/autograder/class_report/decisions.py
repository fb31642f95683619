"""The graders' decisions on look-alike pairs, as the class report shows them.

A grader confirms or dismisses a pair in the review app (``course-lib review``); the decision
is stored in the gradebook (:meth:`course_lib.autograder.manual.ManualStore.decide_pair`). The
report reads them and puts each next to its pair: ``data.json``'s pair gets ``decision`` (a
:class:`PairDecisionData`, or null when undecided), and the look-alike summary counts the
``confirmed`` and ``dismissed`` pairs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from ..gradebook import Gradebook
from ..manual import PairDecision, pair_key

__all__ = ["PairDecisionData", "decision_data", "pair_decisions", "with_decisions"]

#: Decided pairs by assignment, then by :func:`~course_lib.autograder.manual.pair_key`.
Decided = dict[str, dict[tuple[str, str], PairDecision]]


class PairDecisionData(TypedDict):
    """A pair's decision in ``data.json``: ``verdict`` (``confirmed`` or ``dismissed``), the
    grader's ``note``, ``by`` whom and ``at`` when (ISO 8601, UTC)."""

    verdict: str
    note: str
    by: str
    at: str


def decision_data(decision: PairDecision | None) -> PairDecisionData | None:
    """A stored decision as ``data.json`` carries it (None: undecided)."""
    if decision is None:
        return None
    return PairDecisionData(verdict=decision.verdict, note=decision.note, by=decision.by, at=decision.at)


def pair_decisions(db: str | Path, assignments: Iterable[str]) -> Decided:
    """The decided pairs of each assignment in the gradebook ``db``.

    Args:
        db: the gradebook file (it exists: the report read it).
        assignments: the assignments to read.

    Returns:
        Assignment -> :func:`~course_lib.autograder.manual.pair_key` -> the decision.
    """
    with Gradebook(db) as book:
        return {a: book.manual.pairs(a) for a in assignments}


def with_decisions(
    pairs: list[dict[str, Any]], summary: dict[str, Any], decided: Mapping[tuple[str, str], PairDecision]
) -> None:
    """Give each pair (the report's dicts, with students' ids) its ``decision``, and the summary
    ``confirmed_pairs`` and ``dismissed_pairs``, in place."""
    counts = {"confirmed": 0, "dismissed": 0}
    for pair in pairs:
        data = decision_data(decided.get(pair_key(str(pair["a"]), str(pair["b"]))))
        pair["decision"] = data
        if data is not None and data["verdict"] in counts:
            counts[data["verdict"]] += 1
    summary["confirmed_pairs"] = counts["confirmed"]
    summary["dismissed_pairs"] = counts["dismissed"]
