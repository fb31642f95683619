"""Shared test configuration for the course_lib test suite.

- Every test starts from the same torch RNG state (``seed_torch``), so a failure
  reproduces exactly.
- Hypothesis runs without a deadline (the first call into torch can be slow) and
  without an on-disk example database, so the suite writes nothing outside ``tests/``.
  Each property test sets its own modest ``max_examples``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# Make ``import course_lib`` work however pytest is launched (``pytest`` or ``python -m pytest``).
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

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
