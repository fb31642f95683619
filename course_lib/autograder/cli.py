"""The instructor's ``course-lib`` subcommands, added to the parser of :mod:`course_lib.cli`.

assign    write the student notebooks (exercises/) from the solution notebooks (solutions/)
release   per-assignment student bundles for a graded course (:mod:`.release`)
collect   an LMS download (Canvas, Moodle, Gradescope, folders) into SUBMISSIONS/<student>/<NN_slug>.ipynb
grade     grade a class's notebooks (SUBMISSIONS/<student>/<NN_slug>.ipynb) into a gradebook
check     grade one notebook locally, in the sandbox, and print the feedback
export    write the gradebook as a CSV, a Canvas gradebook import, a wide table, or Gradescope results.json files
feedback  write a feedback report per student (Markdown or HTML)
report    the class report: scores, mistakes, items, look-alike submissions, answers (HTML site or Markdown)
review    a local web app: grade the answers, resolve held records, judge look-alikes (:mod:`.cli_review`)
history, override, resolve: a submission's history and the instructor's changes (:mod:`.cli_history`)
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..grading.run import CALL_TIME_LIMIT
from .cli_history import add_history, add_override, add_resolve, require_gradebook
from .cli_review import add_review

if TYPE_CHECKING:
    from .deadlines import LatePolicy
    from .sandbox import Limits

#: The --sandbox option's help, shared by ``grade`` and ``check``.
_SANDBOX_HELP = (
    "isolation of student code: auto = the strongest this machine has (bubblewrap, else Linux "
    "namespaces), required = refuse without one of them, off = a fresh process with limits only"
)


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Add the instructor's subcommands to the ``course-lib`` parser, in the order ``--help`` lists them."""
    from .release import add_release

    for add in (add_assign, add_release, add_collect, add_grade, add_check, add_export, add_feedback, add_report):
        add(sub)
    for add in (add_review, add_history, add_override, add_resolve):
        add(sub)


def add_assign(sub: argparse._SubParsersAction) -> None:
    """``course-lib assign``: the student notebooks from the solution notebooks."""
    p = sub.add_parser("assign", help="write exercises/ (student notebooks) from solutions/")
    p.add_argument("--source", default="solutions", help="folder of solution notebooks (default: solutions)")
    p.add_argument("--out", default="exercises", help="folder for student notebooks (default: exercises)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if any student notebook is out of date")
    p.set_defaults(func=_cmd_assign)


def _cmd_assign(args: argparse.Namespace) -> int:
    from .assign import AssignError, assign

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


def add_collect(sub: argparse._SubParsersAction) -> None:
    """``course-lib collect``: an LMS download into the folders ``grade`` reads."""
    from .collect_cli import add_collect as add

    add(sub)


def add_grade(sub: argparse._SubParsersAction) -> None:
    """``course-lib grade``: a class's notebooks into the gradebook."""
    p = sub.add_parser("grade", help="grade SUBMISSIONS/<student>/<NN_slug>.ipynb into a SQLite gradebook")
    p.add_argument("submissions", help="folder with one subfolder per student")
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.add_argument("--jobs", type=int, default=2, help="grading processes: submissions graded at once (default: 2)")
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="grade on the workers of this Dask scheduler (tcp://HOST:8786; start each worker with "
        "'dask worker ADDRESS --nthreads 1'); this process still writes the gradebook; --jobs is then unused",
    )
    p.add_argument("--sandbox", choices=("auto", "required", "off"), default="auto", help=_SANDBOX_HELP)
    p.add_argument("--force", action="store_true", help="regrade everything, even unchanged notebooks")
    p.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draw every test input anew from this seed (recorded per submission), so no output can be "
        "looked up from the self-check; default: the self-check's inputs",
    )
    _add_limit_options(p)
    _add_late_options(p)
    p.set_defaults(func=_cmd_grade)


