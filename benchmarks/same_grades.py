"""Grade one mixed class with two revisions of the grader and compare everything they write.

Run with ``python benchmarks/same_grades.py [--before 7094a1d] [--after main] [--keep DIR]
[--no-cluster]`` from the repository root. A tool, not a test: it prints a table and exits 1
on any difference.

Each revision is checked out into a temporary detached ``git worktree`` and run as its own
``python -m course_lib`` (``PYTHONPATH`` = that worktree, this interpreter). The class, built
once: the benchmark class (``benchmarks/grading.py``'s submissions of two assignments), an attack
class (hostile notebooks) and late work (a timestamps CSV, a deadline and a penalty), then two
notebooks resubmitted and graded again. Each revision grades it without ``--seed``, with
``--seed 1234`` and on a local Dask cluster, and writes every export. Gradebooks are compared
record by record with :data:`VOLATILE` masked, exports byte for byte; "after" grades the class
a second time to show what the mask hides differs between two runs of the same code too.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENTS = ("02_self_attention", "05_layer_norm")
N_STUDENTS = 12
DEADLINE, PENALTY = "2026-11-20T23:59:00+00:00", "10%/day,max=50%"

#: Gradebook fields that differ between any two runs of the same code, masked for the comparison
#: only (the same-revision control run prints whether each differs there too):
VOLATILE = {
    "results.checker": "hash of the grader's own source: changes with any edit of the grader, by design",
    "results.seconds": "wall time the submission took to grade",
    "results.graded_at": "clock time the submission was graded",
}

#: Hostile notebooks: a cell appended to the solution of 02_self_attention, or the file's bytes.
ATTACKS: dict[str, str | bytes] = {
    "loop_top": "while True:\n    pass\n",
    "loop_in_call": "def softmax(x, dim=-1):\n    while True:\n        pass\n",
    "os_system": "import os\nos.system('echo pwned > /tmp/same_grades_pwned')\nprint(open('/etc/passwd').read()[:40])\n",
    "getsource": "import inspect\nimport course_lib\nSRC = inspect.getsource(course_lib.softmax)\n",
    "import_in_fn": "def softmax(x, dim=-1):\n    import course_lib\n    return course_lib.softmax(x, dim)\n",
    "forbidden": "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n",
    "sys_exit": "import sys\nsys.exit()\n",
    "patch": "import builtins\nbuiltins.len = lambda x: 0\nimport course_lib.grading as g\ng.check = lambda *a, **k: 1\n",
    "memory": "hog = bytearray(8 * 1024**3)\n",
    "syntax": "def softmax(x dim=-1):\n    return x\n",
    "not_json": b"this is not a notebook {",
    "empty_file": b"",
    "empty_nb": b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
}
#: Submission times: student -> days after the deadline (absent: no time, on time).
LATE_DAYS = {"student000": -1.0, "student001": 0.5, "student002": 2.2, "student004": 9.0, "attack_forbidden": 1.5}
#: Resubmitted after the first grading: (student, assignment) -> the new notebook's source.
RESUBMIT = {("student001", "02_self_attention"): "solution", ("attack_syntax", "02_self_attention"): "solution"}
EXPORTS = {
    "csv": ["export", "--format", "csv", "--out", "{o}/grades.csv"],
    "canvas": ["export", "--format", "canvas", "--out", "{o}/canvas.csv", "--roster", "{roster}"],
    "wide": ["export", "--format", "wide", "--out", "{o}/wide.csv", "--roster", "{roster}"],
    "gradescope": ["export", "--format", "gradescope", "--out", "{o}/gradescope"],
    "feedback_md": ["feedback", "--format", "md", "--out", "{o}/feedback_md"],
    "feedback_html": ["feedback", "--format", "html", "--out", "{o}/feedback_html"],
    "report_md": ["report", "--format", "md", "--exercises", "{tree}/exercises", "--solutions", "{tree}/solutions"],
    "report_html": [
        "report",
        "--format",
        "html",
        "--out",
        "{o}/report_html",
        "--exercises",
        "{tree}/exercises",
        "--solutions",
        "{tree}/solutions",
    ],
}


def run(tree: Path, args: list[str], cwd: Path, stdout: Path | None = None) -> tuple[int, float, str]:
    """``python -m course_lib ARGS`` of the revision in ``tree``: exit status, seconds, stderr's tail."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    with open(stdout or os.devnull, "wb") as out:
        p = subprocess.run(
            [sys.executable, "-m", "course_lib", *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.PIPE
        )
    return p.returncode, time.perf_counter() - t0, p.stderr.decode(errors="replace")[-400:]


def own_course_lib(tree: Path) -> str:
    """The course_lib that ``PYTHONPATH=tree`` imports; refuses another one."""
    code = "import course_lib; print(course_lib.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tree,
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not where.startswith(str(tree) + os.sep):
        raise SystemExit(f"PYTHONPATH={tree} imports {where!r}, not its own course_lib")
    return where


@contextmanager
def worktree(rev: str, where: Path) -> Iterator[Path]:
    """A detached checkout of ``rev`` at ``where``, removed afterwards."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(where), rev], check=True)
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


def notebook(tree: Path, kind: str, extra: str | None = None) -> dict[str, Any]:
    """The solution (or exercise) notebook of 02_self_attention, with ``extra`` as a last cell."""
    folder = "solutions" if kind == "solution" else "exercises"
    nb: dict[str, Any] = json.loads((tree / folder / f"{ASSIGNMENTS[0]}.ipynb").read_text(encoding="utf-8"))
    if extra is not None:
        nb["cells"].append(
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": extra}
        )
    return nb


def build_class(tree: Path, out: Path, n: int) -> tuple[Path, Path, Path, Path, Path]:
    """The class before and after resubmission, their timestamps CSVs and a roster."""
    first = out / "class1"
    out.mkdir(parents=True)
    make = (
        "import importlib.util, sys; from pathlib import Path\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(tree / 'benchmarks' / 'grading.py')!r})\n"
        "g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)\n"
        "g.make_submissions(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))\n"
    )
    for a in ASSIGNMENTS:
        tmp = out / f"make_{a}"
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, "-c", make, str(tmp), a, str(n)], env=env, cwd=out, check=True)
        for nb in sorted(tmp.glob("*/*.ipynb")):
            (first / nb.parent.name).mkdir(parents=True, exist_ok=True)
            shutil.move(nb, first / nb.parent.name / nb.name)
        shutil.rmtree(tmp)
    for name, attack in ATTACKS.items():
        (first / f"attack_{name}").mkdir()
        data = attack if isinstance(attack, bytes) else json.dumps(notebook(tree, "solution", attack)).encode()
        (first / f"attack_{name}" / f"{ASSIGNMENTS[0]}.ipynb").write_bytes(data)
    second = out / "class2"
    shutil.copytree(first, second)
    for (student, a), kind in RESUBMIT.items():
        new = notebook(tree, kind, f"# resubmitted by {student}\n")
        (second / student / f"{a}.ipynb").write_text(json.dumps(new), encoding="utf-8")
    stamps = []
    for i, when in enumerate((0.0, 3.0)):  # the resubmissions come 3 days later
        path = out / f"timestamps{i + 1}.csv"
        lines = ["student,assignment,submitted_at"]
        for student, days in LATE_DAYS.items():
            for a in ASSIGNMENTS:
                resubmitted = (student, a) in RESUBMIT
                lines.append(f"{student},{a},{_iso(days + (when if resubmitted else 0.0))}")
        for student, a in RESUBMIT:
            if student not in LATE_DAYS and when:
                lines.append(f"{student},{a},{_iso(when)}")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        stamps.append(path)
    roster = out / "roster.csv"
    students = [*sorted(p.name for p in first.iterdir()), "never_submitted"]
    roster.write_text("student\n" + "\n".join(students) + "\n", encoding="utf-8")
    return first, second, stamps[0], stamps[1], roster


def _iso(days_late: float) -> str:
    from datetime import datetime, timedelta

    return (datetime.fromisoformat(DEADLINE) + timedelta(days=days_late)).isoformat()


def dump(db: Path) -> list[str]:
    """Every row of every table of a gradebook as sorted JSON lines ``table {...}``, the record parsed."""
    lines = []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for table in tables:
            cur = conn.execute(f"SELECT * FROM {table}")  # table names from sqlite_master
            cols = [c[0] for c in cur.description]
            for row in cur:
                values = dict(zip(cols, row, strict=True))
                for key in ("record", "policy"):
                    if isinstance(values.get(key), str):
                        values[key] = json.loads(values[key])
                lines.append(f"{table} " + json.dumps(values, sort_keys=True, ensure_ascii=False))
    conn.close()
    return sorted(lines)


def mask(lines: list[str]) -> list[str]:
    """The lines with every :data:`VOLATILE` field replaced by ``*``."""
    out = []
    for line in lines:
        table, _, text = line.partition(" ")
        values = json.loads(text)
        for field in VOLATILE:
            t, _, name = field.partition(".")
            if t == table and name in values:
                values[name] = "*"
        out.append(f"{table} " + json.dumps(values, sort_keys=True, ensure_ascii=False))
    return sorted(out)  # sorted again: the masked fields may have ordered the lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster(tree: Path, logs: Path, n: int = 2) -> Iterator[str]:
    """A Dask scheduler and ``n`` one-thread workers importing ``tree``'s course_lib; its address."""
    from distributed import Client

    address = f"tcp://127.0.0.1:{_free_port()}"
    dask = str(Path(sys.executable).parent / "dask")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    host, port = address.removeprefix("tcp://").split(":")
    logs.mkdir(parents=True, exist_ok=True)
    cmds = [[dask, "scheduler", "--host", host, "--port", port, "--no-dashboard"]]
    cmds += [[dask, "worker", address, "--nthreads", "1", "--no-dashboard", "--name", f"w{i}"] for i in range(n)]
    procs = []
    try:
        for i, cmd in enumerate(cmds):
            with open(logs / f"dask{i}.log", "wb") as log:
                procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=log, cwd=logs))
            time.sleep(1.0 if i == 0 else 0.0)
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(n, timeout=120)
            where = client.run(_course_lib_file)
        if any(not str(w).startswith(str(tree) + os.sep) for w in where.values()):
            raise SystemExit(f"the cluster's workers import {where}, not {tree}'s course_lib")
        print(f"  cluster {address}: workers import {sorted(set(where.values()))}", flush=True)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _course_lib_file() -> str:
    import course_lib

    return str(course_lib.__file__)


