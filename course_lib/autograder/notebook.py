"""Read a submitted notebook's code cells, refusing anything that is not a notebook.

Runs in the grader's process on untrusted bytes, so it only parses: size limit first, then
UTF-8, then JSON, then the nbformat 4 structure, then the amount of code. Every refusal is a
sentence for the student. Each cell is turned into Python here, once, by IPython's own input
transformer (:func:`python_source`): what the static scan reads is exactly what the sandbox runs,
and exactly what a Jupyter kernel runs.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from ..grading.parsing import SHARED_CHARS, parse_shared
from ..grading.sourcecache import SourceCache
from .answer_images import Budget

__all__ = [
    "NotebookError",
    "code_cells",
    "python_source",
    "function_sources",
    "think_answers",
    "think_questions",
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
#: Cell magics whose body is Python (timing, capturing): the body runs, as IPython runs it; any
#: other cell magic (``%%bash``, ``%%html``...) makes the cell not Python, so it is not run.
_PYTHON_CELL_MAGICS = ("time", "timeit", "capture", "prun")


class NotebookError(ValueError):
    """The submission is not a readable Jupyter notebook; the message says why."""


def python_source(src: str) -> str:
    """A cell as Python, transformed by IPython's own input transformer
    (``TransformerManager().transform_cell``), exactly as a kernel transforms it: magics,
    shell lines and help (``%time``, ``!pip``, ``torch.amax?``) become calls of
    ``get_ipython()``, which do nothing in the sandbox. Line numbers are kept (the blank
    lines IPython drops at the top are put back). The body of a Python cell magic
    (:data:`_PYTHON_CELL_MAGICS`) is transformed in its place, so it runs and is scanned like
    any cell; any other cell magic makes the cell empty."""
    if not src.strip():
        return src
    lines = src.splitlines(keepends=True)
    lead = next(i for i, line in enumerate(lines) if not line.isspace())  # lines IPython drops
    out = _transform(src)
    call = _cell_magic(out)
    if call is not None:
        magic, body = call
        if magic not in _PYTHON_CELL_MAGICS:
            return ""
        return "\n" * (lead + 1) + _transform(body) if body.strip() else ""
    return "\n" * lead + out


def _transform(src: str) -> str:
    """IPython's transform of one cell; a cell of up to
    :data:`~course_lib.grading.parsing.SHARED_CHARS` characters once per process (a class's
    notebooks share most cells)."""
    return _transform_shared(src)


def _transform_once(src: str) -> str:
    """A cell IPython cannot transform is left as it is (and reported if it does not parse)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return TransformerManager().transform_cell(src)
    except Exception:  # noqa: BLE001 - IPython's failure on a student's cell is not the grader's
        return src


#: IPython's transforms of the most recently used cells, up to 4,000,000 characters of source
#: (with each transform, a few characters more: at most about 8 MB of ASCII text, 32 MB of any).
_transform_shared: SourceCache[str] = SourceCache(_transform_once, 4_000_000, SHARED_CHARS)


def _cell_magic(out: str) -> tuple[str, str] | None:
    """(magic, body) when IPython made the cell one ``get_ipython().run_cell_magic(...)``."""
    if not out.startswith("get_ipython().run_cell_magic("):
        return None
    try:
        tree = parse_shared(out)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Expr) or not isinstance(tree.body[0].value, ast.Call):
        return None
    args = tree.body[0].value.args
    if len(args) != 3 or not all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        return None
    return cast(str, cast(ast.Constant, args[0]).value), cast(str, cast(ast.Constant, args[2]).value)


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
#: The heading of a cell of numbered questions (``### Think about it``), the other form of questions.
_HEADING = re.compile(r"^#{1,6}[ \t]+Think about it\b[^\n]*(?:\n|$)", re.MULTILINE)
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


class _Markdown(NamedTuple):
    """A Markdown cell: its text and its attachments (``{name: {mime: data}}``, unchecked)."""

    text: str
    attachments: dict[str, Any]


def _markdown_cells(data: bytes) -> list[_Markdown | None]:
    """Every cell of a notebook in order: a Markdown cell's text and attachments, None for any other cell."""
    try:
        nb = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, TypeError):
        return []
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return []
    out: list[_Markdown | None] = []
    for cell in nb["cells"]:
        src = cell.get("source", "") if isinstance(cell, dict) and cell.get("cell_type") == "markdown" else None
        if isinstance(src, list) and all(isinstance(s, str) for s in src):
            src = "".join(src)
        attachments = cell.get("attachments") if isinstance(src, str) else None
        attachments = {str(k): v for k, v in attachments.items()} if isinstance(attachments, dict) else {}
        out.append(_Markdown(src, attachments) if isinstance(src, str) else None)
    return out


