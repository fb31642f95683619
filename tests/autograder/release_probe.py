"""Run in a fresh Python by tests/autograder/test_release.py: a student's machine with only the
released wheel installed (``argv[1]``, first on ``sys.path``) and the repository's course_lib
unreachable. Runs ``check()`` on the functions defined by the code cells given as JSON on stdin
(``{"steps": [{"cells": [[filename, source], ...], "names": [...]}, ...]}``, run in turn in one
namespace, as a student runs cells) and prints each step's reports as JSON."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

target = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path[:] = [target, *sys.path[1:]]  # not this script's folder: the repository is not on the path

import course_lib  # noqa: E402
from course_lib.grading import check, exercise  # noqa: E402

request = json.load(sys.stdin)
namespace: dict = {"__name__": "__main__"}
steps = []
for step in request["steps"]:
    for filename, source in step["cells"]:
        Path(filename).write_text(source, encoding="utf-8")
        exec(compile(source, filename, "exec"), namespace)  # the test's own student cells
    reports = {}
    for name in step["names"]:
        report = check(namespace[name], name=name)
        reports[name] = {
            "status": report.status,
            "score": report.score,
            "max_score": report.max_score,
            "diagnoses": report.diagnoses,
            "notes": report.notes,
        }
    steps.append(reports)
print(
    json.dumps(
        {
            "course_lib": course_lib.__file__,
            "modules": sorted(
                m
                for m in (
                    "course_lib.softmax",
                    "course_lib.attention",
                    "course_lib.layernorm",
                    "course_lib.grading.rubrics",
                )
                if importlib.util.find_spec(m) is not None
            ),
            "graded_attributes": sorted(n for n in course_lib.GRADED_FUNCTIONS if hasattr(course_lib, n)),
            "reference_softmax": __import__("inspect").getsource(exercise("softmax").reference),
            "steps": steps,
        }
    )
)