def grade_revision(
    tree: Path, klass: tuple[Path, Path, Path, Path, Path], out: Path, use_cluster: bool, limits: list[str]
) -> dict:
    """Grade the class with the revision in ``tree`` into ``out``; the artefacts and timings."""
    first, second, stamps1, stamps2, roster = klass
    out.mkdir(parents=True)
    base = ["grade", "--sandbox", "required", "--jobs", "2", "--quiet", *limits]
    late = ["--deadline", DEADLINE, "--late-penalty", PENALTY]
    runs: list[tuple[str, Path, Path, list[str]]] = [
        ("plain.run1", first, stamps1, []),
        ("plain", second, stamps2, []),
        ("seed", second, stamps2, ["--seed", "1234"]),
    ]
    artefacts: dict[str, list[str] | bytes] = {}
    timings: dict[str, float] = {}
    status: dict[str, int] = {}

    def grade(name: str, folder: Path, stamps: Path, extra: list[str]) -> None:
        db = out / f"{name.split('.')[0]}.sqlite"
        args = [*base, str(folder), "--db", str(db), "--timestamps", str(stamps), *late, *extra]
        rc, seconds, err = run(tree, args, out)
        status[f"grade {name}"], timings[name] = rc, seconds
        if rc not in (0, 1):
            print(f"  grade {name}: exit {rc}: {err}", flush=True)
        artefacts[f"{name}.gradebook"] = dump(db)

    for name, folder, stamps, extra in runs:
        grade(name, folder, stamps, extra)
    if use_cluster:
        with cluster(tree, out / "dask") as address:
            grade("cluster", second, stamps2, ["--scheduler", address])
    for db in sorted(out.glob("*.sqlite")):
        timings.update(export_all(tree, db, roster, out / f"exports_{db.stem}", artefacts, status))
    artefacts["exit statuses"] = [f"{k}: {v}" for k, v in sorted(status.items())]
    return {"artefacts": artefacts, "timings": timings}


