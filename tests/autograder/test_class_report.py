"""The class report (``course-lib report``) and what grading records carry for it.

Records: every record has ``sources`` (each graded function's last top-level ``def``, read
statically) and ``answers`` (the "think about it" answers), capped in size, empty when the
notebook is unreadable.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
import statistics

import numpy as np
import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.class_report import ReportError, build_data, write_report
from course_lib.autograder.class_report.items import item_statistics
from course_lib.autograder.compared import compared_sources
from course_lib.autograder.notebook import (
    MAX_ANSWER_CHARS,
    MAX_SOURCE_CHARS,
    code_cells,
    function_sources,
    think_answers,
)
from course_lib.autograder.record import STAMP_KEYS, STATUSES, Late, Record
from course_lib.cli import main
from course_lib.grading.forbidden.notebook import NotebookScan

A = "02_self_attention"
DEADLINE = "2026-11-23T23:59:00+00:00"
FUNCTIONS = ["softmax", "scaled_dot_product_attention", "self_attention"]


def notebook_bytes(cells: list[tuple[str, str]]) -> bytes:
    """A notebook of (cell type, source) cells."""
    nb = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": src}
            | ({"outputs": [], "execution_count": None} if kind == "code" else {})
            for kind, src in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb).encode()


def exercise_notebook(name: str = A) -> dict:
    return json.loads((ROOT / "exercises" / f"{name}.ipynb").read_text(encoding="utf-8"))


def answered(nb: dict, answers: dict[str, str]) -> bytes:
    """The exercise notebook with each question's placeholder replaced by ``answers[id]``."""
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        parts = src.split("**Think about it.**")
        for i, part in enumerate(parts[1:], 1):
            for qid, text in answers.items():
                if f"#{qid})" in part:
                    parts[i] = part.replace("*Your answer here.*", text)
        cell["source"] = "**Think about it.**".join(parts)
    return json.dumps(nb).encode()


# -- what a record carries ---------------------------------------------------------------------


def test_sources_are_the_last_top_level_def_of_each_graded_function():
    cells = [
        "import torch\n\ndef softmax(x, dim=-1):\n    return x  # first try\n",
        "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim, keepdim=True)\n\nprint('hi')\n",
        "def soft_max(x, dim=-1):\n    return x\n",  # a renamed def is not the graded function
        "class Helper:\n    def self_attention(self):\n        return 0\n",  # not top level
        "@staticmethod\ndef scaled_dot_product_attention(q, k, v, mask=None):\n    return q, k\n",
    ]
    got = function_sources(cells, FUNCTIONS)
    assert got == {
        "softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim, keepdim=True)",
        "scaled_dot_product_attention": "@staticmethod\ndef scaled_dot_product_attention(q, k, v, mask=None):\n"
        "    return q, k",
    }


def test_a_broken_cell_is_skipped_and_the_other_cells_still_read():
    cells = ["def softmax(x, dim=-1):\n    return x\n", "def self_attention(x, W_q:\n    return x\n"]
    assert function_sources(cells, FUNCTIONS) == {"softmax": "def softmax(x, dim=-1):\n    return x"}


def test_a_huge_source_is_capped():
    body = "".join(f"    x = x + {i}\n" for i in range(10_000))
    got = function_sources([f"def softmax(x, dim=-1):\n{body}    return x\n"], FUNCTIONS)
    assert len(got["softmax"]) == MAX_SOURCE_CHARS
    assert got["softmax"].startswith("def softmax(x, dim=-1):\n    x = x + 0\n")


def test_answers_are_the_students_text_without_question_placeholder_or_link():
    data = answered(exercise_notebook(), {"ch02-nb-mean-shift": "The mean can be\n\nfar from the max."})
    got = {a["id"]: a["answer"] for a in think_answers(data)}
    assert got == {
        "ch02-nb-mean-shift": "The mean can be\n\nfar from the max.",
        "ch02-nb-saturation": "",  # the placeholder counts as no answer
        "ch02-nb-mask-shape": "",
        "ch02-nb-causal-permutation": "",
    }


def test_an_answer_typed_into_a_new_markdown_cell_after_the_question_counts():
    nb = exercise_notebook()
    i = next(i for i, c in enumerate(nb["cells"]) if "ch02-nb-causal-permutation" in "".join(c["source"]))
    nb["cells"].insert(i + 1, {"cell_type": "markdown", "metadata": {}, "source": "No: the mask is tied to positions."})
    got = {a["id"]: a["answer"] for a in think_answers(json.dumps(nb).encode())}
    assert got["ch02-nb-causal-permutation"] == "No: the mask is tied to positions."
    assert got["ch02-nb-mask-shape"] == ""  # the course's own next heading is not an answer