def _add_limit_options(p: argparse.ArgumentParser) -> None:
    """``grade``'s time and memory limits (a :class:`~.sandbox.Limits`)."""
    p.add_argument(
        "--call-seconds",
        type=float,
        default=CALL_TIME_LIMIT,
        help=f"CPU time per call of a function (default: {CALL_TIME_LIMIT:g})",
    )
    p.add_argument(
        "--submission-seconds",
        type=float,
        default=60.0,
        help="wall-clock time for a whole notebook, cells and calls (default: 60)",
    )
    p.add_argument(
        "--cell-seconds",
        type=float,
        default=None,
        help="wall-clock time for one code cell; a cell over it is stopped with an error and the rest of "
        "the notebook still runs (default: half of --submission-seconds)",
    )
    p.add_argument(
        "--memory-mb",
        type=int,
        default=1024,
        help="memory for all of a submission's processes together (default: 1024)",
    )


def _add_late_options(p: argparse.ArgumentParser) -> None:
    """``grade``'s deadline, late penalty and submission times (read by :func:`_late_options`)."""
    p.add_argument(
        "--deadline",
        default=None,
        help="ISO 8601 time with a timezone (2026-11-23T23:59:00+01:00); with --late-penalty, stored in the "
        "gradebook for the assignments of this run and kept by later runs",
    )
    p.add_argument(
        "--late-penalty",
        default=None,
        metavar="RATE%/day[,max=CAP%]",
        help="penalty per started day after the deadline, a fraction of the raw score, at most CAP "
        "(default 100%%), e.g. 10%%/day,max=50%%; a rerun with other values updates the penalties "
        "without regrading",
    )
    p.add_argument("--no-deadline", action="store_true", help="remove the stored deadline of this run's assignments")
    p.add_argument(
        "--timestamps",
        default=None,
        help="CSV with columns student, assignment, submitted_at (ISO time with a timezone); a submission "
        "without a time is on time (the summary counts them)",
    )


def _late_options(args: argparse.Namespace) -> tuple[LatePolicy | None, dict[tuple[str, str], str] | None]:
    """The run's late policy and submission times from ``--deadline``, ``--late-penalty``,
    ``--no-deadline`` and ``--timestamps`` (a ValueError names the argument at fault)."""
    from .deadlines import LatePolicy, read_timestamps

    if args.no_deadline and (args.deadline or args.late_penalty):
        raise ValueError("--no-deadline: cannot be combined with --deadline or --late-penalty")
    if (args.deadline is None) != (args.late_penalty is None):
        missing = "--late-penalty" if args.late_penalty is None else "--deadline"
        raise ValueError(f"{missing}: --deadline and --late-penalty go together (e.g. --late-penalty 10%/day)")
    policy = LatePolicy.parse(args.deadline, args.late_penalty) if args.deadline is not None else None
    times = None
    if args.timestamps is not None:
        try:
            times = read_timestamps(args.timestamps)
        except OSError as err:
            raise ValueError(f"--timestamps: cannot read {args.timestamps} ({err.strerror or err})") from None
    return policy, times


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _limits(args: argparse.Namespace) -> Limits:
    """``grade``'s limits (a ValueError names the argument at fault)."""
    from .sandbox import Limits

    try:
        cell = Limits(cell_seconds=args.cell_seconds).cell_seconds
    except ValueError as err:
        raise ValueError(f"--cell-seconds: {err}") from None
    return Limits(
        call_seconds=args.call_seconds,
        submission_seconds=args.submission_seconds,
        memory_mb=args.memory_mb,
        cell_seconds=cell,
    )


