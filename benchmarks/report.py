"""Benchmark: the class report of 1,000 students x 7 assignments (``course-lib report``).

Run with ``python benchmarks/report.py`` (``make bench`` runs it). Prints numbers; nothing
here is a timed test. Target: the whole report (HTML pages, figures, data.json, look-alike
search included) in at most 60 s on the 2-core machine.

The gradebook is built fast, without the sandbox: every graded function's reference and each
of its named mistakes are checked once (``course_lib.grading.check``), then each student gets,
per function, the correct report or a mistake's (common mistakes more often), sometimes with one
passing test flipped to an unrecognised failure (no diagnosis), a few records refused, timed out
or failed, some late. Sources: a signature and docstring from the exercise notebook and a body
of random statements (torch calls, methods and operators over the student's own names); some
blanks (the starter), some renamed copies of another student, some of the solution. Answers: a few sentences to most questions.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = "2026-11-24T00:00:00+00:00"  # of the late records planted

#: What a student's statements are made of: methods, torch functions and operators drawn at
#: random, so that two independent students rarely write the same statements in the same order.
METHODS = ("sum", "mean", "abs", "clone", "exp", "transpose", "reshape", "view", "softmax", "amax", "unsqueeze")
METHODS += ("squeeze", "flatten", "float", "contiguous", "norm", "cumsum", "sqrt", "log", "tanh", "max", "size")
TORCH = ("zeros_like", "ones_like", "where", "clamp", "cat", "stack", "exp", "log", "sqrt", "matmul", "einsum")
TORCH += ("tril", "triu", "maximum", "full_like", "isfinite", "nan_to_num", "bmm", "softmax", "outer")
OPERATORS = ("+", "-", "*", "/", "@", "**")


def expression(rng: random.Random, names: list[str], depth: int) -> str:
    """A random expression over ``names``: a name, a method or torch call, an operation, an index."""
    kind = rng.randrange(5 if depth > 0 else 2)
    if kind == 0:
        return rng.choice(names)
    if kind == 1:
        args = ", ".join(str(rng.randint(-2, 3)) for _ in range(rng.randint(0, 2)))
        return f"{rng.choice(names)}.{rng.choice(METHODS)}({args})"
    if kind == 2:
        args = [expression(rng, names, depth - 1) for _ in range(rng.randint(1, 2))]
        return f"torch.{rng.choice(TORCH)}({', '.join(args)})"
    if kind == 3:
        return f"{expression(rng, names, depth - 1)} {rng.choice(OPERATORS)} {expression(rng, names, depth - 1)}"
    return f"({expression(rng, names, depth - 1)})[{rng.randint(-1, 2)}]"


def statement(rng: random.Random, names: list[str], new: str) -> str:
    """A random statement that binds ``new``: an assignment, an ``if`` or a ``for`` loop."""
    form = rng.randrange(5)
    if form == 3:
        return (
            f"if {expression(rng, names, 1)}.{rng.choice(('any', 'all'))}():\n    {new} = {expression(rng, names, 2)}"
        )
    if form == 4:
        return (
            f"{new} = {names[0]}\nfor i in range({rng.randint(1, 4)}):\n    {new} = {new} + {expression(rng, names, 1)}"
        )
    return f"{new} = {expression(rng, names, 2)}"


NAMES = ["out", "res", "tmp", "val", "acc", "buf", "y", "z", "t", "w", "h", "s", "cur", "total", "part", "prev"]
SENTENCES = [
    "The maximum keeps every exponent at most zero, so nothing overflows.",
    "I think the mean can be far from the largest score.",
    "Scaling keeps the variance of the scores near one.",
    "A mask broadcast over the queries hides the same keys for every query.",
    "Without positions the model cannot tell the order of the tokens.",
    "The gradient vanishes when the softmax is nearly one-hot.",
    "Memory grows with the square of the sequence length.",
    "I am not sure, but the sum stays the same after the shift.",
]


def header_of(stub: str) -> str:
    """The starter stub without its placeholder body (signature and docstring)."""
    return stub.replace("    # YOUR CODE HERE\n", "").replace("    raise NotImplementedError()", "").rstrip()


def student_body(rng: random.Random, x: str) -> str:
    """4 to 7 random statements over the parameter ``x`` and the student's own names, then a return."""
    names, lines = [x], []
    for _ in range(rng.randint(4, 7)):
        new = rng.choice([n for n in NAMES if n not in names] or NAMES)
        lines += ["    " + line for line in statement(rng, names, new).split("\n")]
        names.append(new)
    lines.append(f"    return {names[-1]}")
    return "\n".join(lines)


def disguise(rng: random.Random, src: str) -> str:
    """Renamed local names, comments and blank lines: a copy made to look different."""
    for name in rng.sample(NAMES, 6):
        src = re.sub(rf"\b{name}\b", name + "_" + str(rng.randint(0, 99)), src)
    out = []
    for line in src.split("\n"):
        out.append(line)
        if line.rstrip().endswith(":") and rng.random() < 0.5:
            out.append(" " * (len(line) - len(line.lstrip()) + 4) + "# my own idea")
    return "\n".join(out)


