"""Read a submitted notebook's code cells, refusing anything that is not a notebook.

Runs in the grader's process on untrusted bytes, so it only parses: size limit first, then
UTF-8, then JSON, then the nbformat 4 structure, then the amount of code. Every refusal is a
sentence for the student. IPython's magics and shell lines are turned into Python here, once
(:func:`python_source`): what the static scan reads is exactly what the sandbox runs.
"""

from __future__ import annotations

import json

__all__ = ["NotebookError", "code_cells", "python_source", "MAX_NOTEBOOK_BYTES", "MAX_CODE_CHARS"]

#: Larger submissions are refused unread (a notebook of six exercises is well under 1 MB).
MAX_NOTEBOOK_BYTES = 20_000_000
#: All code cells together (the solutions have about 8,000 characters of code each); more is
#: refused before anything is parsed, so no submission can make the grader's parse slow.
MAX_CODE_CHARS = 300_000
#: Cell magics whose body is Python (timing, capturing): the body runs; any other cell magic
#: (``%%bash``, ``%%html``...) makes the cell not Python, so it is not run.
_PYTHON_CELL_MAGICS = ("time", "timeit", "capture", "prun")


class NotebookError(ValueError):
    """The submission is not a readable Jupyter notebook; the message says why."""


def python_source(src: str) -> str:
    """A cell as Python: line magics and shell lines (``%time``, ``!pip``) become ``pass`` at
    their indentation, a Python cell magic's first line is dropped, any other cell magic makes
    the cell empty."""
    lines = src.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].split()[0][2:]
        if magic not in _PYTHON_CELL_MAGICS:
            return ""
        lines = [""] + lines[1:]
    out = []
    for line in lines:
        stripped = line.lstrip()
        out.append(line[: len(line) - len(stripped)] + "pass" if stripped.startswith(("%", "!")) else line)
    return "\n".join(out)


def code_cells(data: bytes) -> list[str]:
    """The source of every code cell, as Python (see :func:`python_source`).

    Raises:
        NotebookError: empty, too large, not UTF-8, not JSON, not a notebook, or more code
            than :data:`MAX_CODE_CHARS`.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise NotebookError(f"expected the notebook's bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise NotebookError("the file is empty")
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"the file is {len(data):,} bytes; notebooks over {MAX_NOTEBOOK_BYTES:,} bytes are not graded "
            "(clear large outputs and submit again)"
        )
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotebookError(f"the file is not UTF-8 text (byte {e.start}): is it really a .ipynb notebook?") from None
    try:
        nb = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        raise NotebookError(
            f"the file is not valid JSON{where}, so it is not a Jupyter notebook; "
            "save it from Jupyter and submit the .ipynb file"
        ) from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError("the file is JSON but not a Jupyter notebook (no list of cells)")
    cells: list[str] = []
    for i, cell in enumerate(nb["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        if not isinstance(src, str):
            raise NotebookError(f"code cell {i} has no readable source")
        cells.append(python_source(src))
    total = sum(len(c) for c in cells)
    if total > MAX_CODE_CHARS:
        raise NotebookError(
            f"the notebook has {total:,} characters of code; notebooks with more than "
            f"{MAX_CODE_CHARS:,} are not graded (an exercise notebook needs far fewer)"
        )
    return cells
