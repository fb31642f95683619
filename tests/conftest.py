"""Shared test configuration for the course_lib test suite.

- Every test starts from the same torch RNG state (``seed_torch``), so a failure
  reproduces exactly.
- Hypothesis runs without a deadline (the first call into torch can be slow) and
  without an on-disk example database. Each property test sets its own modest
  ``max_examples``.
- Tests write into pytest's ``tmp_path``; the browser test of the book also keeps its
  screenshots in ``artifacts/screenshots`` for a person to look at.
- Shared helpers live here and are imported by name (``from conftest import ROOT``): the
  folder of this file is on ``sys.path`` when pytest collects.

Tests mirror the package: ``lib/`` the model modules, ``grading/`` the student-side checks,
``autograder/`` the instructor's side and its sandbox, ``book/`` the built book.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

#: The repository's root folder (``solutions/``, ``exercises/``, ``book/``, ``_build/``).
ROOT = Path(__file__).resolve().parents[1]

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
