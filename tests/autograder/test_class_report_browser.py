"""The class report's site, opened in a real browser (headless Debian chromium via Playwright).

The report of the generated class of ``test_class_report.py`` is written to a folder and opened from
``file://``, in the reader's light and in the dark colour scheme: every page (the index and each
assignment) loads with no console error, no failed request, no request outside ``file://``,
every image loaded (``naturalWidth > 0``), and the page's colours follow the scheme. The math of
the questions and answers is drawn from the MathML written into the page (``math`` elements with
a size, no literal ``$``), with no script. Full-page screenshots go to
``artifacts/screenshots/report-*.png`` for a person to look at. The Answers section (questions,
answers, their MathML and images) passes axe-core's WCAG A/AA rules, light and dark.
"""

from __future__ import annotations

import pytest
from conftest import ROOT
from pagecheck import axe_violations
from test_class_report import gradebook  # noqa: F401  (the generated class, a module fixture)

from course_lib.autograder.class_report import write_report

pytestmark = pytest.mark.browser

SHOTS = ROOT / "artifacts" / "screenshots"


@pytest.fixture(scope="module")
def site(gradebook, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("report-site")
    result = write_report(gradebook, out, exercises=ROOT / "exercises", solutions=ROOT / "solutions")
    return out, ["index.html"] + [a["page"] for a in result.data["assignments"]]


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_every_page_opens_offline_without_errors_and_with_its_figures(site, browser, mode):
    out, pages = site
    assert len(pages) >= 2
    backgrounds = set()
    for name in pages:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=mode)
        page = context.new_page()
        errors: list[str] = []
        outside: list[str] = []
        page.on("console", lambda msg, errors=errors: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        page.on("requestfailed", lambda req, errors=errors: errors.append(f"request failed: {req.url}"))
        page.on(
            "request", lambda req, outside=outside: None if req.url.startswith("file://") else outside.append(req.url)
        )
        page.goto((out / name).as_uri(), wait_until="load")
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=20000)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"report-{name.removesuffix('.html')}-{mode}.png"), full_page=True)
        images = page.evaluate("() => Array.from(document.images).map(i => [i.src, i.naturalWidth])")
        scripts = page.evaluate("() => document.scripts.length")
        answers = page.evaluate(
            """() => { const h = document.getElementById('answers'); if (!h) return null;
                let text = '', maths = [], n = h.nextElementSibling;
                for (; n; n = n.nextElementSibling) {
                  text += n.innerText;
                  for (const m of n.querySelectorAll('math')) {
                    const r = m.getBoundingClientRect(); maths.push([r.width, r.height]); } }
                return {text, maths}; }"""
        )
        backgrounds.add(page.evaluate("() => getComputedStyle(document.body).backgroundColor"))
        context.close()
        assert not errors, f"console errors on {name} ({mode}): {errors}"
        assert not outside, f"{name} made requests outside file://: {outside}"
        assert all(width > 0 for _, width in images), f"images that did not load on {name}: {images}"
        assert scripts == 0, f"{name} has {scripts} script element(s)"
        if name != "index.html":
            assert images, f"{name} shows no figure"
            assert any(src.startswith("data:image/png;base64,") for src, _ in images), f"no pasted image on {name}"
            assert answers["maths"], f"no math element in the answers of {name}"
            assert all(w > 0 and h > 0 for w, h in answers["maths"]), f"math not drawn on {name}: {answers['maths']}"
            assert "$" not in answers["text"], f"a literal $ in the answers of {name}"
    dark = mode == "dark"
    assert backgrounds == {"rgb(22, 24, 28)" if dark else "rgb(255, 255, 255)"}, backgrounds


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_every_page_passes_axe_cores_wcag_rules(site, browser, mode):
    out, pages = site
    # axe-core is injected as a script, which the page's own CSP forbids: only this context bypasses it.
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=mode, bypass_csp=True)
    found = {}
    for name in pages:
        page = context.new_page()
        page.goto((out / name).as_uri(), wait_until="load")
        if name != "index.html":  # the answers' math and the look-alikes' code are on the page
            assert page.locator("#answers ~ table math").count() > 0
        found[name] = axe_violations(page)
        page.close()
    context.close()
    assert not any(found.values()), f"axe-core on the report ({mode}): {found}"
