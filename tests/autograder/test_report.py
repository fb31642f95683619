"""The class report (``course-lib report``) and what grading records carry for it.

Records: every record has ``sources`` (each graded function's last top-level ``def``, read
statically) and ``answers`` (the "think about it" answers), capped in size, empty when the
notebook is unreadable.
"""

from __future__ import annotations

import json

import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.notebook import (
    MAX_ANSWER_CHARS,
    MAX_SOURCE_CHARS,
    code_cells,
    function_sources,
    think_answers,
)

A = "02_self_attention"
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
    assert record["status"] == "invalid"
    assert record["sources"] == {} and record["answers"] == []


@pytest.mark.slow
def test_a_graded_record_carries_the_sources_and_answers(tmp_path):
    from course_lib.autograder.sandbox import Runner

    nb = json.loads((ROOT / "solutions" / f"{A}.ipynb").read_text(encoding="utf-8"))
    data = json.dumps(nb).encode()
    with Runner(mode="off", slot=4711) as runner:
        record = grade_submission(data, A, runner)
    assert record["status"] == "graded"
    assert record["sources"] == function_sources(code_cells(data), FUNCTIONS)
    assert set(record["sources"]) == set(FUNCTIONS)
    assert record["answers"] == think_answers(data) and all(a["answer"] for a in record["answers"])
    for key in ("assignment", "sha256", "status", "score", "max_score", "messages", "functions", "flags"):
        assert key in record
