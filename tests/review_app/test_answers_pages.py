"""The answers pages through Flask's test client: the index, a question's rubric, groups and grades."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import pytest
from review_fixtures import HOSTILE, TOKEN, A, Q, class_gradebook, csrf, login, make_app, set_rubric

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.review_app import answers as answers_module
from course_lib.autograder.review_app import create_app, question_view

PAGE = f"/a/{A}/q/{Q}"


@pytest.fixture
def db(tmp_path):
    return class_gradebook(tmp_path / "g.sqlite")


@pytest.fixture
def app(db):
    return make_app(db)


@pytest.fixture
def client(app):
    c = app.test_client()
    login(c)
    return c


def _groups(html: str) -> list[list[str]]:
    """The members of each group on a question's page, in page order."""
    sections = html.split('<section class="group"')[1:]
    return [re.findall(r'<li data-student="([^"]+)"', s) for s in sections]


def _expected(html: str, student: str) -> str:
    """The hidden ``expected`` value of the group form that holds ``student``."""
    for section in html.split('<section class="group"')[1:]:
        if f'<li data-student="{student}"' in section:
            return json.loads(re.search(r'name="expected" value="([^"]+)"', section)[1].replace("&#34;", '"'))
    raise AssertionError(student)


def _index_row(html: str) -> list[str]:
    """The cells of question Q's line on the index."""
    return re.findall(r"<td>([^<]*)</td>", html[html.index(f"{Q}</a>") :].split("</tr>")[0])


def test_the_index_lists_each_question_with_answered_groups_graded_and_links(client, db):
    set_rubric(db)
    html = client.get("/").get_data(as_text=True)
    assert _index_row(html) == ["5", "3", "0 of 5", "2"]
    assert f'href="/a/{A}/held"' in html and f'href="/a/{A}/pairs"' in html
    assert "ch02-nb-saturation" in html  # asked by the release, answered by nobody


def test_the_question_page_shows_the_question_rendered_and_the_answers_escaped(client):
    html = client.get(PAGE).get_data(as_text=True)
    assert "<strong>Think about it.</strong>" in html and "<math" in html
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'onerror="alert' not in html


def test_identical_answers_fall_into_one_group_and_the_unanswered_are_listed_apart(client):
    html = client.get(PAGE).get_data(as_text=True)
    assert _groups(html) == [["ann", "bob", "cat"], ["dan"], ["fay"]]
    assert "cat's own text" in html and "ann's own text" not in html  # cat wrote it differently
    assert "Unanswered: 1" in html and "eve" in html.split('id="unanswered"')[1]


def test_the_rubric_is_added_edited_and_removed_and_a_stale_edit_is_refused(client, app, db):
    token = csrf(app)
    new = {
        "csrf": token,
        "expected": "0",
        "max_points": "3",
        "item_id": [""],
        "item_text": ["names the shift"],
        "item_points": ["2"],
    }
    assert client.post(f"{PAGE}/rubric", data=new).status_code == 303
    with Gradebook(db) as book:
        setup = book.manual.setup(A, Q)
    assert setup.max_points == 3 and [(i.text, i.points) for i in setup.rubric] == [("names the shift", 2.0)]
    first = setup.rubric[0].id
    edit = {
        "csrf": token, "expected": str(setup.version), "max_points": "3", "item_id": [str(first), ""],
        "item_text": ["names the constant shift", "off by a sign"], "item_points": ["2.5", "-1"],
    }  # fmt: skip
    assert client.post(f"{PAGE}/rubric", data=edit).status_code == 303
    with Gradebook(db) as book:
        setup = book.manual.setup(A, Q)
    assert [(i.id == first, i.text, i.points) for i in setup.rubric] == [
        (True, "names the constant shift", 2.5),
        (False, "off by a sign", -1.0),
    ]
    remove = {**edit, "expected": str(setup.version), "item_id": [str(i.id) for i in setup.rubric], "remove": ["0"]}
    assert client.post(f"{PAGE}/rubric", data=remove).status_code == 303
    stale = client.post(f"{PAGE}/rubric", data={**remove, "item_text": ["mine"] * 2})
    html = stale.get_data(as_text=True)
    assert stale.status_code == 409 and "was changed by prof" in html and 'value="mine"' in html
    with Gradebook(db) as book:
        assert [i.text for i in book.manual.setup(A, Q).rubric] == ["off by a sign"]