def test_the_solution_notebooks_answers_are_read_without_their_markers():
    data = (ROOT / "solutions" / f"{A}.ipynb").read_bytes()
    got = think_answers(data)
    assert [a["id"] for a in got] == [a["id"] for a in think_answers(json.dumps(exercise_notebook()).encode())]
    for a in got:
        assert a["answer"] and "SOLUTION" not in a["answer"] and "<!--" not in a["answer"]
        assert "Think about it" not in a["answer"] and "book's answer" not in a["answer"]


def test_a_hostile_huge_answer_is_capped():
    data = answered(exercise_notebook(), {"ch02-nb-saturation": "<script>alert(1)</script>" + "x" * 1_000_000})
    got = {a["id"]: a["answer"] for a in think_answers(data)}
    assert len(got["ch02-nb-saturation"]) == MAX_ANSWER_CHARS
    assert got["ch02-nb-saturation"].startswith("<script>")


@given(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=200))
def test_any_answer_text_comes_back_as_typed(text):
    text = "answer: " + text.replace("**Think about it.**", "").replace("*Your answer here.*", "").strip()
    data = answered(exercise_notebook(), {"ch02-nb-mask-shape": text.replace("\r", " ")})
    got = {a["id"]: a["answer"] for a in think_answers(data)}
    assert got["ch02-nb-mask-shape"] == text.replace("\r", " ").strip()


@pytest.mark.parametrize("data", [b"", b"{not json", b'{"cells": 3}', b"[1, 2]", b"\xff\xfe"])
def test_an_unreadable_notebook_has_no_answers(data):
    assert think_answers(data) == []


def test_a_refused_record_carries_empty_sources_and_answers():
    record = grade_submission(b"{not json", A, runner=None)
    assert record.status == "invalid"
    assert record.sources == {} and record.answers == ()
    assert {"sources", "answers"} <= set(record.to_json())


@pytest.mark.slow
def test_a_graded_record_carries_the_sources_and_answers(tmp_path):
    from course_lib.autograder.sandbox import Runner
    from course_lib.autograder.sandbox_adapter import watch_lists

    nb = json.loads((ROOT / "solutions" / f"{A}.ipynb").read_text(encoding="utf-8"))
    data = json.dumps(nb).encode()
    with Runner(mode="off", slot=4711, watch=watch_lists()) as runner:
        record = grade_submission(data, A, runner)
    assert record.status == "graded"
    assert record.sources == compared_sources(NotebookScan(code_cells(data)), FUNCTIONS)
    assert set(record.sources) == set(FUNCTIONS)
    assert list(record.answers) == think_answers(data) and all(a["answer"] for a in record.answers)
    for key in ("assignment", "sha256", "status", "score", "max_score", "messages", "functions", "flags"):
        assert key in record.to_json()


# -- a generated class -------------------------------------------------------------------------
# Three independent correct styles of chapter 2's functions (loops, einsum, matmul), a renamed and
# reformatted copy of one student, a renamed copy of the solution, students with named mistakes,
# a hostile student, old and refused records.

LOOPS = """
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    out = torch.zeros_like(flat)
    for r in range(flat.shape[0]):
        biggest = -math.inf
        for c in range(flat.shape[1]):
            biggest = max(biggest, float(flat[r, c]))
        if biggest == -math.inf:
            continue
        total = 0.0
        for c in range(flat.shape[1]):
            out[r, c] = math.exp(float(flat[r, c]) - biggest)
            total += float(out[r, c])
        for c in range(flat.shape[1]):
            out[r, c] = out[r, c] / total
    return out.reshape(moved.shape).movedim(-1, dim)


def scaled_dot_product_attention(q, k, v, mask=None):
    L, S = q.shape[-2], k.shape[-2]
    scores = torch.empty(*q.shape[:-1], S)
    for i in range(L):
        for j in range(S):
            scores[..., i, j] = (q[..., i, :] * k[..., j, :]).sum(-1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -math.inf))
    weights = softmax(scores, dim=-1)
    out = torch.zeros(*q.shape[:-1], v.shape[-1])
    for i in range(L):
        for j in range(S):
            out[..., i, :] += weights[..., i, j, None] * v[..., j, :]
    return out, weights


def self_attention(x, W_q, W_k, W_v, mask=None):
    queries, keys, values = [], [], []
    for t in range(x.shape[1]):
        queries.append(x[:, t] @ W_q)
        keys.append(x[:, t] @ W_k)
        values.append(x[:, t] @ W_v)
    return scaled_dot_product_attention(torch.stack(queries, 1), torch.stack(keys, 1), torch.stack(values, 1), mask)
"""