def _cmd_grade(args: argparse.Namespace) -> int:
    from .batch import grade_all
    from .config import GradeConfig
    from .sandbox import SandboxUnavailable

    try:
        limits = _limits(args)
        policy, times = _late_options(args)
        config = GradeConfig(
            jobs=args.jobs,
            sandbox=args.sandbox,
            limits=limits,
            seed=args.seed,
            late=policy,
            no_deadline=args.no_deadline,
            timestamps=times or {},
            scheduler=args.scheduler,
            force=args.force,
            assignments=tuple(args.assignment) if args.assignment else None,
            progress=not args.quiet,
        )
    except ValueError as err:
        print(f"course-lib grade: {err}", file=sys.stderr)
        return 2
    # SIGTERM (a scheduler's stop, `kill`) ends the run as Ctrl-C does: the runners close, their
    # processes and memory cgroups go; what was graded is already in the gradebook
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        summary = grade_all(args.submissions, args.db, config)
    except (FileNotFoundError, SandboxUnavailable, ValueError, OSError) as err:
        print(f"course-lib grade: {err}", file=sys.stderr)
        return 2
    # 1: a submission not graded in full or a file that is no submission (the summary names each)
    return 1 if summary.needs_attention else 0


def add_check(sub: argparse._SubParsersAction) -> None:
    """``course-lib check``: one notebook graded locally, its feedback printed."""
    p = sub.add_parser("check", help="grade one notebook locally and print the feedback")
    p.add_argument("notebook")
    p.add_argument("--assignment", default=None, help="default: from the file name, e.g. 02_self_attention")
    p.add_argument("--sandbox", choices=("auto", "required", "off"), default="auto", help=_SANDBOX_HELP)
    p.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from ..grading.registry import ASSIGNMENTS
    from ..grading.report import Report
    from .autograde import grade_submission, refused_record
    from .batch import read_submission
    from .notebook import NotebookError
    from .sandbox import Runner, SandboxUnavailable
    from .sandbox_adapter import watch_lists

    path = Path(args.notebook)
    assignment = args.assignment or path.name.removesuffix(".ipynb")
    if assignment not in ASSIGNMENTS:
        print(
            f"course-lib check: cannot tell the assignment from {path.name!r}; name the file like "
            f"{', '.join(a + '.ipynb' for a in ASSIGNMENTS)} or pass --assignment",
            file=sys.stderr,
        )
        return 2
    if not path.is_file():
        print(f"course-lib check: {path} is not a file", file=sys.stderr)
        return 2
    try:
        with Runner(mode=args.sandbox, watch=watch_lists()) as runner:
            try:
                record = grade_submission(read_submission(path), assignment, runner)
            except NotebookError as err:
                record = refused_record(assignment, str(err), isolation=runner.isolation)
    except SandboxUnavailable as err:
        print(f"course-lib check: {err}", file=sys.stderr)
        return 2
    for m in record.messages:
        print(f"! {m}")
    for fr in record.functions:
        print(Report.from_dict(fr))
        print()
    print(f"{assignment}: {record.score:g} / {record.max_score:g} points (isolation: {record.isolation})")
    return 0


def add_export(sub: argparse._SubParsersAction) -> None:
    """``course-lib export``: the gradebook as a CSV, a Canvas import, a wide table or Gradescope results."""
    p = sub.add_parser(
        "export",
        help="write the gradebook as a CSV, a Canvas gradebook import, a wide table or Gradescope results.json",
        description="csv: one row per student and assignment (raw score, late days, penalty, points per "
        "function); canvas: a file for Canvas's gradebook import, one row per student of --roster, each notebook in "
        "one of the roster's own assignment columns (--map), never a new one; wide: one "
        "row per student, one column per assignment; gradescope: OUT/<student>/<assignment>/results.json; "
        "gradescope-autograder: the autograder.zip to upload to Gradescope, which grades each submission there "
        "(no gradebook needed). "
        "Students with submissions who are not in the roster are listed on stderr (exit status 0).",
    )
    p.add_argument("--db", default="gradebook.sqlite")
    p.add_argument("--format", choices=("csv", "canvas", "wide", "gradescope", "gradescope-autograder"), default="csv")
    p.add_argument("--out", required=True, help="CSV file, folder for Gradescope results, or autograder.zip")
    _add_gradescope_options(p)
    p.add_argument(
        "--roster",
        default=None,
        help="canvas (required): your Canvas gradebook export (Grades > Export); wide (optional): that or any CSV "
        "with a 'SIS Login ID', 'login' or 'student' column; students are matched by that login",
    )
    p.add_argument(
        "--map",
        action="append",
        metavar='ASSIGNMENT="TITLE (ID)"',
        help="canvas: the roster's column for an assignment (its whole title, its id or its title; repeatable); "
        "unmapped assignments go to the column titled like them, and one without is an error",
    )
    p.add_argument(
        "--missing",
        choices=("blank", "zero"),
        default="blank",
        help="canvas: a roster student without a submission gets an empty cell (Canvas keeps its grade) or 0",
    )
    p.add_argument("--scale", action="store_true", help="canvas: rescale scores to Canvas's Points Possible")
    p.set_defaults(func=_cmd_export)


