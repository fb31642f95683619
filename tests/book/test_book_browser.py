"""The built book, opened in a real browser (headless Debian chromium driven by Playwright).

`make test` builds the book into `_build/html` first (strictly); set `BOOK_HTML` to test
another build (e.g. `BOOK_HTML=/tmp/x/_build/html`). Every page of the table of contents is
served from localhost and opened in the theme's light mode and in its dark mode (checked on
`<html data-theme>`); the test asserts no console errors, no request leaving localhost,
every equation typeset by MathJax (no raw `$$` or `\\(` left, a MathJax container for every
math node, each with the MathML that screen readers read), every image (SVG included)
loaded, with a non-empty file behind it, and the sidebar reaching every chapter. The introduction and every chapter must show at least one
schematic diagram (`img.schematic`, drawn by `book/schematics.py`) with alt text. Full-page
screenshots, light and dark, go to `artifacts/screenshots/`.

What a reader on a 1280-px window runs into is checked on every page in both modes
(tests/book/pagecheck.py): no display equation wider than the text column, no code block
whose lines are cut at its edge, no visible code cell longer than 25 lines (cells tagged
`hide-input` sit behind a "show code" toggle), every image with alt text, and no serious or
critical violation of axe-core's WCAG 2 A and AA rules. Schematics keep their colours in
dark mode (dimmed on a light card), so that "shaded = larger" or "shaded = may attend" stays true.
"""

from __future__ import annotations

import base64
import functools
import http.server
import os
import re
import threading
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
import yaml
from conftest import ROOT
from pagecheck import axe_violations, cut_code, wide_equations

pytestmark = pytest.mark.browser

HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html")).resolve()
SHOTS = ROOT / "artifacts" / "screenshots"
MODES = ("light", "dark")
MAX_VISIBLE_CELL_LINES = 25


def toc_pages() -> list[str]:
    """Every document of `_toc.yml`, in order, e.g. ``book/intro``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(toc.get("chapters"))
    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    return pages


PAGES = toc_pages()
# The introduction and the numbered chapters (not the notation appendix or the bibliography).
CHAPTERS = [PAGES[0]] + [p for p in PAGES[1:] if re.fullmatch(r"book/0\d_\w+", p)]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    assert (HTML / "index.html").is_file(), f"no book at {HTML}: build it first (`make book`; make test does)"
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def open_page(browser, server, name: str, mode: str = "light"):
    """A page of the book in the theme's light or dark mode, after MathJax has finished.

    Returns ``(page, errors, outside)``: console errors and requests that left localhost.
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=mode)
    # The pydata theme reads the reader's choice from localStorage before it paints.
    context.add_init_script(
        f"try {{ localStorage.setItem('theme', '{mode}'); localStorage.setItem('mode', '{mode}'); }} catch (e) {{}}"
    )
    page = context.new_page()
    errors, outside = [], []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "request",
        lambda req: outside.append(req.url) if not req.url.startswith((server, "data:", "blob:", "about:")) else None,
    )
    page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url}"))
    page.goto(f"{server}/{name}.html", wait_until="load")
    page.wait_for_function(
        "() => window.MathJax === undefined || (MathJax.startup && MathJax.startup.promise)", timeout=20000
    )
    page.evaluate("() => window.MathJax && MathJax.startup.promise")
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete)", timeout=20000)
    return page, errors, outside


# Text of the article with code removed, as the reader sees it after MathJax has run.
ARTICLE_TEXT_JS = """() => {
  const article = document.querySelector('article') || document.body;
  const copy = article.cloneNode(true);
  copy.querySelectorAll('pre, code, .highlight, mjx-container, script, style').forEach(e => e.remove());
  return copy.innerText;
}"""

# Source lines of each code cell shown on the page (not behind a "show code" toggle).
VISIBLE_CELL_LINES_JS = """() => Array.from(document.querySelectorAll('article div.cell'))
  .filter(c => !c.classList.contains('tag_hide-input') && !c.classList.contains('tag_remove-input'))
  .map(c => c.querySelector('div.cell_input pre'))
  .filter(pre => pre)
  .map(pre => pre.textContent.replace(/\\n+$/, '').split('\\n').length)"""

IMAGES_JS = """() => Array.from(document.images).map(i => ({
  src: i.currentSrc || i.src, complete: i.complete, width: i.naturalWidth, height: i.naturalHeight,
  schematic: i.classList.contains('schematic'), alt: (i.getAttribute('alt') || '').trim()}))"""


