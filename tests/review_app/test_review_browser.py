"""The review app in a real browser (headless Debian chromium via Playwright), served for each test.

A class of six students, one question: the page opens with the token and again without it (the
cookie), and is refused without either; the rubric is edited; a group is graded with the
keyboard alone (saved by the page's script, no reload); a member is split off and graded apart;
in the light and the dark colour scheme the page has no console error and axe-core finds no
violation of WCAG 2 A/AA (any impact). Screenshots go to ``artifacts/screenshots/review-*.png``.
"""

from __future__ import annotations

import pytest
from conftest import ROOT
from pagecheck import axe_violations
from review_fixtures import A, Q, class_gradebook, make_app, set_rubric

from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.review_app import serve

pytestmark = pytest.mark.browser

SHOTS = ROOT / "artifacts" / "screenshots"
PAGE = f"/a/{A}/q/{Q}"
ALL_IMPACTS = ("minor", "moderate", "serious", "critical")


@pytest.fixture
def served(tmp_path):
    """The review server of a fresh class gradebook (question Q has a rubric), stopped after the test."""
    db = class_gradebook(tmp_path / "g.sqlite")
    items = set_rubric(db)
    server = serve(make_app(db, grader="prof"))
    yield server, db, items
    server.shutdown()


@pytest.fixture
def page(browser, served):
    """A page logged in with the token, on question Q's page; console errors collected in ``page.problems``."""
    server, _, _ = served
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    tab = context.new_page()
    tab.problems = []
    tab.on("console", lambda msg: tab.problems.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: tab.problems.append(str(exc)))
    tab.goto(server.url)
    tab.goto(f"http://127.0.0.1:{server.port}{PAGE}")
    yield tab
    context.close()


def _grades(db):
    with Gradebook(db) as book:
        return book.manual.grades(A, Q)


def test_the_token_opens_the_app_the_cookie_keeps_it_open_and_nothing_opens_without(browser, served):
    server, _, _ = served
    context = browser.new_context()
    tab = context.new_page()
    response = tab.goto(server.url)
    assert response.ok and "token" not in tab.url and tab.get_by_role("heading", name="Answers to grade").is_visible()
    assert tab.reload().ok and tab.get_by_role("heading", name="Answers to grade").is_visible()
    context.close()
    stranger = browser.new_context()
    refused = stranger.new_page().goto(f"http://127.0.0.1:{server.port}{PAGE}")
    assert refused.status == 403
    stranger.close()


def test_the_rubric_is_edited_in_the_page(page, served):
    _, db, _ = served
    page.get_by_label("Points of this question").fill("4")
    page.get_by_label("Item 2 text").fill("the sign is wrong")
    page.get_by_label("New item text").fill("mentions overflow")
    page.get_by_label("New item points").fill("2")
    page.get_by_role("button", name="Save rubric").click()
    page.get_by_text("Rubric saved.").wait_for()
    with Gradebook(db) as book:
        setup = book.manual.setup(A, Q)
    assert setup.max_points == 4
    assert [(i.text, i.points) for i in setup.rubric] == [
        ("explains the constant", 2.0),
        ("the sign is wrong", -1.0),
        ("mentions overflow", 2.0),
    ]
    assert not page.problems, page.problems


def test_a_group_is_graded_with_the_keyboard_without_a_reload(page, served):
    _, db, _ = served
    page.evaluate("() => { window.notReloaded = true; }")
    page.keyboard.press("j")  # the first group: ann, bob, cat
    first = page.locator("section.group").first
    assert first.evaluate("g => g === document.activeElement")
    page.keyboard.press("1")  # "explains the constant"
    assert first.get_by_role("checkbox").first.is_checked()
    page.keyboard.press("Enter")
    first.get_by_text("Graded: 2 points").wait_for()
    assert page.evaluate("() => window.notReloaded === true")
    assert {s: g.points for s, g in _grades(db).items()} == {"ann": 2.0, "bob": 2.0, "cat": 2.0}
    page.keyboard.press("u")  # the next group not graded: dan's
    assert page.locator("section.group").nth(1).evaluate("g => g === document.activeElement")
    page.keyboard.press("?")
    assert page.get_by_role("region", name="keyboard keys").is_visible()
    assert not page.problems, page.problems


