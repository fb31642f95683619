"""One student's feedback page, opened in a real browser (headless Debian chromium via Playwright).

The HTML feedback file of ``test_feedback_files.py``'s class is opened from ``file://`` on a
phone-sized window (375 px wide), in the light and in the dark colour scheme: the score comes
before the error, the error before the likely mistake, the mistake before the failing tests and
the passing tests last; the hint, the fix and the passing tests are folded (hidden until their
summary is clicked); nothing is wider than the window (no horizontal scroll), the page makes no
request and has no script; the background follows the scheme; and axe-core finds no violation
of WCAG 2 A/AA (any impact) with every folded part opened. Screenshots go to
``artifacts/screenshots/feedback-*.png`` for a person to look at. A few seconds in all.
"""

from __future__ import annotations

import pytest
from conftest import ROOT
from pagecheck import axe_violations
from test_feedback_files import class_gradebook

from course_lib.autograder.exports import file_stem
from course_lib.autograder.feedback_files import write_feedback

pytestmark = pytest.mark.browser

SHOTS = ROOT / "artifacts" / "screenshots"
PHONE = {"width": 375, "height": 740}
#: The vertical positions of the parts of the first failing report, in reading order.
ORDER_JS = """() => {
  const report = Array.from(document.querySelectorAll('.course-lib-report'))
    .find(r => r.querySelector('.course-lib-mistake'));
  const y = sel => report.querySelector(sel).getBoundingClientRect().top;
  return ['.course-lib-headline', '.course-lib-error', '.course-lib-mistake', 'table[aria-label="failing tests"]',
          '.course-lib-waiting', 'details.course-lib-passing'].map(y);
}"""


@pytest.fixture(scope="module")
def page_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("feedback-page")
    book = class_gradebook(folder / "g.sqlite")
    write_feedback(book, folder / "out", "html")
    return folder / "out" / f"{file_stem('ann')}.html"


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_the_feedback_page_reads_in_order_folds_fits_a_phone_and_passes_axe(page_file, browser, mode):
    context = browser.new_context(viewport=PHONE, color_scheme=mode, bypass_csp=True)  # to add axe-core
    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("request", lambda req: None if req.url == page_file.as_uri() else problems.append(req.url))
    page.goto(page_file.as_uri(), wait_until="load")

    tops = page.evaluate(ORDER_JS)
    assert tops == sorted(tops), tops
    for folded, inside in [("course-lib-fix", "p"), ("course-lib-passing", "table")]:
        details = page.locator(f"details.{folded}").nth(1)
        assert not details.evaluate("d => d.open") and not details.locator(inside).is_visible(), folded
        details.locator("summary").click()
        assert details.evaluate("d => d.open") and details.locator(inside).is_visible(), folded

    page.eval_on_selector_all("details", "all => all.forEach(d => { d.open = true; })")
    wide = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"feedback-{mode}.png"), full_page=True)
    violations = axe_violations(page, impacts=("minor", "moderate", "serious", "critical"))
    background = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    scripts = page.evaluate("() => document.scripts.length")
    context.close()

    assert wide[0] <= wide[1], f"the page scrolls sideways at 375 px: {wide}"
    assert not violations, violations
    assert not problems, problems  # no console error, no request besides the page itself
    assert scripts == 1  # axe-core's, added by the test; the page has none
    assert background == ("rgb(22, 24, 28)" if mode == "dark" else "rgb(255, 255, 255)"), background
