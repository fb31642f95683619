"""The book's chapters are executed two at a time before the build (book/_ext/execute_parallel.py).

The script must read a chapter exactly as myst-nb does, or the build would not find its
execution in the cache and would execute it again, one chapter after another. These tests
check the toc's notebooks, a tiny notebook executed and cached, a failing one left out of
the cache, and that every chapter of the book built by ``make book`` is in the cache as the
script reads it.
"""

from __future__ import annotations

import execute_parallel
from conftest import ROOT

NOTEBOOK = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A page

```{{code-cell}} ipython3
{code}
```
"""


def test_every_notebook_page_of_the_toc_is_found_in_order():
    names = [p.name for p in execute_parallel.chapters()]
    assert names == ["intro.md", *sorted(p.name for p in (ROOT / "book").glob("0*.md"))]


def test_an_executed_page_is_cached_and_its_changed_code_is_not(tmp_path):
    page, cache = tmp_path / "page.md", tmp_path / "cache"
    page.write_text(NOTEBOOK.format(code="print(1 + 1)"))
    assert not execute_parallel.is_cached(page, cache)
    name, seconds, error = execute_parallel.execute(page, timeout=60, cache_dir=cache)
    assert (name, error) == ("page.md", None) and seconds > 0
    assert execute_parallel.is_cached(page, cache)
    page.write_text(NOTEBOOK.format(code="print(2)"))
    assert not execute_parallel.is_cached(page, cache)


def test_a_failing_page_is_reported_and_not_cached(tmp_path):
    page, cache = tmp_path / "page.md", tmp_path / "cache"
    page.write_text(NOTEBOOK.format(code="raise ValueError('broken chapter')"))
    name, _, error = execute_parallel.execute(page, timeout=60, cache_dir=cache)
    assert name == "page.md" and "broken chapter" in error
    assert not execute_parallel.is_cached(page, cache)


def test_every_chapter_of_the_built_book_is_in_the_cache_as_the_script_reads_it():
    # make test builds the book first; a chapter the script reads differently from myst-nb
    # would have been executed by the build under another hash, and be missing here.
    for page in execute_parallel.chapters():
        assert execute_parallel.is_cached(page), page.name
