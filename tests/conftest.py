"""Shared test configuration for the course_lib test suite.

- Every test starts from the same torch RNG state (``seed_torch``), so a failure
  reproduces exactly.
- Hypothesis runs without a deadline (the first call into torch can be slow) and
  without an on-disk example database. Each property test sets its own modest
  ``max_examples``.
- The browser tests share one fixture, ``browser`` (headless chromium, one per module).
- Tests write into pytest's ``tmp_path``; the browser test of the book also keeps its
  screenshots in ``artifacts/screenshots`` for a person to look at.
- Shared helpers live here and are imported by name (``from conftest import ROOT``): the
  folder of this file is on ``sys.path`` when pytest collects.

Tests mirror the package: ``lib/`` the model modules, ``grading/`` the student-side checks,
``autograder/`` the instructor's side and its sandbox, ``book/`` the built book.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

#: The repository's root folder (``solutions/``, ``exercises/``, ``book/``, ``_build/``).
ROOT = Path(__file__).resolve().parents[1]

#: A student's softmax, written honestly (the NaN-safe form), for notebooks the tests build.
HONEST_SOFTMAX = """
def softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=dim, keepdim=True)
    return e / torch.where(total == 0, torch.ones_like(total), total)
"""


def notebook(*cells: str) -> bytes:
    """An nbformat 4 notebook of these code cells, as the bytes a student would submit."""
    nb = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb).encode()


# The book's own modules (``book/ch02_cost.py``, ``book/agreement.py``, ...) and its Sphinx
# extensions (``book/_ext/print_pdf.py``, ...), importable by name from every test.
sys.path.insert(0, str(ROOT / "book"))
sys.path.insert(0, str(ROOT / "book" / "_ext"))
# ``pagecheck`` (axe-core and the other checks of a page in chromium), for every browser test.
sys.path.insert(0, str(ROOT / "tests" / "book"))
#: Debian's chromium, which the browser tests drive through Playwright (``make test`` installs
#: it), with the book's own flags for printing it (no background traffic: no network here).
from print_pdf import CHROMIUM, CHROMIUM_ARGS  # noqa: E402 - re-exported to the browser tests

settings.register_profile(
    "course_lib",
    deadline=None,
    database=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("course_lib")


@pytest.fixture(autouse=True)
def seed_torch():
    """Seed torch's global RNG before every test."""
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="module")
def browser():
    """Headless Debian chromium, driven by Playwright, for the tests of one module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield b
        b.close()


def assert_full_marks(report) -> None:
    """A :class:`~course_lib.grading.Report` that passed every test, with points to give."""
    assert report.status == "passed", str(report)
    assert report.score == report.max_score > 0, str(report)


def assert_diagnosed(report, phrase: str) -> None:
    """A failed report that lost points and names the mistake (a diagnosis containing ``phrase``)."""
    assert report.status == "failed", str(report)
    assert report.score < report.max_score, str(report)
    assert any(phrase in d for d in report.diagnoses), f"expected a diagnosis with {phrase!r}:\n{report}"


def assert_forbidden(report, phrase: str) -> None:
    """A report refused for a forbidden call: 0 points, and a note that names it (``phrase``)."""
    assert report.status == "forbidden"
    assert report.score == 0
    assert any(phrase in n for n in report.notes), report.notes


def implementation_id(fn) -> str:
    """A test id for an implementation: where it comes from and its name (``course_lib.softmax``)."""
    return f"{fn.__module__.split('.')[0]}.{fn.__name__}"


def pytest_collection_modifyitems(config, items):
    """Mark tests by the room they test: everything under ``book/`` needs the built book, and
    everything under ``autograder/`` is ``serial``: its tests start grading runners under one
    uid (``60000 + slot``, slot 0 unless a test picks another), and some count that uid's
    processes and the ``course-lib-*`` memory cgroups machine-wide, so ``make test`` runs them
    one after another in a stream of their own, beside the tests that start no runner."""
    for item in items:
        parents = Path(item.path).parents
        if ROOT / "tests" / "book" in parents:
            item.add_marker(pytest.mark.book)
        if ROOT / "tests" / "autograder" in parents:
            item.add_marker(pytest.mark.serial)