EINSUM = """
def softmax(x, dim=-1):
    peak = torch.amax(x, dim=dim, keepdim=True)
    peak = peak.nan_to_num(0.0, posinf=0.0, neginf=0.0)
    ex = torch.exp(x - peak)
    norm = ex.sum(dim=dim, keepdim=True)
    norm = norm.clamp_min(1e-30)
    return ex / norm


def scaled_dot_product_attention(q, k, v, mask=None):
    logits = torch.einsum("...ld,...sd->...ls", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        logits = logits.masked_fill(mask.logical_not(), -float("inf"))
    attn = softmax(logits, -1)
    return torch.einsum("...ls,...sv->...lv", attn, v), attn


def self_attention(x, W_q, W_k, W_v, mask=None):
    proj = lambda w: torch.einsum("nte,ed->ntd", x, w)
    return scaled_dot_product_attention(proj(W_q), proj(W_k), proj(W_v), mask=mask)
"""

MATMUL = """
def softmax(x, dim=-1):
    top = x.max(dim=dim, keepdim=True).values
    top[~torch.isfinite(top)] = 0
    num = (x - top).exp()
    den = num.sum(dim, keepdim=True)
    den[den == 0] = 1
    return num / den


def scaled_dot_product_attention(q, k, v, mask=None):
    d = k.size(-1)
    sc = torch.matmul(q, k.mT) / torch.tensor(float(d)).sqrt()
    if mask is not None:
        sc = sc.masked_fill(mask == 0, -torch.inf)
    p = softmax(sc)
    return torch.matmul(p, v), p


def self_attention(x, W_q, W_k, W_v, mask=None):
    Q = torch.matmul(x, W_q)
    K = torch.matmul(x, W_k)
    V = torch.matmul(x, W_v)
    result, weights = scaled_dot_product_attention(Q, K, V, mask)
    return result, weights
"""

HOSTILE_ID = '<script>alert("id")</script>'
HOSTILE_TEXT = '</td></tr></table><img src=x onerror=alert(1)><script>alert("answer")</script>'