def test_a_bad_point_value_is_refused_naming_the_field_and_keeping_the_input(client, app):
    form = {
        "csrf": csrf(app),
        "expected": "0",
        "max_points": "lots",
        "item_id": [""],
        "item_text": ["x"],
        "item_points": ["1"],
    }
    response = client.post(f"{PAGE}/rubric", data=form)
    assert response.status_code == 400
    assert "max_points: expected a number, got &#39;lots&#39;" in response.get_data(as_text=True)


def test_a_group_is_graded_in_one_save_for_every_member(client, app, db):
    good, _ = set_rubric(db)
    html = client.get(PAGE).get_data(as_text=True)
    form = {"csrf": csrf(app), "group": "g", "expected": json.dumps(_expected(html, "ann")), "item": [str(good)], "adjust": "-0.5", "comment": "Right, say *why*."}  # fmt: skip
    response = client.post(f"{PAGE}/grade", data=form)
    assert response.status_code == 303 and response.headers["Location"].endswith("?saved=g#g-g")
    with Gradebook(db) as book:
        grades = book.manual.grades(A, Q)
    assert sorted(grades) == ["ann", "bob", "cat"]
    assert {(g.points, g.comment, g.by) for g in grades.values()} == {(1.5, "Right, say *why*.", "prof")}
    assert "Graded: 1.5 points" in client.get(PAGE).get_data(as_text=True)


def test_a_grade_saved_by_script_answers_json_with_the_new_versions(client, app, db):
    good, _ = set_rubric(db)
    expected = _expected(client.get(PAGE).get_data(as_text=True), "fay")
    headers = {"Accept": "application/json", "X-CSRF-Token": csrf(app)}
    response = client.post(
        f"{PAGE}/grade", data={"expected": json.dumps(expected), "item": [str(good)]}, headers=headers
    )
    data = response.get_json()
    with Gradebook(db) as book:
        stored = book.manual.grades(A, Q)["fay"]
    assert response.status_code == 200 and data["ok"] and data["expected"] == {"fay": stored.version}
    assert "Graded: 2 points" in data["status_html"]


def test_a_grade_saved_by_script_answers_each_members_new_points(client, app, db):
    good, bad = set_rubric(db)
    expected = _expected(client.get(PAGE).get_data(as_text=True), "ann")
    headers = {"Accept": "application/json", "X-CSRF-Token": csrf(app)}
    form = {"expected": json.dumps(expected), "item": [str(good), str(bad)], "adjust": "0.5"}
    data = client.post(f"{PAGE}/grade", data=form, headers=headers).get_json()
    assert data["points"] == {"ann": "1.5 pts", "bob": "1.5 pts", "cat": "1.5 pts"}
    html = client.get(PAGE).get_data(as_text=True)
    assert re.search(
        r'<li data-student="cat">\s*<span>cat</span>\s*<span class="muted" data-role="points">1.5 pts</span>', html
    )


def test_a_second_grader_sees_the_first_graders_change_and_keeps_their_input(app, db):
    good, bad = set_rubric(db)
    first, second = app.test_client(), app.test_client()
    login(first)
    login(second)
    seen = _expected(second.get(PAGE).get_data(as_text=True), "ann")  # both read the page
    token = csrf(app)
    first.post("/grader", data={"name": "ta-one", "csrf": token})
    saved = first.post(f"{PAGE}/grade", data={"csrf": token, "group": "x", "expected": json.dumps(seen), "item": [str(good)], "comment": "good"})  # fmt: skip
    assert saved.status_code == 303
    late = {"csrf": token, "group": "g", "expected": json.dumps(seen), "item": [str(bad)], "comment": "my own words"}
    response = second.post(f"{PAGE}/grade", data=late)
    html = response.get_data(as_text=True)
    assert response.status_code == 409
    assert (
        "changed by ta-one at" in html and "They gave 2 points (explains the constant), with the comment: good" in html
    )
    assert ">my own words</textarea>" in html  # the second grader's input is kept
    with Gradebook(db) as book:
        assert {g.comment for g in book.manual.grades(A, Q).values()} == {"good"}
    as_json = second.post(f"{PAGE}/grade", data=late, headers={"Accept": "application/json"}).get_json()
    assert not as_json["ok"] and "ta-one" in as_json["message"] and as_json["expected"] != seen


