"""The autograder: a class graded safely, resumably, with feedback and exports.

Every attack below runs in the same batch as honest students, graded with fresh inputs
(``--seed``): each attacker earns at most what its honest parts earn alone, the batch finishes
with every submission recorded once, the honest students' records equal those from grading
them alone, nothing is left running, and the gradebook stays intact. The attackers follow
the security review's findings (grouped by its items 1-7); the notebooks are our own.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import HONEST_SOFTMAX, ROOT, notebook
from markdown_it import MarkdownIt

import course_lib
from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.batch import grade_all
from course_lib.autograder.config import GradeConfig
from course_lib.autograder.exports import export_csv, export_gradescope, file_stem
from course_lib.autograder.feedback_files import write_feedback
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.record import Record
from course_lib.autograder.sandbox.runner import BASE_UID, Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading.registry import ASSIGNMENTS, exercise

pytestmark = pytest.mark.sandbox

A = "02_self_attention"
SEED = 20261123
LIMITS = Limits(call_seconds=2.0, submission_seconds=20.0, memory_mb=512, processes=32)

SETUP = "import math\nimport os\nimport torch\nimport torch.nn.functional as F\n"

HONEST_ATTENTION = """
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
"""

HONEST = HONEST_SOFTMAX + HONEST_ATTENTION

WRONG = """
def softmax(x, dim=-1):
    return torch.zeros_like(x)
"""


def _literal(t: torch.Tensor) -> str:
    text = repr(t.tolist()).replace("inf", "float('inf')")
    return f"torch.tensor({text}, dtype={t.dtype})"


def lookup_table_softmax() -> str:
    """A softmax that is a table of the self-check's public inputs and the reference's outputs."""
    ex = exercise("softmax")
    rows = []
    for case in ex.cases():
        for call in case.calls:
            x = call.args[0]
            dim = call.kwargs.get("dim", -1)
            rows.append(f"    ({_literal(x)}, {dim}, {_literal(course_lib.softmax(x, dim))}),")
    return (
        "_TABLE = [\n" + "\n".join(rows) + "\n]\n\n"
        "def softmax(x, dim=-1):\n"
        "    for inp, d, out in _TABLE:\n"
        "        if d == dim and inp.shape == x.shape and torch.equal(inp, x):\n"
        "            return out.clone()\n"
        "    return torch.zeros_like(x)\n"
    )


FORGE = """
import json, struct
def forge(header, blobs=()):
    header = dict(header, blobs=[len(b) for b in blobs])
    h = json.dumps(header).encode()
    os.write(3, struct.pack('<I', len(h)) + h + b''.join(blobs))
