"""The book shows course_lib's own code where it explains it, and nothing but that code.

Every graded function is listed, folded, on its own chapter's page (the assignment's slug is
the chapter's file name), and so are the teaching modules; what a listing shows is exactly
the object's source as ``inspect.getsource`` reads it from the package. The directive itself
(book/_ext/implementations.py) is tested on a tiny Sphinx project: a listing is the source,
``BOOK_IMPLEMENTATIONS=hide`` replaces it by a sentence, and a name that does not exist
stops the build.
"""

from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from conftest import ROOT

import course_lib
from course_lib.assignments import TABLE

HTML = Path(os.environ.get("BOOK_HTML", ROOT / "_build" / "html")).resolve()

# The teaching modules, each on the page that builds it: (dotted name, chapter).
TEACHING = {
    "course_lib.multihead.MultiHeadAttention": "03_multi_head_attention",
    "course_lib.layernorm.LayerNorm": "05_layer_norm",
    "course_lib.transformer.EncoderLayer": "06_transformer",
    "course_lib.transformer.DecoderLayer": "06_transformer",
    "course_lib.transformer.Transformer.forward": "06_transformer",
    "course_lib.transformer.Transformer.decode_step": "06_transformer",
    "course_lib.training._train": "06_transformer",
    "course_lib.multihead.fused_attention": "07_efficient_attention",
}


def dotted(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


REQUIRED = {dotted(getattr(course_lib, name)): a.slug for a in TABLE for name in a.functions} | TEACHING


def resolve(target: str):
    """The object a dotted name such as ``course_lib.transformer.Transformer.forward`` names."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise LookupError(target)


def listings(page: Path) -> dict[str, str]:
    """Dotted name -> the code a page's folded listing shows."""
    soup = BeautifulSoup(page.read_text(encoding="utf8"), "html.parser")
    return {d["data-object"]: d.find("pre").get_text() for d in soup.select("details.implementation[data-object]")}


@pytest.fixture(scope="module")
def shown() -> dict[str, dict[str, str]]:
    """Chapter name -> its listings, for every page of the built book."""
    assert (HTML / "index.html").is_file(), f"no book at {HTML}: build it first (`make book`; make test does)"
    return {p.stem: listings(p) for p in sorted((HTML / "book").glob("*.html"))}


def covered(target: str, on_page: dict[str, str]) -> bool:
    """Listed itself, or inside a listed class (``Transformer`` covers ``Transformer.forward``)."""
    parts = target.split(".")
    return any(".".join(parts[:cut]) in on_page for cut in range(len(parts), 2, -1))


@pytest.mark.book
@pytest.mark.parametrize("target", sorted(REQUIRED))
def test_every_implementation_is_shown_on_its_chapter(shown, target):
    chapter = REQUIRED[target]
    assert chapter in shown, f"no page book/{chapter}.html in the built book"
    assert covered(target, shown[chapter]), (
        f"{target} is not listed on book/{chapter} (add ```{{implementation}} {target}``` where the chapter explains it)"
    )


@pytest.mark.book
def test_every_listing_is_the_source_itself(shown):
    checked = 0
    for chapter, on_page in shown.items():
        for target, code in on_page.items():
            expected = textwrap.dedent(inspect.getsource(resolve(target)))
            assert code.strip("\n") == expected.strip("\n"), (
                f"book/{chapter}: the listing of {target} is not its source"
            )
            checked += 1
    assert checked >= len(REQUIRED) - 1  # Transformer may be shown whole, covering two names


MODULE = '''"""A module."""


def f(x):
    """Add one."""
    return x + 1


class C:
    def m(self):
        return 2
'''


def build(tmp_path: Path, page: str, hide: bool = False) -> subprocess.CompletedProcess:
    """Build a one-page Sphinx project with the extension; the page is MyST Markdown."""
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "mod.py").write_text(MODULE)
    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        'extensions = ["myst_parser", "implementations"]\n'
    )
    (tmp_path / "index.md").write_text(page)
    env = {k: v for k, v in os.environ.items() if k != "BOOK_IMPLEMENTATIONS"}
    if hide:
        env["BOOK_IMPLEMENTATIONS"] = "hide"
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html", str(tmp_path), str(tmp_path / "_out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


PAGE = "# T\n\n```{implementation} pkg.mod.f\n```\n\n```{implementation} pkg.mod.C.m\n```\n"


@pytest.mark.slow
def test_a_listing_is_the_objects_source_folded(tmp_path):
    done = build(tmp_path, PAGE)
    assert done.returncode == 0, done.stderr
    shown = listings(tmp_path / "_out" / "index.html")
    assert shown["pkg.mod.f"].strip() == 'def f(x):\n    """Add one."""\n    return x + 1'
    assert shown["pkg.mod.C.m"].strip() == "def m(self):\n    return 2"  # a method, dedented
    html = (tmp_path / "_out" / "index.html").read_text()
    assert "<details" in html and "<details open" not in html  # folded: try the notebook first


@pytest.mark.slow
def test_hide_builds_the_book_without_the_code(tmp_path):
    done = build(tmp_path, PAGE, hide=True)
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "_out" / "index.html").read_text()
    assert "return x + 1" not in html and "details" not in html
    assert html.count("is left to the exercise notebook") == 2


@pytest.mark.slow
@pytest.mark.parametrize("target", ["pkg.mod.g", "pkg.nothing.f"])
def test_a_listing_of_something_that_does_not_exist_stops_the_build(tmp_path, target):
    done = build(tmp_path, f"# T\n\n```{{implementation}} {target}\n```\n")
    assert done.returncode != 0
    assert "implementation" in done.stderr or "pyobject" in done.stderr or target.split(".")[-1] in done.stderr
