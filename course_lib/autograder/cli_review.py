"""``course-lib review``: the review web app (:mod:`.review_app`) served on 127.0.0.1 until Ctrl-C."""

from __future__ import annotations

import argparse
import secrets
import sys
import threading
from pathlib import Path

from .cli_history import require_gradebook
from .history import os_user

__all__ = ["add_review"]


def add_review(sub: argparse._SubParsersAction) -> None:
    """``course-lib review --db gradebook.sqlite [--exercises DIR] [--solutions DIR] [--port N] [--grader NAME]``."""
    p = sub.add_parser(
        "review",
        help="a local web app to grade the answers, resolve held records and judge look-alikes",
        description="Serves the gradebook on 127.0.0.1 behind a random token: the URL printed carries it "
        "(open it in a browser on this machine, or through an SSH port forward; docs/review-app.md). Every "
        "decision is saved at once to the gradebook, with the grader's name. Ctrl-C stops it.",
    )
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.add_argument("--exercises", default="exercises", help="folder of the exercise notebooks (default: exercises)")
    p.add_argument("--solutions", default="solutions", help="folder of the solution notebooks (default: solutions)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    p.add_argument("--grader", default=None, help="the name decisions are saved with (default: the OS user)")
    p.set_defaults(func=_cmd_review)


def _cmd_review(args: argparse.Namespace) -> int:
    if not require_gradebook(args.db, "review"):
        return 2
    if not 0 <= args.port <= 65535:
        print(f"course-lib review: --port: expected 0 to 65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        from .review_app import create_app, serve
    except ImportError as err:
        print(
            f"course-lib review: needs the instructor extra (pip install 'course-lib[instructor]'): {err}",
            file=sys.stderr,
        )
        return 2
    grader = args.grader if args.grader is not None else os_user()
    try:
        app = create_app(
            args.db, exercises=args.exercises, solutions=args.solutions, token=secrets.token_urlsafe(32), grader=grader
        )
    except ValueError as err:
        print(f"course-lib review: --grader: {err}", file=sys.stderr)
        return 2
    try:
        server = serve(app, port=args.port)
    except OSError as err:
        print(
            f"course-lib review: --port: cannot listen on 127.0.0.1:{args.port} ({err.strerror or err})",
            file=sys.stderr,
        )
        return 2
    if not Path(args.exercises).is_dir():
        print(
            f"course-lib review: note: --exercises {args.exercises} is not a folder; the questions' text will be missing",
            file=sys.stderr,
        )
    print(f"Reviewing {args.db} as {app.config['REVIEW_GRADER']!r}; open (Ctrl-C stops):\n  {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.shutdown()
    return 0