"""


def attacks(tmp: Path) -> dict[str, tuple[bytes, bytes | None]]:
    """Student -> (submitted bytes, the same notebook with only its honest parts, or None if it
    has none). An attacker may earn at most what its honest parts earn alone."""
    victim = tmp / "subs" / "honest1" / f"{A}.ipynb"
    nothing = None
    big_cell = "x = 1\n" * 2_000_000  # 12 MB of code in one cell
    deep = "x = " + "1+" * 100_000 + "1"  # one 200,000-term expression (under the code-size limit)
    surrogate_cell = notebook(SETUP, "s = 'x'", HONEST).replace(b"s = 'x'", b"s = '\\ud800'")
    return {
        # -- invalid files -------------------------------------------------------------------
        "invalid_json": (b"{not json", nothing),
        "not_a_notebook": (json.dumps({"hello": "world"}).encode(), nothing),
        "empty": (b"", nothing),
        "huge": (b" " * 20_000_001, nothing),
        "not_utf8": (b"\xff\xfe\x00bad bytes", nothing),
        "renamed_function": (
            notebook(
                SETUP,
                HONEST.replace("def softmax", "def soft_max")
                .replace("def scaled_dot", "def sdpa_")
                .replace("def self_attention", "def selfattention"),
            ),
            nothing,
        ),
        # -- 1. forbidden calls hidden from the scan -----------------------------------------
        "alias_module_level": (
            notebook(SETUP, "sm = torch.softmax\n\ndef softmax(x, dim=-1):\n    return sm(x, dim)"),
            nothing,
        ),
        "helper_function": (
            notebook(
                SETUP,
                "def _normalise(x, dim):\n    return F.softmax(x, dim=dim)\n\n"
                "def softmax(x, dim=-1):\n    return _normalise(x, dim)",
            ),
            nothing,
        ),
        "lambda_as_graded_name": (notebook(SETUP, "softmax = lambda x, dim=-1: torch.softmax(x, dim)"), nothing),
        "rebound_after_clean_stub": (
            notebook(
                SETUP,
                "def softmax(x, dim=-1):\n    raise NotImplementedError",
                "def _s(x, dim=-1):\n    return x.softmax(dim)\n\nsoftmax = _s",
            ),
            nothing,
        ),
        "bound_to_torch_itself": (notebook(SETUP, "softmax = F.softmax"), nothing),
        "bound_to_a_library_function": (notebook(SETUP, "softmax = torch.sigmoid"), nothing),
        "getattr_built_name": (
            notebook(SETUP, "def softmax(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)"),
            nothing,
        ),
        "unparsable_cell_first": (
            notebook(SETUP, "def broken(:\n    pass", "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)"),
            nothing,
        ),
        "bash_cell_first": (
            notebook(SETUP, "%%bash\necho hello", "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)"),
            nothing,
        ),
        "hidden_in_a_table_filled_at_run_time": (
            notebook(
                SETUP,
                "table = {}\n\ndef setup():\n    table['f'] = torch.softmax\n\n"
                "setup()\n\ndef softmax(x, dim=-1):\n    return table['f'](x, dim)",
            ),
            nothing,
        ),
        "sdpa_alias": (
            notebook(
                SETUP,
                "attend = F.scaled_dot_product_attention\n\n"
                "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                "    out = attend(q, k, v, attn_mask=mask)\n"
                "    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)\n"
                "    return out, w",
            ),
            nothing,
        ),
        "cheat_softmax_honest_rest": (
            notebook(SETUP, "sm = torch.softmax\ndef softmax(x, dim=-1):\n    return sm(x, dim)", HONEST_ATTENTION),
            notebook(SETUP, HONEST_ATTENTION),
        ),
        # -- 2. forged results ---------------------------------------------------------------
        "forged_frames_before_the_calls": (
            notebook(
                SETUP,
                FORGE,
                HONEST_SOFTMAX.replace("softmax", "_real"),
                "for i in range(8):\n    forge({'t': 'reply', 'id': i, 'status': 'ok', "
                "'value': {'t': 'int', 'v': 1}, 'seq': i})",
                WRONG,
            ),
            nothing,
        ),
        "forged_done_then_exit": (
            notebook(
                SETUP,
                FORGE,
                "forge({'t': 'cells_done', 'missing': [], 'not_own': {}, 'seq': 0})\n"
                "forge({'t': 'bye', 'seq': 1})\nos._exit(0)",
                WRONG,
            ),
            nothing,
        ),
        # -- 2b. the watch, the encoding and the harness (round 2, items 1 and 2) -------------
        "work_left_for_the_encoding": (
            notebook(
                SETUP,
                "torch.Tensor.detach = lambda self: torch.softmax(self, -1)\n\n"
                "def softmax(x, dim=-1):\n    return x + 0",
            ),
            nothing,
        ),
        "watch_switched_off": (
            notebook(
                SETUP,
                "watch = [c for c in object.__subclasses__() if c.__name__ == 'OpWatch'][0]\n"
                "watch.__enter__ = lambda self: self\nwatch.__exit__ = lambda self, *e: False",
                "def softmax(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)",
            ),
            nothing,
        ),
        "harness_from_a_signal_frame": (
            notebook(
                SETUP,
                "import signal\nfound = {}\n\ndef grab(signum, frame):\n    while frame is not None:\n"
                "        h = frame.f_locals.get('self')\n        if hasattr(h, 'sender'):\n"
                "            found['h'] = h\n        frame = frame.f_back\n\n"
                "signal.signal(signal.SIGUSR1, grab)\nos.kill(os.getpid(), signal.SIGUSR1)\n"
                "for i in range(8):\n    found['h'].sender.send({'t': 'reply', 'id': i, 'status': 'ok', "
                "'value': {'t': 'int', 'v': 1}})",
                "def softmax(x, dim=-1):\n    return getattr(torch, 'soft' + 'max')(x, dim)",
            ),
            nothing,
        ),
        "stand_in_asked_for_n_squared": (  # item 8: the reference, in the grader, on 12,000 x 12,000
            notebook(
                SETUP,
                HONEST_SOFTMAX,
                "def scaled_dot_product_attention(q, k, v, mask=None):\n    return v, q\n\n"
                "def self_attention(x, W_q, W_k, W_v, mask=None):\n    n = 12_000\n"
                "    _, w = scaled_dot_product_attention(torch.ones(n, 1, 1), torch.ones(1, n, 1), torch.ones(1, n, 1))\n"
                "    return x @ W_v, w.sum() * torch.ones(*x.shape[:-1], x.shape[-2])",
            ),
            notebook(SETUP, HONEST_SOFTMAX),
        ),
        # -- 3. points for non-implementations -----------------------------------------------
        "uniform_weights": (
            notebook(
                SETUP,
                "def softmax(x, dim=-1):\n    return torch.ones_like(x) / x.shape[dim]\n\n"
                "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                "    L, S = q.shape[-2], k.shape[-2]\n"
                "    w = torch.ones(*q.shape[:-2], L, S) / S\n"
                "    return torch.zeros(*q.shape[:-1], v.shape[-1]), w\n\n"
                "def self_attention(x, W_q, W_k, W_v, mask=None):\n"  # not a composition: uniform too
                "    T = x.shape[-2]\n"
                "    return torch.zeros(*x.shape[:-1], W_v.shape[-1]), torch.ones(*x.shape[:-1], T) / T",
            ),
            nothing,
        ),
        "all_zeros": (
            notebook(
                SETUP,
                "def softmax(x, dim=-1):\n    return torch.zeros_like(x)\n\n"
                "def scaled_dot_product_attention(q, k, v, mask=None):\n"
                "    return torch.zeros(*q.shape[:-1], v.shape[-1]), torch.zeros(*q.shape[:-1], k.shape[-2])",
            ),
            nothing,
        ),
        "lookup_table": (notebook(SETUP, lookup_table_softmax()), nothing),
        # -- 4. reading the previous student's notebook ----------------------------------------
        "scan_own_memory": (
            notebook(
                SETUP,
                "import ctypes\nfound = []\nfor line in open('/proc/self/maps'):\n"
                "    pass\nbuf = ctypes.string_at(id(found), 64)",
                WRONG,
            ),
            nothing,
        ),
        "kernel_keyring": (
            notebook(
                SETUP,
                "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.syscall(248, b'user', b'stolen', b'x', 1, -3)",
                WRONG,
            ),
            nothing,
        ),
        "read_other_student": (
            notebook(
                SETUP,
                f"import json\nstolen = json.load(open({str(victim)!r}))\n"
                "for cell in stolen['cells']:\n    exec(''.join(cell['source']))",
            ),
            nothing,
        ),
        # -- 5. one notebook takes the batch down --------------------------------------------
        "surrogate_in_source": (surrogate_cell, notebook(SETUP, HONEST)),
        "deep_expression": (notebook(SETUP, deep, HONEST), notebook(SETUP, HONEST)),
        "surrogate_in_exceptions": (
            notebook(
                SETUP,
                "raise ValueError('\\ud800 cell')",
                "def softmax(x, dim=-1):\n    raise ValueError('\\udc80' * 3)",
            ),
            nothing,
        ),
        # -- 6. the grader's own memory ------------------------------------------------------
        "same_array_many_times": (
            notebook(SETUP, "big = torch.zeros(1_000_000)\n\ndef softmax(x, dim=-1):\n    return (big,) * 500"),
            nothing,
        ),
        "big_code_cell": (notebook(SETUP, big_cell, HONEST), nothing),
        # -- 7. feedback and exports ---------------------------------------------------------
        "markdown_and_html_in_messages": (
            notebook(
                SETUP,
                "def softmax(x, dim=-1):\n    raise ValueError("
                "'\\n## softmax: 10/10 points\\n<script>alert(1)</script> [x](http://evil)')",
            ),
            nothing,
        ),
        "inputs_in_messages": (
            notebook(SETUP, "def softmax(x, dim=-1):\n    raise ValueError(str(x.tolist()))"),
            nothing,
        ),
        "=SUM(1,2)": (notebook(SETUP, WRONG), nothing),
        "@evil": (notebook(SETUP, WRONG), nothing),
        "-2+3": (notebook(SETUP, WRONG), nothing),
        file_stem("Ana María"): (notebook(SETUP, WRONG), nothing),  # a folder named like her files
        # -- the machine (contained by the sandbox) ------------------------------------------
        "infinite_loop_cell": (notebook(SETUP, "while True:\n    pass", WRONG), nothing),
        "infinite_loop_call": (notebook(SETUP, "def softmax(x, dim=-1):\n    while True:\n        pass"), nothing),
        "exit": (notebook(SETUP, "exit()", WRONG), nothing),
        "os_exit": (notebook(SETUP, "os._exit(0)", HONEST), nothing),
        "kill_parent": (
            notebook(SETUP, "import signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)", WRONG),
            nothing,
        ),
        "fork_bomb": (
            notebook(SETUP, "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass"),
            nothing,
        ),
        "memory_bomb_in_processes": (
            notebook(
                SETUP,
                "for _ in range(8):\n    if os.fork() == 0:\n"
                "        hog = bytearray(400_000_000)\n        import time\n"
                "        time.sleep(30)\n        os._exit(0)\nimport time\ntime.sleep(5)",
                WRONG,
            ),
            nothing,
        ),
        "delete_files": (
            notebook(SETUP, f"import shutil\nshutil.rmtree({str(tmp / 'subs')!r})\nos.remove({str(victim)!r})", WRONG),
            nothing,
        ),
        "patch_checker_and_torch": (
            notebook(
                SETUP,
                "import course_lib.grading as g\ng.check = lambda *a, **k: 'passed'",
                "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a: True",
                WRONG,
            ),
            nothing,
        ),
        "pretend_tensor": (
            notebook(
                SETUP,
                "class Fake:\n    shape = (2, 3)\n"
                "    def __eq__(self, o):\n        return True\n\n"
                "def softmax(x, dim=-1):\n    return Fake()",
            ),
            nothing,
        ),
        "uses_reference": (
            notebook(SETUP, "import course_lib\n\ndef softmax(x, dim=-1):\n    return course_lib.softmax(x, dim)"),
            nothing,
        ),
    }


def _write(subs: Path, student: str, data: bytes) -> None:
    (subs / student).mkdir(parents=True, exist_ok=True)
    (subs / student / f"{A}.ipynb").write_bytes(data)


def _sandbox_processes() -> list[int]:
    """Processes of any sandbox uid, anywhere on the machine."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if BASE_UID <= os.stat(f"/proc/{d}").st_uid < BASE_UID + 5000:
                    pids.append(int(d))
            except FileNotFoundError:
                pass
    return pids


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded by the command line, as an instructor would, with fresh inputs."""
    tmp = tmp_path_factory.mktemp("class")
    subs = tmp / "subs"
    honest = notebook(SETUP, HONEST)
    cases = attacks(tmp)
    for student, data in {"honest1": honest, "honest2": honest, "Ana María": honest}.items():
        _write(subs, student, data)
    for student, (data, _) in cases.items():
        _write(subs, student, data)
    (subs / "honest2" / "notes.txt").write_text("not a notebook name: ignored")
    (subs / "folder_notebook" / f"{A}.ipynb").mkdir(parents=True)
    (subs / "link_to_honest").mkdir()
    (subs / "link_to_honest" / f"{A}.ipynb").symlink_to(subs / "honest1" / f"{A}.ipynb")
    db = tmp / "book" / "gradebook.sqlite"
    cmd = [
        sys.executable,
        "-m",
        "course_lib",
        "grade",
        str(subs),
        "--db",
        str(db),
        "--jobs",
        "2",
        "--quiet",
        "--seed",
        str(SEED),
        "--call-seconds",
        str(LIMITS.call_seconds),
        "--submission-seconds",
        str(LIMITS.submission_seconds),
        "--memory-mb",
        str(LIMITS.memory_mb),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    with Gradebook(db) as book:
        rows = dict(book.rows())
    return tmp, subs, db, out, rows, cases


def test_the_whole_batch_is_graded_once_each_and_nothing_is_left_running(graded):
    _tmp, subs, db, out, rows, _cases = graded
    # 1: the class has invalid files, timeouts, a review and a stray file, each named in the summary
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED" not in out.stdout
    not_full = [r for r in rows.values() if r.status not in ("graded", "error")]
    assert f"NOT GRADED IN FULL: {len(not_full)} submission(s)" in out.stdout
    for student, record in rows.items():
        assert (f"  {student}/{A}: {record.status}: " in out.stdout) == (record in not_full), student
    assert "NOT GRADED: 1 file(s) are no submission (unmatched 1):\n  honest2/notes.txt: unmatched:" in out.stdout
    assert set(rows) == {p.name for p in subs.iterdir()}
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT student) FROM results").fetchone() == (len(rows), len(rows))
    assert _sandbox_processes() == []
    assert all(r.seed == SEED for r in rows.values() if r.status != "invalid")


def test_the_graders_memory_stays_bounded_whatever_the_class_sends(graded):
    out = graded[3]
    peak = float(re.search(r"grader peak memory: (\d+) MB", out.stdout).group(1))
    print(f"\ngrader peak memory over the attack class: {peak:.0f} MB")
    assert peak < 1500  # torch and the checks take about 400 MB; no submission adds more than a few MB


def test_honest_students_get_full_marks_as_if_graded_alone(graded):
    _tmp, subs, _db, _out, rows, _cases = graded
    with Runner(mode="auto", limits=LIMITS, watch=watch_lists()) as runner:
        alone = grade_submission((subs / "honest1" / f"{A}.ipynb").read_bytes(), A, runner, seed=SEED)
    for student in ("honest1", "honest2", "Ana María"):
        assert rows[student].score == rows[student].max_score > 0
        assert rows[student].functions == alone.functions


@pytest.fixture(scope="module")
def honest_scores(graded):
    """What each attacker's honest parts earn alone (graded the same way)."""
    _tmp, _subs, _db, _out, _rows, cases = graded
    scores = {}
    with Runner(mode="auto", limits=LIMITS, slot=3, watch=watch_lists()) as runner:
        for student, (_, honest_part) in cases.items():
            scores[student] = 0.0 if honest_part is None else grade_submission(honest_part, A, runner, seed=SEED).score
    return scores


