"""The ``course-lib`` command line (also ``python -m course_lib``).

Subcommands for learners (this module):
    api       list the graded API: every function students implement, with its signature
    bench     time course_lib against PyTorch (forward + backward) and print the ratios
    train     train a model on a toy task, save a checkpoint, print held-out accuracy
    evaluate  exact-sequence accuracy of a checkpoint on fresh sequences
    decode    a checkpoint's output for one input (greedy, or beam search with --beam K)

Subcommands for instructors (:mod:`course_lib.autograder.cli`):
    assign    write the student notebooks (exercises/) from the solution notebooks (solutions/)
    release   per-assignment student bundles: the notebook and a self-check without reference code
    collect   an LMS download (Canvas, Moodle, Gradescope, folders) into SUBMISSIONS/<student>/<NN_slug>.ipynb
    grade     grade a class's notebooks (SUBMISSIONS/<student>/<NN_slug>.ipynb) into a gradebook
    check     grade one notebook locally, with the same checks, and print the feedback
    export    the gradebook as a CSV, a Canvas gradebook import, a wide table, Gradescope results.json
              files, or Gradescope's autograder.zip
    feedback  write a feedback report per student (Markdown or HTML)
    report    the class report: scores, mistakes, items, look-alike submissions, answers (HTML site or Markdown)
    review    a local web app: grade the answers, resolve held records, judge look-alikes
    history, override, resolve: a submission's history and the instructor's changes to its score
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
    import importlib.util
    from pathlib import Path

    # The benchmarks are not part of the package; they live in the course's checkout.
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "attention_vs_torch.py"
    if not script.is_file():
        print(
            f"course-lib bench: {script} not found; the benchmarks ship with a checkout of the course "
            "repository, not with the installed package",
            file=sys.stderr,
        )
        return 2
    spec = importlib.util.spec_from_file_location("attention_vs_torch", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    argv = ["--repeats", str(args.repeats), "--device", args.device]
    return int(module.main(argv + (["--threads", str(args.threads)] if args.threads else [])))


def _device(args: argparse.Namespace) -> str | None:
    """``args.device`` checked (None after printing why it cannot be used)."""
    from .training import resolve_device

    try:
        resolve_device(args.device)
    except ValueError as err:
        print(f"course-lib {args.command}: {err}", file=sys.stderr)
        return None
    return args.device


def _cmd_train(args: argparse.Namespace) -> int:
    from .training import default_config, train

    if _device(args) is None:
        return 2
    overrides = {"steps": args.steps} if args.steps else {}
    config = default_config(args.task, args.model, seed=args.seed, **overrides)
    out = args.out or f"checkpoints/{args.task}-{args.model}-seed{args.seed}.pt"
    _, _, metrics = train(config, out=out, threads=args.threads, device=args.device)
    print(f"trained {args.model} on {args.task} for {metrics['steps']} steps in {metrics['train_seconds']:.1f} s")
    print(f"held-out exact-sequence accuracy: {metrics['test_exact_accuracy']:.2%} (1,000 test sequences)")
    print(f"checkpoint: {out}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .training import evaluate, load_checkpoint

    if _device(args) is None:
        return 2
    model, task, _ = load_checkpoint(args.checkpoint, args.device)
    accuracy = evaluate(model, task, n=args.n, seed=args.seed)
    print(f"exact-sequence accuracy: {accuracy:.2%} on {args.n} fresh {task.name} test sequences (seed {args.seed})")
    return 0


def _cmd_decode(args: argparse.Namespace) -> int:
    from .decoding import beam_search, greedy_decode
    from .training import load_checkpoint, model_device

    if _device(args) is None:
        return 2
    model, task, _ = load_checkpoint(args.checkpoint, args.device)
    try:
        src, _, _ = task.batch([(task.parse(args.input), [])])  # (1, S)
    except ValueError as err:
        print(f"course-lib decode: cannot read {args.input!r} as {task.name} input: {err}", file=sys.stderr)
        return 2
    src = src.to(model_device(model))
    max_len = task.max_tgt_len + 1
    if args.beam > 1:
        tokens = beam_search(model, src, beam_size=args.beam, max_len=max_len)
    else:
        tokens = greedy_decode(model, src, max_len=max_len)[0].tolist()
    print(task.render(task.tgt_vocab.decode(tokens)))
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
    p.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default: cpu)")
    p.set_defaults(func=_cmd_bench)

    from .models import MODELS
    from .tasks import TASKS
    from .training import DEVICES

    p = sub.add_parser("train", help="train a model on a toy task and save a checkpoint")
    p.add_argument("task", choices=TASKS)
    p.add_argument("--model", choices=MODELS, default="transformer")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="most training steps (default: the tuned number)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    p.add_argument("--out", default=None, help="checkpoint path (default: checkpoints/TASK-MODEL-seedN.pt)")
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run (default: auto, CUDA when available, else the CPU)",
    )
    p.set_defaults(func=_cmd_train)
    p = sub.add_parser("evaluate", help="exact-sequence accuracy of a checkpoint on fresh test sequences")
    p.add_argument("checkpoint")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run (default: auto, CUDA when available, else the CPU)",
    )
    p.set_defaults(func=_cmd_evaluate)
    p = sub.add_parser("decode", help="print a checkpoint's output for one input")
    p.add_argument("checkpoint")
    p.add_argument("input", help='e.g. "3 1 4 1 5" for reverse, "21 Nov 2026" for dates')
    p.add_argument("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="where to run (default: auto, CUDA when available, else the CPU)",
    )
    p.set_defaults(func=_cmd_decode)
    from .autograder.cli import add_subcommands

    add_subcommands(sub)
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
