"""Grading one Gradescope submission: what the bundle's ``run_autograder`` runs.

``python -m course_lib.autograder.gradescope_run --root /autograder`` reads the bundle's
configuration (``ROOT/source/course_lib_autograder.json``, a :class:`.gradescope.BundleConfig`),
finds the notebook in ``ROOT/submission`` (:func:`find_notebook`: renamed copies such as
``Copy of 02_self_attention (1).ipynb`` included), grades it with the checks and the sandbox of
``course-lib grade`` (:func:`.autograde.grade_or_fail`) and writes
``ROOT/results/results.json`` (:func:`.exports.gradescope_results`, with ``execution_time``).

Whatever happens, a ``results.json`` is written: no notebook, an unreadable one, several that
could be the one, no sandbox under ``sandbox: required``, or a fault of the grader's own each
give a score of 0 and a sentence that says why. The submission is hostile: links are not
followed, every file is read at most one byte past the size limit, and the sandbox never sees
the submission or results folders.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
import traceback
from dataclasses import replace
from hashlib import sha256
from pathlib import Path

from ..grading.registry import ASSIGNMENTS
from .autograde import failure_reason, grade_or_fail, refused_record
from .collect import assignment_from_name, stamped_assignment
from .exports import gradescope_results
from .gradescope import CONFIG_NAME, BundleConfig
from .notebook import MAX_NOTEBOOK_BYTES, NotebookError, code_cells
from .record import Record

__all__ = ["assignment_in_name", "find_notebook", "grade_submission_folder", "lock_down", "main"]

#: The most notebooks of one submission read to find the one to grade (the first, by name).
MAX_NOTEBOOKS = 20
#: Folders of a submission that hold no student work (macOS's zip metadata, Jupyter's copies).
_SKIPPED_DIRS = {"__MACOSX", ".ipynb_checkpoints"}


def assignment_in_name(name: str) -> str | None:
    """The assignment a file name names (:func:`.collect.assignment_from_name`: ``Copy of``,
    ``(1)``, ``-Copy1`` and a prefix such as ``smith_12345_678_`` removed), or None."""
    return assignment_from_name(name) or None


def _files(folder: Path) -> list[Path]:
    """The files under ``folder`` (links never followed), in name order."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        found += [Path(dirpath) / f for f in sorted(filenames)]
    return found


def _read(path: Path) -> bytes:
    """A regular file's bytes, at most one past the size limit (a link is read as nothing)."""
    if path.is_symlink() or not path.is_file():
        return b""
    with open(path, "rb") as f:
        return f.read(MAX_NOTEBOOK_BYTES + 1)


def _defines(data: bytes, assignment: str) -> int:
    """How many of ``assignment``'s graded functions a notebook's text defines."""
    text = data.decode("utf-8", "replace")
    return sum(bool(re.search(rf"def\s+{name}\s*\(", text)) for name in ASSIGNMENTS[assignment])


def find_notebook(folder: Path, assignment: str | None) -> tuple[Path | None, str | None, str]:
    """The submission's notebook, its assignment, and a sentence on what was found.

    One notebook is the one. Among several, the one whose name (:func:`assignment_in_name`)
    or stamped metadata names ``assignment``, else the one that defines most of its graded
    functions. Without an ``assignment`` it is found from the notebook: its stamp, its name,
    or the graded functions it defines. The path is None when no notebook is found; the
    assignment None when it cannot be told."""
    files = _files(folder)
    notebooks = [p for p in files if p.name.lower().endswith(".ipynb")][:MAX_NOTEBOOKS]
    if not notebooks:
        seen = f" (files seen: {', '.join(p.name for p in files[:10])})" if files else " (the submission is empty)"
        return None, assignment, f"no notebook (.ipynb file) in your submission{seen}"
    data = {p: _read(p) for p in notebooks}
    if assignment is None:
        return _choose_any(notebooks, data)
    ranked = sorted(
        notebooks,
        key=lambda p: (
            -(assignment in (assignment_in_name(p.name), stamped_assignment(data[p]))),
            -_defines(data[p], assignment),
        ),
    )
    note = f"graded {ranked[0].name}" + (f" (of {len(notebooks)} notebooks)" if len(notebooks) > 1 else "")
    return ranked[0], assignment, note


def _choose_any(notebooks: list[Path], data: dict[Path, bytes]) -> tuple[Path | None, str | None, str]:
    """The notebook and its assignment when the bundle grades whichever assignment it is given."""
    for p in notebooks:
        slug = stamped_assignment(data[p]) or assignment_in_name(p.name)
        if slug is not None:
            return p, slug, f"graded {p.name} as {slug}"
    best = max(((_defines(data[p], a), p, a) for p in notebooks for a in ASSIGNMENTS), key=lambda t: t[0])
    if best[0] == 0:
        names = ", ".join(p.name for p in notebooks[:10])
        return notebooks[0], None, f"cannot tell which assignment {names} is: name it like {next(iter(ASSIGNMENTS))}"
    return best[1], best[2], f"graded {best[1].name} as {best[2]} (from the functions it defines)"