@pytest.mark.parametrize("student", sorted(attacks(Path("/x"))))
def test_an_attacker_earns_at_most_its_honest_score_and_gets_a_message(graded, honest_scores, student):
    rows = graded[4]
    rec = rows[student]
    assert rec.score <= honest_scores[student], json.dumps(rec.to_json())[:3000]
    feedback = " ".join(rec.messages) + " ".join(
        r["feedback"] + " " + " ".join(f["notes"]) for f in rec.functions for r in f["results"]
    )
    assert feedback.strip(), rec


def _function(rec: Record, name: str) -> dict:
    return next(f for f in rec.functions if f["function"] == name)


def test_forbidden_calls_are_found_however_they_are_hidden(graded):
    rows = graded[4]
    for student in (
        "alias_module_level",
        "helper_function",
        "lambda_as_graded_name",
        "rebound_after_clean_stub",
        "bound_to_torch_itself",
        "getattr_built_name",
        "unparsable_cell_first",
        "bash_cell_first",
        "hidden_in_a_table_filled_at_run_time",
        "cheat_softmax_honest_rest",
    ):
        soft = _function(rows[student], "softmax")
        assert soft["status"] == "forbidden" and soft["score"] == 0, (student, soft["notes"])
        assert any(f.startswith("forbidden: softmax") for f in rows[student].flags), student
    sdpa = _function(rows["sdpa_alias"], "scaled_dot_product_attention")
    assert sdpa["status"] == "forbidden" and "scaled_dot_product_attention" in sdpa["notes"][0]
    # the static scan missed the table filled inside a function; the runtime layer saw the call
    assert "while being checked" in _function(rows["hidden_in_a_table_filled_at_run_time"], "softmax")["notes"][0]
    # a cell that cannot be parsed is reported, and the other cells are still checked and run
    assert any(
        "code cell 2 (counting code cells only): SyntaxError" in m for m in rows["unparsable_cell_first"].messages
    )
    honest = sum(exercise(n).max_score for n in ("scaled_dot_product_attention", "self_attention"))
    assert rows["cheat_softmax_honest_rest"].score == honest  # the honest functions keep their points


