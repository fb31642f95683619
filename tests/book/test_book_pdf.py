"""`make pdf`'s pipeline on a two-chapter book: single-page build, then book/_ext/print_pdf.py.

The whole book takes a minute or more to print, so this test builds a small book with the
same theme, extensions and kinds of content (a hidden-input code cell with an SVG figure,
numbered and inline math, math in a heading, an exercise with a dropdown solution, a long
code line, an equation wider than the page) and prints it with the same script. It checks
that the PDF has pages, a contents page, and bookmarks with the headings' own titles
(introduction and chapters at the top level, sections under them, math as text). The
script itself fails on a console error, a request leaving localhost, untypeset math or an
image that did not load. About 20 s.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import print_pdf
import pytest
from conftest import ROOT

EXT = ROOT / "book" / "_ext"

pytestmark = pytest.mark.browser

SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="80" viewBox="0 0 200 80">'
    '<rect x="5" y="5" width="190" height="70" fill="#cfe2f3" stroke="#3d6fa8"/></svg>'
)

CONFIG = f"""
title: "A small book"
author: "Test"
only_build_toc_files: true
execute:
  execute_notebooks: "off"
launch_buttons:
  thebe: false
sphinx:
  extra_extensions: [sphinx_exercise]
  local_extensions:
    offline_book: {EXT}
  config:
    numfig: true
    math_numfig: true
"""

TOC = """
format: jb-book
root: intro
options:
  numbered: true
chapters:
- file: ch1
- file: ch2
"""

INTRO = """# A small book

Inline math $x^2$ and a numbered equation:

```{math}
:label: eq-small
y = \\frac{a}{b}
```

## Who it is for

Everyone.
"""

CH2 = """# Chapter two

## A wide equation

$$
a_1 + a_2 + a_3 + a_4 + a_5 + a_6 + a_7 + a_8 + a_9 + a_{10} + a_{11} + a_{12} + a_{13} + a_{14} + a_{15} + a_{16}
+ a_{17} + a_{18} + a_{19} + a_{20} + a_{21} + a_{22} + a_{23} + a_{24} + a_{25} + a_{26} + a_{27} = b
$$

```{exercise}
:label: ex-small
What is $1 + 1$?
```

```{solution} ex-small
:class: dropdown
Two.
```
"""


def _chapter_one() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    code = nbformat.v4.new_code_cell("x = 1  # " + "a long comment " * 12, metadata={"tags": ["hide-input"]})
    code.outputs = [nbformat.v4.new_output("display_data", data={"image/svg+xml": SVG, "text/plain": "<svg>"})]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Chapter one\n\nText.\n\n## A section with $\\sqrt{D}$\n\nMore text."),
        code,
        nbformat.v4.new_markdown_cell("## Another section\n\nThe end."),
    ]
    return nb


def _bookmarks(pdf: bytes) -> list[str]:
    """Bookmark titles in document order, from the latest version of each object."""
    objects = {}
    for m in re.finditer(rb"\n(\d+) 0 obj\n(<<.*?>>)\nendobj", pdf, re.S):
        objects[int(m.group(1))] = m.group(2)  # an incremental update comes later in the file
    catalog = next(body for body in objects.values() if b"/Type /Catalog" in body)
    first = re.search(rb"/First (\d+) 0 R", objects[int(re.search(rb"/Outlines (\d+) 0 R", catalog).group(1))])
    titles: list[str] = []

    def walk(num, depth):
        while num is not None:
            body = objects[num]
            raw = re.search(rb"/Title (\((?:[^()\\]|\\.)*\)|<[0-9A-Fa-f]*>)", body).group(1)
            titles.append("  " * depth + print_pdf._pdf_unstring(raw))
            child = re.search(rb"/First (\d+) 0 R", body)
            walk(int(child.group(1)) if child else None, depth + 1)
            nxt = re.search(rb"/Next (\d+) 0 R", body)
            num = int(nxt.group(1)) if nxt else None

    walk(int(first.group(1)), 0)
    return titles


def test_a_small_book_prints_with_contents_and_bookmarks(tmp_path):
    # A missing browser is a failure, not a skip: make test installs Debian chromium.
    assert Path(print_pdf.CHROMIUM).exists(), f"{print_pdf.CHROMIUM} is missing: run make sysdeps"
    src = tmp_path / "book"
    src.mkdir()
    (src / "_config.yml").write_text(CONFIG)
    (src / "_toc.yml").write_text(TOC)
    (src / "intro.md").write_text(INTRO)
    nbformat.write(_chapter_one(), src / "ch1.ipynb")
    (src / "ch2.md").write_text(CH2)
    jb = Path(sys.executable).with_name("jupyter-book")
    build = subprocess.run(
        [str(jb), "build", str(src), "--builder", "singlehtml", "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]

    out = tmp_path / "pdf" / "book.pdf"
    info = print_pdf.print_pdf(src / "_build" / "singlehtml", out)
    pdf = out.read_bytes()
    assert pdf.startswith(b"%PDF-")
    pages = len(re.findall(rb"/Type /Page\b(?!s)", pdf))
    assert pages >= 3, f"{pages} pages"  # contents, introduction, and each chapter on a new page
    assert info["chapters"] == 2 and info["fitted"] >= 1  # the wide equation was scaled to fit
    assert _bookmarks(pdf) == [
        "Contents",
        "A small book",
        "  Who it is for",
        "1. Chapter one",
        "  1.1. A section with \u221aD",
        "  1.2. Another section",
        "2. Chapter two",
        "  2.1. A wide equation",
    ]
