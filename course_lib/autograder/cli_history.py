"""The gradebook's history on the command line: ``history``, ``override`` and ``resolve``.

history   every grading, resubmission, override and resolution of a student's submissions,
          and the graders' decisions about their answers (points given by hand, look-alike pairs)
override  set (or --clear) the score that counts for a submission
resolve   accept or reject a submission held for review
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_history", "add_override", "add_resolve"]

_BY_HELP = "who makes the change, kept in the history (default: the OS user)"


def require_gradebook(db: str, verb: str) -> bool:
    """Whether the gradebook file ``db`` exists; if not, say so on stderr for ``course-lib <verb>``."""
    if Path(db).is_file():
        return True
    print(f"course-lib {verb}: no gradebook at {db}", file=sys.stderr)
    return False


def add_history(sub: argparse._SubParsersAction) -> None:
    """``course-lib history STUDENT [ASSIGNMENT]``."""
    p = sub.add_parser(
        "history",
        help="a student's gradings, resubmissions, overrides and resolutions, oldest first",
        description="One line per event: when, the assignment, what (graded, regraded, resubmitted, override, "
        "accepted, rejected, cleared), the score, the status and notebook, by whom and why; with them, the "
        "graders' decisions about the student's answers and look-alike pairs (manual grade, clear, split, "
        "pair); each assignment headed by the score that counts now.",
    )
    p.add_argument("student")
    p.add_argument("assignment", nargs="?", default=None)
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.set_defaults(func=_cmd_history)


def _cmd_history(args: argparse.Namespace) -> int:
    from .gradebook import Gradebook
    from .identity import identity

    if not require_gradebook(args.db, "history"):
        return 2
    student = identity(args.student)
    assignment = None if args.assignment is None else identity(args.assignment)
    with Gradebook(args.db) as book:
        events = book.history(student, assignment)
        if not events:
            what = f"{student!r}" + ("" if assignment is None else f" for {assignment!r}")
            print(f"course-lib history: no history of {what} in {args.db}", file=sys.stderr)
            return 2
        decisions = book.manual.about(student, assignment)
        for slug in dict.fromkeys(e.assignment for e in events):
            rec = book.record(student, slug)
            if rec is not None:
                why = f" ({rec.adjustment.flag()})" if rec.adjustment else ""
                pending = rec.manual.pending if rec.manual else 0
                changed = (
                    [f" ({q.question}: {q.note})" for q in rec.manual.questions if q.changed] if rec.manual else []
                )
                waiting = (f"; manual grading pending: {pending}" if pending else "") + "".join(changed)
                print(f"{student} / {slug}: {rec.score:g} / {rec.points_possible:g} counts{why}{waiting}")
            lines = [(e.at, 0, e.id, e.line()) for e in events if e.assignment == slug]
            lines += [(d.at, 1, d.id, d.line()) for d in decisions if d.assignment == slug]
            for *_, line in sorted(lines):
                print(f"  {line}")
    return 0


def add_override(sub: argparse._SubParsersAction) -> None:
    """``course-lib override STUDENT ASSIGNMENT --points P --reason R [--by NAME] | --clear``."""
    p = sub.add_parser(
        "override",
        help="set the score that counts for a submission (or --clear it)",
        description="The override is the final score of the notebook graded now (late penalty included) and "
        "every export shows it as a flag. A regrade of the same notebook keeps it; a new notebook (a "
        "resubmission) is graded afresh and the override no longer counts (grade prints a note).",
    )
    p.add_argument("student")
    p.add_argument("assignment")
    p.add_argument("--points", type=float, default=None, help="the score, 0 to the assignment's points")
    p.add_argument("--reason", default="", help="why (required with --points)")
    p.add_argument("--clear", action="store_true", help="remove the override or resolution: the grading counts again")
    p.add_argument("--by", default=None, help=_BY_HELP)
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.set_defaults(func=_cmd_override)


def _cmd_override(args: argparse.Namespace) -> int:
    from .adjust import AdjustError, clear, override
    from .history import os_user

    if not require_gradebook(args.db, "override"):
        return 2
    by = args.by or os_user()
    try:
        if args.clear == (args.points is not None):
            raise AdjustError("override: give either --points P (with --reason) or --clear")
        if args.clear:
            rec = clear(args.db, args.student, args.assignment, args.reason, by)
        else:
            rec = override(args.db, args.student, args.assignment, args.points, args.reason, by)
    except AdjustError as err:
        print(f"course-lib {err}", file=sys.stderr)
        return 2
    print(f"{args.student} / {rec.assignment}: {rec.score:g} / {rec.points_possible:g} counts")
    return 0


def add_resolve(sub: argparse._SubParsersAction) -> None:
    """``course-lib resolve STUDENT ASSIGNMENT --accept [--points P] | --reject --reason R``."""
    p = sub.add_parser(
        "resolve",
        help="accept or reject a submission held for review",
        description="A review record holds 0 points: nothing in the notebook was graded. --accept --points P "
        "gives the score you judge after reading it (without --points: the grading's score, refused when that "
        "is 0); --reject --reason R confirms 0 points. Both are kept in the history and flagged in the exports.",
    )
    p.add_argument("student")
    p.add_argument("assignment")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--accept", action="store_true")
    how.add_argument("--reject", action="store_true")
    p.add_argument("--points", type=float, default=None, help="with --accept: the score")
    p.add_argument("--reason", default="", help="why (required with --reject)")
    p.add_argument("--by", default=None, help=_BY_HELP)
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.set_defaults(func=_cmd_resolve)


def _cmd_resolve(args: argparse.Namespace) -> int:
    from .adjust import AdjustError, resolve
    from .history import os_user

    if not require_gradebook(args.db, "resolve"):
        return 2
    try:
        rec = resolve(
            args.db,
            args.student,
            args.assignment,
            accept=args.accept,
            points=args.points,
            reason=args.reason,
            by=args.by or os_user(),
        )
    except AdjustError as err:
        print(f"course-lib {err}", file=sys.stderr)
        return 2
    print(f"{args.student} / {rec.assignment}: {rec.score:g} / {rec.points_possible:g} counts")
    return 0
