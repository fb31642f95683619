"""Images pasted into "think about it" answers: what ``think_answers`` keeps and a record stores.

Colab and JupyterLab paste an image into a Markdown cell as ``![image.png](attachment:image.png)``
with the cell's ``attachments`` (``{"image.png": {"image/png": "<base64>"}}``): that shape is built
here. Kept: the attachments the answer's text references, raster images whose base64 decodes to
bytes of their format, within 1 MB per answer and 4 MB per record.
"""

from __future__ import annotations

import base64
import json

from conftest import ROOT

from course_lib.autograder.answer_images import (
    MAX_ANSWER_IMAGE_BYTES,
    MAX_RECORD_IMAGE_BYTES,
    raster_image,
    referenced_attachments,
)
from course_lib.autograder.notebook import think_answers
from course_lib.autograder.record import Record

A = "02_self_attention"
QUESTION_CELL = (
    "**Think about it.** Why?\n\n{answer}\n\n"
    "*After you have tried: [the book's answer](../book/02_self_attention.md#ch02-nb-{qid}).*"
)


def png(size: int = 64) -> str:
    """The base64 of ``size`` bytes that start as a PNG does."""
    head = b"\x89PNG\r\n\x1a\n"
    return base64.b64encode(head + b"\0" * (size - len(head))).decode()


def jpeg(size: int = 64) -> str:
    return base64.b64encode(b"\xff\xd8\xff" + b"\1" * (size - 3)).decode()


def cell(answer: str, qid: str = "q1", attachments: dict | None = None) -> dict:
    out = {"cell_type": "markdown", "metadata": {}, "source": QUESTION_CELL.format(answer=answer, qid=qid)}
    return out | ({"attachments": attachments} if attachments is not None else {})


def notebook(*cells: dict) -> bytes:
    return json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


def test_an_image_pasted_in_jupyterlab_or_colab_is_kept_with_the_answer():
    nb = notebook(
        cell("See the plot:\n\n![image.png](attachment:image.png)", attachments={"image.png": {"image/png": png()}})
    )
    (answer,) = think_answers(nb)
    assert answer == {
        "id": "ch02-nb-q1",
        "answer": "See the plot:\n\n![image.png](attachment:image.png)",
        "attachments": {"image.png": {"image/png": png()}},
    }


def test_an_answer_without_images_has_no_attachments_key():
    (answer,) = think_answers(notebook(cell("No image.", attachments={"image.png": {"image/png": png()}})))
    assert answer == {"id": "ch02-nb-q1", "answer": "No image."}  # not referenced: not kept


def test_an_image_in_a_markdown_cell_added_after_the_question_is_kept():
    follow = {
        "cell_type": "markdown",
        "metadata": {},
        "source": ["More:\n", "![a](attachment:b.jpg)"],
        "attachments": {"b.jpg": {"image/jpeg": [jpeg()[:20], jpeg()[20:]]}},  # nbformat allows a list of lines
    }
    (answer,) = think_answers(notebook(cell("First part."), follow))
    assert answer["answer"] == "First part.\n\nMore:\n![a](attachment:b.jpg)"
    assert answer["attachments"] == {"b.jpg": {"image/jpeg": jpeg()}}


def test_two_answers_of_one_cell_each_keep_the_images_they_show():
    attachments = {"x.png": {"image/png": png()}, "y.png": {"image/png": png(80)}}
    text = (
        QUESTION_CELL.format(answer="![x](attachment:x.png)", qid="q1")
        + "\n\n"
        + QUESTION_CELL.format(answer="![y](attachment:y.png)", qid="q2")
    )
    got = think_answers(notebook({"cell_type": "markdown", "metadata": {}, "source": text, "attachments": attachments}))
    assert [sorted(a["attachments"]) for a in got] == [["x.png"], ["y.png"]]


