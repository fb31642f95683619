"""Benchmark: grade 200 generated submissions of one assignment, against an nbgrader-style baseline.

Run with ``python benchmarks/grading.py`` (``make bench`` runs it). Prints numbers;
nothing here is a timed test.

- **This grader**: ``grade_all`` with full isolation (``--sandbox required``) and two jobs,
  into a fresh gradebook.
- **Baseline** (what nbgrader does): each notebook executed top to bottom by a fresh Jupyter
  kernel through nbclient, one notebook at a time, then the same checks run inside that
  kernel. Run on a sample of the same submissions (it is slow); throughputs are compared.

The submissions are made from the solution notebook: a third correct, a third blank (the
exercise notebook), a third correct except for one function redefined with a classic
mistake in an extra cell.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# One classic mistake per assignment, appended as a last cell (it replaces the student's function).
WRONG = {
    "02_self_attention": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n",
    "05_layer_norm": (
        "def layer_norm(x, gamma, beta, eps=1e-5):\n    mu = x.mean(-1, keepdim=True)\n"
        "    var = x.var(-1, keepdim=True)\n    return gamma * (x - mu) / torch.sqrt(var + eps) + beta\n"
    ),
}


def make_submissions(out: Path, assignment: str, n: int) -> None:
    """``n`` student folders under ``out``, each with one notebook for ``assignment``."""
    solution = json.loads((ROOT / "solutions" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    blank = json.loads((ROOT / "exercises" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    wrong = json.loads(json.dumps(solution))
    wrong["cells"].append(
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": WRONG[assignment]}
    )
    variants = [solution, blank, wrong]
    for i in range(n):
        d = out / f"student{i:03d}"
        d.mkdir(parents=True)
        nb = json.loads(json.dumps(variants[i % 3]))
        nb["metadata"]["student"] = i  # distinct bytes for every student
        (d / f"{assignment}.ipynb").write_text(json.dumps(nb), encoding="utf-8")


def baseline(paths: list[Path], assignment: str) -> list[float]:
    """Seconds per notebook, nbgrader-style: fresh kernel per notebook, then the checks in it."""
    import warnings

    import nbformat
    import nbformat.validator
    from nbclient import NotebookClient

    warnings.filterwarnings("ignore", category=nbformat.validator.MissingIDFieldWarning)

    from course_lib.grading.registry import ASSIGNMENTS

    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    names = list(ASSIGNMENTS[assignment])
    checks = (
        "import json\nfrom course_lib.grading import check as _check\n"
        f"print(json.dumps([_check(globals()[n], name=n).score for n in {names!r}]))\n"
    )
    times = []
    for path in paths:
        t0 = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(checks))
        nbformat.validator.normalize(nb)
        NotebookClient(
            nb,
            kernel_name="python3",
            timeout=120,
            allow_errors=True,
            extra_arguments=["--log-level=ERROR"],
            resources={"metadata": {"path": str(path.parent)}},
        ).execute()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/grading.py", description=__doc__.split("\n")[0])
    p.add_argument("--assignment", default="02_self_attention", choices=sorted(WRONG))
    p.add_argument("-n", type=int, default=200, help="submissions to grade (default: 200)")
    p.add_argument("--baseline-n", type=int, default=12, help="of which the baseline runs (default: 12)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--sandbox", default="required", choices=("auto", "required", "off"))
    args = p.parse_args(argv)

    from course_lib.autograder.batch import grade_all
    from course_lib.autograder.gradebook import Gradebook

    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        subs = tmp / "submissions"
        make_submissions(subs, args.assignment, args.n)
        db = tmp / "gradebook.sqlite"
        t0 = time.perf_counter()
        summary = grade_all(subs, db, jobs=args.jobs, sandbox=args.sandbox, progress=False, out=sys.stderr)
        ours = time.perf_counter() - t0
        with Gradebook(db) as book:
            rows = list(book.rows())
        scores = [r["score"] for _, r in rows]
        print(
            f"course-lib grade: {args.n} submissions of {args.assignment}, {args.jobs} jobs, isolation "
            f"{summary.isolation}: {ours:.1f} s wall ({args.n / ours:.2f} submissions/s), "
            f"{len(rows)} graded, mean score {statistics.mean(scores):.2f}"
        )
        sample = sorted(subs.glob(f"*/{args.assignment}.ipynb"))[: args.baseline_n]
        times = baseline(sample, args.assignment)
        rate = len(times) / sum(times)
        print(
            f"nbgrader-style baseline (fresh kernel per notebook via nbclient, sequential): {len(times)} "
            f"submissions in {sum(times):.1f} s ({rate:.2f} submissions/s; median {statistics.median(times):.2f} s each)"
        )
        print(
            f"speed-up: {(args.n / ours) / rate:.1f}x the baseline's throughput "
            f"({args.n} submissions: {ours:.0f} s here, about {args.n / rate:.0f} s for the baseline)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
