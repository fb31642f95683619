"""The ``course-lib`` command line (also ``python -m course_lib``).

Subcommands:
    api       list the graded API: every function students implement, with its signature
    bench     time course_lib against PyTorch (forward + backward) and print the ratios
    train     train a model on a toy task, save a checkpoint, print held-out accuracy
    evaluate  exact-sequence accuracy of a checkpoint on fresh sequences
    decode    a checkpoint's output for one input (greedy, or beam search with --beam K)
    assign    write the student notebooks (exercises/) from the solution notebooks (solutions/)
    grade     grade a class's notebooks (SUBMISSIONS/<student>/<NN_slug>.ipynb) into a gradebook
    check     grade one notebook locally, with the same checks, and print the feedback
    export    write the gradebook as a CSV or as Gradescope results.json files
    feedback  write a feedback report per student (Markdown or HTML)
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


def _cmd_train(args: argparse.Namespace) -> int:
    from .training import default_config, train

    overrides = {"steps": args.steps} if args.steps else {}
    config = default_config(args.task, args.model, seed=args.seed, **overrides)
    out = args.out or f"checkpoints/{args.task}-{args.model}-seed{args.seed}.pt"
    _, _, metrics = train(config, out=out, threads=args.threads)
    print(f"trained {args.model} on {args.task} for {config.steps} steps in {metrics['train_seconds']:.1f} s")
    print(f"held-out exact-sequence accuracy: {metrics['test_exact_accuracy']:.2%} (1,000 test sequences)")
    print(f"checkpoint: {out}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .training import evaluate, load_checkpoint

    model, task, _ = load_checkpoint(args.checkpoint)
    accuracy = evaluate(model, task, n=args.n, seed=args.seed)
    print(f"exact-sequence accuracy: {accuracy:.2%} on {args.n} fresh {task.name} test sequences (seed {args.seed})")
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    from .decoding import beam_search, greedy_decode
    from .training import load_checkpoint

    model, task, _ = load_checkpoint(args.checkpoint)
    try:
        src, _, _ = task.batch([(task.parse(args.input), [])])  # (1, S)
    except ValueError as err:
        print(f"course-lib decode: cannot read {args.input!r} as {task.name} input: {err}", file=sys.stderr)
        return 2
    max_len = task.max_tgt_len + 1
    if args.beam > 1:
        tokens = beam_search(model, src, beam_size=args.beam, max_len=max_len)
    else:
        tokens = greedy_decode(model, src, max_len=max_len)[0].tolist()
    print(task.render(task.tgt_vocab.decode(tokens)))
    return 0


def _cmd_assign(args: argparse.Namespace) -> int:
    from .grading.assign import AssignError, assign

    try:
        changed = assign(args.source, args.out, check=args.check)
    except (AssignError, FileNotFoundError) as err:
        print(f"course-lib assign: {err}", file=sys.stderr)
        return 2
    if args.check:
        for path in changed:
            print(f"out of date: {path}")
        return 1 if changed else 0
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print(f"{args.out}/ is up to date")
    return 0


def _cmd_grade(args: argparse.Namespace) -> int:
    from .grading.batch import grade_all
    from .grading.sandbox import SandboxUnavailable

    from .grading.sandbox import Limits

    limits = Limits(call_seconds=args.call_seconds, submission_seconds=args.submission_seconds,
                    memory_mb=args.memory_mb)
    try:
        summary = grade_all(args.submissions, args.db, jobs=args.jobs, sandbox=args.sandbox, force=args.force,
                            assignments=tuple(args.assignment) if args.assignment else None,
                            progress=not args.quiet, seed=args.seed, limits=limits)
    except (FileNotFoundError, SandboxUnavailable, ValueError) as err:
        print(f"course-lib grade: {err}", file=sys.stderr)
        return 2
    return 1 if summary.failed else 0  # some submissions could not be graded (the summary says why)


def _cmd_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grading.autograde import grade_submission, refused
    from .grading.batch import read_submission
    from .grading.notebook import NotebookError
    from .grading.core import Report
    from .grading.registry import ASSIGNMENTS
    from .grading.sandbox import Runner, SandboxUnavailable

    path = Path(args.notebook)
    assignment = args.assignment or path.name.removesuffix(".ipynb")
    if assignment not in ASSIGNMENTS:
        print(f"course-lib check: cannot tell the assignment from {path.name!r}; name the file like "
              f"{', '.join(a + '.ipynb' for a in ASSIGNMENTS)} or pass --assignment", file=sys.stderr)
        return 2
    if not path.is_file():
        print(f"course-lib check: {path} is not a file", file=sys.stderr)
        return 2
    try:
        with Runner(mode=args.sandbox) as runner:
            try:
                record = grade_submission(read_submission(path), assignment, runner)
            except NotebookError as err:
                record = refused(assignment, str(err), isolation=runner.isolation)
    except SandboxUnavailable as err:
        print(f"course-lib check: {err}", file=sys.stderr)
        return 2
    for m in record["messages"]:
        print(f"! {m}")
    for fr in record["functions"]:
        print(Report.from_dict(fr))
        print()
    print(f"{assignment}: {record['score']:g} / {record['max_score']:g} points (isolation: {record['isolation']})")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grading.exports import export_csv, export_gradescope

    if not Path(args.db).is_file():
        print(f"course-lib export: no gradebook at {args.db}", file=sys.stderr)
        return 2
    if args.format == "csv":
        n = export_csv(args.db, args.out)
        print(f"wrote {n} row(s) to {args.out}")
    else:
        n = export_gradescope(args.db, args.out)
        print(f"wrote {n} results.json file(s) under {args.out}")
    return 0


def _cmd_feedback(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .grading.exports import write_feedback

    if not Path(args.db).is_file():
        print(f"course-lib feedback: no gradebook at {args.db}", file=sys.stderr)
        return 2
    n = write_feedback(args.db, args.out, fmt=args.format)
    print(f"wrote {n} feedback report(s) to {args.out}")
    return 0


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

    from .models import MODELS
    from .tasks import TASKS

    p = sub.add_parser("train", help="train a model on a toy task and save a checkpoint")
    p.add_argument("task", choices=TASKS)
    p.add_argument("--model", choices=MODELS, default="transformer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the tuned number)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    p.add_argument("--out", default=None, help="checkpoint path (default: checkpoints/TASK-MODEL-seedN.pt)")
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("evaluate", help="exact-sequence accuracy of a checkpoint on fresh test sequences")
    p.add_argument("checkpoint")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_evaluate)
    p = sub.add_parser("decode", help="print a checkpoint's output for one input")
    p.add_argument("checkpoint")
    p.add_argument("input", help='e.g. "3 1 4 1 5" for reverse, "21 Nov 2026" for dates')
    p.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    p.set_defaults(func=_cmd_decode)
    p = sub.add_parser("assign", help="write exercises/ (student notebooks) from solutions/")
    p.add_argument("--source", default="solutions", help="folder of solution notebooks (default: solutions)")
    p.add_argument("--out", default="exercises", help="folder for student notebooks (default: exercises)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any student notebook is out of date")
    p.set_defaults(func=_cmd_assign)

    sandbox_help = ("isolation of student code: auto = the strongest this machine has (bubblewrap, else Linux "
                    "namespaces), required = refuse without one of them, off = a fresh process with limits only")
    p = sub.add_parser("grade", help="grade SUBMISSIONS/<student>/<NN_slug>.ipynb into a SQLite gradebook")
    p.add_argument("submissions", help="folder with one subfolder per student")
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.add_argument("--jobs", type=int, default=2, help="submissions graded at once (default: 2)")
    p.add_argument("--sandbox", choices=("auto", "required", "off"), default="auto", help=sandbox_help)
    p.add_argument("--force", action="store_true", help="regrade everything, even unchanged notebooks")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--seed", type=int, default=None,
                   help="draw every test input anew from this seed (recorded per submission), so no output can be "
                        "looked up from the self-check; default: the self-check's inputs")
    p.add_argument("--call-seconds", type=float, default=10.0, help="CPU time per call of a function (default: 10)")
    p.add_argument("--submission-seconds", type=float, default=60.0,
                   help="wall-clock time for a whole notebook, cells and calls (default: 60)")
    p.add_argument("--memory-mb", type=int, default=1024,
                   help="memory for all of a submission's processes together (default: 1024)")
    p.set_defaults(func=_cmd_grade)
    p = sub.add_parser("check", help="grade one notebook locally and print the feedback")
    p.add_argument("notebook")
    p.add_argument("--assignment", default=None, help="default: from the file name, e.g. 02_self_attention")
    p.add_argument("--sandbox", choices=("auto", "required", "off"), default="auto", help=sandbox_help)
    p.set_defaults(func=_cmd_check)
    p = sub.add_parser("export", help="write the gradebook as CSV or Gradescope results.json files")
    p.add_argument("--db", default="gradebook.sqlite")
    p.add_argument("--format", choices=("csv", "gradescope"), default="csv")
    p.add_argument("--out", required=True, help="CSV file, or folder for Gradescope results")
    p.set_defaults(func=_cmd_export)
    p = sub.add_parser("feedback", help="write a feedback report per student")
    p.add_argument("--db", default="gradebook.sqlite")
    p.add_argument("--out", required=True, help="folder for the reports")
    p.add_argument("--format", choices=("md", "html"), default="md")
    p.set_defaults(func=_cmd_feedback)
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