def _grade(root: Path, config: BundleConfig) -> tuple[Record | None, str]:
    """The record of the submission in ``root`` (None: no assignment could be told), and a note."""
    from .sandbox import Runner, SandboxUnavailable
    from .sandbox_adapter import watch_lists

    path, assignment, note = find_notebook(root / "submission", config.assignment)
    if assignment is None:
        return None, note
    if path is None:
        return refused_record(assignment, note, seed=config.seed), note
    data = _read(path)
    digest = sha256(data).hexdigest()
    try:
        code_cells(data)  # a file that is no notebook is refused before a sandbox starts
    except NotebookError as err:
        return refused_record(assignment, str(err), digest, seed=config.seed), note
    hide = [str(root / "submission"), str(root / "results")]
    try:
        with Runner(mode=config.sandbox, limits=config.limits, hide=hide, watch=watch_lists()) as runner:
            return grade_or_fail(runner, data, assignment, config.seed, digest), note
    except SandboxUnavailable as err:
        reason = f"the autograder requires a sandbox and this container has none ({err})"
        return replace(
            refused_record(assignment, reason, sha256(data).hexdigest(), seed=config.seed), status="error"
        ), note


def _not_graded(reason: str, config: BundleConfig) -> dict:
    """Results for a submission that has no record: 0 points and the reason."""
    return {
        "score": 0,
        "output": f"Not graded: {reason}.",
        "output_format": "text",
        "visibility": config.visibility,
        "stdout_visibility": "hidden",
        "extra_data": {"status": "invalid", "seed": config.seed, "flags": []},
        "tests": [],
    }


def grade_submission_folder(root: Path) -> dict:
    """Grade ``root/submission`` as the bundle in ``root/source`` says; the ``results.json``
    content (never raises: a fault of the grader's own is a result with its reason)."""
    start = time.monotonic()
    config = BundleConfig()
    try:
        config = BundleConfig.from_json(json.loads((root / "source" / CONFIG_NAME).read_text(encoding="utf-8")))
        record, note = _grade(root, config)
        print(f"course_lib autograder: {note}")
        results = gradescope_results(record, config.visibility) if record else _not_graded(note, config)
    except Exception as e:  # noqa: BLE001 - the student still gets a results.json that says why
        traceback.print_exc(file=sys.stdout)  # stdout: the instructor's debugging view
        results = _not_graded(f"the autograder failed ({failure_reason(e)})", config)
        results["extra_data"]["status"] = "error"
    results["execution_time"] = math.ceil(time.monotonic() - start)
    results["extra_data"]["checker"] = _checker()
    return results


def _checker() -> str:
    from .autograde import checker_version

    try:
        return checker_version()
    except OSError:
        return ""


def write_results(root: Path, results: dict) -> Path:
    """``root/results/results.json``, written whole or not at all."""
    out = root / "results"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, out / "results.json")
    return out / "results.json"


def lock_down(root: Path) -> list[Path]:
    """Make the bundle (``root/source``: the configuration with the seed, the wheel) and the
    installed ``course_lib`` (the reference implementations) readable by root only. Where the
    container allows no sandbox, the student's code runs as an unprivileged uid with no walls
    (``isolation: none``) and could otherwise read them; the grader, root, still does. Done only
    as root, and to ``course_lib`` only where it is installed (inside ``sys.prefix``), never to
    a checkout. Returns the folders locked."""
    if os.geteuid() != 0:
        return []
    package = Path(__file__).resolve().parents[1]
    folders = [root / "source"]
    if package.is_relative_to(Path(sys.prefix).resolve()):
        folders.append(package)
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink():
            folder.chmod(0o700)
    return folders


def main(argv: list[str] | None = None) -> int:
    """``run_autograder``'s entry point: grade, write ``results.json``, print a summary line."""
    p = argparse.ArgumentParser(prog="python -m course_lib.autograder.gradescope_run")
    p.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", "/autograder"))
    args = p.parse_args(argv)
    root = Path(args.root)
    lock_down(root)
    results = grade_submission_folder(root)
    path = write_results(root, results)
    extra = results["extra_data"]
    print(
        f"course_lib autograder: {extra.get('status')} {results['score']:g} points, "
        f"isolation {extra.get('isolation', 'none')}, {results['execution_time']} s -> {path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
