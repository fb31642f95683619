"""The checker version: what a grade depends on, hashed, so a change there (and only there) regrades.

It hashes an explicit list (``course_lib.autograder.autograde.checker_files``): the
reference modules the checks call and every file of the student-side checks.
"""

from __future__ import annotations

import ast
import importlib
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

import course_lib
from course_lib.autograder.autograde import REFERENCE_MODULES, checker_files, checker_version

PACKAGE = ROOT / "course_lib"


@pytest.fixture
def package(tmp_path) -> Path:
    """A copy of the course_lib folder, and of benchmarks/ beside it, to edit."""
    copy = tmp_path / "course_lib"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    assert checker_version(copy) == checker_version()
    return copy


def _edit(path: Path) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n# an edit\n")


@pytest.mark.parametrize(
    "relative",
    [
        "cli.py",
        "autograder/cli.py",
        "autograder/batch.py",
        "autograder/sandbox/runner.py",
        "autograder/sandbox/worker/student.py",
        "memory_probe.py",
        "training.py",
        "transformer.py",
        "../benchmarks/grading.py",
        "../benchmarks/attention_vs_torch.py",
    ],
)
def test_editing_the_cli_the_autograder_a_model_or_a_benchmark_leaves_it_unchanged(package, relative):
    _edit(package / relative)
    assert checker_version(package) == checker_version()


@pytest.mark.parametrize(
    "relative",
    [
        "attention.py",  # a reference implementation
        "softmax.py",  # one that another imports
        "_validation.py",  # argument validation the references run
        "assignments.py",  # which functions are graded
        "grading/judging.py",  # the judging
        "grading/rubrics/ch02.py",  # a check: cases, mistakes, feedback
        "grading/forbidden/walk.py",  # the forbidden-call walker
    ],
)
def test_editing_a_reference_or_a_check_changes_it(package, relative):
    _edit(package / relative)
    assert checker_version(package) != checker_version()


def test_a_new_file_among_the_checks_changes_it(package):
    (package / "grading" / "rubrics" / "ch08.py").write_text("EXERCISES = []\n")
    assert checker_version(package) != checker_version()


def _relative_imports(module_file: Path) -> set[str]:
    """The course_lib modules a module imports with ``from .x import`` (one level)."""
    names = set()
    for node in ast.walk(ast.parse(module_file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            names.add(node.module.split(".")[0] + ".py")
    return names


def test_the_list_holds_every_graded_functions_module_and_what_it_imports():
    needed = {
        Path(importlib.import_module(getattr(course_lib, n).__module__).__file__).name
        for n in course_lib.GRADED_FUNCTIONS
    }
    todo = list(needed)
    while todo:
        for name in _relative_imports(PACKAGE / todo.pop()):
            if name not in needed:
                needed.add(name)
                todo.append(name)
    assert needed <= set(REFERENCE_MODULES), sorted(needed - set(REFERENCE_MODULES))


def test_every_listed_file_exists_and_the_checks_are_all_there():
    files = checker_files()
    assert all(f.is_file() for f in files)
    assert set((PACKAGE / "grading").rglob("*.py")) <= set(files)
