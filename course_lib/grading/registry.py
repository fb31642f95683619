"""The exercises of each assignment, looked up from the one table in :mod:`course_lib.assignments`.

An assignment is one exercise notebook, named as in ``exercises/`` (``02_self_attention``);
its exercises live in the module the table names (``course_lib/grading/rubrics/ch02.py``)
as a list ``EXERCISES``. In a released student package (:mod:`.released`) there are no rubrics:
the exercises are rebuilt from the release's data.
"""

from __future__ import annotations

import importlib

from ..assignments import ASSIGNMENTS, TABLE
from .exercise_spec import Exercise
from .released import is_released, load_assignment

__all__ = ["ASSIGNMENTS", "assignment_of", "exercise", "exercises_of"]

_MODULES = {a.slug: f"course_lib.grading.rubrics.{a.module}" for a in TABLE}
_cache: dict[str, Exercise] = {}


def assignment_of(name: str) -> str:
    """The assignment that grades function ``name``."""
    for slug, names in ASSIGNMENTS.items():
        if name in names:
            return slug
    raise KeyError(
        f"{name!r} is not a graded function; graded: {', '.join(n for v in ASSIGNMENTS.values() for n in v)}"
    )


def exercise(name: str) -> Exercise:
    """The :class:`Exercise` for graded function ``name``."""
    if name not in _cache:
        if is_released():
            for ex in load_assignment(assignment_of(name)):
                _cache[ex.name] = ex
            return _cache[name]
        module = importlib.import_module(_MODULES[assignment_of(name)])
        for ex in module.EXERCISES:
            _cache[ex.name] = ex
        if name not in _cache:
            raise KeyError(f"{_MODULES[assignment_of(name)]} defines no exercise for {name!r}")
    return _cache[name]


def exercises_of(slug: str) -> list[Exercise]:
    """The exercises of one assignment, in notebook order."""
    if slug not in ASSIGNMENTS:
        raise KeyError(f"unknown assignment {slug!r}; choose from {', '.join(ASSIGNMENTS)}")
    return [exercise(n) for n in ASSIGNMENTS[slug]]