def test_forged_results_hold_the_submission_for_review_and_earn_nothing(graded):
    rows = graded[4]
    for student in ("forged_frames_before_the_calls", "forged_done_then_exit"):
        rec = rows[student]
        assert rec.status == "review" and rec.score == 0, rec.messages
        assert any(f.startswith("review:") for f in rec.flags)
    for student in ("scan_own_memory", "kernel_keyring"):  # introspection tools: held for review, not run
        assert rows[student].status == "review" and "ctypes" in rows[student].messages[0]


def test_outputs_that_are_not_an_implementation_earn_no_property_points(graded):
    rows = graded[4]
    for student in ("uniform_weights", "all_zeros"):
        assert rows[student].score == 0
    props = [
        r
        for f in rows["uniform_weights"].functions
        for r in f["results"]
        if "only once the value tests" in r["feedback"]
    ]
    assert props  # the weights do sum to one, but that earns nothing on its own


def test_a_lookup_table_of_the_self_check_scores_only_on_the_self_check_inputs(graded):
    rows = graded[4]
    assert rows["lookup_table"].score == 0  # graded with --seed: every input is new
    with Runner(mode="auto", limits=LIMITS, slot=4, watch=watch_lists()) as runner:
        public = grade_submission(notebook(SETUP, lookup_table_softmax()), A, runner)
    assert _function(public, "softmax")["score"] == _function(public, "softmax")["max_score"] > 0


