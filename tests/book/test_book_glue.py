"""A glue name that is missing fails the book's build, every time (book/_ext/strict_glue.py).

myst-nb alone only warns and renders an empty span; with -W the first build fails, but a
second build of the same tree skips the unchanged page and succeeds. These tests build a
one-page Sphinx project with a notebook whose outputs are stored (no kernel is started),
using the book's extension, and check that the build fails twice in a row, then passes once
the name exists. A few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import yaml
from conftest import ROOT

EXT = ROOT / "book" / "_ext"

CONF = f"""
import sys
sys.path.insert(0, {str(EXT)!r})
extensions = ["myst_nb", "strict_glue"]
nb_execution_mode = "off"
"""


def _notebook(prose: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell('from myst_nb import glue\nglue("ratio", 0.5, display=False)')
    prefix = "application/papermill.record/"
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={prefix + "text/plain": "0.5"},
            metadata={"scrapbook": {"name": "ratio", "mime_prefix": prefix}},
        )
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# Glue"), cell, nbformat.v4.new_markdown_cell(prose)]
    return nb


def _project(tmp_path: Path, prose: str) -> Path:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "conf.py").write_text(CONF)
    nbformat.write(_notebook(prose), src / "index.ipynb")
    return src


def _build(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-b",
            "html",
            "-W",
            "-n",
            "--keep-going",
            "-q",
            str(src),
            str(src.parent / "out" / "html"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_glue_name_fails_every_build_until_it_exists(tmp_path):
    src = _project(tmp_path, "Ratio {glue:text}`ratio:.0%`, missing {glue:text}`no_such_name`.")
    for attempt in (1, 2):  # the second build must not skip the page and pass
        result = _build(src)
        assert result.returncode != 0, f"build {attempt} passed with a missing glue name"
        assert "Glue error" in result.stderr and "no_such_name" in result.stderr, result.stderr[-2000:]

    nbformat.write(_notebook("Ratio {glue:text}`ratio:.0%`, present {glue:text}`ratio`."), src / "index.ipynb")
    result = _build(src)
    assert result.returncode == 0, result.stderr[-2000:]
    html = (src.parent / "out" / "html" / "index.html").read_text()
    assert '<span class="pasted-text">50%</span>' in html


def test_a_format_that_does_not_apply_is_an_error_too(tmp_path):
    src = _project(tmp_path, "Ratio {glue:text}`ratio:%Y-%m`.")
    result = _build(src)
    assert result.returncode != 0 and "Glue error" in result.stderr, result.stderr[-2000:]


def test_the_book_loads_the_extension():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["sphinx"]["local_extensions"].get("strict_glue") == "book/_ext"
