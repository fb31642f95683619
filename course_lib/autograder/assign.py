"""Write the student notebooks (``exercises/``) from the solution notebooks (``solutions/``).

The solution notebooks are the one source. In a code cell, the lines from
``### BEGIN SOLUTION`` to ``### END SOLUTION`` become::

    # YOUR CODE HERE
    raise NotImplementedError()

at the marker's indentation. In a Markdown cell, text from ``<!-- BEGIN SOLUTION -->`` to
``<!-- END SOLUTION -->`` (an answer to a "think about it" question) becomes
``*Your answer here.*``. Outputs and execution counts are cleared. A notebook named after an
assignment gets its name stamped into its metadata, ``metadata["course_lib"]["assignment"]``,
so ``course-lib collect`` finds the assignment of a submission whatever the student renamed it to.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

from ..assignments import ASSIGNMENTS

__all__ = ["make_exercise", "assign", "AssignError"]

_CODE_BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
_CODE_END = re.compile(r"^\s*### END SOLUTION\s*$")
_MD = re.compile(r"<!-- BEGIN SOLUTION -->.*?<!-- END SOLUTION -->", re.S)


class AssignError(ValueError):
    """A solution notebook whose solution markers do not pair up."""


def _strip_code(source: str, where: str) -> str:
    out: list[str] = []
    indent: str | None = None
    for n, line in enumerate(source.splitlines(keepends=True), 1):
        begin = _CODE_BEGIN.match(line)
        if begin:
            if indent is not None:
                raise AssignError(f"{where}, line {n}: BEGIN SOLUTION inside another solution region")
            indent = begin.group(1)
            out.append(f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()\n")
        elif _CODE_END.match(line):
            if indent is None:
                raise AssignError(f"{where}, line {n}: END SOLUTION without BEGIN SOLUTION")
            indent = None
        elif indent is None:
            out.append(line)
    if indent is not None:
        raise AssignError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    return "".join(out).rstrip("\n")


def make_exercise(notebook: dict, name: str = "notebook") -> dict:
    """The student version of one solution notebook (a dict in nbformat 4)."""
    nb = copy.deepcopy(notebook)
    for i, cell in enumerate(nb["cells"]):
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            src = _strip_code(src, f"{name}, cell {i}")
            cell["outputs"] = []
            cell["execution_count"] = None
        elif cell["cell_type"] == "markdown":
            src = _MD.sub("*Your answer here.*", src)
            if "BEGIN SOLUTION" in src or "END SOLUTION" in src:
                raise AssignError(f"{name}, cell {i}: unpaired SOLUTION marker in Markdown")
        cell["source"] = src
        cell.get("metadata", {}).pop("execution", None)
    slug = name.removesuffix(".ipynb")
    if slug in ASSIGNMENTS:
        nb.setdefault("metadata", {})["course_lib"] = {"assignment": slug}
    return nb


def dumps(nb: dict) -> str:
    """Notebook JSON as nbformat writes it (one space indent, sorted keys, final newline)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def assign(source_dir: str | Path = "solutions", out_dir: str | Path = "exercises", check: bool = False) -> list[Path]:
    """Write ``out_dir/NAME.ipynb`` for every ``source_dir/NAME.ipynb``.

    Args:
        source_dir: folder of solution notebooks.
        out_dir: folder for the student notebooks.
        check: write nothing; return the student notebooks that are missing or differ.

    Returns:
        The files written (or, with ``check``, the files out of date).
    """
    source_dir, out_dir = Path(source_dir), Path(out_dir)
    sources = sorted(source_dir.glob("*.ipynb"))
    if not sources:
        raise FileNotFoundError(f"assign: no notebooks in {source_dir}")
    changed: list[Path] = []
    for src in sources:
        nb = json.loads(src.read_text(encoding="utf-8"))
        text = dumps(make_exercise(nb, src.name))
        dest = out_dir / src.name
        if dest.exists() and dest.read_text(encoding="utf-8") == text:
            continue
        changed.append(dest)
        if not check:
            out_dir.mkdir(parents=True, exist_ok=True)
            dest.write_text(text, encoding="utf-8")
    return changed