def test_one_broken_notebook_never_stops_the_batch(graded):
    rows = graded[4]
    surrogate = rows["surrogate_in_source"]
    assert surrogate.status == "graded" and surrogate.score == surrogate.max_score
    assert any("code cell 2 (counting code cells only):" in m and "cannot be read" in m for m in surrogate.messages)
    deep = rows["deep_expression"]
    assert deep.score == deep.max_score and any("nested too deeply" in m for m in deep.messages)
    assert rows["big_code_cell"].status == "invalid" and "characters of code" in rows["big_code_cell"].messages[0]
    text = json.dumps(rows["surrogate_in_exceptions"].to_json(), ensure_ascii=False)
    assert "\ufffd" in text and rows["surrogate_in_exceptions"].status == "graded"
    assert "returned more than" in json.dumps(rows["same_array_many_times"].to_json())


def test_invalid_files_are_refused_with_the_reason(graded):
    rows = graded[4]
    assert "not valid JSON" in rows["invalid_json"].messages[0]
    assert "not a Jupyter notebook" in rows["not_a_notebook"].messages[0]
    assert "empty" in rows["empty"].messages[0]
    assert "bytes" in rows["huge"].messages[0]
    assert "UTF-8" in rows["not_utf8"].messages[0]
    for s in ("invalid_json", "not_a_notebook", "empty", "huge", "not_utf8"):
        assert rows[s].status == "invalid"
    for student, word in (("folder_notebook", "a folder"), ("link_to_honest", "a link")):
        assert rows[student].status == "invalid" and rows[student].score == 0
        assert word in rows[student].messages[0]


def test_attacks_on_the_machine_leave_everything_intact(graded):
    _tmp, subs, _db, _out, rows, _cases = graded
    assert (subs / "honest1" / f"{A}.ipynb").is_file()
    assert rows["infinite_loop_call"].functions[0]["results"][0]["feedback"].startswith("took longer")
    assert rows["renamed_function"].functions[0]["status"] == "missing"
    assert "reference" in json.dumps(rows["uses_reference"].to_json())
    assert "expected a torch.Tensor" in json.dumps(rows["pretend_tensor"].to_json())
    assert "not a function defined with def" in json.dumps(rows["bound_to_a_library_function"].to_json())


def test_summary_names_the_isolation_memory_limit_and_inputs(graded):
    out = graded[3].stdout
    assert re.search(r"isolation: (bubblewrap|namespaces);", out)
    assert "memory: cgroup" in out  # this machine has a writable memory cgroup (CI too)
    assert f"drawn from seed {SEED}" in out


def test_a_rerun_skips_unchanged_notebooks_and_regrades_changed_ones(graded, tmp_path):
    _tmp, subs, _db, _out, _rows, _cases = graded
    subs2 = tmp_path / "subs"
    for s in ("honest1", "markdown_and_html_in_messages"):
        _write(subs2, s, (subs / s / f"{A}.ipynb").read_bytes())
    db2 = tmp_path / "g.sqlite"
    assert grade_all(subs2, db2, GradeConfig(progress=False, limits=LIMITS)).graded == 2
    again = grade_all(subs2, db2, GradeConfig(progress=False, limits=LIMITS))
    assert (again.graded, again.skipped) == (0, 2)
    _write(subs2, "markdown_and_html_in_messages", notebook(SETUP, HONEST))
    changed = grade_all(subs2, db2, GradeConfig(progress=False, limits=LIMITS))
    assert (changed.graded, changed.skipped) == (1, 1)
    with Gradebook(db2) as book:
        recs = dict(book.rows())
    assert recs["markdown_and_html_in_messages"].score == recs["markdown_and_html_in_messages"].max_score
    forced = grade_all(subs2, db2, GradeConfig(force=True, progress=False, limits=LIMITS))
    assert forced.graded == 2
    with Gradebook(db2) as book:
        assert dict(book.rows()) == recs  # same notebook, same score and feedback