def _image_bytes(src: str, server: str) -> int:
    """The size of the file (or data URI) an image points to."""
    if src.startswith("data:"):
        header, _, payload = src.partition(",")
        return len(base64.b64decode(payload)) if header.endswith(";base64") else len(unquote(payload))
    assert src.startswith(server), f"image outside the book: {src}"
    path = HTML / unquote(urlparse(src).path).lstrip("/")
    assert path.is_file(), f"image file missing: {path}"
    return path.stat().st_size


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("page_name", PAGES)
def test_page_renders_offline_without_errors(server, browser, page_name, mode):
    page, errors, outside = open_page(browser, server, page_name, mode)
    theme = page.evaluate("() => document.documentElement.dataset.theme")
    assert theme == mode, f"{page_name} should be in {mode} mode, html[data-theme] is {theme!r}"

    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{page_name.replace('/', '_')}-{mode}.png"), full_page=True)

    assert not errors, f"console errors on {page_name} ({mode}): {errors}"
    assert not outside, f"{page_name} made requests outside localhost: {outside}"
    text = page.evaluate(ARTICLE_TEXT_JS)
    for raw in ("$$", "\\(", "\\[", "\\begin{"):
        assert raw not in text, f"untypeset math {raw!r} left on {page_name}"
    math_nodes = page.locator("div.math, span.math").count()
    typeset = page.locator("mjx-container").count()
    assert typeset >= math_nodes, f"{page_name}: {math_nodes} equations but {typeset} typeset"
    # Screen readers read MathJax's hidden MathML copy of each equation, not the glyphs.
    readable = page.locator("mjx-container mjx-assistive-mml math").count()
    assert readable == typeset, f"{page_name}: {typeset - readable} equations without MathML for screen readers"

    images = page.evaluate(IMAGES_JS)
    broken = [i["src"] for i in images if not (i["complete"] and i["width"] > 0 and i["height"] > 0)]
    assert not broken, f"images that did not load on {page_name} ({mode}): {broken}"
    empty = [i["src"][:80] for i in images if _image_bytes(i["src"], server) == 0]
    assert not empty, f"empty image files on {page_name}: {empty}"
    no_alt = [i["src"][:80] for i in images if not i["alt"]]
    assert not no_alt, f"images without alt text on {page_name}: {no_alt}"
    # Schematics are drawn dark on white and their shading means something: never inverted,
    # and on a light card in dark mode (the theme's dimmed images keep which cell is darker).
    looks = page.evaluate(
        "() => Array.from(document.querySelectorAll('img.schematic')).map(i => "
        "[getComputedStyle(i).filter, getComputedStyle(i).backgroundColor])"
    )
    assert all("invert" not in f for f, _ in looks), f"{page_name}: schematics inverted in {mode} mode"
    if mode == "dark":
        cards = [[int(c) for c in re.findall(r"\d+", bg)[:3]] for _, bg in looks]
        assert all(len(c) == 3 and min(c) >= 180 for c in cards), (
            f"{page_name}: schematics not on a light card: {looks}"
        )

    wide = wide_equations(page)
    assert not wide, f"{page_name} ({mode}): display equations wider than the column at 1280 px: {wide}"
    cut = cut_code(page)
    assert not cut, f"{page_name} ({mode}): code lines cut at the block's edge: {cut}"
    long_cells = [n for n in page.evaluate(VISIBLE_CELL_LINES_JS) if n > MAX_VISIBLE_CELL_LINES]
    assert not long_cells, (
        f"{page_name}: visible code cells of {long_cells} lines (at most {MAX_VISIBLE_CELL_LINES}; "
        "plumbing goes to book/ helpers or remove-input/hide-input cells)"
    )
    violations = axe_violations(page)
    assert not violations, f"{page_name} ({mode}): axe-core WCAG 2 A/AA serious or critical violations: {violations}"
    page.context.close()


@pytest.mark.parametrize("page_name", CHAPTERS)
def test_chapter_has_a_schematic_with_alt_text(server, browser, page_name):
    page, _, _ = open_page(browser, server, page_name)
    schematics = [i for i in page.evaluate(IMAGES_JS) if i["schematic"]]
    page.context.close()
    assert schematics, f"{page_name} has no schematic diagram (img.schematic, drawn with book/schematics.py)"
    no_alt = [i["src"][:80] for i in schematics if not i["alt"]]
    assert not no_alt, f"{page_name}: schematics without alt text: {no_alt}"


def test_table_of_contents_reaches_every_chapter(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/index.html", wait_until="load")  # redirects to the root page
    page.wait_for_load_state("networkidle")
    hrefs = page.evaluate("() => Array.from(document.querySelectorAll('nav.bd-docs-nav a')).map(a => a.href)")
    for name in PAGES[1:]:
        assert any(h.split("#")[0].endswith(f"/{name}.html") for h in hrefs), f"{name} missing from the sidebar"
    page.close()


def test_chapters_typeset_their_numbered_equations(server, browser):
    """A chapter with a labelled equation shows it numbered, typeset by MathJax."""
    page = browser.new_page()
    with_math = 0
    for name in PAGES:
        page.goto(f"{server}/{name}.html", wait_until="load")
        page.evaluate("() => window.MathJax && MathJax.startup.promise")
        numbered = page.locator("div.math span.eqno").count()
        if numbered:
            with_math += 1
            assert page.locator("div.math mjx-container").count() >= numbered
    page.close()
    assert with_math >= min(len(PAGES) - 2, 7), "most chapters should have numbered equations"
