"""The index's counts per assignment: its records held for review (how many resolved) and its
look-alike pairs (how many confirmed and dismissed), the pairs counted only once computed: the
index never computes them."""

from __future__ import annotations

import re

import pytest
from review_class import LOOP, A, make_class
from review_fixtures import login, make_app

from course_lib.autograder.adjust import override, resolve
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.manual import pair_key
from course_lib.autograder.record import Record
from course_lib.autograder.review_app import pair_list


@pytest.fixture
def db(tmp_path):
    return make_class(tmp_path / "g.sqlite")


@pytest.fixture
def app(db):
    return make_app(db, grader="ann")


@pytest.fixture
def client(app):
    c = app.test_client()
    login(c)
    return c


def _counts(client) -> tuple[str, str]:
    """The index's held and pairs lines of assignment A."""
    page = client.get("/").get_data(as_text=True)
    found = dict(re.findall(r'data-role="(held|pairs)">([^<]*)</a>', page))
    return found["held"], found["pairs"]


def test_the_index_counts_the_held_records_and_how_many_are_resolved(client, db):
    assert _counts(client)[0] == "3 held for review (0 resolved)"
    resolve(db, "hugo", A, accept=True, points=6.0, reason="fine", by="ann")
    resolve(db, "hana", A, accept=False, points=None, reason="ctypes", by="ann")
    override(db, "cara", A, points=9.0, reason="not held: not counted", by="ann")
    assert _counts(client)[0] == "3 held for review (2 resolved)"


def test_the_index_never_computes_the_pairs_and_says_when_they_will_be(client, monkeypatch):
    calls = []
    real = pair_list.compute_pairs
    monkeypatch.setattr(pair_list, "compute_pairs", lambda *a: calls.append(a) or real(*a))
    assert _counts(client)[1] == "look-alike pairs: computed when opened"
    assert calls == []
    assert client.get(f"/a/{A}/pairs").status_code == 200
    assert _counts(client)[1] == "3 look-alike pairs (0 confirmed, 0 dismissed)"
    assert len(calls) == 1


def test_once_computed_the_index_counts_the_pairs_confirmed_and_dismissed(client, app, db):
    client.get(f"/a/{A}/pairs")
    found = pair_list.compute_pairs(db, A, app.config["EXERCISES"], app.config["SOLUTIONS"]).pairs
    with Gradebook(db) as book:
        for pair, verdict in zip(found[:2], ("confirmed", "dismissed"), strict=True):
            book.manual.decide_pair(A, *pair_key(pair.a, pair.b), verdict=verdict, note="seen", by="ann", expected=0)
        book.manual.decide_pair(A, "fred", "gina", verdict="confirmed", note="no such pair", by="ann", expected=0)
    assert _counts(client)[1] == "3 look-alike pairs (1 confirmed, 1 dismissed)"


def test_after_a_regrade_the_index_says_the_pairs_are_computed_again_when_opened(client, db):
    client.get(f"/a/{A}/pairs")
    with Gradebook(db) as book:
        book.save(
            "fred", Record(A, "2" * 64, "graded", 7.0, 10.0, sources={"softmax": LOOP}, absent=frozenset()), "t", 0.1
        )
    assert _counts(client)[1] == "look-alike pairs: computed when opened"
    rows = re.findall(r'<th scope="row">', client.get(f"/a/{A}/pairs").get_data(as_text=True))
    assert len(rows) > 3  # fred now pairs with cara and dave
    assert _counts(client)[1] == f"{len(rows)} look-alike pairs (0 confirmed, 0 dismissed)"