def test_a_record_of_the_graders_own_failure_is_regraded_on_the_next_run(tmp_path, monkeypatch):
    from course_lib.autograder import autograde

    _write(tmp_path / "subs", "s1", notebook(SETUP, HONEST))
    db = tmp_path / "g.sqlite"

    def broken(*a, **k):
        raise RuntimeError("the judge broke")

    monkeypatch.setattr(autograde, "grade_submission", broken)
    first = grade_all(tmp_path / "subs", db, GradeConfig(progress=False, limits=LIMITS))
    assert first.failed == 1 and first.statuses["error"] == 1 and "the judge broke" in first.failures[0]
    from course_lib.cli import main

    assert main(["grade", str(tmp_path / "subs"), "--db", str(db), "--quiet"]) == 1  # the exit status says so
    monkeypatch.undo()
    second = grade_all(tmp_path / "subs", db, GradeConfig(progress=False, limits=LIMITS))
    assert (second.graded, second.skipped, second.failed) == (1, 0, 0)
    with Gradebook(db) as book:
        assert dict(book.rows())["s1"].status == "graded"


def test_csv_export_neutralises_formulas_and_carries_flags_and_seed(graded, tmp_path):
    _tmp, _subs, db, _out, rows, _cases = graded
    path = tmp_path / "grades.csv"
    assert export_csv(db, path) == len(rows) + 1  # and a row for the stray honest2/notes.txt
    with open(path, newline="", encoding="utf-8") as f:
        table = list(csv.DictReader(f))
    stray = [r for r in table if r["status"] == "unmatched"]
    assert [(r["student"], r["flags"].split(": ")[0]) for r in stray] == [("honest2", "honest2/notes.txt")]
    header = list(table[0])
    assert header[:7] == ["student", "assignment", "score", "max_score", "status", "flags", "seed"]
    assert set(ASSIGNMENTS[A]) <= set(header[7:])
    for row in table:
        for value in row.values():
            assert not value or value[0] not in "=+-@\t\r" or re.fullmatch(r"-?[\d.]+", value), row
    assert {r["student"] for r in table} >= {"'=SUM(1,2)", "'@evil", "'-2+3"}
    honest = next(r for r in table if r["student"] == "honest1")
    assert float(honest["score"]) == float(honest["max_score"]) and honest["seed"] == str(SEED)
    assert sum(float(honest[f]) for f in ASSIGNMENTS[A]) == float(honest["score"])
    assert honest["padding_mask"] == ""  # not part of this assignment
    cheat = next(r for r in table if r["student"] == "alias_module_level")
    assert "forbidden: softmax" in cheat["flags"]


def test_gradescope_export_follows_the_results_format(graded, tmp_path):
    _tmp, _subs, db, _out, rows, _cases = graded
    assert export_gradescope(db, tmp_path / "gs") == len(rows)
    res = json.loads((tmp_path / "gs" / file_stem("honest1") / A / "results.json").read_text())
    assert res["score"] == rows["honest1"].score
    t = res["tests"][0]
    assert set(t) >= {"name", "score", "max_score", "output", "visibility"}
    assert t["name"].startswith("softmax: ")
    assert sum(t["score"] for t in res["tests"]) == res["score"]


