"""The class report shows the graders' decisions on look-alike pairs (made in ``course-lib review``):
``data.json`` carries each pair's ``decision`` and the counts, the site and the Markdown show it."""

from __future__ import annotations

import json
import re

from conftest import ROOT
from review_class import HOSTILE, A, make_class

from course_lib.autograder.class_report import write_report
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.lookalike import REFERENCE


def _report(db, tmp_path, fmt="html"):
    return write_report(db, tmp_path / "site", fmt=fmt, exercises=ROOT / "exercises", solutions=ROOT / "solutions")


def _decided(tmp_path):
    db = make_class(tmp_path / "g.sqlite")
    with Gradebook(db) as book:
        book.manual.decide_pair(A, "dave", "cara", verdict="confirmed", note="same loop", by="ann", expected=0)
        book.manual.decide_pair(A, "erin", REFERENCE, verdict="dismissed", note="", by="bea", expected=0)
    return db


def test_data_json_carries_each_pairs_decision_and_the_counts(tmp_path):
    _report(_decided(tmp_path), tmp_path)
    data = json.loads((tmp_path / "site" / "data.json").read_text())
    look = next(a for a in data["assignments"] if a["assignment"] == A)["lookalikes"]
    by_pair = {(p["a"], p["b"]): p["decision"] for p in look["pairs"]}
    confirmed = by_pair[("cara", "dave")]
    assert {k: confirmed[k] for k in ("verdict", "note", "by")} == {
        "verdict": "confirmed",
        "note": "same loop",
        "by": "ann",
    }
    assert confirmed["at"].endswith("Z")
    assert by_pair[("erin", REFERENCE)]["verdict"] == "dismissed"
    assert by_pair[("gina", "hugo")] is None
    assert (look["confirmed_pairs"], look["dismissed_pairs"]) == (1, 1)


def test_the_site_and_the_summary_show_the_decision_next_to_the_pair(tmp_path):
    db = _decided(tmp_path)
    result = _report(db, tmp_path)
    page = (tmp_path / "site" / f"{A}.html").read_text()
    assert re.search(r"<b>confirmed</b> by ann at 20\d\d-\d\d-\d\dT[\d:]+Z: same loop", page)
    assert re.search(r"<b>dismissed</b> by bea at 20\d\d-[-\dT:]+Z<", page)
    assert page.count("undecided") == 2  # the undecided pair, in the table and under its heading
    text = _report(db, tmp_path, fmt="md").text
    line = next(x for x in text.splitlines() if "cara ~ dave" in x)
    assert line.endswith("; confirmed by ann")
    assert result.files


def test_a_decisions_note_is_escaped_in_the_site(tmp_path):
    db = make_class(tmp_path / "g.sqlite")
    with Gradebook(db) as book:
        book.manual.decide_pair(A, "cara", "dave", verdict="confirmed", note=HOSTILE, by="<b>x</b>", expected=0)
    _report(db, tmp_path)
    page = (tmp_path / "site" / f"{A}.html").read_text()
    assert HOSTILE not in page and "&lt;script&gt;" in page and "<b>x</b>" not in page