class _Think(NamedTuple):
    """One "think about it" question as a notebook has it."""

    id: str  # the label of the book link
    question: str  # from "**Think about it.**" to the end of its paragraph
    parts: list[tuple[str, int]]  # the answer's pieces of text and the index of the cell each is in


def _cell_questions(text: str) -> list[tuple[str, str]]:
    """A Markdown cell's questions: ``(marker, part)``, each part holding its question, answer and link.

    Two forms: paragraphs that start ``**Think about it.**`` (the marker), or a heading
    ``### Think about it`` followed by numbered questions, each with its placeholder and link (no
    marker; a part then ends at its link's line, the last one at the end of the cell).
    """
    if _QUESTION in text:
        return [(_QUESTION, part) for part in text.split(_QUESTION)[1:]]
    heading = _HEADING.search(text)
    if heading is None:
        return []
    body, parts, start = text[heading.end() :], [], 0
    for link in _ANSWER_LINK.finditer(body):
        end = body.find("\n", link.end())
        end = len(body) if end < 0 else end
        parts.append(("", body[start:end]))
        start = end
    return [*parts[:-1], ("", parts[-1][1] + body[start:])] if parts else []


def _asks(text: str) -> bool:
    return _QUESTION in text or _HEADING.search(text) is not None


def _think_questions(cells: list[_Markdown | None]) -> list[_Think]:
    """The questions of a notebook's cells and their answers' text (see :func:`think_answers`)."""
    out: list[_Think] = []
    for i, cell in enumerate(cells):
        parts = _cell_questions(cell.text) if cell is not None else []
        for j, (marker, part) in enumerate(parts):
            link = _ANSWER_LINK.search(part)
            if link is None:
                continue
            head = part[: part.rfind("\n", 0, link.start()) + 1].lstrip("\r\n")  # up to the link's line
            question, *body = re.split(r"\n[ \t]*\n", head, maxsplit=1)
            texts = [(t, i) for t in body]  # the question's paragraph dropped
            if j == len(parts) - 1:
                end = part.find("\n", link.end())
                texts += [(part[end:], i)] if end >= 0 else []
                for k in range(i + 1, len(cells)):
                    follow = cells[k]
                    if follow is None or _asks(follow.text) or follow.text.lstrip().startswith("#"):
                        break
                    texts.append((follow.text, k))
                    if sum(len(t) for t, _ in texts) > MAX_ANSWER_CHARS:
                        break
            out.append(_Think(link.group(1), (marker + question).strip(), texts))
    return out


def think_questions(data: bytes) -> list[tuple[str, str]]:
    """The "think about it" questions of a notebook (the exercise notebook: the course's text).

    Args:
        data: the notebook file's bytes (an unreadable file has no questions).

    Returns:
        ``[(id, text)]`` in notebook order: the label of the book link and the question's
        Markdown, from ``**Think about it.**`` to the end of its paragraph.
    """
    return [(q.id, q.question) for q in _think_questions(_markdown_cells(data))]


def think_answers(data: bytes) -> list[dict[str, Any]]:
    """The student's answers to the notebook's "think about it" questions.

    A question is a Markdown cell's paragraph starting ``**Think about it.**``, followed by the
    answer (the placeholder ``*Your answer here.*`` counts as none) and the link to the book's
    answer, whose label (``ch02-nb-mean-shift``) is the question's id. Text after the last link
    of a cell, and Markdown cells the student added right after it (up to a code cell, a heading
    or the next question), are part of that answer too. Images pasted into those cells that the
    answer shows (``![image.png](attachment:image.png)``) are kept as
    :mod:`.answer_images` bounds them; one over its bounds is dropped and the answer ends with
    ``(image too large: NAME)``.

    Args:
        data: the notebook file's bytes (an unreadable file has no answers).

    Returns:
        ``[{"id": ..., "answer": ...}]`` in notebook order, each answer at most
        :data:`MAX_ANSWER_CHARS` characters ("" when not answered), and ``"attachments":
        {name: {mime: base64}}`` when it keeps any image.
    """
    cells = _markdown_cells(data)
    budget = Budget()
    out: list[dict[str, Any]] = []
    for q in _think_questions(cells):
        answer = _answer_text("\n\n".join(t.lstrip("\r\n").rstrip() for t, _ in q.parts if t.strip()))
        used = dict.fromkeys(k for _, k in q.parts)
        kept, too_large = budget.keep(answer, [c.attachments for k in used if (c := cells[k]) is not None])
        answer += "".join(f"\n\n(image too large: {name})" for name in too_large)
        entry: dict[str, Any] = {"id": q.id, "answer": answer.strip()}
        if kept:
            entry["attachments"] = kept
        out.append(entry)
    return out