def tiny_png() -> str:
    """The base64 of a real 2 x 2 PNG (a browser draws it), as Jupyter stores a pasted image."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress(b"\0" + b"\xff\0\0" * 2 + b"\0" + b"\0\0\xff" * 2)
    head = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    return base64.b64encode(png).decode()


#: An answer with inline and display math and a pasted image (bo's, to the saturation question).
MATH_ANSWER = (
    "Dividing by $\\sqrt{D}$ keeps the scores' variance at 1:\n\n"
    "$$\\operatorname{softmax}\\left(\\frac{q^\\top k}{\\sqrt{D}}\\right)$$\n\n"
    "![my plot](attachment:image.png)"
)


def split_functions(code: str) -> dict[str, str]:
    return function_sources([code], FUNCTIONS)


def disguise(sources: dict[str, str], renames: dict[str, str]) -> dict[str, str]:
    """Renamed local names, 2-space indentation, comments, blank lines and single quotes."""
    out = {}
    for name, src in sources.items():
        for old, new in renames.items():
            src = re.sub(rf"\b{re.escape(old)}\b", new, src)
        lines = []
        for line in src.split("\n"):
            stripped = line.lstrip(" ")
            indent = (len(line) - len(stripped)) // 4 * 2
            lines.append(" " * indent + stripped.replace('"', "'"))
            if line.rstrip().endswith(":"):
                lines.append(" " * (indent + 2) + "# my own idea")
                lines.append("")
        out[name] = "\n".join(lines)
    return out


def record_of(reports: list, sources: dict[str, str] | None, answers: list[dict] | None, late: Late | None = None):
    """A graded record of these reports; ``None`` sources or answers: a record graded before
    records carried them (the keys absent)."""
    functions = [r.to_dict() for r in reports]
    record = Record(
        assignment=A,
        sha256="",
        status="graded",
        raw_score=float(sum(f["score"] for f in functions)),
        max_score=float(sum(f["max_score"] for f in functions)),
        functions=tuple(functions),
        sources=sources or {},
        answers=tuple(answers or ()),
        absent=STAMP_KEYS | {k for k, v in (("sources", sources), ("answers", answers)) if v is None},
    )
    return record if late is None else record.stamp(late.submitted, late)


#: The same answer of m1, m2 and m3 (m3's in other case and spacing): one group, shown once.
SAME = {"id": "ch02-nb-mask-shape", "answer": "It masks keys, the same for every query."}
SAME_AGAIN = {"id": "ch02-nb-mask-shape", "answer": "it masks  keys, the same for every query"}
#: Nearly the same answers of m4 and u1 (one word apart).
NEAR = {"id": "ch02-nb-causal-permutation", "answer": "No: the causal mask ties each token to the tokens before it."}
NEAR_TOO = {
    "id": "ch02-nb-causal-permutation",
    "answer": "No: the causal mask ties every token to the tokens before it.",
}


def _identity_softmax(x, dim=-1):
    return x


@pytest.fixture(scope="module")
def gradebook(tmp_path_factory):
    """A class of chapter 2, graded by the checks (``course_lib.grading.check``), in a gradebook."""
    from course_lib.autograder.autograde import failed_record, refused_record
    from course_lib.autograder.gradebook import Gradebook
    from course_lib.grading import check
    from course_lib.grading.registry import exercise

    right = {f: check(exercise(f).reference, f) for f in FUNCTIONS}
    sdpa_mistakes = exercise("scaled_dot_product_attention").mistakes
    softmax_mistakes = exercise("softmax").mistakes
    wrong_sdpa = check(sdpa_mistakes[0].implementation, "scaled_dot_product_attention")
    wrong_softmax = check(softmax_mistakes[0].implementation, "softmax")
    unknown_softmax = check(_identity_softmax, "softmax")
    solution = function_sources(code_cells((ROOT / "solutions" / f"{A}.ipynb").read_bytes()), FUNCTIONS)
    starter = function_sources(code_cells((ROOT / "exercises" / f"{A}.ipynb").read_bytes()), FUNCTIONS)
    correct = [right[f] for f in FUNCTIONS]
    mean_shift = {"id": "ch02-nb-mean-shift", "answer": ""}
    einsum = split_functions(EINSUM)
    students = {
        "ada": record_of(
            correct, split_functions(LOOPS), [{"id": "ch02-nb-mean-shift", "answer": "The mean is not max."}]
        ),
        "bo": record_of(
            correct,
            einsum,
            [
                mean_shift,
                {
                    "id": "ch02-nb-saturation",
                    "answer": MATH_ANSWER,
                    "attachments": {"image.png": {"image/png": tiny_png()}},
                },
            ],
        ),
        "cy": record_of(correct, split_functions(MATMUL), [mean_shift]),
        "dee": record_of(
            correct,
            disguise(einsum, {"peak": "mx", "ex": "expd", "norm": "z", "logits": "s", "attn": "probs", "proj": "P"}),
            [{"id": "ch02-nb-mean-shift", "answer": "Exponents can overflow."}],
        ),
        "eve": record_of(correct, disguise(solution, {"scores": "logit", "weights": "w", "total": "denominator"}), []),
        HOSTILE_ID: record_of(
            correct,
            {
                "softmax": disguise(split_functions(MATMUL), {"top": "t"})["softmax"] + f"  # {HOSTILE_TEXT}",
                "scaled_dot_product_attention": starter["scaled_dot_product_attention"],
            },
            [
                {"id": "ch02-nb-mean-shift", "answer": HOSTILE_TEXT},
                {"id": "ch02-nb-saturation", "answer": HOSTILE_TEXT},
            ],
        ),
        "m1": record_of([right["softmax"], wrong_sdpa, right["self_attention"]], dict(starter), [SAME]),
        "m2": record_of([right["softmax"], wrong_sdpa, right["self_attention"]], {}, [SAME]),
        "m3": record_of([wrong_softmax, wrong_sdpa, right["self_attention"]], {}, [SAME_AGAIN]),
        "m4": record_of([wrong_softmax, right["scaled_dot_product_attention"], right["self_attention"]], {}, [NEAR]),
        "u1": record_of(
            [unknown_softmax, right["scaled_dot_product_attention"], right["self_attention"]], {}, [NEAR_TOO]
        ),
        "old": record_of(correct, None, None),
        "late": record_of(correct, {}, [], Late(2, 0.2, 6.8, "2026-11-25T12:00:00+00:00", DEADLINE, 0.1, 1.0)),
        "refused": refused_record(A, "the file is not valid JSON"),
        "crashed": failed_record(A, "the sandbox failed"),
    }
    path = tmp_path_factory.mktemp("report") / "gradebook.sqlite"
    with Gradebook(path) as book:
        for student, record in students.items():
            book.save(student, record, checker="test", seconds=0.1)
    return path


@pytest.fixture(scope="module")
def site(gradebook, tmp_path_factory):
    """The HTML report of the class (written once for the module)."""
    out = tmp_path_factory.mktemp("site")
    result = write_report(gradebook, out, exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    return out, result.data


def rows_from_sql(path) -> list[tuple[str, str, float, float, dict]]:
    conn = sqlite3.connect(str(path))
    try:
        return [
            (s, status, score, max_score, json.loads(rec))
            for s, status, score, max_score, rec in conn.execute(
                "SELECT student, status, score, max_score, record FROM results WHERE assignment = ?", (A,)
            )
        ]
    finally:
        conn.close()


def the(data: dict) -> dict:
    (entry,) = [a for a in data["assignments"] if a["assignment"] == A]
    return entry


# -- counts equal the gradebook's ---------------------------------------------------------------


def test_status_counts_scores_and_full_marks_equal_the_gradebooks(site, gradebook):
    _, data = site
    a = the(data)
    rows = rows_from_sql(gradebook)
    conn = sqlite3.connect(str(gradebook))
    by_status = dict(conn.execute("SELECT status, COUNT(*) FROM results WHERE assignment = ? GROUP BY status", (A,)))
    full = conn.execute(
        "SELECT COUNT(*) FROM results WHERE assignment = ? AND score >= max_score AND max_score > 0", (A,)
    )
    full_marks = full.fetchone()[0]
    conn.close()
    assert set(a["scores"]["statuses"]) >= set(STATUSES)
    assert {k: v for k, v in a["scores"]["statuses"].items() if v} == by_status
    assert a["scores"]["records"] == len(rows) == data["records"]
    assert a["class_size"] == by_status["graded"]
    assert a["scores"]["full_marks"] == full_marks
    assert a["scores"]["zero"] == sum(1 for r in rows if r[2] == 0)
    assert a["scores"]["mean"] == pytest.approx(statistics.fmean(r[2] for r in rows))
    assert a["scores"]["median"] == pytest.approx(statistics.median(r[2] for r in rows))
    assert a["scores"]["late"] == sum(1 for r in rows if r[4].get("late"))
    assert sum(a["scores"]["histogram"]["counts"]) == len(rows)


def test_each_mistakes_students_equal_those_found_in_the_records(site, gradebook):
    _, data = site
    a = the(data)
    graded_rows = [r for r in rows_from_sql(gradebook) if r[1] == "graded"]
    expected: dict[tuple[str, str], set[str]] = {}
    for student, _, _, _, rec in graded_rows:
        for fr in rec["functions"]:
            for res in fr["results"]:
                for d in res["diagnoses"]:
                    expected.setdefault((fr["function"], d), set()).add(student)
    got = {(f["function"], m["mistake"]): m for f in a["mistakes"] for m in f["named"]}
    assert set(got) == set(expected) and expected
    for key, students in expected.items():
        assert set(got[key]["students"]) == students and got[key]["count"] == len(students)
        assert got[key]["share"] == pytest.approx(len(students) / len(graded_rows))
    for f in a["mistakes"]:  # ranked by how many students made them
        counts = [m["count"] for m in f["named"]]
        assert counts == sorted(counts, reverse=True)


def test_failed_tests_without_a_named_mistake_are_counted_as_not_recognised(site):
    _, data = site
    (softmax,) = [f for f in the(data)["mistakes"] if f["function"] == "softmax"]
    assert softmax["unrecognised"]
    assert all(u["students"] == ["u1"] for u in softmax["unrecognised"])


def test_pass_rates_equal_those_computed_from_the_records(site, gradebook):
    _, data = site
    graded_rows = [r for r in rows_from_sql(gradebook) if r[1] == "graded"]
    for item in the(data)["items"]:
        results = [
            res
            for *_, rec in graded_rows
            for fr in rec["functions"]
            if fr["function"] == item["function"]
            for res in fr["results"]
            if res["name"] == item["test"]
        ]
        assert item["students"] == len(results)
        assert item["pass_rate"] == pytest.approx(sum(r["passed"] for r in results) / len(results))


def test_records_graded_before_sources_and_answers_existed_are_counted(site):
    out, data = site
    assert data["without_sources"] == 1 and data["without_answers"] == 1
    assert (
        "1 of 15 record(s) were graded before records carried the functions' sources"
        in (out / "index.html").read_text()
    )


# -- items ----------------------------------------------------------------------------------------


def _item_records(matrix: list[list[bool]]) -> list[tuple[str, Record]]:
    rows = []
    for i, passes in enumerate(matrix):
        results = [
            {"name": f"t{j}", "points": float(p), "max_points": 1.0, "passed": p, "diagnoses": []}
            for j, p in enumerate(passes)
        ]
        functions = ({"function": "f", "results": results},)
        rows.append((f"s{i}", Record(A, "", "graded", float(sum(passes)), float(len(passes)), functions=functions)))
    return rows


@given(
    st.integers(2, 12).flatmap(
        lambda n: st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=n, max_size=n)
    )
)
def test_discrimination_is_the_corrected_item_total_correlation_or_none(matrix):
    items = item_statistics(_item_records(matrix), ["f"])
    x = np.array(matrix, dtype=float)
    for j, item in enumerate(items):
        rest = x.sum(axis=1) - x[:, j]
        if x[:, j].std() == 0 or rest.std() == 0:
            assert item["discrimination"] is None
        else:
            assert item["discrimination"] == pytest.approx(np.corrcoef(x[:, j], rest)[0, 1], abs=1e-9)
        assert item["pass_rate"] == pytest.approx(x[:, j].mean())
        assert ("everyone passes" in item["flags"]) == (x[:, j].min() == 1)
        assert ("nobody passes" in item["flags"]) == (x[:, j].max() == 0)
        d = item["discrimination"]
        assert ("negative discrimination" in item["flags"]) == (d is not None and d < 0)
    json.dumps(items, allow_nan=False)  # no NaN anywhere


def test_an_item_strong_students_fail_is_flagged():
    # t0..t2 follow ability; t3 is passed by the weakest students only
    matrix = [
        [True, True, True, False],
        [True, True, False, False],
        [True, False, False, True],
        [False, False, False, True],
    ]
    items = item_statistics(_item_records(matrix), ["f"])
    assert items[3]["flags"] == ["negative discrimination"]
    assert all("negative discrimination" not in it["flags"] for it in items[:3])


def test_undefined_discrimination_reads_n_a_on_the_page(site):
    out, data = site
    assert any(it["discrimination"] is None for it in the(data)["items"])
    page = (out / the(data)["page"]).read_text()
    assert "<td class=num>n/a</td>" in page and not re.search(r">\s*-?nan\s*<", page, re.IGNORECASE)
    json.loads((out / "data.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in data.json"))


# -- look-alikes --------------------------------------------------------------------------------


def student_pairs(data) -> list[tuple[str, str]]:
    return [(p["a"], p["b"]) for p in the(data)["lookalikes"]["pairs"] if not p["reference"]]


def test_independent_correct_solutions_in_different_styles_are_not_look_alikes(site):
    _, data = site
    independent = {"ada", "bo", "cy"}
    assert not [p for p in student_pairs(data) if set(p) <= independent]


def test_a_renamed_and_reformatted_copy_is_the_top_pair(site):
    out, data = site
    pairs = student_pairs(data)
    assert set(pairs[0]) == {"bo", "dee"}
    top = the(data)["lookalikes"]["pairs"][0]
    page = (out / the(data)["page"]).read_text()
    assert 'id="pair-1"' in page and "mx" in page  # dee's renamed code is shown beside bo's
    assert {r["function"] for r in top["regions"]} == set(FUNCTIONS)


def test_a_copy_of_the_solution_is_reported_as_matching_the_reference(site):
    out, data = site
    refs = [p for p in the(data)["lookalikes"]["pairs"] if p["reference"]]
    assert "eve" in [p["a"] for p in refs]
    assert all(p["b"] == "(reference solution)" for p in refs)
    assert "eve matches the reference solution" in (out / the(data)["page"]).read_text()


def test_the_report_never_shows_the_solutions_code(site, gradebook):
    """Only the students' own code is shown: no line of the solution that no student wrote."""
    out, _ = site
    written = "\n".join(src for *_, rec in rows_from_sql(gradebook) for src in rec.get("sources", {}).values())
    solution = function_sources(code_cells((ROOT / "solutions" / f"{A}.ipynb").read_bytes()), FUNCTIONS)
    starter = (ROOT / "exercises" / f"{A}.ipynb").read_text()
    lines = {
        line.strip()
        for src in solution.values()
        for line in src.split("\n")
        if len(line.strip()) > 20 and line.strip() not in starter + written and not line.strip().startswith(("#", "-"))
    }
    assert len(lines) > 5
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        for line in lines:
            assert line not in text and html.escape(line) not in text, (path.name, line)