def test_after_a_save_with_the_keyboard_the_members_show_their_new_points(page, served):
    first = page.locator("section.group").first
    first.get_by_text("Members (3)").click()
    shown = {s: first.locator(f'li[data-student="{s}"] [data-role=points]') for s in ("ann", "bob", "cat")}
    assert [p.inner_text() for p in shown.values()] == ["", "", ""]  # nobody graded yet
    page.keyboard.press("j")
    page.keyboard.press("1")  # "explains the constant": 2 points
    page.keyboard.press("2")  # "wrong sign": -1
    page.keyboard.press("Enter")
    first.get_by_text("Graded: 1 points").wait_for()
    assert all(p.is_visible() for p in shown.values())
    assert [p.inner_text() for p in shown.values()] == ["1 pts", "1 pts", "1 pts"]
    assert not page.problems, page.problems


def test_a_member_split_off_is_graded_apart(page, served):
    _, db, _ = served
    first = page.locator("section.group").first
    first.get_by_text("Members (3)").click()
    first.get_by_role("button", name="Split cat off this group").click()
    page.wait_for_load_state()
    cat = page.locator("section.group", has_text="Group 2: 1 answer").first
    assert cat.locator('li[data-student="cat"]').count() == 1
    cat.get_by_role("checkbox").nth(1).check()  # "wrong sign"
    cat.get_by_label("Comment to the student").fill("Check the sign.")
    cat.get_by_role("button", name="Save grade").click()
    cat.get_by_text("Saved.").wait_for()
    page.locator("section.group").first.get_by_role("checkbox").first.check()
    page.locator("section.group").first.get_by_role("button", name="Save grade").click()
    page.locator("section.group").first.get_by_text("Saved.").wait_for()
    grades = _grades(db)
    assert {s: (g.points, g.comment) for s, g in grades.items()} == {
        "ann": (2.0, ""),
        "bob": (2.0, ""),
        "cat": (0.0, "Check the sign."),
    }
    assert not page.problems, page.problems


def test_two_graders_at_once_the_second_sees_the_first_change_keeps_their_input_and_can_save_again(browser, served):
    server, db, _ = served
    graders = []
    for name in ("ta-one", "ta-two"):
        context = browser.new_context()
        tab = context.new_page()
        tab.goto(server.url)
        tab.get_by_label("Grading as").fill(name)
        tab.get_by_role("button", name="Set name").click()
        tab.goto(f"http://127.0.0.1:{server.port}{PAGE}")
        graders.append((context, tab))
    (first_context, first), (second_context, second) = graders
    assert second.get_by_label("Grading as").input_value() == "ta-two"
    one = first.locator("section.group").first
    one.get_by_role("checkbox").first.check()
    one.get_by_role("button", name="Save grade").click()
    one.get_by_text("Saved.").wait_for()
    two = second.locator("section.group").first  # read before ta-one saved
    two.get_by_role("checkbox").nth(1).check()
    two.get_by_label("Comment to the students").fill("my own words")
    two.get_by_role("button", name="Save grade").click()
    alert = two.get_by_role("alert")
    alert.wait_for()
    assert "changed by ta-one" in alert.inner_text() and "They gave 2 points" in alert.inner_text()
    assert two.get_by_label("Comment to the students").input_value() == "my own words"
    assert {g.by for g in _grades(db).values()} == {"ta-one"}
    two.get_by_role("button", name="Save grade").click()  # knowingly, over ta-one's grade
    two.get_by_text("Saved.").wait_for()
    assert {(g.by, g.comment, g.points) for g in _grades(db).values()} == {("ta-two", "my own words", 0.0)}
    first_context.close()
    second_context.close()