def test_a_split_member_becomes_a_group_alone_graded_apart_and_can_join_again(client, app, db):
    good, bad = set_rubric(db)
    token = csrf(app)
    assert client.post(f"{PAGE}/split", data={"csrf": token, "student": "cat", "split": "1"}).status_code == 303
    html = client.get(PAGE).get_data(as_text=True)
    assert _groups(html) == [["ann", "bob"], ["cat"], ["dan"], ["fay"]]
    for student, item in (("ann", good), ("cat", bad)):
        expected = json.dumps(_expected(html, student))
        client.post(f"{PAGE}/grade", data={"csrf": token, "group": "g", "expected": expected, "item": [str(item)]})
    with Gradebook(db) as book:
        points = {s: g.points for s, g in book.manual.grades(A, Q).items()}
    assert points == {"ann": 2.0, "bob": 2.0, "cat": 0.0}
    client.post(f"{PAGE}/split", data={"csrf": token, "student": "cat", "split": "0"})
    html = client.get(PAGE).get_data(as_text=True)
    assert _groups(html)[0] == ["ann", "bob", "cat"] and "Mixed: 3 of 3 graded" in html


def test_the_history_shows_who_decided_what_and_when(client, app, db):
    set_rubric(db)
    client.post(f"{PAGE}/split", data={"csrf": csrf(app), "student": "cat", "split": "1"})
    html = client.get(f"{PAGE}/history?student=cat").get_data(as_text=True)
    rows = html.split("<tbody>")[1].split("</tr>")[:-1]
    assert len(rows) == 2 and "question" in rows[0] and "split" in rows[1] and "prof" in rows[1]


def test_a_question_nobody_asked_is_not_found(client):
    assert client.get(f"/a/{A}/q/no-such-question").status_code == 404


def test_every_page_is_refused_without_the_token(app):
    anonymous = app.test_client()
    for path in ("/", PAGE, f"{PAGE}/history", f"/?token={TOKEN}x"):
        assert anonymous.get(path).status_code == 403, path


def test_student_ids_and_answers_with_markup_are_shown_as_text(tmp_path):
    db = class_gradebook(tmp_path / "g.sqlite", {HOSTILE: "fine", "amy": HOSTILE})
    client = make_app(db).test_client()
    login(client)
    html = client.get(PAGE).get_data(as_text=True) + client.get("/").get_data(as_text=True)
    assert "<script>" not in html and "<img src=x" not in html


def test_an_image_pasted_into_an_answer_is_shown_from_its_attachment(tmp_path):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
    answers = {"ann": "See ![plot](attachment:plot.png) and ![remote](https://example.com/x.png)"}
    client = make_app(class_gradebook(tmp_path / "g.sqlite", answers, {"plot.png": {"image/png": png}})).test_client()
    login(client)
    html = client.get(PAGE).get_data(as_text=True)
    assert f'src="data:image/png;base64,{png}"' in html
    assert 'src="https://example.com' not in html  # a remote image is shown as its alt text only


def test_answers_with_the_same_text_but_other_pasted_images_are_graded_apart(tmp_path):
    def png(fill: bytes) -> dict:
        return {"image.png": {"image/png": base64.b64encode(b"\x89PNG\r\n\x1a\n" + fill * 32).decode()}}

    pasted = "![image.png](attachment:image.png)"
    db = class_gradebook(tmp_path / "g.sqlite", {"ann": pasted, "bob": pasted, "cat": pasted})
    rec = replace(refused_record(A, "x"), status="graded", raw_score=6.0, messages=())
    with Gradebook(db) as book:  # ann and cat paste one plot, bob another
        for student, fill in (("ann", b"\1"), ("bob", b"\2"), ("cat", b"\1")):
            entry = {"id": Q, "answer": pasted, "attachments": png(fill)}
            book.save(student, replace(rec, answers=(entry,), absent=frozenset()), "c", 1.0)
    client = make_app(db).test_client()
    login(client)
    assert sorted(_groups(client.get(PAGE).get_data(as_text=True))) == [["ann", "cat"], ["bob"]]