def export_all(tree: Path, db: Path, roster: Path, out: Path, artefacts: dict, status: dict) -> dict[str, float]:
    """Every export of ``db`` into ``out``; each file's bytes go into ``artefacts``."""
    out.mkdir()
    seconds = 0.0
    for name, template in EXPORTS.items():
        args = [a.format(o=out, roster=roster, tree=tree) for a in template] + ["--db", str(db)]
        stdout = out / "report.md" if name == "report_md" else None
        rc, t, err = run(tree, args, out, stdout)
        status[f"{db.stem} {name}"], seconds = rc, seconds + t
        if rc != 0:
            print(f"  {db.stem} {name}: exit {rc}: {err}", flush=True)
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        artefacts[f"{db.stem}:{path.relative_to(out)}"] = path.read_bytes()
    return {f"exports of {db.stem}": seconds}


def resubmission_check(result: dict) -> str:
    """'' when the second run changed exactly the resubmitted notebooks' rows (a new hash, graded
    again) and left every other row as it was, time of grading included; else what it did."""
    arts = result["artefacts"]
    before = {_key(line): json.loads(line.partition(" ")[2]) for line in arts["plain.run1.gradebook"]}
    after = {_key(line): json.loads(line.partition(" ")[2]) for line in arts["plain.gradebook"]}
    changed = {k for k in after if before.get(k) != after[k]}
    if changed != set(RESUBMIT) or set(before) != set(after):
        return f"the rerun changed {sorted(changed)}, expected {sorted(RESUBMIT)}"
    if any(before[k]["sha256"] == after[k]["sha256"] for k in RESUBMIT):
        return "a resubmitted notebook kept its hash"
    return ""


