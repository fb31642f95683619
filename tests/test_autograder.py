"""The autograder: a class graded safely, resumably, with feedback and exports.

Every attack below runs in the same batch as honest students: the attacker gets no
undeserved points, the batch finishes, the honest students' records equal those from
grading them alone, and the gradebook stays intact.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_lib.grading.autograde import grade_submission
from course_lib.grading.batch import grade_all
from course_lib.grading.exports import export_csv, export_gradescope, write_feedback
from course_lib.grading.gradebook import Gradebook
from course_lib.grading.registry import ASSIGNMENTS
from course_lib.grading.sandbox import Limits, Runner

A = "02_self_attention"
LIMITS = Limits(call_seconds=1.0, submission_seconds=8.0, memory_mb=512, processes=32)

SETUP = "import math\nimport os\nimport torch\n"

HONEST = '''
def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)
    total = e.sum(dim=-1, keepdim=True)
    w = e / torch.where(total == 0, torch.ones_like(total), total)
    return w @ v, w

def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
'''

WRONG = '''
def softmax(x, dim=-1):
    return torch.zeros_like(x)
'''


def notebook(*cells: str) -> bytes:
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c}
                    for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb).encode()


def attacks(tmp: Path) -> dict[str, bytes]:
    """Student -> submitted bytes. Every one of them deserves 0 points."""
    victim = tmp / "subs" / "honest1" / f"{A}.ipynb"
    return {
        "invalid_json": b"{not json",
        "not_a_notebook": json.dumps({"hello": "world"}).encode(),
        "empty": b"",
        "huge": b" " * 20_000_001,
        "not_utf8": b"\xff\xfe\x00bad bytes",
        "syntax_error": notebook(SETUP, "def softmax(x, dim=-1)\n    return x"),
        "renamed_function": notebook(SETUP, HONEST.replace("def softmax", "def soft_max").replace(
            "def scaled_dot", "def sdpa_").replace("def self_attention", "def selfattention")),
        "infinite_loop_cell": notebook(SETUP, "while True:\n    pass", WRONG),
        "infinite_loop_call": notebook(SETUP, "def softmax(x, dim=-1):\n    while True:\n        pass"),
        "input": notebook(SETUP, "name = input('who are you?')", WRONG),
        "exit": notebook(SETUP, "exit()", WRONG),
        "os_exit": notebook(SETUP, "os._exit(0)", HONEST),
        "kill_parent": notebook(SETUP, "import signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                                "os.kill(-1, signal.SIGKILL)", WRONG),
        "fork_bomb": notebook(SETUP, "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
        "memory_bomb": notebook(SETUP, "hog = []\nwhile True:\n    hog.append(bytearray(50_000_000))"),
        "fill_disk": notebook(SETUP, "for p in ['/tmp/fill', 'fill', '/work/fill', str(__import__('pathlib')"
                              f".Path({str(tmp)!r}) / 'fill')]:\n    try:\n        with open(p, 'wb') as f:\n"
                              "            while True:\n                f.write(b'x' * 1_000_000)\n"
                              "    except OSError:\n        pass", WRONG),
        "delete_files": notebook(SETUP, f"import shutil\nshutil.rmtree({str(tmp / 'subs')!r})\n"
                                 f"os.remove({str(victim)!r})", WRONG),
        "read_other_student": notebook(SETUP, f"import json\nstolen = json.load(open({str(victim)!r}))\n"
                                       "for cell in stolen['cells']:\n    exec(''.join(cell['source']))"),
        "ignore_signals": notebook(SETUP, "import signal\nfor s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT):\n"
                                   "    signal.signal(s, signal.SIG_IGN)\n" + WRONG.replace(
                                       "return torch.zeros_like(x)", "while True:\n        pass")),
        "fake_score": notebook(SETUP, "print('softmax: 8/8 points, all tests passed')\nprint(json := "
                               "'{\"score\": 100, \"tests\": []}')", WRONG),
        "patch_checker_and_torch": notebook(SETUP, "import course_lib.grading as g\ng.check = lambda *a, **k: 'passed'",
                                            "torch.allclose = lambda *a, **k: True\n"
                                            "torch.Tensor.__eq__ = lambda *a: True\n"
                                            "torch.testing.assert_close = lambda *a, **k: None", WRONG),
        "pretend_tensor": notebook(SETUP, "class T(torch.Tensor):\n    pass\n\nclass Fake:\n    shape = (2, 3)\n"
                                   "    def __eq__(self, o):\n        return True\n\n"
                                   "def softmax(x, dim=-1):\n    return Fake()\n\n"
                                   "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                                   "    return (q.as_subclass(T), q.as_subclass(T))"),
        "nan_and_inf": notebook(SETUP, "def softmax(x, dim=-1):\n    return torch.full_like(x, float('nan'))\n\n"
                                "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                                "    return (torch.full_like(q, float('inf')), None)"),
        "uses_reference": notebook(SETUP, "import course_lib\n\ndef softmax(x, dim=-1):\n    "
                                   "return course_lib.softmax(x, dim)"),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("class")
    subs = tmp / "subs"
    honest = notebook(SETUP, HONEST)
    for student, data in {"honest1": honest, "honest2": honest, **attacks(tmp)}.items():
        (subs / student).mkdir(parents=True)
        (subs / student / f"{A}.ipynb").write_bytes(data)
    (subs / "honest2" / "notes.txt").write_text("not a notebook name: ignored")
    (subs / "folder_notebook" / f"{A}.ipynb").mkdir(parents=True)
    (subs / "link_to_honest").mkdir()
    (subs / "link_to_honest" / f"{A}.ipynb").symlink_to(subs / "honest1" / f"{A}.ipynb")
    db = tmp / "book" / "gradebook.sqlite"
    summary = grade_all(subs, db, jobs=2, sandbox="auto", progress=False, limits=LIMITS)
    with Gradebook(db) as book:
        rows = dict(book.rows())
    return tmp, subs, db, summary, rows


def test_the_whole_batch_is_graded_once_each(graded):
    tmp, subs, db, summary, rows = graded
    assert set(rows) == {p.name for p in subs.iterdir()}
    assert summary.graded == len(rows)
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_honest_students_get_full_marks_as_if_graded_alone(graded):
    tmp, subs, db, summary, rows = graded
    with Runner(mode="auto", limits=LIMITS) as runner:
        alone = grade_submission((subs / "honest1" / f"{A}.ipynb").read_bytes(), A, runner)
    for student in ("honest1", "honest2"):
        assert rows[student]["score"] == rows[student]["max_score"] > 0
        assert rows[student]["functions"] == alone["functions"]


@pytest.mark.parametrize("student", sorted(attacks(Path("/x"))))
def test_an_attack_earns_no_points_and_gets_a_message(graded, student):
    tmp, subs, db, summary, rows = graded
    rec = rows[student]
    assert rec["score"] == 0, json.dumps(rec)[:2000]
    feedback = " ".join(rec["messages"]) + " ".join(
        r["feedback"] + " " + " ".join(f["notes"]) for f in rec["functions"] for r in f["results"])
    assert feedback.strip(), rec


def test_invalid_files_are_refused_with_the_reason(graded):
    rows = graded[4]
    assert "not valid JSON" in rows["invalid_json"]["messages"][0]
    assert "not a Jupyter notebook" in rows["not_a_notebook"]["messages"][0]
    assert "empty" in rows["empty"]["messages"][0]
    assert "bytes" in rows["huge"]["messages"][0]
    assert "UTF-8" in rows["not_utf8"]["messages"][0]
    for s in ("invalid_json", "not_a_notebook", "empty", "huge", "not_utf8"):
        assert rows[s]["status"] == "invalid"


def test_a_folder_or_a_link_in_place_of_a_notebook_is_refused(graded):
    rows = graded[4]
    for student, word in (("folder_notebook", "a folder"), ("link_to_honest", "a link")):
        assert rows[student]["status"] == "invalid" and rows[student]["score"] == 0
        assert word in rows[student]["messages"][0]


def test_attacks_on_the_machine_leave_everything_intact(graded):
    tmp, subs, db, summary, rows = graded
    assert (subs / "honest1" / f"{A}.ipynb").is_file()
    assert not Path("/work/fill").exists() and not (tmp / "fill").exists() and not Path("/tmp/fill").exists()
    assert not (Path.cwd() / "fill").exists()


def test_specific_attacks_get_specific_feedback(graded):
    rows = graded[4]

    def text(s):
        rec = rows[s]
        return json.dumps(rec)

    assert "timed out" in text("infinite_loop_call") or "took longer" in text("infinite_loop_call")
    assert rows["renamed_function"]["functions"][0]["status"] == "missing"
    assert "reference" in text("uses_reference")
    assert "reference" in text("patch_checker_and_torch")
    assert "expected a torch.Tensor" in text("pretend_tensor")
    assert "NaN" in text("nan_and_inf")
    assert "SyntaxError" in text("syntax_error")


def test_summary_names_the_isolation_used(graded):
    summary = graded[3]
    assert summary.isolation in ("bubblewrap", "namespaces")
    assert f"isolation: {summary.isolation}" in summary.table()


def test_a_rerun_skips_unchanged_notebooks_and_regrades_changed_ones(graded, tmp_path):
    tmp, subs, db, summary, rows = graded
    subs2 = tmp_path / "subs"
    for s in ("honest1", "fake_score"):
        (subs2 / s).mkdir(parents=True)
        (subs2 / s / f"{A}.ipynb").write_bytes((subs / s / f"{A}.ipynb").read_bytes())
    db2 = tmp_path / "g.sqlite"
    assert grade_all(subs2, db2, progress=False, limits=LIMITS).graded == 2
    again = grade_all(subs2, db2, progress=False, limits=LIMITS)
    assert (again.graded, again.skipped) == (0, 2)
    (subs2 / "fake_score" / f"{A}.ipynb").write_bytes(notebook(SETUP, HONEST))
    changed = grade_all(subs2, db2, progress=False, limits=LIMITS)
    assert (changed.graded, changed.skipped) == (1, 1)
    with Gradebook(db2) as book:
        recs = dict(book.rows())
    assert recs["fake_score"]["score"] == recs["fake_score"]["max_score"]
    forced = grade_all(subs2, db2, force=True, progress=False, limits=LIMITS)
    assert forced.graded == 2
    with Gradebook(db2) as book:
        assert dict(book.rows()) == recs  # same notebook, same score and feedback


def test_csv_export_has_one_row_per_submission_and_a_column_per_function(graded, tmp_path):
    tmp, subs, db, summary, rows = graded
    out = tmp_path / "grades.csv"
    assert export_csv(db, out) == len(rows)
    with open(out, newline="") as f:
        table = list(csv.DictReader(f))
    header = list(table[0])
    assert header[:5] == ["student", "assignment", "score", "max_score", "status"]
    assert set(ASSIGNMENTS[A]) <= set(header[5:])
    honest = next(r for r in table if r["student"] == "honest1")
    assert float(honest["score"]) == float(honest["max_score"])
    assert sum(float(honest[f]) for f in ASSIGNMENTS[A]) == float(honest["score"])
    assert honest["padding_mask"] == ""  # not part of this assignment


def test_gradescope_export_follows_the_results_format(graded, tmp_path):
    tmp, subs, db, summary, rows = graded
    assert export_gradescope(db, tmp_path / "gs") == len(rows)
    res = json.loads((tmp_path / "gs" / "honest1" / A / "results.json").read_text())
    assert res["score"] == rows["honest1"]["score"]
    t = res["tests"][0]
    assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
    assert t["name"].startswith("softmax: ")
    assert sum(t["score"] for t in res["tests"]) == res["score"]


def test_feedback_reports_name_mistakes_and_reveal_no_hidden_inputs(graded, tmp_path):
    tmp, subs, db, summary, rows = graded
    for fmt in ("md", "html"):
        assert write_feedback(db, tmp_path / fmt, fmt=fmt) == len(rows)
    md = (tmp_path / "md" / "fake_score.md").read_text()
    assert "softmax" in md and "failed" in md
    html = (tmp_path / "html" / "honest1.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "passed" in html
    from course_lib.grading.registry import exercise

    # no input value of any hidden case appears in any feedback
    values = set()
    for name in ASSIGNMENTS[A]:
        for case in exercise(name).cases():
            for call in case.calls:
                for a in call.args:
                    if hasattr(a, "flatten") and a.is_floating_point() and a.numel() > 2:
                        values.update(f"{float(v):.4f}" for v in a.flatten()[:3] if v.isfinite())
    text = "".join(p.read_text() for p in (tmp_path / "md").iterdir())
    assert not [v for v in values if v in text and v not in ("0.0000", "1.0000")]


def test_sandbox_required_refuses_to_grade_without_isolation(tmp_path, monkeypatch):
    from course_lib.grading import sandbox

    monkeypatch.setattr(sandbox, "detect_isolation", lambda: "none")
    with pytest.raises(sandbox.SandboxUnavailable):
        Runner(mode="required")


def test_killing_the_grader_at_any_moment_then_rerunning_grades_each_submission_once(tmp_path):
    subs = tmp_path / "subs"
    honest, wrong = notebook(SETUP, HONEST), notebook(SETUP, WRONG)
    n = 16
    for i in range(n):
        (subs / f"s{i:02d}").mkdir(parents=True)
        (subs / f"s{i:02d}" / f"{A}.ipynb").write_bytes(honest if i % 2 else wrong)
    db = tmp_path / "g.sqlite"
    cmd = [sys.executable, "-m", "course_lib", "grade", str(subs), "--db", str(db), "--jobs", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 120
    committed = 0
    while time.time() < deadline and proc.poll() is None:
        if db.exists():
            try:
                committed = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
            except sqlite3.OperationalError:
                committed = 0
            if committed >= 3:
                break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()
    os.killpg(proc.pid, signal.SIGKILL)  # the grader and everything it started
    proc.wait()
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert 3 <= before < n
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"skipped {before} unchanged" in out.stdout
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT student) FROM results").fetchone() == (n, n)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    scores = dict(con.execute("SELECT student, score FROM results"))
    full = max(scores.values())
    assert all((scores[f"s{i:02d}"] == full) == bool(i % 2) for i in range(n))


@pytest.fixture(scope="module")
def runner():
    with Runner(mode="required", limits=Limits(submission_seconds=60.0)) as r:
        yield r


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("slug", list(ASSIGNMENTS))
def test_the_sandboxed_grader_gives_solutions_full_marks_and_blank_exercises_zero(runner, slug):
    solved = grade_submission((ROOT / "solutions" / f"{slug}.ipynb").read_bytes(), slug, runner)
    assert solved["status"] == "graded" and solved["messages"] == []
    assert solved["score"] == solved["max_score"] > 0, [
        (f["function"], r["feedback"]) for f in solved["functions"] for r in f["results"] if not r["passed"]]
    blank = grade_submission((ROOT / "exercises" / f"{slug}.ipynb").read_bytes(), slug, runner)
    assert blank["score"] == 0 and all(f["status"] == "not implemented" for f in blank["functions"])


def test_the_checker_version_covers_the_reference_implementations(tmp_path):
    import shutil

    from course_lib.grading.autograde import checker_version

    package = tmp_path / "course_lib"
    shutil.copytree(ROOT / "course_lib", package, ignore=shutil.ignore_patterns("__pycache__"))
    assert checker_version(package) == checker_version()
    with open(package / "attention.py", "a") as f:
        f.write("\n# a change to a reference implementation\n")
    assert checker_version(package) != checker_version()  # so notebooks graded against it are regraded