def test_without_javascript_a_group_is_graded_by_a_plain_form_post(browser, served):
    server, db, _ = served
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    tab.goto(server.url)
    tab.goto(f"http://127.0.0.1:{server.port}{PAGE}")
    fay = tab.locator("section.group", has=tab.locator('li[data-student="fay"]'))
    fay.get_by_role("checkbox").first.check()
    fay.get_by_role("button", name="Save grade").click()
    tab.wait_for_load_state()
    assert "?saved=" in tab.url
    fay = tab.locator("section.group", has=tab.locator('li[data-student="fay"]'))
    assert fay.get_by_text("Saved.").is_visible() and fay.get_by_text("Graded: 2 points").is_visible()
    assert {s: g.points for s, g in _grades(db).items()} == {"fay": 2.0}
    context.close()


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_the_question_page_passes_axe_in_both_colour_schemes_without_console_errors(browser, served, mode):
    server, _, _ = served
    strict = browser.new_context(color_scheme=mode, viewport={"width": 1100, "height": 900})
    tab = strict.new_page()
    problems: list[str] = []
    tab.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: problems.append(str(exc)))
    tab.goto(server.url)
    for path in (PAGE, "/", f"{PAGE}/history"):
        tab.goto(f"http://127.0.0.1:{server.port}{path}")
    cookies = strict.cookies()
    strict.close()
    assert not problems, problems  # with the app's own CSP: no blocked script, style or image
    # axe-core is added to the page by the test, which the app's CSP would refuse
    context = browser.new_context(color_scheme=mode, viewport={"width": 1100, "height": 900}, bypass_csp=True)
    context.add_cookies(cookies)
    tab = context.new_page()
    SHOTS.mkdir(parents=True, exist_ok=True)
    found = {}
    for name, path in (("question", PAGE), ("index", "/"), ("history", f"{PAGE}/history")):
        tab.goto(f"http://127.0.0.1:{server.port}{path}")
        tab.eval_on_selector_all("details", "all => all.forEach(d => { d.open = true; })")
        tab.keyboard.press("?") if name == "question" else None
        tab.screenshot(path=str(SHOTS / f"review-{name}-{mode}.png"), full_page=True)
        found[name] = axe_violations(tab, impacts=ALL_IMPACTS)
    background = tab.evaluate("() => getComputedStyle(document.body).backgroundColor")
    context.close()
    assert found == {"question": [], "index": [], "history": []}, found
    assert background == ("rgb(22, 24, 28)" if mode == "dark" else "rgb(255, 255, 255)"), background


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_a_paged_question_with_graded_and_changed_answers_passes_axe(browser, tmp_path, mode):
    """The states a group shows at once: graded, not graded, a member whose answer changed since
    it was graded, and the pages of groups; axe-core finds nothing, in both schemes."""
    from review_fixtures import ANSWERS
    from test_answers_stale import CHANGED, grade_everyone, resubmit

    answers = ANSWERS | {f"s{i:03d}": f"My own answer number {i}." for i in range(60)}  # 63 groups: 2 pages
    db = class_gradebook(tmp_path / "g.sqlite", answers)
    good, bad = set_rubric(db)
    grade_everyone(db, good)  # ann, bob, cat alike; fay alone
    with Gradebook(db) as book:
        book.manual.grade(A, Q, ["s000"], items=[bad], adjust=0, comment="", by="prof", expected={"s000": 0})
    resubmit(db, {"bob": CHANGED})  # bob's grade no longer counts: his new answer stands alone
    server = serve(make_app(db, grader="prof"))
    context = browser.new_context(color_scheme=mode, viewport={"width": 1100, "height": 900}, bypass_csp=True)
    try:
        tab = context.new_page()
        tab.goto(server.url)
        found = {}
        for page in (1, 2):
            tab.goto(f"http://127.0.0.1:{server.port}{PAGE}?page={page}")
            assert tab.locator("nav.pager").count() == 2
            tab.eval_on_selector_all("details", "all => all.forEach(d => { d.open = true; })")
            found[page] = axe_violations(tab, impacts=ALL_IMPACTS)
        tab.goto(f"http://127.0.0.1:{server.port}{PAGE}")
        for _ in range(50):  # j to the page's last group; one more j goes on to the next page
            tab.keyboard.press("j")
        with tab.expect_navigation():
            tab.keyboard.press("j")
        next_page = tab.url
        tab.goto(f"http://127.0.0.1:{server.port}{PAGE}")
        statuses = tab.eval_on_selector_all("section.group", "all => all.map(g => g.dataset.status)")
        changed = tab.locator("[data-role=member-changed]").count()
        SHOTS.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(SHOTS / f"review-question-paged-{mode}.png"), full_page=True)
    finally:
        context.close()
        server.shutdown()
    assert {"uniform", "none"} <= set(statuses) and changed == 1, (statuses, changed)
    assert found == {1: [], 2: []}, found
    assert next_page.endswith(f"{PAGE}?page=2"), next_page
