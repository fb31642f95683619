"""A question's page when students resubmitted after their answer was graded: a changed answer's
grade does not count (the member says so, its group is not graded, the earlier grade stays
filled in for one save to confirm it); an unchanged answer stays graded."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from review_fixtures import ANSWERS, A, Q, class_gradebook, csrf, login, make_app, set_rubric

from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.gradebook import Gradebook

PAGE = f"/a/{A}/q/{Q}"
CHANGED = "The mean stays put: softmax of x + c is softmax of x, so nothing moves."


@pytest.fixture
def db(tmp_path):
    return class_gradebook(tmp_path / "g.sqlite")


@pytest.fixture
def client(db):
    c = make_app(db).test_client()
    login(c)
    return c


def _section(html: str, student: str) -> str:
    """The group section of the question's page that holds ``student``."""
    for section in html.split('<section class="group"')[1:]:
        if f'<li data-student="{student}"' in section:
            return section.split("</section>")[0]
    raise AssertionError(f"no group holds {student}")


def _member(html: str, student: str) -> str:
    """``student``'s line in the members' list."""
    section = _section(html, student)
    return section[section.index(f'<li data-student="{student}"') :].split("</li>")[0]


def _expected(section: str) -> dict[str, int]:
    return json.loads(re.search(r'name="expected" value="([^"]+)"', section)[1].replace("&#34;", '"'))


def grade_everyone(db, item: int) -> dict[str, str]:
    """ann, bob and cat (one group) graded with ``item`` and a comment, fay alone; when, by student."""
    with Gradebook(db) as book:
        store = book.manual
        store.grade(A, Q, ["ann", "bob", "cat"], items=[item], adjust=0, comment="well put", by="prof",
                    expected=dict.fromkeys(("ann", "bob", "cat"), 0))  # fmt: skip
        store.grade(A, Q, ["fay"], items=[], adjust=0, comment="", by="prof", expected={"fay": 0})
        return {s: g.at for s, g in store.grades(A, Q).items()}


def resubmit(db, answers: dict[str, str]) -> None:
    """Each student of ``answers`` hands in a new notebook whose answer to Q is theirs there."""
    rec = replace(refused_record(A, "x", sha256(b"v2")), status="graded", raw_score=6.0, messages=())
    with Gradebook(db) as book:
        for student, text in answers.items():
            book.save(student, replace(rec, answers=({"id": Q, "answer": text},), absent=frozenset()), "c", 1.0)


def test_a_changed_answer_shows_its_grade_as_stale_and_its_group_as_not_graded(client, db):
    good, _ = set_rubric(db)
    when = grade_everyone(db, good)
    resubmit(db, {"ann": CHANGED, "bob": ANSWERS["bob"]})  # ann changed her answer, bob handed in the same
    html = client.get(PAGE).get_data(as_text=True)
    ann = _section(html, "ann")
    assert 'data-status="none"' in ann and "Not graded" in ann
    assert "1 answer changed since graded: that grade does not count" in ann
    assert f"answer changed since graded by prof on {when['ann'][:10]} (2 pts, not counted)" in _member(html, "ann")
    assert f'value="{good}" checked' in ann and ">well put</textarea>" in ann  # the earlier grade, filled in
    bob = _section(html, "bob")
    assert 'data-status="uniform"' in bob and "Graded: 2 points" in bob and "changed since" not in bob
    assert "3 graded, 1 changed since graded (not counted)" in html


def test_a_group_whose_answers_all_changed_is_confirmed_in_one_save(client, db):
    good, _ = set_rubric(db)
    grade_everyone(db, good)
    resubmit(db, dict.fromkeys(("ann", "bob", "cat"), CHANGED))
    html = client.get(PAGE).get_data(as_text=True)
    section = _section(html, "ann")
    assert 'data-status="none"' in section and "3 answers changed since graded: those grades do not count" in section
    assert "the earlier grade is filled in below, save to confirm it" in section
    form = {"csrf": csrf(client.application), "group": "g", "expected": json.dumps(_expected(section)),
            "item": [str(good)], "adjust": "0", "comment": "well put"}  # fmt: skip
    assert client.post(f"{PAGE}/grade", data=form).status_code == 303
    html = client.get(PAGE).get_data(as_text=True)
    section = _section(html, "ann")
    assert 'data-status="uniform"' in section and "changed since" not in html
    with Gradebook(db) as book:
        rec = book.record("ann", A)
        history = [d.by for d in book.manual.history(A, f"{Q}/ann")]
    assert rec is not None and rec.manual is not None and rec.manual.points == 2.0 and rec.manual.pending == 0
    assert history == ["prof", "prof"]  # the earlier grade kept, then the confirmation


