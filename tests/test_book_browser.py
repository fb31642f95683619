"""The built book, opened in a real browser (headless Debian chromium driven by Playwright).

`make test` builds the book into `_build/html` first (strictly). Every page of the table of
contents is served from localhost and opened; the test asserts no console errors, no
request leaving localhost, every equation typeset by MathJax (no raw `$$` or `\\(` left),
every image loaded, and the sidebar reaching every chapter. Screenshots go to
`artifacts/screenshots/`.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [  # no background traffic: this machine has no network
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-default-apps", "--disable-extensions",
]


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


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    assert (HTML / "index.html").is_file(), "build the book first: `make book` (make test does)"
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Text of the article with code removed, as the reader sees it after MathJax has run.
ARTICLE_TEXT_JS = """() => {
  const article = document.querySelector('article') || document.body;
  const copy = article.cloneNode(true);
  copy.querySelectorAll('pre, code, .highlight, mjx-container, script, style').forEach(e => e.remove());
  return copy.innerText;
}"""


@pytest.mark.parametrize("page_name", PAGES)
def test_page_renders_offline_without_errors(server, browser, page_name):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors, outside = [], []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("request", lambda req: outside.append(req.url)
            if not req.url.startswith((server, "data:", "blob:", "about:")) else None)
    page.on("requestfailed", lambda req: errors.append(f"request failed: {req.url}"))
    page.goto(f"{server}/{page_name}.html", wait_until="load")
    page.wait_for_function("() => window.MathJax === undefined || "
                           "(MathJax.startup && MathJax.startup.promise)", timeout=20000)
    page.evaluate("() => window.MathJax && MathJax.startup.promise")
    page.wait_for_load_state("networkidle")

    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{page_name.replace('/', '_')}.png"), full_page=True)

    assert not errors, f"console errors on {page_name}: {errors}"
    assert not outside, f"{page_name} made requests outside localhost: {outside}"
    text = page.evaluate(ARTICLE_TEXT_JS)
    for raw in ("$$", "\\(", "\\[", "\\begin{"):
        assert raw not in text, f"untypeset math {raw!r} left on {page_name}"
    math_nodes = page.locator("div.math, span.math").count()
    typeset = page.locator("mjx-container").count()
    assert typeset >= math_nodes, f"{page_name}: {math_nodes} equations but {typeset} typeset"
    broken = page.evaluate("() => Array.from(document.images)"
                           ".filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
    assert not broken, f"images that did not load on {page_name}: {broken}"
    page.close()


def test_table_of_contents_reaches_every_chapter(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/index.html", wait_until="load")  # redirects to the root page
    page.wait_for_load_state("networkidle")
    hrefs = page.evaluate("() => Array.from(document.querySelectorAll('nav.bd-docs-nav a'))"
                          ".map(a => a.href)")
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
