"""check()'s report as a student sees it: in JupyterLab, in headless Debian chromium (issue 29, item 5).

A JupyterLab server (the test environment's, ``python -m jupyterlab``) starts on a free port
with a random token, its own settings, workspaces, config and runtime folders and a root folder
holding one notebook; the server's process group is ended after the module. The notebook's
``check(softmax)`` output is what the kernel would store: IPython's display formatter applied to
the report of a wrong softmax (the whole tensor's max subtracted), in a notebook written like an
executed one, so JupyterLab renders its ``text/html`` as it renders a stored output (untrusted:
through its HTML sanitizer). JupyterLab's adaptive theme follows the browser's colour scheme.

In the rendered output: the likely mistake is above the failing tests and in the first
viewport, every table cell is left-aligned, text in backticks is a ``<code>`` element, the fix
and the passing tests are folded in closed ``<details>`` that open on a click, and axe-core
finds no violation of WCAG 2 A/AA (any impact) in the output area, with the light and with the
dark theme, the folded parts opened, and has measured the contrast of the report's text. axe
runs on the output only: JupyterLab 4.6's own chrome has violations (``aria-allowed-attr`` on
its toolbar buttons, ``aria-input-field-name`` on the cell editors, ``aria-required-children``
on the notebook's windowed list) that are not ours to fix. About 25 s in all, most of it
JupyterLab's start and first page load.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import ROOT
from IPython.core.formatters import DisplayFormatter
from pagecheck import axe_violations

from course_lib.grading import check

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WRONG_SOFTMAX = """def softmax(x, dim=-1):
    e = torch.exp(x - x.max())  # the whole tensor's max, not the max along dim
    return e / e.sum(dim, keepdim=True)"""
OUTPUT = ".jp-OutputArea-output:has(.course-lib-report)"
AXE_SCOPE = ".jp-OutputArea-output"  # the notebook's one output (axe-core's selectors have no :has())
WIDTH, HEIGHT = 1280, 900
#: How many elements of the output axe-core's colour-contrast rule measured (and passed).
CONTRAST_MEASURED = """scope => axe.run({include: [[scope]]}, {runOnly: {type: 'rule', values: ['color-contrast']}})
  .then(r => r.passes.reduce((n, rule) => n + rule.nodes.length, 0))"""


def _report_notebook() -> nbformat.NotebookNode:
    """A notebook as the kernel leaves it after ``check(softmax)`` on a wrong softmax."""
    namespace: dict = {"torch": torch}
    exec(WRONG_SOFTMAX, namespace)
    data, metadata = DisplayFormatter().format(check(namespace["softmax"]))
    assert "text/html" in data and "text/plain" in data
    v4 = nbformat.v4
    nb = v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        v4.new_code_cell("import torch\nfrom course_lib.grading import check", execution_count=1),
        v4.new_code_cell(WRONG_SOFTMAX, execution_count=2),
        v4.new_code_cell(
            "check(softmax)",
            execution_count=3,
            outputs=[v4.new_output("execute_result", data=data, metadata=metadata, execution_count=3)],
        ),
    ]
    return nb


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(folder: Path) -> None:
    """JupyterLab's user settings: the theme follows the colour scheme; no news, no update checks."""
    apputils = folder / "@jupyterlab" / "apputils-extension"
    apputils.mkdir(parents=True)
    (apputils / "themes.jupyterlab-settings").write_text(json.dumps({"adaptive-theme": True}))
    (apputils / "notification.jupyterlab-settings").write_text(
        json.dumps({"checkForUpdates": False, "fetchNews": "false"})
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server serving the report's notebook: ``(base URL, token)``."""
    base = tmp_path_factory.mktemp("jupyterlab")
    root = base / "notebooks"
    root.mkdir()
    nbformat.write(_report_notebook(), root / "report.ipynb")
    _settings(base / "settings")
    port, token = _free_port(), os.urandom(16).hex()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        **{f"JUPYTER_{d.upper()}_DIR": str(base / d) for d in ("config", "data", "runtime")},
    }
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--allow-root",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.terminals_enabled=False",
        f"--LabApp.user_settings_dir={base / 'settings'}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}",
    ]
    log = base / "jupyterlab.log"
    with open(log, "w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, f"JupyterLab stopped:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"JupyterLab did not answer in 60 s:\n{log.read_text()[-3000:]}"
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2).close()
                break
            except OSError:
                time.sleep(0.2)
        yield url, token
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and the kernel it started
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def page(lab, browser):
    """The notebook open in JupyterLab (light colour scheme), its report rendered."""
    url, token = lab
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT}, color_scheme="light")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{url}/lab/tree/report.ipynb?reset&token={token}")
    page.locator(f"{OUTPUT} .course-lib-report").wait_for(state="visible", timeout=60000)
    yield page
    context.close()
    assert not errors, f"JavaScript errors in JupyterLab: {errors}"