def test_only_valid_raster_images_are_kept():
    svg = base64.b64encode(b"<svg onload='alert(1)'/>").decode()
    attachments = {
        "s.svg": {"image/svg+xml": svg},
        "fake.png": {"image/png": svg},  # not a PNG's bytes
        "bad.png": {"image/png": "%%% not base64 %%%"},
        "html": {"text/html": "<script>alert(1)</script>"},
        "ok.gif": {"image/gif": base64.b64encode(b"GIF89a" + b"\0" * 10).decode()},
        "odd": "not a bundle",
    }
    text = " ".join(f"![{n}](attachment:{n})" for n in attachments)
    (answer,) = think_answers(notebook(cell(text, attachments=attachments)))
    assert list(answer["attachments"]) == ["ok.gif"]


def test_an_image_over_the_answers_limit_is_dropped_and_the_answer_says_so():
    big = png(MAX_ANSWER_IMAGE_BYTES + 1)
    attachments = {"big.png": {"image/png": big}, "small.png": {"image/png": png()}}
    text = "![b](attachment:big.png) ![s](attachment:small.png)"
    (answer,) = think_answers(notebook(cell(text, attachments=attachments)))
    assert list(answer["attachments"]) == ["small.png"]
    assert answer["answer"].endswith("\n\n(image too large: big.png)")


def test_images_over_the_records_limit_are_dropped_from_the_later_answers():
    size = MAX_ANSWER_IMAGE_BYTES - 100
    count = MAX_RECORD_IMAGE_BYTES // size + 1
    cells = [cell("![i](attachment:i.png)", f"q{k}", {"i.png": {"image/png": png(size)}}) for k in range(count)]
    got = think_answers(notebook(*cells))
    kept = [a for a in got if "attachments" in a]
    assert len(kept) == MAX_RECORD_IMAGE_BYTES // size
    assert got[-1]["answer"].endswith("(image too large: i.png)") and "attachments" not in got[-1]


def test_a_record_with_images_round_trips_through_its_json():
    answers = think_answers(
        notebook(cell("![image.png](attachment:image.png)", attachments={"image.png": {"image/png": png()}}))
    )
    record = Record(
        assignment=A, sha256="ab" * 32, status="graded", raw_score=1.0, max_score=2.0, answers=tuple(answers)
    )
    text = json.dumps(record.to_json())
    again = Record.from_json(json.loads(text))
    assert again == record
    assert again.answers[0]["attachments"] == {"image.png": {"image/png": png()}}
    assert json.dumps(again.to_json()) == text


def test_referenced_names_are_read_bare_in_angle_brackets_and_percent_encoded():
    text = "![a](attachment:a.png) ![b](<attachment:my plot.png>) ![c](attachment:c%20d.png) attachment:a.png"
    assert referenced_attachments(text) == ["a.png", "my plot.png", "c d.png"]


def test_a_bundle_that_is_no_image_is_none():
    assert raster_image(None) is None and raster_image({"image/png": 5}) is None
    assert raster_image({"image/png": png(10)}) == ("image/png", png(10), 10)
    webp = base64.b64encode(b"RIFF\0\0\0\0WEBPVP8 ").decode()
    assert raster_image({"image/webp": webp}) is not None
    assert raster_image({"image/webp": base64.b64encode(b"RIFF\0\0\0\0WAVEfmt ").decode()}) is None


def test_answers_to_numbered_questions_under_a_heading_are_read():
    nb = json.loads((ROOT / "exercises" / "03_multi_head_attention.ipynb").read_text(encoding="utf-8"))
    for c in nb["cells"]:
        src = "".join(c["source"])
        if src.startswith("### Think about it") and "#ch03-nb-scale)" in src:
            c["source"] = src.replace("*Your answer here.*", "Because $D$ is the head's width.", 2)
    got = {a["id"]: a["answer"] for a in think_answers(json.dumps(nb).encode())}
    assert got["ch03-nb-bare-view"] == got["ch03-nb-scale"] == "Because $D$ is the head's width."
    assert got["ch03-nb-params"] == "" and got["ch03-nb-rank"] == ""