def _key(line: str) -> tuple[str, str]:
    table, _, text = line.partition(" ")
    values = json.loads(text)
    return (values["student"], values["assignment"]) if table == "results" else (table, values["assignment"])


def first_difference(a: list[str] | bytes, b: list[str] | bytes) -> str:
    """The first line where ``a`` and ``b`` differ, both versions, shortened; in a gradebook, the
    first row (student, assignment) whose fields differ, and the first field."""
    if isinstance(a, list) and isinstance(b, list):
        rows_a, rows_b = ({_key(s): json.loads(s.partition(" ")[2]) for s in x} for x in (a, b))
        for k in sorted(rows_a.keys() | rows_b.keys()):
            if rows_a.get(k) != rows_b.get(k):
                return f"row {k}: " + _field_difference(rows_a.get(k), rows_b.get(k))
    la = a if isinstance(a, list) else a.decode(errors="replace").splitlines()
    lb = b if isinstance(b, list) else b.decode(errors="replace").splitlines()
    for i in range(max(len(la), len(lb))):
        x, y = (la[i] if i < len(la) else "<none>"), (lb[i] if i < len(lb) else "<none>")
        if x != y:
            return f"line {i + 1}: {x[:160]!r} | {y[:160]!r}"
    return "same lines, other bytes (line ends?)"


def _field_difference(x: Any, y: Any, path: str = "") -> str:
    """The first path where two JSON values differ, and both values, shortened."""
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(x.keys() | y.keys()):
            if x.get(k) != y.get(k):
                return _field_difference(x.get(k), y.get(k), f"{path}.{k}")
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            if u != v:
                return _field_difference(u, v, f"{path}[{i}]")
    return f"{path or 'row'}: {json.dumps(x)[:150]} | {json.dumps(y)[:150]}"


