"""A forbidden call costs points once: in the graded function that makes it.

When ``softmax`` calls ``torch.softmax``, ``softmax`` scores 0. Its graded callers
(``scaled_dot_product_attention``, ``self_attention``) only call the student's ``softmax``;
they are graded with the reference standing in for it (:mod:`.standins`), exactly as for a
wrong callee, and keep the points their own code earns.

What a graded function ``f`` is charged with (its forbidden notes) is read in two parts:

- its own code and the helpers it reaches, with its graded callees (the functions the
  reference stands in for, :func:`~.standins.static_callees` / :func:`~.standins.live_callees`)
  left unread: the walk stops at them;
- inside each graded callee ``g``, what ``f``'s rules forbid and ``g``'s rules do not: a use
  that ``g`` may make but ``f`` may not (``softmax`` calling ``F.scaled_dot_product_attention``
  for ``self_attention``) is charged to ``f``, since the reference ``g`` does not do it and the
  student's ``g`` would do it for ``f``. What ``g``'s own rules forbid is charged to ``g``,
  and ``f`` runs with the reference ``g`` whenever that matters.

A caller that calls a forbidden function itself, or through a helper of its own that is not
graded, is charged as before. One rule for :func:`course_lib.grading.check` (a live function)
and the autograder (a notebook's source, read without running it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from .forbidden import NotebookScan, violations_in_function
from .registry import ASSIGNMENTS, assignment_of, exercise
from .standins import live_callees, static_callees

__all__ = ["Charging", "static_charges", "live_charges"]

#: (graded name, rules, callees not to read) -> the walk's notes
Walk = Callable[[str, Sequence[str], Collection[str]], list[str]]


@dataclass
class Charging:
    """The forbidden notes charged to each graded function of one notebook.

    Args:
        walk: the forbidden-call walk from a graded name under some rules, not reading the
            given graded callees.
        callees: a graded name's graded callees that the reference stands in for.
        rules: a graded name's own forbidden calls.
    """

    walk: Walk
    callees: Callable[[str], list[str]]
    rules: Callable[[str], Sequence[str]]
    _memo: dict[tuple[str, tuple[str, ...], frozenset[str]], list[str]] = field(
        default_factory=dict, init=False, repr=False
    )

    def charged(self, name: str) -> list[str]:
        """The notes ``name`` itself is charged with, each once, in the order found."""
        return self._under(name, tuple(self.rules(name)), frozenset())

    def _under(self, name: str, rules: tuple[str, ...], stack: frozenset[str]) -> list[str]:
        """What ``rules`` forbid in ``name``'s code and, in its graded callees, what those
        callees' own rules allow (``stack``: the names being read, a callee that calls back
        into one of them is read in full)."""
        key = (name, rules, stack)
        if key not in self._memo:
            callees = [c for c in self.callees(name) if c not in stack]
            notes = list(self.walk(name, rules, callees))
            inner = stack | {name}
            for callee in callees:
                theirs = set(self._under(callee, tuple(self.rules(callee)), inner))
                notes += [n for n in self._under(callee, rules, inner) if n not in theirs and n not in notes]
            self._memo[key] = notes
        return self._memo[key]


def static_charges(scan: NotebookScan, assignment: str) -> dict[str, list[str]]:
    """Graded name -> the forbidden notes charged to it, read from a notebook's cells.

    Args:
        scan: the notebook, parsed.
        assignment: its assignment (``02_self_attention``).
    """
    names = ASSIGNMENTS[assignment]
    unreadable = [c.source for c in scan.cells if c.tree is None]  # a callee's def may be there
    charging = Charging(
        walk=scan.violations,
        callees=lambda n: static_callees(scan.env, n, [m for m in names if m != n], unreadable),
        rules=lambda n: exercise(n).forbidden,
    )
    return {n: charging.charged(n) for n in names}


def live_charges(fn: Callable[..., Any], name: str) -> list[str]:
    """The forbidden notes charged to a live function ``fn`` graded as ``name``, its graded
    callees read from its globals (the notebook's namespace).

    Args:
        fn: the student's function.
        name: the graded function it implements.
    """
    namespace = getattr(fn, "__globals__", None)
    names = ASSIGNMENTS[assignment_of(name)]

    def function(n: str) -> Any:
        return fn if n == name else namespace.get(n) if isinstance(namespace, dict) else None

    def walk(n: str, rules: Sequence[str], boundary: Collection[str]) -> list[str]:
        f = function(n)
        if f is None:
            return []  # a callee whose cell failed: nothing of it runs
        return violations_in_function(f, rules, [function(b) for b in boundary if function(b) is not None])

    def callees(n: str) -> list[str]:
        f = function(n)
        return live_callees(f, [m for m in names if m != n]) if callable(f) else []

    return Charging(walk, callees, lambda n: exercise(n).forbidden).charged(name)
