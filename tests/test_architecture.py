"""Which parts of course_lib may import which, read from the source (every import, at any depth).

- the student side (``course_lib.grading``, what notebooks import) never imports the instructor
  side (``course_lib.autograder``);
- the library (the modules directly in ``course_lib``) imports neither, except the command
  line, which registers the grader's subcommands;
- the sandbox (``course_lib.autograder.sandbox``) knows no rubric: it imports nothing of the
  checks (``course_lib.grading``); the autograder hands it calls, watch lists and a stand-in
  hook (``course_lib.autograder.sandbox_adapter``);
- ``grading/opwatch.py`` imports only the standard library and torch, ``grading/operands.py``
  only the standard library: the sandbox's worker runs their source, handed over by the
  autograder (the worker has its own test: tests/autograder/test_sandbox.py);
- no import cycle among the modules, counting the imports that run (those under ``if
  TYPE_CHECKING:`` only serve the type checker).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "course_lib"
LIBRARY_MAY_IMPORT_THE_GRADER = {"course_lib.cli"}  # registers `course-lib grade` and the rest


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


MODULES = {_module(p)[0]: p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:``."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for child in node.body for n in ast.walk(child)}
    return skip


def imports(name: str, runtime_only: bool = False) -> set[str]:
    """Every module a module imports: absolute names, ``from . import x`` resolved."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if _module(path)[1] else name.rpartition(".")[0]
    skip = _type_checking_only(tree) if runtime_only else set()
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES}
    return found


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_student_side_never_imports_the_instructor_side():
    bad = {
        (name, m)
        for name in MODULES
        if _inside(name, "course_lib.grading")
        for m in imports(name)
        if _inside(m, "course_lib.autograder")
    }
    assert not bad, bad


def test_the_library_imports_neither_grading_nor_the_autograder():
    library = [n for n, p in MODULES.items() if p.parent == PACKAGE and n not in LIBRARY_MAY_IMPORT_THE_GRADER]
    assert "course_lib.attention" in library and "course_lib.training" in library
    bad = {
        (name, m)
        for name in library
        for m in imports(name)
        if _inside(m, "course_lib.grading") or _inside(m, "course_lib.autograder")
    }
    assert not bad, bad


def test_the_sandbox_never_imports_the_grading_checks():
    sandbox = [name for name in MODULES if _inside(name, "course_lib.autograder.sandbox")]
    assert "course_lib.autograder.sandbox.conversation" in sandbox and "course_lib.autograder.sandbox.worker" in sandbox
    bad = {(name, m) for name in sandbox for m in imports(name) if _inside(m, "course_lib.grading")}
    assert not bad, bad


def test_what_the_sandbox_runs_from_source_imports_only_the_standard_library_and_torch():
    outside = {m.split(".")[0] for m in imports("course_lib.grading.opwatch")} - set(sys.stdlib_module_names)
    assert outside <= {"torch"}, outside
    outside = {m.split(".")[0] for m in imports("course_lib.grading.operands")} - set(sys.stdlib_module_names)
    assert not outside, outside


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_among_the_modules():
    # a module's own packages are always imported before it (``from . import x`` is no cycle)
    graph = {
        name: {m for m in imports(name, runtime_only=True) if m in MODULES and not _inside(name, m)} for name in MODULES
    }
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
