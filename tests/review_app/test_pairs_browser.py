"""The look-alike pages in a real browser (headless Debian chromium via Playwright), with the app
served on 127.0.0.1 by the test: a grader confirms a pair with a note, in the light and the dark
colour scheme, with no console error and axe-core's WCAG 2 A/AA rules clean, and the pair with
the reference solution shows the student's side only; two graders open the same pair, the first
decides, and the second's decision is refused with the first's shown. Screenshots go to
``artifacts/screenshots/review-pair-*.png``."""

from __future__ import annotations

import pytest
from conftest import ROOT
from review_class import CONFLICT_LOGGED, SHOTS, SOLUTION_ONLY, A, Grader, served  # noqa: F401 (served: a fixture)

from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.review_app.pair_list import compute_pairs

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_a_grader_confirms_a_pair_with_a_note(browser, served, mode):  # noqa: F811
    server, db = served
    ann = Grader(browser, server, "ann", mode)
    page = ann.page
    ann.open(f"/a/{A}/pairs")
    violations = ann.axe()
    page.get_by_role("link", name="Pair 1", exact=True).click()
    assert page.locator("h1").inner_text() == "Pair 1: cara and dave"
    highlighted = page.locator(".side pre span.hl").count()
    violations += ann.axe()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"review-pair-{mode}.png"), full_page=True)
    page.get_by_label("Confirmed: copied (needs a note)").check()
    page.fill("#note", "the same loop, line for line")
    page.get_by_role("button", name="Save the decision").click()
    assert page.get_by_role("status").inner_text() == "Saved: the pair is confirmed."
    decision = page.locator("#decision").inner_text()
    violations += ann.axe()

    ann.open(f"/a/{A}/pairs/2")  # the reference solution's pair
    reference = page.locator("main").inner_text()
    codes = page.locator(".side .code").count()
    ann.open("/")  # the index counts the held records and the pairs computed
    counts = page.locator("ul.links").inner_text()
    violations += ann.axe()
    ann.close()

    (region,) = compute_pairs(db, A, ROOT / "exercises", ROOT / "solutions").pairs[0].regions
    assert highlighted == region.a_lines[1] - region.a_lines[0] + region.b_lines[1] - region.b_lines[0] + 2
    assert "Confirmed by ann" in decision and "the same loop, line for line" in decision
    with Gradebook(db) as book:
        stored = book.manual.pairs(A)[("cara", "dave")]
    assert (stored.verdict, stored.note, stored.by) == ("confirmed", "the same loop, line for line", "ann")
    assert codes == 1 and "Not shown: the solution's code" in reference
    assert "3 held for review (0 resolved)" in counts and "3 look-alike pairs (1 confirmed, 0 dismissed)" in counts
    assert not [s for s in SOLUTION_ONLY if s in reference]
    assert not violations, violations
    assert not ann.problems, ann.problems


def test_two_graders_on_one_pair_the_second_is_refused_and_sees_the_first(browser, served):  # noqa: F811
    server, db = served
    ann, bea = Grader(browser, server, "ann", "dark"), Grader(browser, server, "bea", "light")
    for grader in (ann, bea):
        grader.open(f"/a/{A}/pairs/1")
    ann.page.get_by_label("Dismissed: no copying").check()
    ann.page.fill("#note", "one natural way to write it")
    ann.page.get_by_role("button", name="Save the decision").click()
    assert ann.page.get_by_role("status").inner_text() == "Saved: the pair is dismissed."
    bea.page.get_by_label("Confirmed: copied (needs a note)").check()
    bea.page.fill("#note", "copied")
    bea.page.get_by_role("button", name="Save the decision").click()
    alert = bea.page.get_by_role("alert").inner_text()
    decision = bea.page.locator("#decision").inner_text()
    kept = bea.page.input_value("#note")
    violations = bea.axe()
    problems = ann.problems + bea.problems
    ann.close()
    bea.close()

    assert "Not saved: ann decided this pair" in alert
    assert "Dismissed by ann" in decision and "one natural way to write it" in decision
    assert kept == "copied"  # the refused grader's note is kept in the form
    with Gradebook(db) as book:
        stored = book.manual.pairs(A)[("cara", "dave")]
        history = book.manual.history(A)
    assert (stored.verdict, stored.by, stored.note) == ("dismissed", "ann", "one natural way to write it")
    assert [(d.by, d.kind) for d in history] == [("ann", "pair")]
    assert not violations, violations
    # the refused save is answered 409 Conflict, which chromium itself logs; the page logs nothing
    assert problems == [CONFLICT_LOGGED], problems