def test_the_index_counts_a_changed_answer_as_not_graded(client, db):
    good, _ = set_rubric(db)
    grade_everyone(db, good)
    resubmit(db, {"cat": CHANGED})
    row = client.get("/").get_data(as_text=True)
    row = row[row.index(f"{Q}</a>") :].split("</tr>")[0]
    assert re.findall(r"<td>([^<]*)</td>", row)[2] == "3 of 5"


def test_other_pictures_with_the_same_text_make_the_member_stale(tmp_path):
    png = "iVBORw0KGgo" + "A" * 20
    other = "iVBORw0KGgo" + "B" * 20
    text = "See ![plot](attachment:plot.png)"
    db = class_gradebook(tmp_path / "g.sqlite", {"ann": text}, {"plot.png": {"image/png": png}})
    good, _ = set_rubric(db)
    with Gradebook(db) as book:
        book.manual.grade(A, Q, ["ann"], items=[good], adjust=0, comment="", by="prof", expected={"ann": 0})
    client = make_app(db).test_client()
    login(client)
    assert "changed since" not in client.get(PAGE).get_data(as_text=True)
    rec = replace(refused_record(A, "x", sha256(b"v2")), status="graded", raw_score=6.0, messages=())
    entry = {"id": Q, "answer": text, "attachments": {"plot.png": {"image/png": other}}}
    with Gradebook(db) as book:
        book.save("ann", replace(rec, answers=(entry,), absent=frozenset()), "c", 1.0)
    assert "answer changed since graded by prof" in _member(client.get(PAGE).get_data(as_text=True), "ann")


def test_a_grade_saved_on_a_page_read_before_a_resubmission_is_refused_and_keeps_the_input(client, db):
    good, _ = set_rubric(db)
    section = _section(client.get(PAGE).get_data(as_text=True), "fay")
    seen = json.loads(re.search(r'name="seen" value="([^"]+)"', section)[1].replace("&#34;", '"'))
    resubmit(db, {"fay": CHANGED})  # fay hands in a new answer while the grader reads the old one
    form = {"csrf": csrf(client.application), "group": "g", "expected": json.dumps(_expected(section)),
            "seen": json.dumps(seen), "item": [str(good)], "comment": "my words"}  # fmt: skip
    response = client.post(f"{PAGE}/grade", data=form)
    html = response.get_data(as_text=True)
    assert response.status_code == 409 and f"the answer of fay to {Q} of {A} changed since you read it" in html
    assert ">my words</textarea>" in html and "softmax of x + c is softmax of x" in html  # the new answer shown
    with Gradebook(db) as book:
        assert book.manual.grades(A, Q) == {}
    seen = json.loads(re.search(r'name="seen" value="([^"]+)"', _section(html, "fay"))[1].replace("&#34;", '"'))
    assert client.post(f"{PAGE}/grade", data=form | {"seen": json.dumps(seen)}).status_code == 303
    headers = {"Accept": "application/json", "X-CSRF-Token": csrf(client.application)}
    resubmit(db, {"fay": "A third answer."})
    with Gradebook(db) as book:
        version = book.manual.grades(A, Q)["fay"].version
    late = form | {"seen": json.dumps(seen), "expected": json.dumps({"fay": version})}
    data = client.post(f"{PAGE}/grade", data=late, headers=headers).get_json()
    assert not data["ok"] and data["message"].endswith(
        "Reload the page to read the answer as it is now, then save again."
    )
