"""The ``course-lib`` command line (also ``python -m course_lib``).

Subcommands:
    api     list the graded API: every function students implement, with its signature
    bench   time course_lib against PyTorch (forward + backward) and print the ratios
"""

from __future__ import annotations

import argparse
import inspect
import sys


def _cmd_api(args: argparse.Namespace) -> int:
    import course_lib

    for name in course_lib.GRADED_FUNCTIONS:
        fn = getattr(course_lib, name)
        summary = (inspect.getdoc(fn) or "").splitlines()[0]
        print(f"{name}{inspect.signature(fn)}\n    {summary}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import main as bench_main

    return bench_main(repeats=args.repeats, threads=args.threads)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="course-lib",
        description="Reference implementations and tools for 'Attention and Transformers, from Scratch'.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("api", help="list the graded API (names, signatures, one-line summaries)")
    p.set_defaults(func=_cmd_api)
    p = sub.add_parser("bench", help="time course_lib vs PyTorch, forward + backward, and print ratios")
    p.add_argument("--repeats", type=int, default=20, help="timed iterations per case (default: 20)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.set_defaults(func=_cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
