"""The history page's sentences (``review_app.history_text``): each decision's before and after
read as what changed, never raw JSON, and shown escaped."""

from __future__ import annotations

import json

import pytest
from review_fixtures import HOSTILE, A, Q, class_gradebook, csrf, login, make_app, set_rubric

from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.lookalike import REFERENCE
from course_lib.autograder.review_app.history_text import describe, item_texts

PAGE = f"/a/{A}/q/{Q}"


@pytest.fixture
def db(tmp_path):
    return class_gradebook(tmp_path / "g.sqlite")


def _history(db, target: str | None = None):
    with Gradebook(db) as book:
        everything = book.manual.history(A)
    texts = item_texts(everything)
    return [describe(d, texts) for d in everything if target is None or d.target == target]


def test_a_grade_reads_as_points_before_and_after_its_items_and_its_comment(db):
    good, bad = set_rubric(db)
    with Gradebook(db) as book:
        (first,) = book.manual.grade(A, Q, ["ann"], items=[good], adjust=0, comment="", by="ta", expected={"ann": 0})
        book.manual.grade(
            A, Q, ["ann"], items=[good, bad], adjust=0.5, comment="Check  the\nsign.", by="ta",
            expected={"ann": first.version},
        )  # fmt: skip
    assert _history(db, f"{Q}/ann") == [
        "not graded → 2 points; items: explains the constant",
        "2 → 1.5 points; items: explains the constant → explains the constant, wrong sign; "
        "adjustment: +0 → +0.5; comment: none → Check the sign.",
    ]


def test_a_question_setup_reads_as_its_points_and_the_rubric_items_added_removed_and_changed(db):
    good, _ = set_rubric(db)
    with Gradebook(db) as book:
        version = book.manual.setup(A, Q).version
        book.manual.set_question(
            A, Q, max_points=3, rubric=[(good, "explains the constant", 2.5), (None, "mentions overflow", 1)],
            by="prof", expected=version,
        )  # fmt: skip
    assert _history(db, Q) == [
        "2 points; items: explains the constant (+2), wrong sign (-1)",
        "2 → 3 points; items added: mentions overflow (+1); items removed: wrong sign (-1); "
        "items changed: explains the constant (+2) → explains the constant (+2.5)",
    ]


def test_a_cleared_grade_a_split_and_a_pair_read_as_sentences(db):
    good, _ = set_rubric(db)
    with Gradebook(db) as book:
        (grade,) = book.manual.grade(A, Q, ["bob"], items=[good], adjust=0, comment="", by="ta", expected={"bob": 0})
        book.manual.clear_grade(A, Q, "bob", by="ta", expected=grade.version)
        book.manual.set_split(A, Q, "cat", True, by="ta")
        book.manual.set_split(A, Q, "cat", False, by="ta")
        first = book.manual.decide_pair(A, "ann", REFERENCE, verdict="dismissed", note="", by="ta", expected=0)
        book.manual.decide_pair(A, "ann", REFERENCE, verdict="confirmed", note="same", by="ta", expected=first.version)
    assert _history(db)[-6:] == [
        "not graded → 2 points; items: explains the constant",
        "2 points → not graded (the grade was cleared)",
        "split off its group, graded apart",
        "joined its group again",
        "dismissed",
        "dismissed → confirmed; note: same",
    ]


def test_the_history_page_shows_sentences_escaped_and_no_json(db):
    (good,) = set_rubric(db, items=((HOSTILE, 2.0),))
    app = make_app(db)
    client = app.test_client()
    login(client)
    page = client.get(PAGE).get_data(as_text=True)
    expected = {"ann": 0, "bob": 0, "cat": 0}
    form = {"csrf": csrf(app), "group": "g", "expected": json.dumps(expected), "item": [str(good)], "comment": HOSTILE}
    assert client.post(f"{PAGE}/grade", data=form).status_code == 303 and "Save grade" in page
    html = client.get(f"{PAGE}/history?student=ann").get_data(as_text=True)
    rows = html.split("<tbody>")[1].split("</tr>")[:-1]
    assert len(rows) == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rows[1] and "<script>alert" not in html
    assert "not graded → 2 points; items: &lt;script&gt;" in rows[1]
    assert '"items"' not in html and "&#34;items&#34;" not in html and "max_points" not in html