def test_without_the_exercise_notebooks_the_pages_still_open_and_say_why_there_is_no_text(tmp_path):
    db = class_gradebook(tmp_path / "g.sqlite")
    app = create_app(db, exercises=tmp_path / "none", solutions=tmp_path / "none", token=TOKEN, grader="prof")
    client = app.test_client()
    login(client)
    assert f"{Q}</a>" in client.get("/").get_data(as_text=True)
    html = client.get(PAGE).get_data(as_text=True)
    assert "No question text: exercises: no exercise notebook" in html and _groups(html)[0] == ["ann", "bob", "cat"]


def test_past_its_time_budget_the_index_counts_only_the_groups_already_made(client, monkeypatch):
    monkeypatch.setattr(answers_module, "INDEX_GROUPING_SECONDS", -1.0)
    question_view._CACHE.clear()
    row = _index_row(client.get("/").get_data(as_text=True))
    assert row == ["5", "not counted yet", "0 of 5", "not graded by hand"]
    client.get(PAGE)  # the question's page groups its answers
    assert _index_row(client.get("/").get_data(as_text=True))[1] == "3"


def _paged_class(tmp_path, n: int = 120):
    """``n`` students, each with a short answer of their own (short answers group only when
    identical): ``n`` groups of one; the question has points and a rubric."""
    answers = {f"s{i:03d}": f"Answer number {i}." for i in range(n)}
    db = class_gradebook(tmp_path / "g.sqlite", answers)
    items = set_rubric(db)
    client = make_app(db).test_client()
    login(client)
    return db, client, items


def test_a_question_with_many_groups_shows_them_a_page_at_a_time(tmp_path):
    _, client, _ = _paged_class(tmp_path)
    first = client.get(PAGE).get_data(as_text=True)
    assert len(_groups(first)) == answers_module.PAGE_GROUPS == 50
    assert "Groups 1–50 of 120" in first and f'href="{PAGE}?page=2" rel="next"' in first
    last = client.get(f"{PAGE}?page=3").get_data(as_text=True)
    assert len(_groups(last)) == 20 and "Groups 101–120 of 120" in last and 'rel="next"' not in last
    seen = [
        s for page in (1, 2, 3) for g in _groups(client.get(f"{PAGE}?page={page}").get_data(as_text=True)) for s in g
    ]
    assert sorted(seen) == [f"s{i:03d}" for i in range(120)]  # every answer on exactly one page
    assert client.get(f"{PAGE}?page=4").status_code == 404
    refused = client.get(f"{PAGE}?page=0")
    assert refused.status_code == 400 and "page: expected a whole number from 1" in refused.get_data(as_text=True)


def test_a_grade_saved_without_the_script_returns_to_its_page(tmp_path):
    _, client, items = _paged_class(tmp_path)
    page = client.get(f"{PAGE}?page=2").get_data(as_text=True)
    student = _groups(page)[0][0]
    key = re.search(r'<section class="group" id="g-([^"]+)"', page)[1]
    form = {"csrf": csrf(client.application), "group": key, "page": "2", "item": [str(items[0])]}
    saved = client.post(f"{PAGE}/grade", data=form | {"expected": json.dumps(_expected(page, student))})
    assert saved.status_code == 303 and "page=2" in saved.headers["Location"]
    stale = client.post(f"{PAGE}/grade", data=form | {"page": "1", "expected": json.dumps({student: 0})})
    html = stale.get_data(as_text=True)  # refused: the page that holds the group, with the message
    assert stale.status_code == 409 and "Groups 51–100" in html and "was changed by prof" in html
