"""The held-record pages of the review app (``/a/<assignment>/held``), through Flask's test client:
why a record was held, the student's code (escaped), the history, and accept / reject through
``adjust.resolve`` with the version the page showed (a stale page gets a conflict, nothing saved)."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from review_class import HOSTILE, MAX, A, make_class
from review_fixtures import login, make_app

from course_lib.autograder.adjust import override, resolve
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.review_app.security import csrf_token


@pytest.fixture
def db(tmp_path):
    return make_class(tmp_path / "g.sqlite")


@pytest.fixture
def client(db):
    app = make_app(db, grader="ann")
    c = app.test_client()
    login(c)
    with app.app_context():
        c.csrf = csrf_token()  # type: ignore[attr-defined]
    return c


def _url(student: str) -> str:
    return f"/a/{A}/held/{quote(student, safe='')}"


def _expected(page: str) -> str:
    found = re.search(r'name="expected" value="(\d+)"', page)
    assert found, "the page carries no expected version"
    return found.group(1)


def _post(client, student: str, expected: str, **form: str):
    return client.post(_url(student), data={"csrf": client.csrf, "expected": expected, **form})


def _open(client, student: str) -> str:
    response = client.get(_url(student))
    assert response.status_code == 200
    return response.get_data(as_text=True)


def test_the_list_shows_every_held_record_and_none_graded(client):
    page = client.get(f"/a/{A}/held").get_data(as_text=True)
    for student in ("hana", "hugo"):
        assert f">{student}</a>" in page
    assert "cara" not in page and "not resolved" in page
    assert "cell 3, line 2: uses ctypes.pythonapi" in page


def test_a_record_page_names_the_cell_line_and_construct_and_highlights_its_line(client):
    page = _open(client, "hana")
    assert "Code cell 3, line 2" in page and "<code>ctypes.pythonapi</code>" in page
    assert "<code>softmax</code> line 2 (highlighted)" in page
    assert "<span class=hl><i>2</i>    api = ctypes.pythonapi</span>" in page
    assert "Nothing in it is graded" in page  # the message the student gets


def test_a_flag_without_a_cell_says_so_and_shows_what_the_record_has(client):
    page = _open(client, "hugo")
    assert "No cell named" in page
    assert "a frame out of sequence (replayed or forged)" in page


def test_accept_gives_the_autograders_score_by_default(client, db):
    expected = _expected(_open(client, "hugo"))
    response = _post(client, "hugo", expected, action="accept", points="", reason="")
    assert response.status_code == 303
    with Gradebook(db) as book:
        record = book.record("hugo", A)
    assert record.adjustment.kind == "accepted" and record.score == 6.0 and record.adjustment.by == "ann"
    page = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "Saved: the record is accepted." in page and "Accepted</strong> by ann" in page


def test_accept_with_other_points_saves_them(client, db):
    expected = _expected(_open(client, "hana"))
    assert _post(client, "hana", expected, action="accept", points="7.5", reason="read it: fine").status_code == 303
    with Gradebook(db) as book:
        record = book.record("hana", A)
    assert record.score == 7.5 and record.adjustment.reason == "read it: fine"


def test_accept_of_a_notebook_nothing_was_graded_in_needs_points(client, db):
    page = _open(client, "hana")
    assert re.search(r'<input id="points"[^>]*required', page)
    response = _post(client, "hana", _expected(page), action="accept", points="")
    assert response.status_code == 400
    assert "--points is needed" in response.get_data(as_text=True)
    with Gradebook(db) as book:
        assert book.record("hana", A).adjustment is None


@pytest.mark.parametrize("points", ["-1", str(MAX + 1), "nan", "lots"])
def test_points_outside_zero_to_the_maximum_are_refused(client, db, points):
    response = _post(client, "hugo", _expected(_open(client, "hugo")), action="accept", points=points)
    assert response.status_code == 400
    assert f"between 0 and {MAX:g}" in response.get_data(as_text=True)
    with Gradebook(db) as book:
        assert book.record("hugo", A).adjustment is None


def test_reject_needs_a_reason(client, db):
    response = _post(client, "hana", _expected(_open(client, "hana")), action="reject", reason="   ")
    assert response.status_code == 400
    assert "--reason must say why" in response.get_data(as_text=True)
    with Gradebook(db) as book:
        assert book.record("hana", A).adjustment is None


def test_reject_gives_zero_points_and_keeps_the_reason_in_the_history(client, db):
    response = _post(client, "hugo", _expected(_open(client, "hugo")), action="reject", reason="reads frames")
    assert response.status_code == 303
    with Gradebook(db) as book:
        record = book.record("hugo", A)
        history = book.history("hugo", A)
    assert record.adjustment.kind == "rejected" and record.score == 0
    assert (history[-1].kind, history[-1].by, history[-1].reason) == ("rejected", "ann", "reads frames")
    assert "reads frames" in _open(client, "hugo")


def test_a_decision_on_a_stale_page_is_refused_and_shows_who_acted_first(client, db):
    stale = _expected(_open(client, "hugo"))
    resolve(db, "hugo", A, accept=False, points=None, reason="first grader's reason", by="bea")
    response = _post(client, "hugo", stale, action="accept", points="9")
    page = response.get_data(as_text=True)
    assert response.status_code == 409
    assert "Not saved: bea acted on this record" in page and "first grader&#39;s reason" in page
    assert _expected(page) != stale  # the page now carries what is stored
    with Gradebook(db) as book:
        record = book.record("hugo", A)
    assert record.adjustment.kind == "rejected" and record.adjustment.by == "bea"


def test_a_hostile_student_id_and_code_are_shown_as_text(client):
    listing = client.get(f"/a/{A}/held").get_data(as_text=True)
    page = _open(client, HOSTILE)
    for html in (listing, page):
        assert "<script>alert" not in html and "</pre><script>" not in html
    assert "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_an_unknown_student_or_assignment_is_not_found(client):
    assert client.get(_url("nobody")).status_code == 404
    assert client.get("/a/no_such_assignment/held").status_code == 404
    assert client.get(_url("cara")).status_code == 404  # graded, not held


def test_an_override_of_a_held_record_is_shown_as_what_counts(client, db):
    override(db, "hana", A, 3.0, "regrade request", by="bea")
    page = _open(client, "hana")
    assert "Overridden</strong> by bea" in page and "3 of 10 points (regrade request)" in page
    assert "override: 3 of 10" in client.get(f"/a/{A}/held").get_data(as_text=True)