def make_gradebook(path: Path, n: int, seed: int = 0) -> tuple[int, int, int]:
    """Write a gradebook of ``n`` students x every assignment to ``path``; returns the records,
    the copies of another student and the copies of the solution planted."""
    from course_lib.autograder.autograde import failed_record, refused_record
    from course_lib.autograder.gradebook import Gradebook
    from course_lib.autograder.notebook import code_cells, function_sources, think_answers
    from course_lib.autograder.record import Late, Record
    from course_lib.grading import check
    from course_lib.grading.registry import ASSIGNMENTS, exercise

    rng = random.Random(seed)
    students = [f"student{i:04d}" for i in range(n)]
    rows = []
    copies = solution_copies = 0
    for assignment, functions in ASSIGNMENTS.items():
        exercises_nb = (ROOT / "exercises" / f"{assignment}.ipynb").read_bytes()
        starter = function_sources(code_cells(exercises_nb), functions)
        solution = function_sources(code_cells((ROOT / "solutions" / f"{assignment}.ipynb").read_bytes()), functions)
        questions = [q["id"] for q in think_answers(exercises_nb)]
        right = {f: check(exercise(f).reference, f).to_dict() for f in functions}
        wrong = {f: [check(m.implementation, f).to_dict() for m in exercise(f).mistakes[:8]] for f in functions}
        params = {f: re.search(r"def \w+\(\s*(\w+)", starter[f]).group(1) for f in functions}  # type: ignore[union-attr]
        sources: dict[str, dict[str, str]] = {}
        for i, student in enumerate(students):
            r = rng.random()
            if r < 0.08:
                sources[student] = dict(starter)  # blank
            elif r < 0.09:
                sources[student] = {f: disguise(rng, solution[f]) for f in functions}  # the solution, copied
                solution_copies += 1
            elif r < 0.11 and i > 0:
                other = sources[students[rng.randrange(i)]]  # another student's, copied
                sources[student] = {f: disguise(rng, src) for f, src in other.items()}
                copies += 1
            else:
                sources[student] = {f: header_of(starter[f]) + "\n" + student_body(rng, params[f]) for f in functions}
            r = rng.random()
            if r < 0.02:
                record = refused_record(assignment, "the file is not valid JSON")
            elif r < 0.03:
                record = failed_record(assignment, "the sandbox failed")
            else:
                reports = []
                for f in functions:
                    if rng.random() < 0.25 and wrong[f]:
                        k = min(int(rng.paretovariate(1.2)) - 1, len(wrong[f]) - 1)  # common mistakes more often
                        reports.append(wrong[f][k])
                    elif rng.random() < 0.05:
                        flipped = copy.deepcopy(right[f])
                        res = rng.choice(flipped["results"])
                        res.update(points=0.0, passed=False, feedback="the output differs from the expected one")
                        flipped["score"] = float(sum(x["points"] for x in flipped["results"]))
                        flipped["status"] = "failed"
                        reports.append(flipped)
                    else:
                        reports.append(right[f])
                score = float(sum(x["score"] for x in reports))
                record = Record(
                    assignment=assignment,
                    sha256="",
                    status="timeout" if r < 0.04 else "graded",
                    raw_score=score,
                    max_score=float(sum(x["max_score"] for x in reports)),
                    functions=tuple(reports),
                    isolation="bwrap",
                )
                if rng.random() < 0.05:
                    late = Late(1, 0.1, round(score * 0.1, 6), "2026-11-25T00:00:00+00:00", DEADLINE, 0.1, 1.0)
                    record = record.stamp(late.submitted, late)
            answers = [
                {"id": q, "answer": " ".join(rng.sample(SENTENCES, rng.randint(2, 4))) if rng.random() < 0.7 else ""}
                for q in questions
            ]
            record = replace(
                record,
                sources=sources[student] if record.status != "invalid" else {},
                answers=tuple(answers),
            )
            rows.append(
                (
                    student,
                    assignment,
                    "",
                    "bench",
                    record.status,
                    record.score,
                    record.max_score,
                    json.dumps(record.to_json(), sort_keys=True),
                    0.5,
                    "2026-11-24T00:00:00Z",
                )
            )
    with Gradebook(path) as book:
        book.conn.execute("BEGIN")
        book.conn.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        book.conn.execute("COMMIT")
    return len(rows), copies, solution_copies


def main() -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/report.py", description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=1000, help="students (default: 1000)")
    p.add_argument("--keep", action="store_true", help="keep the gradebook and the report (printed)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="report-bench-"))
    try:
        t0 = time.perf_counter()
        n, copies, solution_copies = make_gradebook(work / "gradebook.sqlite", args.n)
        size = (work / "gradebook.sqlite").stat().st_size / 1e6
        print(
            f"gradebook: {n} records ({args.n} students x 7 assignments, {size:.0f} MB), built in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        cli = Path(sys.executable).parent / "course-lib"
        cmd = [str(cli), "report", "--db", str(work / "gradebook.sqlite"), "--out", str(work / "report")]
        t0 = time.perf_counter()
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 1
        stages = re.search(r"\((\d+) assignment\(s\); (.*)\)", done.stdout)
        pages = sum(1 for _ in (work / "report").glob("*.html"))
        mb = sum(f.stat().st_size for f in (work / "report").iterdir()) / 1e6
        data = json.loads((work / "report" / "data.json").read_text())
        pairs = sum(a["lookalikes"]["student_pairs"] for a in data["assignments"])
        refs = sum(a["lookalikes"]["reference_pairs"] for a in data["assignments"])
        print(
            f"course-lib report, {args.n} students x 7 assignments: {seconds:.1f} s (target <= 60 s), "
            f"{pages} pages, {mb:.1f} MB; {pairs} student look-alike pairs ({copies} copies planted, some of a "
            f"blank), {refs} matches with the solution ({solution_copies} planted)"
        )
        print(
            f"  where the time goes: {stages.group(2) if stages else done.stdout.strip()}; the rest is "
            "starting Python and importing"
        )
        if args.keep:
            print(f"  kept in {work}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
