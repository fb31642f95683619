"""What a reader of one built page runs into: wide equations, cut code, accessibility failures.

Used by the browser test (tests/book/test_book_browser.py) on every page in light and dark
mode, and runnable on its own while editing a chapter::

    .venv/bin/python tests/book/pagecheck.py [_build/html] [book/02_self_attention ...]

prints, per page and mode, the display equations wider than the text column at a 1280-px
window, the code blocks whose lines are cut at the cell's edge, and axe-core's serious or
critical violations of the WCAG 2 A and AA rules. axe-core's script comes from the
``axe-playwright-python`` wheel (no download at test time).
"""

from __future__ import annotations

import functools
import http.server
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import axe_playwright_python

AXE_JS = Path(axe_playwright_python.__file__).parent / "axe.min.js"
WIDTH, HEIGHT = 1280, 900
AXE_TAGS = ["wcag2a", "wcag2aa"]
SERIOUS = ("serious", "critical")

# Display equations (MathJax CHTML) whose typeset width exceeds the width they are given.
WIDE_EQUATIONS_JS = """() => Array.from(document.querySelectorAll('article div.math')).map(div => {
  const c = div.querySelector('mjx-container');
  if (!c) return null;
  const math = c.querySelector('mjx-math') || c;
  const need = math.getBoundingClientRect().width;
  const have = div.getBoundingClientRect().width;
  return need > have + 1 ? {label: div.id || (div.closest('[id]') || {}).id || '', need: Math.round(need),
                            have: Math.round(have), tex: (div.textContent || '').trim().slice(0, 80)} : null;
}).filter(x => x)"""

# Code blocks whose content is wider than the block (lines cut at the edge, or a scroll bar).
CUT_CODE_JS = """() => Array.from(document.querySelectorAll('article pre')).filter(
  p => p.offsetParent !== null && p.scrollWidth > p.clientWidth + 1
).map(p => p.textContent.split('\\n').reduce((a, b) => a.length >= b.length ? a : b).slice(0, 100))"""


def wide_equations(page) -> list[dict]:
    """Display equations wider than their column: ``{label, need, have, tex}`` each."""
    return page.evaluate(WIDE_EQUATIONS_JS)


def cut_code(page) -> list[str]:
    """The longest line of each visible code block that does not fit its block."""
    return page.evaluate(CUT_CODE_JS)


def axe_violations(page, within: str | None = None, impacts: tuple[str, ...] = SERIOUS) -> list[dict]:
    """axe-core's WCAG 2 A/AA violations of ``impacts`` (serious and critical by default) on the
    page, or only inside the elements matching the CSS selector ``within`` (axe-core's own
    selector engine: no ``:has()``; a selector that gives axe nothing to check raises
    ``ValueError``): ``{id, impact, help, nodes}`` each."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE_JS))
    result = page.evaluate(
        "([tags, within]) => axe.run(within ? {include: [[within]]} : document, "
        "{runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})",
        [AXE_TAGS, within],
    )
    if within and not (result["passes"] or result["violations"] or result["incomplete"]):
        raise ValueError(f"axe-core checked nothing within {within!r}")
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [" ".join(n["target"]) if isinstance(n["target"], list) else str(n["target"]) for n in v["nodes"]][
                :5
            ],
        }
        for v in result["violations"]
        if v["impact"] in impacts
    ]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextmanager
def serve(html: Path) -> Iterator[str]:
    """Serve a built book from localhost; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from conftest import CHROMIUM, CHROMIUM_ARGS
    from test_book_browser import PAGES, open_page

    html = Path(argv[0] if argv else "_build/html").resolve()
    pages = argv[1:] or PAGES
    bad = 0
    with serve(html) as server, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for name in pages:
            for mode in ("light", "dark"):
                page, _, _ = open_page(browser, server, name, mode)
                found = {
                    "wide equations": wide_equations(page) if mode == "light" else [],
                    "cut code": cut_code(page) if mode == "light" else [],
                    "axe": axe_violations(page),
                }
                page.context.close()
                for what, items in found.items():
                    for item in items:
                        bad += 1
                        print(f"{name} ({mode}) {what}: {item}")
        browser.close()
    print(f"{bad} problems on {len(pages)} pages")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
