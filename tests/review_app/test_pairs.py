"""The look-alike pages of the review app (``/a/<assignment>/pairs``), through Flask's test client:
the pairs, the two codes side by side with the shared regions, the solution's code never shown,
and a decision (dismissed / confirmed with a note) saved with the version the page showed."""

from __future__ import annotations

import re
import threading
import time

import pytest
from conftest import ROOT
from review_class import HOSTILE, LOOP, SOLUTION_ONLY, A, make_class
from review_fixtures import login, make_app

from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.lookalike import REFERENCE
from course_lib.autograder.review_app import pair_list
from course_lib.autograder.review_app.security import csrf_token

#: Pair numbers in the class of review_class.py (the most similar first).
STUDENTS, WITH_REFERENCE = 1, 2


@pytest.fixture
def db(tmp_path):
    return make_class(tmp_path / "g.sqlite")


def _client(app, grader_cookie: str | None = None):
    c = app.test_client()
    login(c)
    if grader_cookie:
        c.set_cookie("grader", grader_cookie)
    with app.app_context():
        c.csrf = csrf_token()  # type: ignore[attr-defined]
    return c


@pytest.fixture
def app(db):
    return make_app(db, grader="ann")


@pytest.fixture
def client(app):
    return _client(app)


def _page(client, number: int) -> str:
    response = client.get(f"/a/{A}/pairs/{number}")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def _decide(client, number: int, page: str, **form: str):
    hidden = dict(re.findall(r'<input type="hidden" name="(expected|a|b)" value="([^"]*)"', page))
    hidden = {
        k: v.replace("&#34;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
        for k, v in hidden.items()
    }
    return client.post(f"/a/{A}/pairs/{number}", data={"csrf": client.csrf, **hidden, **form})


def test_the_list_shows_each_pair_with_its_similarity_and_no_decision_yet(client):
    page = client.get(f"/a/{A}/pairs").get_data(as_text=True)
    rows = re.findall(r"<tr>\s*<th scope=\"row\">.*?</tr>", page, re.S)
    assert len(rows) == 3
    assert "<td>cara</td>" in rows[0] and "<td>dave</td>" in rows[0] and "100.0%" in rows[0]
    assert "<td>erin</td>" in rows[1] and "the reference solution" in rows[1]
    assert all("undecided" in r for r in rows)


def test_a_pair_shows_both_codes_side_by_side_with_the_shared_lines_highlighted(client, db):
    page = _page(client, STUDENTS)
    assert 'aria-label="softmax of cara"' in page and 'aria-label="softmax of dave"' in page
    marked = [int(n) for n in re.findall(r"<span class=hl><i>(\d+)</i>", page)]
    (region,) = pair_list.compute_pairs(db, A, ROOT / "exercises", ROOT / "solutions").pairs[0].regions
    assert marked == [
        *range(region.a_lines[0], region.a_lines[1] + 1),
        *range(region.b_lines[0], region.b_lines[1] + 1),
    ]
    assert len(marked) >= 2 * 8  # the loop's eight lines, on both sides
    assert "    for row in x.unbind(dim):" in page and "    for r in x.unbind(dim):" in page


def test_a_pair_with_the_reference_shows_the_students_side_only_and_says_so(client):
    page = _page(client, WITH_REFERENCE)
    assert page.count('<div class="code"') == 1 and 'aria-label="softmax of erin"' in page
    assert "Not shown: the solution's code never leaves the instructor's notebooks" in page


def test_the_solutions_code_is_in_no_response(client):
    pages = [f"/a/{A}/pairs", f"/a/{A}/held"] + [f"/a/{A}/pairs/{n}" for n in (1, 2, 3)]
    for url in pages:
        text = client.get(url).get_data(as_text=True)
        assert not [s for s in SOLUTION_ONLY if s in text], url
    response = _decide(client, WITH_REFERENCE, _page(client, WITH_REFERENCE), verdict="dismissed", note="")
    text = client.get(response.headers["Location"]).get_data(as_text=True)
    assert not [s for s in SOLUTION_ONLY if s in text]


def test_confirming_needs_a_note(client, db):
    response = _decide(client, STUDENTS, _page(client, STUDENTS), verdict="confirmed", note="  ")
    assert response.status_code == 400
    assert "note: confirming a pair needs a note" in response.get_data(as_text=True)
    with Gradebook(db) as book:
        assert book.manual.pairs(A) == {}


def test_a_confirmed_pair_is_saved_with_its_note_and_grader_and_listed(client, db):
    response = _decide(client, STUDENTS, _page(client, STUDENTS), verdict="confirmed", note="same loop, same names")
    assert response.status_code == 303
    with Gradebook(db) as book:
        d = book.manual.pairs(A)[("cara", "dave")]
    assert (d.verdict, d.note, d.by) == ("confirmed", "same loop, same names", "ann")
    page = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "Saved: the pair is confirmed." in page and "Confirmed</strong> by ann" in page
    listing = client.get(f"/a/{A}/pairs").get_data(as_text=True)
    assert "confirmed</span> by ann: same loop, same names" in listing


def test_a_pair_with_the_reference_is_decided_under_the_reference(client, db):
    _decide(client, WITH_REFERENCE, _page(client, WITH_REFERENCE), verdict="dismissed", note="")
    with Gradebook(db) as book:
        assert set(book.manual.pairs(A)) == {("erin", REFERENCE)}


def test_a_decision_on_a_stale_page_is_refused_and_shows_the_first(app, db):
    ann, bea = _client(app, "ann"), _client(app, "bea")
    page_ann, page_bea = _page(ann, STUDENTS), _page(bea, STUDENTS)
    assert _decide(ann, STUDENTS, page_ann, verdict="dismissed", note="one natural form").status_code == 303
    response = _decide(bea, STUDENTS, page_bea, verdict="confirmed", note="copied")
    text = response.get_data(as_text=True)
    assert response.status_code == 409
    assert "Not saved: ann decided this pair" in text and "Dismissed</strong> by ann" in text
    with Gradebook(db) as book:
        d = book.manual.pairs(A)[("cara", "dave")]
        history = book.manual.history(A)
    assert (d.verdict, d.by) == ("dismissed", "ann") and len(history) == 1


def test_the_pairs_are_computed_once_per_assignment(app, monkeypatch):
    calls = []
    real = pair_list.compute_pairs
    monkeypatch.setattr(pair_list, "compute_pairs", lambda *a: calls.append(a) or real(*a))
    client = _client(app)
    for url in (f"/a/{A}/pairs", f"/a/{A}/pairs/1", f"/a/{A}/pairs/2", f"/a/{A}/pairs"):
        assert client.get(url).status_code == 200
    assert len(calls) == 1


def _rows(client) -> list[str]:
    """The rows of the assignment's list of pairs."""
    page = client.get(f"/a/{A}/pairs").get_data(as_text=True)
    return re.findall(r"<tr>\s*<th scope=\"row\">.*?</tr>", page, re.S)


def test_a_regrade_while_the_app_runs_gives_fresh_pairs_and_keeps_the_decisions(app, db):
    from course_lib.autograder.record import Record

    client = _client(app)
    response = _decide(client, STUDENTS, _page(client, STUDENTS), verdict="confirmed", note="same loop")
    assert response.status_code == 303
    assert not [r for r in _rows(client) if "<td>fred</td>" in r and "<td>cara</td>" in r]
    copied = LOOP.replace("shifted", "moved")  # fred's notebook graded again: now cara's loop
    with Gradebook(db) as book:
        book.save(
            "fred",
            Record(A, "2" * 64, "graded", 7.0, 10.0, sources={"softmax": copied}, absent=frozenset()),
            "test",
            0.1,
        )
    rows = _rows(client)
    assert any("<td>fred</td>" in r and "<td>cara</td>" in r and "100.0%" in r for r in rows)
    (cara_dave,) = [r for r in rows if "<td>cara</td>" in r and "<td>dave</td>" in r]
    assert "confirmed</span> by ann: same loop" in cara_dave


def test_a_review_decision_does_not_compute_the_pairs_again(app, db, monkeypatch):
    from course_lib.autograder.adjust import resolve

    calls = []
    real = pair_list.compute_pairs
    monkeypatch.setattr(pair_list, "compute_pairs", lambda *a: calls.append(a) or real(*a))
    client = _client(app)
    assert client.get(f"/a/{A}/pairs").status_code == 200
    resolve(db, "hugo", A, accept=True, points=6.0, reason="fine", by="ann")
    assert client.get(f"/a/{A}/pairs").status_code == 200
    assert len(calls) == 1


def test_hostile_ids_and_code_in_a_pair_are_shown_as_text(tmp_path):
    from course_lib.autograder.record import Record

    db = make_class(tmp_path / "h.sqlite")
    code = LOOP.replace("total = sum(exps)", "total = sum(exps)  # </pre><script>alert(3)</script>")
    with Gradebook(db) as book:
        rec = Record(A, "1" * 64, "graded", 5.0, 10.0, sources={"softmax": code}, absent=frozenset())
        book.save(HOSTILE, rec, checker="test", seconds=0.1)
    client = _client(make_app(db))
    listing = client.get(f"/a/{A}/pairs").get_data(as_text=True)
    number = next(n for n in range(1, 10) if HOSTILE in _raw_pair(client, n))
    page = _page(client, number)
    for html in (listing, page):
        assert "<script>alert" not in html
    assert "&lt;/pre&gt;&lt;script&gt;alert(3)&lt;/script&gt;" in page


def _raw_pair(client, number: int) -> str:
    """The pair's students as stored (from the hidden fields), unescaped."""
    page = _page(client, number)
    return " ".join(
        v.replace("&#34;", '"').replace("&lt;", "<").replace("&gt;", ">")
        for v in re.findall(r'name="[ab]" value="([^"]*)"', page)
    )


def test_an_unknown_pair_or_assignment_is_not_found(client):
    assert client.get(f"/a/{A}/pairs/99").status_code == 404
    assert client.get(f"/a/{A}/pairs/0").status_code == 404
    assert client.get("/a/no_such_assignment/pairs").status_code == 404


def test_without_the_course_notebooks_the_pairs_page_says_which_is_missing(db, tmp_path):
    app = make_app(db)
    app.config["EXERCISES"] = str(tmp_path / "nowhere")
    response = _client(app).get(f"/a/{A}/pairs")
    assert response.status_code == 503
    assert "--exercises: no notebook" in response.get_data(as_text=True)


def test_requests_at_once_wait_for_one_computation_of_the_pairs(db, monkeypatch):
    calls, started = [], threading.Event()
    real = pair_list.compute_pairs

    def slow(*args):
        calls.append(args)
        started.set()
        time.sleep(0.3)  # the others arrive while it runs
        return real(*args)

    monkeypatch.setattr(pair_list, "compute_pairs", slow)
    cache = pair_list.PairCache(db, ROOT / "exercises", ROOT / "solutions")
    results: list[pair_list.AssignmentPairs] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(A))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started.is_set() and len(calls) == 1
    assert len(results) == 4 and all(r is results[0] for r in results)