def test_feedback_is_escaped_per_student_and_reveals_no_hidden_input(graded, tmp_path):
    _tmp, _subs, db, _out, rows, _cases = graded
    for fmt in ("md", "html"):
        assert len(write_feedback(db, tmp_path / fmt, fmt=fmt).files) == len(rows)
    # one file per student, named with a hash of the exact id: look-alike names never collide
    assert len(list((tmp_path / "md").iterdir())) == len(rows)
    ana = (tmp_path / "md" / f"{file_stem('Ana María')}.md").read_text()
    assert "10 / 10" in ana.replace("\\", "") or "passed" in ana
    md = (tmp_path / "md" / f"{file_stem('markdown_and_html_in_messages')}.md").read_text()
    rendered = MarkdownIt("commonmark").render(md)  # the student's line is code, verbatim: inert
    assert "<script" not in rendered and "<a " not in rendered and "<h2>softmax: 10/10" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt; [x](http://evil)" in rendered
    html = (tmp_path / "html" / f"{file_stem('markdown_and_html_in_messages')}.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<script>" not in html and "&lt;script&gt;" in html
    leak = (tmp_path / "md" / f"{file_stem('inputs_in_messages')}.md").read_text()
    assert "raised ValueError" in leak
    text = "".join(p.read_text() for p in (tmp_path / "md").iterdir())
    assert not _leaked(text)  # no input value of any case in any feedback


def _leaked(text: str) -> list[str]:
    """The hidden input values in ``text``: as printed (4 decimals, as a tensor shows them, not
    the start of a longer number such as a pass rate) or in full (as JSON writes a float)."""
    shown, full = _hidden_values()
    found = [v for v in shown if re.search(rf"(?<![\d.]){re.escape(v)}(?!\d)", text)]
    return found + [v for v in full if v in text]


def _hidden_values() -> tuple[set[str], set[str]]:
    """The first values of every floating-point input of every case, with and without the seed,
    as 4-decimal text (0 and +-1 left out: they occur in any text) and in full (when that is
    long enough not to occur by chance, as 0.75 does)."""
    values, full = set(), set()
    for name in ASSIGNMENTS[A]:
        for seed in (None, SEED):
            for case in exercise(name).cases(seed):
                for call in case.calls:
                    for a in call.args:
                        if isinstance(a, torch.Tensor) and a.is_floating_point() and a.numel() > 2:
                            values.update(f"{float(v):.4f}" for v in a.flatten()[:3] if v.isfinite())
                            full.update(r for r in (repr(float(v)) for v in a.flatten()[:3]) if len(r) > 8)
    return values - {"0.0000", "1.0000", "-1.0000"}, full


def test_the_class_report_of_the_attack_class_reveals_no_hidden_input(graded, tmp_path):
    """The report shows what the records hold (feedback, sources, answers): no input value of any
    case, with or without the seed, in any page, in data.json or in the Markdown summary."""
    from course_lib.autograder.class_report import write_report

    db = graded[2]
    site = write_report(db, tmp_path / "report", exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    md = write_report(db, None, fmt="md", exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    assert site.data["records"] == len(graded[4])
    text = md.text + "".join(p.read_text(encoding="utf-8", errors="replace") for p in (tmp_path / "report").iterdir())
    assert "inputs_in_messages" in text  # the student whose errors carry the inputs is listed
    assert not _leaked(text)


def test_sandbox_required_refuses_to_grade_without_isolation(tmp_path, monkeypatch):
    from course_lib.autograder.sandbox import SandboxUnavailable, isolation

    monkeypatch.setattr(isolation, "detect_isolation", lambda: "none")
    with pytest.raises(SandboxUnavailable):
        Runner(mode="required", watch=watch_lists())


def test_killing_the_grader_at_any_moment_then_rerunning_grades_each_submission_once(tmp_path):
    subs = tmp_path / "subs"
    honest, wrong = notebook(SETUP, HONEST), notebook(SETUP, WRONG)
    n = 16
    for i in range(n):
        _write(subs, f"s{i:02d}", honest if i % 2 else wrong)
    db = tmp_path / "g.sqlite"
    cmd = [sys.executable, "-m", "course_lib", "grade", str(subs), "--db", str(db), "--jobs", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 300
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
    proc.stdout.close()
    before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
    assert 3 <= before < n
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"skipped {before} unchanged" in out.stdout
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*), COUNT(DISTINCT student) FROM results").fetchone() == (n, n)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    scores = dict(con.execute("SELECT student, score FROM results"))
    full = max(scores.values())
    assert all((scores[f"s{i:02d}"] == full) == bool(i % 2) for i in range(n))


def test_a_grader_stopped_by_sigterm_leaves_no_process_or_memory_cgroup(tmp_path):
    # review item 11: SIGTERM (a scheduler's stop) left the runners' memory cgroups behind
    from course_lib.autograder.sandbox.cgroup import MemoryCgroup

    probe = MemoryCgroup.create(f"course-lib-{os.getpid()}-sigterm-probe")
    assert probe is not None  # this machine has a writable memory cgroup (CI too)
    parent = probe.path.parent
    probe.remove()
    before = {p.name for p in parent.iterdir() if p.name.startswith("course-lib-")}
    subs = tmp_path / "subs"
    for i in range(12):
        _write(subs, f"s{i:02d}", notebook(SETUP, HONEST))
    db = tmp_path / "g.sqlite"
    cmd = [sys.executable, "-m", "course_lib", "grade", str(subs), "--db", str(db), "--jobs", "2", "--quiet"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True) as proc:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            try:
                if sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0] >= 1:
                    break
            except sqlite3.OperationalError:
                pass
            time.sleep(0.05)
        assert proc.poll() is None, proc.stdout.read().decode()
        proc.send_signal(signal.SIGTERM)  # the grader only, as a scheduler would
        code = proc.wait(timeout=60)
        assert code == 128 + signal.SIGTERM, proc.stdout.read().decode()
    until = time.time() + 10
    while time.time() < until and (
        _in_session(proc.pid) or {p.name for p in parent.iterdir() if p.name.startswith("course-lib-")} - before
    ):
        time.sleep(0.1)
    assert {p.name for p in parent.iterdir() if p.name.startswith("course-lib-")} - before == set()
    assert _in_session(proc.pid) == []  # its grading processes and sandboxes ended with it


class _InterruptedAfterCommit:
    """A gradebook connection whose COMMIT is followed at once by an interrupt, as a SIGTERM
    that lands just after it would be."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __getattr__(self, name: str):
        return getattr(self.conn, name)

    def execute(self, sql: str, *args):
        cursor = self.conn.execute(sql, *args)
        if sql == "COMMIT":
            raise KeyboardInterrupt
        return cursor


def test_an_interrupt_just_after_a_commit_propagates_and_the_record_stays(tmp_path):
    # CI: a SIGTERM just after COMMIT made the ROLLBACK raise in its place, and the grader
    # exited with 1 instead of 143
    from course_lib.autograder.autograde import refused_record

    with Gradebook(tmp_path / "g.sqlite") as book:
        book.conn = _InterruptedAfterCommit(book.conn)
        with pytest.raises(KeyboardInterrupt):
            book.save("ada", refused_record("02_self_attention", "no notebook"), "v1", 0.0)
        book.conn = book.conn.conn
        assert book.record("ada", "02_self_attention").status == "invalid"


def _in_session(sid: int) -> list[int]:
    """The processes of session ``sid`` (from /proc/PID/stat: the session is its sixth field)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if d.isdigit() and int(fields[3]) == sid:
            found.append(int(d))
    return found


@pytest.fixture(scope="module")
def runner():
    with Runner(mode="required", limits=Limits(submission_seconds=60.0), watch=watch_lists()) as r:
        yield r


@pytest.mark.parametrize("slug", list(ASSIGNMENTS))
def test_the_sandboxed_grader_gives_solutions_full_marks_and_blank_exercises_zero(runner, slug):
    for seed in (None, SEED):
        solved = grade_submission((ROOT / "solutions" / f"{slug}.ipynb").read_bytes(), slug, runner, seed=seed)
        assert solved.status == "graded" and solved.messages == () and solved.flags == ()
        assert solved.score == solved.max_score > 0, [
            (f["function"], r["feedback"]) for f in solved.functions for r in f["results"] if not r["passed"]
        ]
    blank = grade_submission((ROOT / "exercises" / f"{slug}.ipynb").read_bytes(), slug, runner)
    assert blank.score == 0 and all(f["status"] == "not implemented" for f in blank.functions)


# -- a mistake costs points once: the reference stands in for a failing callee ----------------

UNSCALED_ATTENTION = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)  # not divided by sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = softmax(scores, dim=-1)
    return w @ v, w

def self_attention(x, W_q, W_k, W_v, mask=None):
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
"""


def test_a_callees_mistake_costs_points_only_in_the_callee_and_the_record_shows_both_runs(runner):
    rec = grade_submission(notebook(SETUP + HONEST_SOFTMAX + UNSCALED_ATTENTION), A, runner)
    assert rec.status == "graded" and rec.flags == ()
    fn = {f["function"]: f for f in rec.functions}
    sdpa, sa = fn["scaled_dot_product_attention"], fn["self_attention"]
    assert sdpa["score"] < sdpa["max_score"] and sdpa["composition"] is None
    assert sa["score"] == sa["max_score"], sa
    assert sa["composition"]["callees"] == ["scaled_dot_product_attention"]
    assert sa["composition"]["score"] < sa["max_score"] and sa["composition"]["failed"]


NEVER_WRITTEN_CALLEE = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = softmax(scores, dim=-1)  # softmax is never written in this notebook
    return w @ v, w
"""


def test_a_callee_never_written_gets_no_stand_in_and_its_caller_earns_nothing(runner):
    rec = grade_submission(notebook(SETUP + NEVER_WRITTEN_CALLEE + "\n# def softmax(x, dim=-1):\n"), A, runner)
    fn = {f["function"]: f for f in rec.functions}
    sdpa = fn["scaled_dot_product_attention"]
    assert sdpa["score"] == 0 and sdpa["composition"] is None, sdpa
    assert fn["softmax"]["score"] == 0


def test_with_right_callees_no_second_run_is_made(runner):
    rec = grade_submission(notebook(SETUP + HONEST), A, runner)
    assert rec.score == rec.max_score
    assert all(f["composition"] is None for f in rec.functions)


STASHED_STAND_IN = """
_kept = []

def scaled_dot_product_attention(q, k, v, mask=None):
    _kept.append(softmax)  # during its stand-in run, this is the grader's forwarding function
    w = softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ v, w

def self_attention(x, W_q, W_k, W_v, mask=None):
    for f in _kept:
        if f.__code__ is not softmax.__code__:
            f(x, -1)  # the reference softmax, asked outside the run it was lent to
    return scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask)
"""


def test_a_stand_in_kept_and_called_outside_its_run_holds_the_submission_for_review(runner):
    rec = grade_submission(notebook(SETUP + WRONG + STASHED_STAND_IN), A, runner)
    assert rec.status == "review", rec.messages
    assert rec.score == 0


# -- an input changed in place is named (issue 29, item 3) -----------------------------------------

LAYER_NORM_IN_PLACE = """
def layer_norm(x, gamma, beta, eps=1e-5):
    x -= x.mean(dim=-1, keepdim=True)  # the caller's x
    var = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(var + eps) * gamma + beta

def add_and_norm(x, sublayer_output, gamma, beta, eps=1e-5):
    out = x.clone()
    out += sublayer_output  # its own tensor
    return layer_norm(out, gamma, beta, eps)
"""


def test_an_input_changed_in_place_is_named_by_the_sandboxed_grader_and_a_clone_is_not(runner):
    rec = grade_submission(notebook(SETUP + LAYER_NORM_IN_PLACE), "05_layer_norm", runner, seed=SEED)
    assert rec.status == "graded", rec.messages
    fn = {f["function"]: f for f in rec.functions}
    ln, an = fn["layer_norm"], fn["add_and_norm"]
    assert ln["score"] == 0 < ln["max_score"]
    lines = {d for r in ln["results"] for d in r["diagnoses"]}
    assert lines == {
        "your layer_norm changed its argument `x` in place (`x -= ...`), so the caller's tensor is no longer "
        "what it passed: write `x = x - ...` (a new tensor) instead of `x -= ...`, or clone first"
    }
    assert an["score"] == an["max_score"], an  # its own clone, changed: full marks, no line
    assert not any(r["diagnoses"] for r in an["results"])
