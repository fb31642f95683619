"""The autograder's side of the sandbox, which knows no rubric (:mod:`.sandbox`).

* :func:`watch_lists`: what the warm worker prepares for the runtime layer, from the rules.
* :func:`outcome_of` / :class:`Outcomes`: a sandbox :class:`~.sandbox.jobs.Reply` as grading's
  :class:`~course_lib.grading.model.Outcome` (one outcome per reply, kept: judged reports are
  cached by their outcomes' ids).
* :class:`StandInHook`: a job's stand-in hook (:class:`~.sandbox.jobs.StandIns`): whether a
  stand-in run is needed, and the reference's answer to a stand-in's call, made here in the
  grading process within bounds (:func:`.standin_calls.bounded_call`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ..grading import operands, opwatch
from ..grading.forbidden import OPS_OF_RULE
from ..grading.model import Call, Outcome, OutcomeStatus
from ..grading.registry import ASSIGNMENTS, exercises_of
from .sandbox.jobs import Reply, WatchLists
from .standin_calls import bounded_call

__all__ = ["STANDIN_BYTES", "watch_lists", "outcome_of", "Outcomes", "StandInHook"]

STANDIN_BYTES = 512 << 20  # the memory one stand-in call may add to the grading process

#: run key -> whether that stand-in run is needed, given the outcomes so far (None: not yet)
Decision = Callable[[dict[str, list[Outcome | None]]], bool]


@functools.cache
def watch_lists() -> WatchLists:
    """Every torch function (dotted path) and aten operator that a rule can forbid, with the
    operator watch's source (:mod:`course_lib.grading.opwatch`): the warm worker resolves the
    functions and wraps the operators' kernels once, so that no job pays for it. With the
    source of the words for a failing line's operands (:mod:`course_lib.grading.operands`),
    which the worker runs too: the same code as ``check``'s."""
    rules = {r for slug in ASSIGNMENTS for ex in exercises_of(slug) for r in ex.forbidden} | set(OPS_OF_RULE)
    functions = tuple(sorted(r for r in rules if ":" not in r))
    ops = tuple(sorted({op for ops in OPS_OF_RULE.values() for op in ops}))
    return WatchLists(Path(opwatch.__file__).resolve(), Path(operands.__file__).resolve(), functions, ops)


def outcome_of(reply: Reply) -> Outcome:
    """Grading's outcome of a call, from the sandbox's reply (a status outside grading's is
    turned into ``bad_type`` by the sandbox already)."""
    return Outcome(
        cast(OutcomeStatus, reply.status),
        value=reply.value,
        message=reply.message,
        seen=list(reply.seen),
        largest=reply.largest,
        changed=list(reply.changed),
    )


class Outcomes:
    """Replies as outcomes, each reply converted once: the same reply gives the same outcome,
    so that a report judged on it while the job runs is found again afterwards."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Reply, Outcome]] = {}  # id(reply) -> (the reply, kept: its id stays its own)

    def of(self, reply: Reply) -> Outcome:
        hit = self._made.get(id(reply))
        if hit is None or hit[0] is not reply:
            hit = self._made[id(reply)] = (reply, outcome_of(reply))
        return hit[1]

    def all(self, replies: Mapping[str, Sequence[Reply | None]]) -> dict[str, list[Outcome | None]]:
        """Each run key's outcomes (None where a call has no reply yet)."""
        return {key: [None if r is None else self.of(r) for r in rs] for key, rs in replies.items()}


class StandInHook:
    """A job's stand-in hook: ``references`` (graded name -> the reference function) answer
    the stand-ins' calls, and ``decisions`` (run key -> :data:`Decision`) say whether a
    stand-in run is needed (a run without one always is).

    Args:
        references: the reference of each callee the stand-in runs forward.
        decisions: per stand-in run key, whether to make it from the outcomes so far.
        outcomes: the replies' outcomes (shared with the judging of the job, see
            :class:`~course_lib.autograder.autograde.Judged`).
    """

    def __init__(
        self,
        references: dict[str, Callable[..., Any]],
        decisions: dict[str, Decision] | None = None,
        outcomes: Outcomes | None = None,
    ):
        self.references = references
        self.decisions = decisions if decisions is not None else {}
        self.outcomes = outcomes if outcomes is not None else Outcomes()

    def needed(self, key: str, replies: Mapping[str, Sequence[Reply | None]]) -> bool:
        decide = self.decisions.get(key)
        return True if decide is None else decide(self.outcomes.all(replies))

    def stands_in(self, name: str) -> bool:
        return name in self.references

    def forward(self, name: str, args: tuple, kwargs: dict[str, Any], seconds: float) -> Reply:
        out = bounded_call(self.references[name], Call(args, kwargs), STANDIN_BYTES, seconds)
        return Reply(out.status, value=out.value, message=out.message, seen=list(out.seen), largest=out.largest)