def _box(page, selector: str) -> dict:
    box = page.locator(selector).first.bounding_box()
    assert box is not None, f"{selector} is not shown"
    return box


def test_the_likely_mistake_is_above_the_failing_tests_and_in_the_first_viewport(page):
    output = _box(page, OUTPUT)
    mistake = _box(page, f"{OUTPUT} .course-lib-mistake")
    failing = _box(page, f"{OUTPUT} table")
    assert output["y"] <= mistake["y"] < failing["y"]
    assert mistake["y"] + mistake["height"] <= HEIGHT, (output, mistake)  # seen without scrolling
    assert "Likely mistake" in page.locator(f"{OUTPUT} .course-lib-mistake").inner_text()


def test_every_cell_is_left_aligned_and_backticks_are_code(page):
    aligns = page.eval_on_selector_all(
        f"{OUTPUT} td, {OUTPUT} th", "cells => cells.map(c => getComputedStyle(c).textAlign)"
    )
    assert len(aligns) > 8 and set(aligns) == {"left"}, aligns
    assert page.locator(f"{OUTPUT} .course-lib-mistake code").inner_text() == "dim"


def test_the_fix_and_the_passing_tests_are_folded_and_open_on_a_click(page):
    for folded, inside in (("course-lib-fix", "p"), ("course-lib-passing", "table")):
        details = page.locator(f"{OUTPUT} details.{folded}")
        assert not details.evaluate("d => d.open") and not details.locator(inside).is_visible(), folded
        details.locator("summary").click()
        assert details.evaluate("d => d.open") and details.locator(inside).is_visible(), folded
    fix = page.locator(f"{OUTPUT} details.course-lib-fix p").inner_text()
    assert "underflows to 0 / 0 = NaN" in fix


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_axe_finds_no_wcag_violation_in_the_output_in_either_theme(page, mode):
    page.emulate_media(color_scheme=mode)
    theme = "JupyterLab Dark" if mode == "dark" else "JupyterLab Light"
    page.wait_for_function(f"() => document.body.dataset.jpThemeName === {theme!r}", timeout=20000)
    page.eval_on_selector_all(f"{OUTPUT} details", "all => all.forEach(d => { d.open = true; })")  # everything shown
    # JupyterLab's <body> has no height and hides its overflow (the shell is positioned over
    # it), so axe-core would take every element for hidden and skip its colour-contrast rule
    page.evaluate("() => { document.body.style.height = '100vh'; }")
    assert page.locator(AXE_SCOPE).count() == 1
    violations = axe_violations(page, within=AXE_SCOPE, impacts=("minor", "moderate", "serious", "critical"))
    assert not violations, f"axe-core, {mode} theme: {violations}"
    contrast = page.evaluate(CONTRAST_MEASURED, AXE_SCOPE)
    assert contrast >= 10, f"axe-core measured the contrast of {contrast} element(s) of the report only"