def _add_gradescope_options(p: argparse.ArgumentParser) -> None:
    """``export``'s options for Gradescope (results and the autograder bundle)."""
    p.add_argument(
        "--visibility",
        choices=("visible", "after_due_date", "after_published", "hidden"),
        default=None,
        help="gradescope, gradescope-autograder: when students see the tests (default: visible)",
    )
    p.add_argument(
        "--assignment",
        default=None,
        help="gradescope-autograder: the assignment the bundle grades (default: found from each notebook)",
    )
    p.add_argument("--seed", type=int, default=None, help="gradescope-autograder: as course-lib grade --seed")
    p.add_argument(
        "--sandbox",
        choices=("auto", "required", "off"),
        default="auto",
        help="gradescope-autograder: " + _SANDBOX_HELP + " (default: auto)",
    )


def _cmd_gradescope_bundle(args: argparse.Namespace) -> int:
    """``export --format gradescope-autograder``: Gradescope's autograder.zip."""
    from .gradescope import BundleConfig, BundleError, build_bundle

    try:
        config = BundleConfig(args.assignment, args.visibility or "visible", args.seed, args.sandbox)
        names = build_bundle(args.out, config)
    except (BundleError, OSError) as err:
        print(f"course-lib export: {err}", file=sys.stderr)
        return 2
    what = args.assignment or "the assignment of each notebook"
    print(f"wrote {args.out} ({', '.join(names)}): grades {what}; upload it as the Gradescope autograder")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from .canvas import export_canvas, parse_maps
    from .exports import export_csv, export_gradescope, export_wide

    if args.format == "gradescope-autograder":
        return _cmd_gradescope_bundle(args)
    if args.assignment is not None or args.seed is not None or args.sandbox != "auto":
        print(
            "course-lib export: --assignment, --seed and --sandbox go with --format gradescope-autograder",
            file=sys.stderr,
        )
        return 2
    if args.visibility is not None and args.format != "gradescope":
        print("course-lib export: --visibility goes with --format gradescope or gradescope-autograder", file=sys.stderr)
        return 2
    if not require_gradebook(args.db, "export"):
        return 2
    if args.format == "canvas" and not args.roster:
        print("course-lib export: --format canvas needs --roster (a Canvas gradebook export)", file=sys.stderr)
        return 2
    if args.roster and args.format not in ("canvas", "wide"):
        print("course-lib export: --roster goes with --format canvas or wide", file=sys.stderr)
        return 2
    if args.format != "canvas" and (args.map or args.scale or args.missing != "blank"):
        print("course-lib export: --map, --missing and --scale go with --format canvas", file=sys.stderr)
        return 2
    if args.format in ("canvas", "wide"):
        try:
            if args.format == "canvas":
                done = export_canvas(args.db, args.out, args.roster, parse_maps(args.map), args.missing, args.scale)
                n, unknown = done.rows, done.not_in_roster
                for warning in done.warnings:
                    print(f"warning: {warning}", file=sys.stderr)
            else:
                n, unknown = export_wide(args.db, args.out, args.roster)
        except (ValueError, OSError) as err:  # RosterError is a ValueError
            print(f"course-lib export: {err}", file=sys.stderr)
            return 2
        print(f"wrote {n} student row(s) to {args.out}")
        if unknown:  # information, not an error: the exit status stays 0
            print(f"{len(unknown)} student(s) with submissions are not in the roster {args.roster}:", file=sys.stderr)
            for student in unknown:
                print(f"  {student}", file=sys.stderr)
        return 0
    if args.format == "csv":
        n = export_csv(args.db, args.out)
        print(f"wrote {n} row(s) to {args.out}")
    else:
        n = export_gradescope(args.db, args.out, args.visibility or "visible")
        print(f"wrote {n} results.json file(s) under {args.out}")
    return 0