def compare(a: dict, b: dict) -> list[tuple[str, str, str, bool, str]]:
    """One row per artefact of either run: name, size in a, size in b, equal, first difference."""
    rows = []
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if name.endswith(".gradebook"):
            x, y = mask(x or []) if x is not None else None, mask(y or []) if y is not None else None
        size = [("absent" if v is None else f"{len(v)} {'rows' if isinstance(v, list) else 'B'}") for v in (x, y)]
        same = x is not None and x == y
        rows.append((name, size[0], size[1], same, "" if same else first_difference(x or [], y or [])))
    return rows


def masked_fields(a: dict, b: dict) -> list[str]:
    """For each :data:`VOLATILE` field: in how many rows of the gradebooks it differs between a and b."""
    lines = []
    for field in VOLATILE:
        table, _, col = field.partition(".")
        differ = total = 0
        for name in (n for n in a if n.endswith(".gradebook") and n in b):
            rows_a = {_key(s): json.loads(s.partition(" ")[2]) for s in a[name] if s.startswith(table + " ")}
            rows_b = {_key(s): json.loads(s.partition(" ")[2]) for s in b[name] if s.startswith(table + " ")}
            for k in rows_a.keys() & rows_b.keys():
                total += 1
                differ += rows_a[k].get(col) != rows_b[k].get(col)
        lines.append(f"  {field}: differs in {differ} of {total} rows  ({VOLATILE[field]})")
    return lines


def table(title: str, rows: list[tuple[str, str, str, bool, str]]) -> int:
    """Print the comparison; the number of differences."""
    print(f"\n{title}\n{'artefact':<52} {'A':>12} {'B':>12}  equal")
    for name, sa, sb, same, diff in rows:
        print(f"{name:<52} {sa:>12} {sb:>12}  {'yes' if same else 'NO'}")
        if not same:
            print(f"    first difference: {diff}")
    bad = sum(not r[3] for r in rows)
    print(f"{len(rows) - bad} of {len(rows)} artefacts equal")
    return bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", default="7094a1d")
    p.add_argument("--after", default="main", help="default: main (its HEAD)")
    p.add_argument("--keep", type=Path, help="write everything here (kept) instead of a temporary folder")
    p.add_argument("--no-cluster", action="store_true", help="skip the Dask cluster runs")
    p.add_argument("--call-seconds", help="passed to every grading run (default: the grader's)")
    p.add_argument("--submission-seconds", help="passed to every grading run (default: the grader's)")
    p.add_argument("--students", type=int, default=N_STUDENTS, help="benchmark students per assignment")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="same_grades_") as scratch:
        base = Path(scratch)
        work = args.keep.resolve() if args.keep else base / "work"
        work.mkdir(parents=True, exist_ok=True)
        with worktree(args.before, base / "before") as before, worktree(args.after, base / "after") as after:
            for label, tree in (("before", before), ("after", after)):
                rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True)
                print(f"{label}: {rev.stdout.decode().strip()}, course_lib from {own_course_lib(tree)}", flush=True)
            klass = build_class(after, work / "class", args.students)
            limits = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k.endswith("seconds") and v]
            results = {}
            for label, tree in (("before", before), ("after", after), ("after_again", after)):
                print(f"grading with {label} ...", flush=True)
                results[label] = grade_revision(tree, klass, work / label, not args.no_cluster, limits)
        (work / "results.pickle").write_bytes(pickle.dumps(results))  # to look into, with --keep
        failures = 0
        for label, res in results.items():
            problem = resubmission_check(res)
            failures += bool(problem)
            print(f"resubmission, {label}: {problem or 'the rerun regraded exactly the resubmitted notebooks'}")
            print(f"timings, {label}: " + ", ".join(f"{k} {v:.1f} s" for k, v in res["timings"].items()))
        b, a, a2 = (results[k]["artefacts"] for k in ("before", "after", "after_again"))
        print("\nmasked fields, after vs after (same code, two runs):", *masked_fields(a, a2), sep="\n")
        print("masked fields, before vs after:", *masked_fields(b, a), sep="\n")
        failures += table(f"A = after ({args.after}), B = after again (control)", compare(a, a2))
        failures += table(f"A = before ({args.before}), B = after ({args.after})", compare(b, a))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
