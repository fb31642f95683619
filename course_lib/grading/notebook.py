"""Read a submitted notebook's code cells, refusing anything that is not a notebook.

Runs in the grader's process on untrusted bytes, so it only parses: size limit first, then
UTF-8, then JSON, then the nbformat 4 structure. Every refusal is a sentence for the student.
"""

from __future__ import annotations

import json
import re

__all__ = ["NotebookError", "code_cells", "MAX_NOTEBOOK_BYTES"]

#: Larger submissions are refused unread (a notebook of six exercises is well under 1 MB).
MAX_NOTEBOOK_BYTES = 20_000_000

_MAGIC = re.compile(r"^\s*[%!]")


class NotebookError(ValueError):
    """The submission is not a readable Jupyter notebook; the message says why."""


def code_cells(data: bytes) -> list[str]:
    """The source of every code cell, with IPython magics and shell lines blanked.

    Raises:
        NotebookError: empty, too large, not UTF-8, not JSON, or not a notebook.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise NotebookError(f"expected the notebook's bytes, got {type(data).__name__}")
    if len(data) == 0:
        raise NotebookError("the file is empty")
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookError(f"the file is {len(data):,} bytes; notebooks over {MAX_NOTEBOOK_BYTES:,} bytes are not graded "
                            "(clear large outputs and submit again)")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise NotebookError(f"the file is not UTF-8 text (byte {e.start}): is it really a .ipynb notebook?") from None
    try:
        nb = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        raise NotebookError(f"the file is not valid JSON{where}, so it is not a Jupyter notebook; "
                            "save it from Jupyter and submit the .ipynb file") from None
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
        cells.append("\n".join("" if _MAGIC.match(line) else line for line in src.splitlines()))
    return cells
