"""Print the single-page build of the book to one PDF, offline (``make pdf``).

``make pdf`` builds the book as one HTML page (``jupyter-book build . --builder singlehtml``,
from the execution cache) and then runs this script, which serves that page on localhost,
opens it in headless Debian chromium through Playwright (the browser the tests use; nothing
is downloaded), waits until MathJax has typeset every equation and every image has loaded,
prepares the page for paper and prints it::

    .venv/bin/python book/_ext/print_pdf.py _build/singlehtml _build/pdf/book.pdf

Preparing the page for paper:

- light mode, whatever the reader last chose in a browser;
- every chapter starts on a new page, and its headings move up one level (the single page
  nests chapters under the book's title), so the PDF's outline (bookmarks) lists the
  introduction and the chapters at the top level with their sections under them;
- a contents page at the start lists every chapter and section as links;
- hidden code cells and the answers of "check your understanding" are opened (a reader
  of paper cannot click them), long code lines wrap instead of being cut at the margin,
  scrolled outputs are shown whole, and the buttons, sidebars and search box are left out;
- page numbers and the book's title in the footer.

It fails, and prints nothing, on a page error, a request that leaves localhost or fails, an
image that did not load or math left untypeset. The PDF is written to a temporary name and
renamed, so an interrupted run leaves the last complete PDF in place.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [  # no background traffic: the machine may have no network
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]

# Applied on top of the theme's own print rules.
PRINT_CSS = """
@page { size: A4; margin: 16mm 15mm 18mm 15mm; }
/* Nothing half faded in (opened cells fade in on screen). */
*, *::before, *::after { animation: none !important; transition: none !important; }
html { font-size: 14px; }
/* Only the article: no header, sidebars, buttons or previous/next links. */
.bd-header, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-header-article, .bd-footer,
.bd-footer-article, .bd-footer-content, .prev-next-area, .footer-article, .search-button-field,
button.copybtn, a.headerlink, .toggle-button, details summary, .theme-switch-button,
#jb-print-docs-body, .skip-link, .pst-back-to-top { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-article, .bd-page-width, .bd-container,
.bd-container__inner { max-width: none !important; width: auto !important; margin: 0 !important;
  padding: 0 !important; display: block !important; }
/* The theme hides each section's first h1 in print (it prints the title itself). */
.bd-main .bd-content .bd-article h1 { display: block !important; }
.bd-main .bd-content { margin-left: 0 !important; }
/* A few pixels of room so that a full-width box keeps its right border. */
.bd-main .bd-content .bd-article { padding-right: 3px !important; }
/* Code: wrap long lines, never cut them; outputs whole, without scroll bars. */
pre, pre code, div.highlight pre { white-space: pre-wrap !important; overflow-wrap: anywhere !important;
  word-break: break-word !important; overflow: visible !important; max-height: none !important; }
div.highlight pre, div.cell_output pre, .output pre { font-size: 0.8rem !important; }
div.cell_output, .output, .cell_output .output, div.cell, div.cell_input, .scroll-output {
  max-height: none !important; overflow: visible !important; }
/* Boxes: a thin rule instead of a drop shadow (a shadow is cut at the margin). */
.admonition, div.admonition, div.cell, details, .cell_input, .cell_output { box-shadow: none !important; }
.admonition, div.admonition, div.cell, details { box-sizing: border-box !important; max-width: 100% !important;
  margin-right: 0 !important; }
