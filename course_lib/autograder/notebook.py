"""Read a submitted notebook's code cells, refusing anything that is not a notebook.

Runs in the grader's process on untrusted bytes, so it only parses: size limit first, then
UTF-8, then JSON, then the nbformat 4 structure, then the amount of code. Every refusal is a
sentence for the student. IPython's magics and shell lines are turned into Python here, once
(:func:`python_source`): what the static scan reads is exactly what the sandbox runs.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable

from ..grading.parsing import parse_shared

__all__ = [
    "NotebookError",
    "code_cells",
    "python_source",
    "function_sources",
    "think_answers",
    "MAX_NOTEBOOK_BYTES",
    "MAX_CODE_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_ANSWER_CHARS",
]

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


#: A graded function's source kept in the record (for the class report) is cut at this length.
MAX_SOURCE_CHARS = 20_000
#: A "think about it" answer kept in the record is cut at this length.
MAX_ANSWER_CHARS = 5_000
_QUESTION = "**Think about it.**"
_PLACEHOLDER = "*Your answer here.*"
#: The link after each question, ``[the book's answer](../book/02_x.md#ch02-nb-label)``: its label is the id.
_ANSWER_LINK = re.compile(r"\[the book's answer\]\([^)\s]*#(ch\d+-nb-[A-Za-z0-9_-]+)\)")
_SOLUTION_MARKER = re.compile(r"<!--\s*(?:BEGIN|END) SOLUTION\s*-->")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def function_sources(cells: list[str], names: Iterable[str]) -> dict[str, str]:
    """The source text of the last top-level ``def`` of each of ``names`` in the code cells.

    Found statically (``ast``, nothing runs); a cell that does not parse is skipped.

    Args:
        cells: the code cells, as :func:`code_cells` returns them.
        names: the graded function names.

    Returns:
        Function name -> its source (decorators included), at most :data:`MAX_SOURCE_CHARS`
        characters; a name without a ``def`` is left out.
    """
    wanted, found = set(names), {}
    for cell in cells:
        try:
            tree = parse_shared(cell)  # the grader's scan has parsed it already
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        lines: list[str] | None = None
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in wanted:
                lines = lines if lines is not None else _LINE_BREAK.split(cell)
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                found[node.name] = "\n".join(lines[start - 1 : node.end_lineno])[:MAX_SOURCE_CHARS]
    return found


def _answer_text(text: str) -> str:
    """A student's answer: solution markers and the placeholder removed, at most :data:`MAX_ANSWER_CHARS`."""
    text = _SOLUTION_MARKER.sub("", text.replace(_PLACEHOLDER, ""))
    return text.strip()[:MAX_ANSWER_CHARS]


def _markdown_cells(data: bytes) -> list[str | None]:
    """Every cell of a notebook in order: a Markdown cell's text, None for any other cell."""
    try:
        nb = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, TypeError):
        return []
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return []
    out: list[str | None] = []
    for cell in nb["cells"]:
        src = cell.get("source", "") if isinstance(cell, dict) and cell.get("cell_type") == "markdown" else None
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        out.append(src if isinstance(src, str) else None)
    return out


def think_answers(data: bytes) -> list[dict[str, str]]:
    """The student's answers to the notebook's "think about it" questions.

    A question is a Markdown cell's paragraph starting ``**Think about it.**``, followed by the
    answer (the placeholder ``*Your answer here.*`` counts as none) and the link to the book's
    answer, whose label (``ch02-nb-mean-shift``) is the question's id. Text after the last link
    of a cell, and Markdown cells the student added right after it (up to a code cell, a heading
    or the next question), are part of that answer too.

    Args:
        data: the notebook file's bytes (an unreadable file has no answers).

    Returns:
        ``[{"id": ..., "answer": ...}]`` in notebook order, each answer at most
        :data:`MAX_ANSWER_CHARS` characters ("" when not answered).
    """
    cells = _markdown_cells(data)
    out: list[dict[str, str]] = []
    for i, src in enumerate(cells):
        if src is None or _QUESTION not in src:
            continue
        parts = src.split(_QUESTION)[1:]
        for j, part in enumerate(parts):
            link = _ANSWER_LINK.search(part)
            if link is None:
                continue
            head = part[: part.rfind("\n", 0, link.start()) + 1]  # up to the link's line
            body = re.split(r"\n[ \t]*\n", head, maxsplit=1)[1:]  # the question's paragraph dropped
            texts = body
            if j == len(parts) - 1:
                end = part.find("\n", link.end())
                texts = texts + ([part[end:]] if end >= 0 else [])
                for follow in cells[i + 1 :]:
                    if follow is None or _QUESTION in follow or follow.lstrip().startswith("#"):
                        break
                    texts.append(follow)
                    if sum(len(t) for t in texts) > MAX_ANSWER_CHARS:
                        break
            out.append({"id": link.group(1), "answer": _answer_text("\n\n".join(texts))})
    return out