def test_a_student_id_cannot_pose_as_the_reference(tmp_path):
    from course_lib.autograder.gradebook import Gradebook
    from course_lib.grading import check
    from course_lib.grading.registry import exercise

    correct = [check(exercise(f).reference, f) for f in FUNCTIONS]
    with Gradebook(tmp_path / "g.sqlite") as book:
        book.save("(reference solution)", record_of(correct, split_functions(EINSUM), []), "t", 0.1)
        book.save("zed", record_of(correct, disguise(split_functions(EINSUM), {"peak": "p"}), []), "t", 0.1)
    data, _ = build_data(tmp_path / "g.sqlite", exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    (pair,) = the(data)["lookalikes"]["pairs"]
    assert pair["reference"] is False and {pair["a"], pair["b"]} == {"(reference solution)", "zed"}


# -- hostile text ---------------------------------------------------------------------------------


def test_hostile_ids_answers_and_code_are_escaped(site):
    out, data = site
    pages = {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.html")}
    for name, text in pages.items():
        assert "<script" not in text.lower(), name
        assert "<img src=x" not in text, name
        assert "onerror=alert" not in text or "&lt;img src=x onerror=alert" in text, name
    page = pages[the(data)["page"]]
    assert html.escape(HOSTILE_ID) in page  # the id in the tables
    assert html.escape(HOSTILE_TEXT) in page  # the answer and the comment in the code
    hostile_pairs = [p for p in the(data)["lookalikes"]["pairs"] if HOSTILE_ID in (p["a"], p["b"])]
    assert hostile_pairs, "the hostile copy of cy's softmax is a look-alike, so its code is on the page"


def test_file_names_never_come_from_student_text(site):
    out, _ = site
    assert sorted(p.name for p in out.iterdir()) == sorted(["index.html", "data.json", f"{A}.html", f"{A}-scores.svg"])


def test_the_answers_of_every_student_are_listed_side_by_side(site):
    out, data = site
    questions = {q["id"]: q for q in the(data)["answers"]}
    got = {x["student"]: x["answer"] for x in questions["ch02-nb-mean-shift"]["answers"]}
    assert got == {"ada": "The mean is not max.", "dee": "Exponents can overflow.", HOSTILE_ID: HOSTILE_TEXT}
    assert questions["ch02-nb-mean-shift"]["unanswered"] == 2
    assert "Exponents can overflow." in (out / the(data)["page"]).read_text()


def test_questions_and_answers_are_shown_rendered_with_math_as_mathml(site):
    out, data = site
    page = (out / the(data)["page"]).read_text(encoding="utf-8")
    answers = page[page.index('<h2 id="answers">') :]
    assert '<div class="question"><p><strong>Think about it.</strong> Without scaling' in answers
    assert answers.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">') == 1  # bo's
    assert "<msqrt>" in answers and "\\sqrt" not in answers and "$" not in answers
    assert f'<img src="data:image/png;base64,{tiny_png()}" alt="my plot">' in answers
    assert "img-src 'self' file: data:;" in page


def test_data_json_keeps_the_questions_and_answers_as_plain_text(site):
    out, _ = site
    written = json.loads((out / "data.json").read_text(encoding="utf-8"))
    questions = {q["id"]: q for q in the(written)["answers"]}
    assert list(questions)[:4] == [
        "ch02-nb-mean-shift",
        "ch02-nb-saturation",
        "ch02-nb-mask-shape",
        "ch02-nb-causal-permutation",
    ]
    assert [q["number"] for q in list(questions.values())[:4]] == [1, 2, 3, 4]
    saturation = questions["ch02-nb-saturation"]
    assert saturation["question"].startswith("**Think about it.** Without scaling, the largest weight")
    bo = next(x for x in saturation["answers"] if x["student"] == "bo")
    assert bo == {"student": "bo", "answer": MATH_ANSWER, "images": ["image.png"]}
    text = (out / "data.json").read_text(encoding="utf-8")
    assert "<math" not in text and tiny_png() not in text


def test_identical_and_near_identical_answers_are_grouped_and_shown_once(site):
    out, data = site
    questions = {q["id"]: q for q in the(data)["answers"]}
    assert questions["ch02-nb-mask-shape"]["groups"] == [
        {"students": ["m1", "m2", "m3"], "identical": True, "similarity": 1.0}
    ]
    (near,) = questions["ch02-nb-causal-permutation"]["groups"]
    assert sorted(near["students"]) == ["m4", "u1"] and near["identical"] is False and 0.85 <= near["similarity"] < 1
    assert questions["ch02-nb-mean-shift"]["groups"] == []  # three different answers
    page = (out / the(data)["page"]).read_text(encoding="utf-8")
    assert "<b>3 students gave the same answer</b>: m1, m2, m3" in page
    assert page.count("the same for every query") == 1  # shown once, for the group
    assert "<b>2 students gave nearly the same answer</b> (at least" in page
    assert "ties each token" in page and "ties every token" in page  # each near-identical answer kept


# -- the command ------------------------------------------------------------------------------------


def test_the_md_format_prints_the_same_top_numbers(site, gradebook, capsys):
    _, data = site
    code = main(
        [
            "report",
            "--db",
            str(gradebook),
            "--format",
            "md",
            "--exercises",
            str(ROOT / "exercises"),
            "--solutions",
            str(ROOT / "solutions"),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    a = the(data)
    s = a["scores"]
    assert f"mean {s['mean']:.2f} / {s['max_score']:g}, median {s['median']:.2f}" in text
    assert f"full marks {s['full_marks']}, zero {s['zero']}, late {s['late']}" in text
    top = max((m for f in a["mistakes"] for m in f["named"]), key=lambda m: m["count"])
    assert f"- {top['count']} ({100 * top['share']:.1f}%)" in text
    fn = next(f["function"] for f in a["mistakes"] if top in f["named"])
    assert f"%) `{fn}`: " in text  # a code span is verbatim in CommonMark: no backslash before `_`
    assert "bo ~ dee" in text and "eve ~ the reference solution" in text
    assert "<script>" not in text


def test_the_html_command_writes_the_site(gradebook, tmp_path, capsys):
    out = tmp_path / "site"
    code = main(
        [
            "report",
            "--db",
            str(gradebook),
            "--out",
            str(out),
            "--exercises",
            str(ROOT / "exercises"),
            "--solutions",
            str(ROOT / "solutions"),
        ]
    )
    assert code == 0 and (out / "index.html").is_file()
    assert "wrote the class report" in capsys.readouterr().out
    data = json.loads((out / "data.json").read_text())
    assert data["assignments"][0]["page"] == f"{A}.html"


def test_figures_are_the_same_on_every_run(site, gradebook, tmp_path):
    out, _ = site
    again = write_report(gradebook, tmp_path, exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    for name in (f"{A}-scores.svg", "data.json", f"{A}.html", "index.html"):
        assert (out / name).read_bytes() == (tmp_path / name).read_bytes(), name
    assert b"<dc:date>" not in (out / f"{A}-scores.svg").read_bytes()
    assert again.seconds.keys() == {"load", "statistics", "look-alikes", "figures", "html"}


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["--solutions", "/nonexistent"], "--solutions: no notebook /nonexistent/02_self_attention.ipynb"),
        (["--exercises", "/nonexistent"], "--exercises: no notebook"),
        (["--threshold", "1.5"], "--threshold: expected a number between 0 and 1, got 1.5"),
        (["--db", "/nonexistent.sqlite"], "--db: no gradebook at /nonexistent.sqlite"),
    ],
)
def test_bad_arguments_give_a_clear_error(gradebook, tmp_path, capsys, args, phrase):
    base = {"--db": str(gradebook), "--exercises": str(ROOT / "exercises"), "--solutions": str(ROOT / "solutions")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["report", "--out", str(tmp_path / "out")] + [x for kv in base.items() for x in kv]
    if "--threshold" in args:
        argv += ["--threshold", args[1]]
    assert main(argv) == 2
    assert phrase in capsys.readouterr().err


def test_html_needs_an_output_folder(gradebook):
    with pytest.raises(ReportError, match="--out"):
        write_report(gradebook, None, exercises=ROOT / "exercises", solutions=ROOT / "solutions")