.admonition, div.admonition { border-top: 1px solid #d0d0d0 !important; border-right: 1px solid #d0d0d0 !important;
  border-bottom: 1px solid #d0d0d0 !important; }
/* Figures and equations stay whole. */
img { max-width: 100% !important; height: auto !important; }
figure, div.figure, img, mjx-container[display="true"], table, .admonition, div.cell_input {
  break-inside: avoid; }
h1, h2, h3, h4, .admonition-title, p.caption { break-after: avoid; }
mjx-container[display="true"] { overflow: visible !important; max-width: 100%; }
table { font-size: 0.85rem; }
#print-contents { break-after: page; }
#print-contents ol { list-style: none; padding-left: 0; columns: 2; column-gap: 2em; }
#print-contents li { break-inside: avoid; }
#print-contents li.chapter { margin-top: 0.6em; font-weight: 600; break-after: avoid; }
#print-contents li.section { margin-left: 1.6em; font-weight: 400; font-size: 0.92rem; }
#print-contents a { text-decoration: none; color: inherit; }
.print-chapter { break-before: page; }
"""

# Runs in the page after MathJax and the images are ready. Returns what it did.
PREPARE_JS = r"""(css) => {
  document.documentElement.dataset.theme = 'light';
  document.documentElement.dataset.mode = 'light';
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);

  // Open hidden code cells and the dropdown answers.
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.toggle-hidden').forEach(e => e.classList.remove('toggle-hidden'));

  // The article holds the root page (the introduction) with the chapters nested in it.
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const rootSection = article.querySelector('section');
  const chapters = Array.from(article.querySelectorAll('span[id^="document-"]'))
    .map(span => span.nextElementSibling)
    .filter(el => el && el.tagName === 'SECTION');

  // Chapter headings up one level: h2 -> h1, h3 -> h2, ... (the outline nests by level).
  const promote = (h) => {
    const level = Number(h.tagName[1]);
    const n = document.createElement('h' + Math.max(1, level - 1));
    for (const a of h.attributes) n.setAttribute(a.name, a.value);
    while (h.firstChild) n.appendChild(h.firstChild);
    h.replaceWith(n);
    return n;
  };
  for (const ch of chapters) {
    ch.classList.add('print-chapter');
    ch.querySelectorAll('h2, h3, h4, h5, h6').forEach(promote);
  }

  // A contents page: the introduction and every chapter, with their sections, as links.
  const entry = (h, cls) => {
    const sec = h.closest('section');
    const li = document.createElement('li');
    li.className = cls;
    const a = document.createElement('a');
    a.href = '#' + (sec && sec.id ? sec.id : h.id);
    h.childNodes.forEach(c => { if (!(c.classList && c.classList.contains('headerlink'))) a.appendChild(c.cloneNode(true)); });
    li.appendChild(a);
    return li;
  };
  const nav = document.createElement('nav');
  nav.id = 'print-contents';
  nav.innerHTML = '<h2 class="print-contents-title">Contents</h2>';
  const list = document.createElement('ol');
  const rootTitle = rootSection ? rootSection.querySelector('h1') : null;
  let sections = 0;
  if (rootTitle) {
    list.appendChild(entry(rootTitle, 'chapter'));
    rootSection.querySelectorAll(':scope > section > h2').forEach(h => { list.appendChild(entry(h, 'section')); sections++; });
  }
  for (const ch of chapters) {
    const h = ch.querySelector('h1');
    if (!h) continue;
    list.appendChild(entry(h, 'chapter'));
    ch.querySelectorAll(':scope > section > h2').forEach(h2 => { list.appendChild(entry(h2, 'section')); sections++; });
  }
  nav.appendChild(list);
  if (rootSection) rootSection.parentNode.insertBefore(nav, rootSection);
  // The intro's own sections would sit beside the chapters in the outline: one level down.
  if (rootSection) {
    rootSection.querySelectorAll(':scope > section > h2, :scope > section > section > h3').forEach(h => {
      const level = Number(h.tagName[1]);
      const n = document.createElement('h' + (level + 1));
      for (const a of h.attributes) n.setAttribute(a.name, a.value);
      while (h.firstChild) n.appendChild(h.firstChild);
      n.classList.add('print-intro-heading');
      h.replaceWith(n);
    });
  }
  return {chapters: chapters.length, sections: sections};
}"""

# Runs after PREPARE_JS in the print layout: an equation or a table wider than the text is
# scaled down to fit (MathJax 3 does not break lines; cutting it would lose the right end).
FIT_JS = r"""() => {
  const article = document.querySelector('article.bd-article') || document.body;
  const fit = (e, width, avail) => {
    if (width > avail && avail > 0) { e.style.zoom = (avail / width).toFixed(3); return 1; }
    return 0;
  };
  let fitted = 0;
  // A numbered equation shares its line with the number (span.eqno, in a flex row).
  article.querySelectorAll('mjx-container[display="true"]').forEach(e => {
    let avail = e.parentElement.getBoundingClientRect().width - 8;
    for (const sib of e.parentElement.children) if (sib !== e) avail -= sib.getBoundingClientRect().width;
    const m = e.querySelector('mjx-math') || e;
    fitted += fit(e, Math.max(m.scrollWidth, m.getBoundingClientRect().width), avail);
  });
  article.querySelectorAll('table').forEach(t => {
    fitted += fit(t, t.scrollWidth, t.parentElement.getBoundingClientRect().width - 2);
  });
  return fitted;
}"""

# The headings Chromium turns into bookmarks, in document order: the text it takes from the
# page (math left out) and the title we want (math as plain text, from MathJax's TeX).
HEADINGS_JS = r"""() => {
  const tex = new Map();
  if (window.MathJax && MathJax.startup && MathJax.startup.document) {
    for (const item of MathJax.startup.document.math) tex.set(item.typesetRoot, item.math);
  }
  const plain = (t) => t.replace(/\\sqrt\{([^{}]*)\}/g, '\u221a$1').replace(/\\times/g, '\u00d7')
                        .replace(/\\(text|mathrm|operatorname)\{([^{}]*)\}/g, '$2')
                        .replace(/\\[a-zA-Z]+/g, '').replace(/[{}]/g, '').trim();
  const out = [];
  const article = document.querySelector('article.bd-article') || document.body;
  article.querySelectorAll('h1, h2, h3, h4, h5, h6').forEach(h => {
    if (!h.getClientRects().length) return;  // not displayed
    let painted = '', title = '';
    const walk = (node) => {
      if (node.nodeType === Node.TEXT_NODE) { painted += node.textContent; title += node.textContent; return; }
      if (node.nodeType !== Node.ELEMENT_NODE) return;
      if (node.classList.contains('headerlink')) return;
      if (node.tagName === 'MJX-CONTAINER') { title += tex.has(node) ? plain(tex.get(node)) : ''; return; }
      node.childNodes.forEach(walk);
    };
    walk(h);
    out.push({painted: painted, title: title.replace(/\s+/g, ' ').trim()});
  });
  return out;
}"""

FOOTER = (
    '<div style="font-size:8px; width:100%; padding:0 15mm; color:#555; display:flex; '
    'justify-content:space-between; font-family:sans-serif;">'
    '<span>{title}</span><span><span class="pageNumber"></span> / <span class="totalPages"></span></span></div>'
)


BOOK_URL_PATH = "/book.html"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    aliases: ClassVar[dict[str, str]] = {}

    def log_message(self, *args):
        pass

    def translate_path(self, path):
        path = path.split("?", 1)[0].split("#", 1)[0]
        if path in self.aliases:
            return self.aliases[path]
        return super().translate_path(path)


@contextmanager
def serve(directory: Path, aliases: dict[str, Path] | None = None):
    """Serve ``directory`` on an unused localhost port; yields the base URL.

    ``aliases`` maps URL paths to files (the single page is written to ``book/intro.html``
    but its links to ``_static/`` and ``_images/`` are relative to the build's root, so it
    is served from the root as ``/book.html``).
    """
    handler_class = type("_Handler", (_QuietHandler,), {"aliases": {k: str(v) for k, v in (aliases or {}).items()}})
    handler = functools.partial(handler_class, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def book_page(html_dir: Path) -> Path:
    """The file that holds the whole book (``index.html`` only redirects to it)."""
    pages = [p for p in Path(html_dir).rglob("*.html") if p.name != "index.html" and "_static" not in p.parts]
    if not pages:
        raise SystemExit(f"print_pdf: no single-page build in {html_dir} (run `make pdf`)")
    return max(pages, key=lambda p: p.stat().st_size)


def _pdf_string(text: str) -> bytes:
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode() + b">"


def _pdf_unstring(raw: bytes) -> str:
    if raw.startswith(b"<"):
        data = bytes.fromhex(raw[1:-1].decode())
        return data[2:].decode("utf-16-be") if data.startswith(b"\xfe\xff") else data.decode("latin-1")
    body = raw[1:-1]
    return re.sub(rb"\\(.)", rb"\1", body).decode("latin-1")


def _alnum(text: str) -> str:
    return re.sub(r"\W+", "", text)


def _same_heading(bookmark: str, painted: str) -> bool:
    """Whether a bookmark's letters are the heading's, with some runs of text doubled."""
    if not len(painted) <= len(bookmark) <= 2 * len(painted):
        return False
    rest = iter(bookmark)
    return all(ch in rest for ch in painted)  # painted is a subsequence of bookmark


def fix_outline(pdf: Path, headings: list[dict]) -> int:
    """Give the PDF's bookmarks the headings' own titles; returns how many changed.

    Chromium takes a bookmark's title from the text it painted: a space at a line break is
    lost, a heading that moved to the next page can appear twice, and typeset math is
    missing. Each bookmark is matched with its heading (same order, same painted text) and
    rewritten in an incremental update appended to the file; nothing else changes. When
    the bookmarks and the headings do not match one for one, the PDF is left as it is.
    """
    data = pdf.read_bytes()
    root = re.search(rb"trailer\s*<<.*?/Root (\d+) 0 R", data, re.S)
    prev_xref = re.findall(rb"startxref\s+(\d+)", data)
    if not root or not prev_xref:
        return 0

    def obj(num: int) -> re.Match | None:
        return re.search(rb"\n%d 0 obj\n(<<.*?>>)\nendobj" % num, data, re.S)

    catalog = obj(int(root.group(1)))
    outlines = catalog and re.search(rb"/Outlines (\d+) 0 R", catalog.group(1))
    if not outlines:
        return 0
    items: list[tuple[int, bytes]] = []  # (object number, dictionary), depth first = document order

    def walk(first: int | None):
        while first is not None:
            m = obj(first)
            if m is None:
                return
            items.append((first, m.group(1)))
            child = re.search(rb"/First (\d+) 0 R", m.group(1))
            walk(int(child.group(1)) if child else None)
            nxt = re.search(rb"/Next (\d+) 0 R", m.group(1))
            first = int(nxt.group(1)) if nxt else None

    top = obj(int(outlines.group(1)))
    first = top and re.search(rb"/First (\d+) 0 R", top.group(1))
    walk(int(first.group(1)) if first else None)
    if len(items) != len(headings):
        return 0
    title_re = re.compile(rb"/Title (\((?:[^()\\]|\\.)*\)|<[0-9A-Fa-f]*>)")
    updates = []
    for (num, body), heading in zip(items, headings, strict=False):
        m = title_re.search(body)
        if m is None:
            return 0
        old, painted = _alnum(_pdf_unstring(m.group(1))), _alnum(heading["painted"])
        if not _same_heading(old, painted):
            return 0  # not the heading we think it is: change nothing
        if _pdf_unstring(m.group(1)) != heading["title"]:
            updates.append((num, body[: m.start(1)] + _pdf_string(heading["title"]) + body[m.end(1) :]))
    if not updates:
        return 0
    size = re.search(rb"trailer\s*<<.*?/Size (\d+)", data, re.S).group(1)
    info = re.search(rb"trailer\s*<<.*?/Info (\d+) 0 R", data, re.S)
    tail, offsets = bytearray(b"\n"), {}
    for num, body in updates:
        offsets[num] = len(data) + len(tail)
        tail += b"%d 0 obj\n%s\nendobj\n" % (num, body)
    xref_at = len(data) + len(tail)
    tail += b"xref\n"
    for num in sorted(offsets):
        tail += b"%d 1\n%010d 00000 n \n" % (num, offsets[num])
    tail += b"trailer\n<</Size %s\n/Root %s 0 R\n" % (size, root.group(1))
    if info:
        tail += b"/Info %s 0 R\n" % info.group(1)
    tail += b"/Prev %s>>\nstartxref\n%d\n%%%%EOF\n" % (prev_xref[-1], xref_at)
    pdf.write_bytes(data + bytes(tail))
    return len(updates)


def print_pdf(html_dir: Path, out: Path, timeout_s: float = 180.0) -> dict:
    """Print the single-page build in ``html_dir`` to ``out``; returns a short summary."""
    from playwright.sync_api import sync_playwright

    html_dir, out = Path(html_dir), Path(out)
    start = time.perf_counter()
    problems: list[str] = []
    with serve(html_dir, {BOOK_URL_PATH: book_page(html_dir)}) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1000})
            page.set_default_timeout(timeout_s * 1000)
            page.add_init_script(
                "try { localStorage.setItem('theme', 'light'); localStorage.setItem('mode', 'light'); } catch (e) {}"
            )
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("requestfailed", lambda req: problems.append(f"request failed: {req.url}"))
            page.on(
                "request",
                lambda req: (
                    problems.append(f"request outside localhost: {req.url}")
                    if not req.url.startswith((url, "data:", "blob:", "about:"))
                    else None
                ),
            )
            # The single page has no search index; an empty one keeps the theme quiet.
            page.route(
                "**/searchindex.js",
                lambda route: route.fulfill(body="Search.setIndex({});", content_type="text/javascript"),
            )
            page.goto(url + BOOK_URL_PATH, wait_until="load")
            page.wait_for_function("() => window.MathJax === undefined || (MathJax.startup && MathJax.startup.promise)")
            page.evaluate("() => window.MathJax && MathJax.startup.promise")
            page.evaluate("() => document.fonts.ready.then(() => true)")
            page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
            broken = page.evaluate(
                "() => Array.from(document.images).filter(i => i.naturalWidth === 0).map(i => i.src)"
            )
            problems += [f"image did not load: {src}" for src in broken]
            raw = page.evaluate("""() => { const a = (document.querySelector('article') || document.body)
                                      .cloneNode(true);
                                  a.querySelectorAll('pre, code, mjx-container, script, style')
                                   .forEach(e => e.remove());
                                  return ['$$', '\\\\(', '\\\\['].filter(s => a.innerText.includes(s)); }""")
            problems += [f"untypeset math: {s}" for s in raw]
            if problems:  # print nothing rather than a PDF with holes
                raise SystemExit("print_pdf: " + "; ".join(problems[:10]))
            # Lay the page out as it will be printed (A4 less the margins: 180 mm = 680 px).
            page.set_viewport_size({"width": 680, "height": 1000})
            page.emulate_media(media="print")
            done = page.evaluate(PREPARE_JS, PRINT_CSS)
            done["fitted"] = page.evaluate(FIT_JS)
            title = page.title().split(" — ")[0].strip() or "Book"
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(out.name + ".part")
            page.pdf(
                path=str(tmp),
                format="A4",
                print_background=True,
                outline=True,
                tagged=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER.format(title=title),
                margin={"top": "16mm", "bottom": "18mm", "left": "15mm", "right": "15mm"},
            )
            done["bookmarks_fixed"] = fix_outline(tmp, page.evaluate(HEADINGS_JS))
            os.replace(tmp, out)
        finally:
            browser.close()
    if problems:
        raise SystemExit("print_pdf: " + "; ".join(problems[:10]))
    return {"path": str(out), "bytes": out.stat().st_size, "seconds": time.perf_counter() - start, **done}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html_dir", nargs="?", default="_build/singlehtml", type=Path)
    parser.add_argument("out", nargs="?", default="_build/pdf/book.pdf", type=Path)
    args = parser.parse_args(argv)
    info = print_pdf(args.html_dir, args.out)
    print(
        f"print_pdf: {info['path']} ({info['bytes'] / 1e6:.1f} MB, {info['chapters']} chapters, "
        f"{info['sections']} sections, {info['fitted']} wide equations or tables scaled to fit, "
        f"{info['bookmarks_fixed']} bookmark titles restored) "
        f"in {info['seconds']:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
