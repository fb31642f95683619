"""``course-lib collect DOWNLOAD --out SUBMISSIONS [--roster CSV] [--lms ...]`` (:mod:`.collect`)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

__all__ = ["add_collect"]


def add_collect(sub: argparse._SubParsersAction) -> None:
    """Add ``collect`` to the ``course-lib`` parser."""
    p = sub.add_parser(
        "collect",
        help="turn an LMS download into SUBMISSIONS/<student>/<NN_slug>.ipynb, with a manifest",
        description="Reads a Canvas 'Download Submissions' zip, a Moodle 'Download all submissions' zip, a "
        "Gradescope 'Export Submissions' zip, a folder per student or a flat folder, and writes "
        "OUT/<login>/<NN_slug>.ipynb and OUT/collect-manifest.json (every file: collected, superseded, "
        "unmatched, invalid or ignored, with its reason). The assignment comes from the notebook's stamp, "
        "else its name ('Copy of', '(1)', '-Copy1' removed). Exit status 1 when a file is unmatched or invalid.",
    )
    p.add_argument("download", help="the LMS download: a .zip file or a folder")
    p.add_argument("--out", required=True, help="the submissions folder to write (created; may hold earlier downloads)")
    p.add_argument(
        "--roster",
        default=None,
        help="CSV mapping the LMS's ids and names to logins (a Canvas gradebook export, or columns login, id, "
        "email, name); without it students are filed under the names the download gives",
    )
    p.add_argument(
        "--lms",
        choices=("auto", "canvas", "moodle", "gradescope", "folders", "flat"),
        default="auto",
        help="the download's layout (default: auto, from its file names)",
    )
    p.set_defaults(func=_cmd_collect)


def _cmd_collect(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .collect import MANIFEST, collect
    from .exports import RosterError
    from .lms_downloads import CollectError

    try:
        manifest = collect(args.download, args.out, roster=args.roster, lms=args.lms)
    except (CollectError, RosterError, ValueError, OSError) as err:
        print(f"course-lib collect: {err}", file=sys.stderr)
        return 2
    source = Path(args.download).name
    mine = [e for e in manifest.entries if e.source == source]
    counts = Counter(e.status for e in mine)
    layout = mine[0].lms if mine else "nothing"
    said = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no files"
    print(f"{source} ({layout}): {len(mine)} file(s): {said}")
    print(f"wrote {counts['collected']} notebook(s) under {args.out}/ and {args.out}/{MANIFEST}")
    for e in mine:
        if e.status in ("unmatched", "invalid", "superseded"):
            print(f"  {e.status}: {e.origin}: {e.reason}")
    for w in manifest.warnings:
        if w.startswith(f"{source}: "):
            print(f"warning: {w[len(source) + 2 :]}", file=sys.stderr)
    return 1 if counts["unmatched"] or counts["invalid"] else 0
