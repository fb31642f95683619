"""Benchmark: grade 200 generated submissions of one assignment, against an nbgrader-style baseline.

Run with ``python benchmarks/grading.py`` (``make bench`` runs it). Prints numbers;
nothing here is a timed test.

- **This grader**: ``grade_all`` with full isolation (``--sandbox required``) and two jobs,
  into a fresh gradebook.
- **On a Dask cluster**: the same, through ``--scheduler`` to a local cluster of as many
  one-thread workers as jobs, on the same cores: the cluster's overhead.
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
import re
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
    """``n`` student folders under ``out``, each with one notebook for ``assignment``; the cells
    that define graded functions differ from student to student (a comment), as a real class's
    do: what the grader reads once per distinct cell is not read once for the whole class."""
    from course_lib.grading.registry import ASSIGNMENTS

    solution = json.loads((ROOT / "solutions" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    blank = json.loads((ROOT / "exercises" / f"{assignment}.ipynb").read_text(encoding="utf-8"))
    wrong = json.loads(json.dumps(solution))
    wrong["cells"].append(
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": WRONG[assignment]}
    )
    variants = [solution, blank, wrong]
    graded = re.compile(r"^def (" + "|".join(ASSIGNMENTS[assignment]) + r")\(", re.M)
    for i in range(n):
        d = out / f"student{i:03d}"
        d.mkdir(parents=True)
        nb = json.loads(json.dumps(variants[i % 3]))
        nb["metadata"]["student"] = i  # distinct bytes for every student
        for cell in nb["cells"]:  # and, as in a real class, their own text in the cells they write
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] == "code" and graded.search(source):
                cell["source"] = source + f"\n# student {i}\n"
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


def _median_seconds(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def where_the_time_goes(assignment: str, sandbox: str) -> None:
    """Print where one submission's time goes, for the solution and the wrong notebook: the
    job's start (the student's process forked and jailed, no cells), the notebook's cells as
    grading runs them (demo blocks skipped), what the skipped demo blocks would have cost, the
    graded calls (over the signed channel, one function's together), and judging in the grading process
    (comparisons, named mistakes)."""
    from course_lib.autograder.autograde import grade_submission, make_job
    from course_lib.autograder.notebook import code_cells
    from course_lib.autograder.sandbox.runner import Limits, Runner
    from course_lib.autograder.sandbox_adapter import watch_lists
    from course_lib.autograder.skip_demos import skip_demos
    from course_lib.grading.forbidden import NotebookScan
    from course_lib.grading.judging import judge
    from course_lib.grading.registry import exercises_of

    solution = (ROOT / "solutions" / f"{assignment}.ipynb").read_bytes()
    wrong = json.loads(solution)
    wrong["cells"].append(
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": WRONG[assignment]}
    )
    exercises = exercises_of(assignment)
    t0 = time.perf_counter()
    with Runner(mode=sandbox, limits=Limits(), watch=watch_lists()) as runner:
        runner.run(make_job([], []))
        start = time.perf_counter() - t0
        for _ in range(3):  # the first jobs of a fresh worker are slower (pages, caches)
            grade_submission(solution, assignment, runner)
        print(
            f"\nwhere one submission's time goes (one warm runner, median of 7; the runner's own start: {start:.2f} s)"
        )
        print(f"{'':24}{'job start':>10}{'cells':>8}{'demos (skipped)':>16}{'calls':>8}{'judging':>9}{'total':>8}")
        wrong_name = "wrong " + WRONG[assignment].split("(")[0].removeprefix("def ")
        for name, data in (("solution", solution), (wrong_name, json.dumps(wrong).encode())):
            cells = NotebookScan(code_cells(data)).runnable_sources()
            graded = skip_demos(cells, [ex.name for ex in exercises])
            empty = _median_seconds(lambda: runner.run(make_job([], [])))
            graded_cells = _median_seconds(lambda c=graded: runner.run(make_job(c, []))) - empty
            all_cells = _median_seconds(lambda c=cells: runner.run(make_job(c, []))) - empty
            job = make_job(graded, exercises)
            result = runner.run(job)
            with_calls = _median_seconds(lambda j=job: runner.run(j)) - empty
            judging = _median_seconds(lambda r=result: [judge(ex, _split(ex, r.outcomes[ex.name])) for ex in exercises])
            total = _median_seconds(lambda d=data: grade_submission(d, assignment, runner))
            print(
                f"{name[:24]:24}{empty:>10.3f}{graded_cells:>8.3f}{all_cells - graded_cells:>16.3f}"
                f"{with_calls - graded_cells:>8.3f}{judging:>9.3f}{total:>8.3f}"
            )
    print(
        "(demos (skipped): what the notebook's `with when_implemented():` blocks cost when run, which "
        "grading skips unless they define something the graded functions use; total: grade_submission, "
        "which also reads and scans the notebook and may make a second run of a function with "
        "references standing in for a failing callee)"
    )


def _import_grader() -> None:
    """Run on each Dask worker before the timing starts: the local run's imports (torch, the
    grader) are not timed either."""
    import course_lib.autograder.autograde
    import course_lib.autograder.sandbox  # noqa: F401


def _split(ex, replies):
    from course_lib.autograder.autograde import split_outcomes
    from course_lib.autograder.sandbox_adapter import outcome_of

    return split_outcomes(ex, [outcome_of(r) for r in replies])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/grading.py", description=__doc__.split("\n")[0])
    p.add_argument("--assignment", default="02_self_attention", choices=sorted(WRONG))
    p.add_argument("-n", type=int, default=200, help="submissions to grade (default: 200)")
    p.add_argument("--baseline-n", type=int, default=12, help="of which the baseline runs (default: 12)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--sandbox", default="required", choices=("auto", "required", "off"))
    p.add_argument("--no-cluster", action="store_true", help="skip the run on a local Dask cluster")
    args = p.parse_args(argv)

    from course_lib.autograder.batch import grade_all
    from course_lib.autograder.config import GradeConfig
    from course_lib.autograder.gradebook import Gradebook

    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        subs = tmp / "submissions"
        make_submissions(subs, args.assignment, args.n)
        db = tmp / "gradebook.sqlite"
        saved: list[float] = []  # when each record was committed
        commit = Gradebook.save

        def timed_save(book, *a, **kw):
            commit(book, *a, **kw)
            saved.append(time.perf_counter())

        Gradebook.save = timed_save  # type: ignore[method-assign]
        t0 = time.perf_counter()
        try:
            config = GradeConfig(jobs=args.jobs, sandbox=args.sandbox, progress=False)
            summary = grade_all(subs, db, config, out=sys.stderr)
        finally:
            Gradebook.save = commit  # type: ignore[method-assign]
        ours = time.perf_counter() - t0
        with Gradebook(db) as book:
            rows = list(book.rows())
        scores = [r.score for _, r in rows]
        print(
            f"course-lib grade: {args.n} submissions of {args.assignment}, {args.jobs} jobs, isolation "
            f"{summary.isolation}: {ours:.1f} s wall ({args.n / ours:.2f} submissions/s), "
            f"{len(rows)} graded, mean score {statistics.mean(scores):.2f}"
        )
        print(
            f"  of which starting the warm workers and the first record: {saved[0] - t0:.1f} s; then "
            f"{len(saved) - 1} records in {saved[-1] - saved[0]:.1f} s "
            f"({(len(saved) - 1) / (saved[-1] - saved[0]):.2f} submissions/s once warm)"
        )
        if not args.no_cluster:
            from distributed import Client, LocalCluster

            with LocalCluster(
                n_workers=args.jobs, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster:
                with Client(cluster) as client:  # the workers import the grader first, as this process did
                    client.run(_import_grader)
                t0 = time.perf_counter()
                on_cluster = GradeConfig(sandbox=args.sandbox, progress=False, scheduler=cluster.scheduler_address)
                grade_all(subs, tmp / "cluster.sqlite", on_cluster, out=sys.stderr)
                remote = time.perf_counter() - t0
            print(
                f"on a local Dask cluster of {args.jobs} one-thread workers: {remote:.1f} s wall "
                f"({args.n / remote:.2f} submissions/s), {100 * (remote / ours - 1):+.0f}% against local grading"
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
    where_the_time_goes(args.assignment, args.sandbox)
    return 0


if __name__ == "__main__":
    sys.exit(main())
