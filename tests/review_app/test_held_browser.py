"""The held-record pages in a real browser (headless Debian chromium via Playwright), with the app
served on 127.0.0.1 by the test: a grader accepts one held record and rejects another, in the
light and the dark colour scheme, with no console error and axe-core's WCAG 2 A/AA rules clean;
two graders open the same record, the first decides, and the second's decision is refused with
the first's shown. Screenshots go to ``artifacts/screenshots/review-held-*.png``."""

from __future__ import annotations

import pytest
from review_class import CONFLICT_LOGGED, SHOTS, A, Grader, served  # noqa: F401 (served: a fixture)

from course_lib.autograder.gradebook import Gradebook

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_a_grader_accepts_one_held_record_and_rejects_another(browser, served, mode):  # noqa: F811
    server, db = served
    ann = Grader(browser, server, "ann", mode)
    page = ann.page
    ann.open(f"/a/{A}/held")
    violations = ann.axe()
    page.get_by_role("link", name="hana", exact=True).click()
    assert page.locator("#points").get_attribute("required") is not None  # nothing was graded: points needed
    violations += ann.axe()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"review-held-{mode}.png"), full_page=True)
    page.fill("#points", "8")
    page.get_by_role("button", name="Accept").click()
    assert page.get_by_role("status").inner_text() == "Saved: the record is accepted."
    violations += ann.axe()

    ann.open(f"/a/{A}/held")
    page.get_by_role("link", name="hugo", exact=True).click()
    page.fill("#reject-reason", "reads the grader's frames")
    page.get_by_role("button", name="Reject").click()
    assert page.get_by_role("status").inner_text() == "Saved: the record is rejected."
    assert "Rejected by ann" in page.locator("#decision").inner_text()
    ann.open(f"/a/{A}/held")
    listing = page.locator("table.held-list tbody").inner_text()
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    ann.close()

    assert "accepted: 8 of 10\tann" in listing and "rejected: 0 of 10\tann" in listing
    with Gradebook(db) as book:
        assert book.record("hana", A).score == 8 and book.record("hugo", A).adjustment.kind == "rejected"
    assert not violations, violations
    assert not ann.problems, ann.problems
    assert background == ("rgb(22, 24, 28)" if mode == "dark" else "rgb(255, 255, 255)"), background


def test_two_graders_on_one_held_record_the_second_is_refused_and_sees_the_first(browser, served):  # noqa: F811
    server, db = served
    ann, bea = Grader(browser, server, "ann", "light"), Grader(browser, server, "bea", "dark")
    for grader in (ann, bea):
        grader.open(f"/a/{A}/held/hugo")
    ann.page.get_by_role("button", name="Accept").click()  # the autograder's 6 points
    assert ann.page.get_by_role("status").inner_text() == "Saved: the record is accepted."
    bea.page.fill("#reject-reason", "I think it cheats")
    bea.page.get_by_role("button", name="Reject").click()
    alert = bea.page.get_by_role("alert").inner_text()
    decision = bea.page.locator("#decision").inner_text()
    violations = bea.axe()
    kept = bea.page.input_value("#reject-reason")
    problems = ann.problems + bea.problems
    ann.close()
    bea.close()

    assert "Not saved: ann acted on this record" in alert
    assert "Accepted by ann" in decision and "6 of 10 points" in decision
    assert kept == "I think it cheats"  # the refused grader's words are not lost
    with Gradebook(db) as book:
        record = book.record("hugo", A)
        kinds = [(e.kind, e.by) for e in book.history("hugo", A)]
    assert (record.adjustment.kind, record.adjustment.by, record.score) == ("accepted", "ann", 6)
    assert kinds == [("graded", "grader-bot"), ("accepted", "ann")]
    assert not violations, violations
    # the refused save is answered 409 Conflict, which chromium itself logs; the page logs nothing
    assert problems == [CONFLICT_LOGGED], problems