def add_feedback(sub: argparse._SubParsersAction) -> None:
    """``course-lib feedback``: one feedback report per student."""
    p = sub.add_parser("feedback", help="write a feedback report per student")
    p.add_argument("--db", default="gradebook.sqlite")
    p.add_argument("--out", required=True, help="folder for the reports")
    p.add_argument("--format", choices=("md", "html"), default="md")
    p.add_argument("--assignment", action="append", default=[], help="only this assignment (repeatable)")
    p.add_argument("--student", action="append", default=[], help="only this student (repeatable)")
    p.set_defaults(func=_cmd_feedback)


def _cmd_feedback(args: argparse.Namespace) -> int:
    from .feedback_files import FeedbackFilterError, write_feedback

    if not require_gradebook(args.db, "feedback"):
        return 2
    try:
        written = write_feedback(args.db, args.out, args.format, args.assignment, args.student)
    except FeedbackFilterError as err:
        print(f"course-lib {err}", file=sys.stderr)
        return 2
    for student in written.without:
        print(f"course-lib feedback: {student!r} has no record of the assignments asked for", file=sys.stderr)
    print(f"wrote {len(written.files)} feedback report(s) to {args.out}")
    return 0


def add_report(sub: argparse._SubParsersAction) -> None:
    """``course-lib report``: the class report, an HTML site or a Markdown summary."""
    from .lookalike import THRESHOLD

    p = sub.add_parser(
        "report",
        help="the class report: scores, mistakes, items, look-alike submissions and answers",
        description="html: a static site OUT/index.html with one page per assignment, the figures and "
        "OUT/data.json (no script, no external request); md: a summary on stdout. Look-alikes compare the "
        "students' graded functions, leaving out the starter code (--exercises) and the solution's shared parts "
        "(--solutions); the solution's code is never shown.",
    )
    p.add_argument("--db", default="gradebook.sqlite", help="gradebook file (default: gradebook.sqlite)")
    p.add_argument("--out", default=None, help="folder for the site (required for --format html)")
    p.add_argument("--format", choices=("html", "md"), default="html")
    p.add_argument(
        "--threshold",
        type=float,
        default=None,
        help=f"smallest look-alike similarity reported, 0 to 1 (default: {THRESHOLD:g})",
    )
    p.add_argument("--exercises", default="exercises", help="folder of the exercise notebooks (default: exercises)")
    p.add_argument("--solutions", default="solutions", help="folder of the solution notebooks (default: solutions)")
    p.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from .class_report import ReportError, write_report

    try:
        result = write_report(
            args.db,
            args.out,
            fmt=args.format,
            exercises=args.exercises,
            solutions=args.solutions,
            threshold=args.threshold,
        )
    except (ReportError, OSError) as err:
        print(f"course-lib report: {err}", file=sys.stderr)
        return 2
    if args.format == "md":
        print(result.text)
        return 0
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    print(
        f"wrote the class report to {args.out}/index.html ({len(result.data['assignments'])} assignment(s); {stages})"
    )
    return 0
