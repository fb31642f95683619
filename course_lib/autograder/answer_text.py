"""The "think about it" questions and answers as safe HTML: Markdown, math as MathML, pasted images.

:func:`render_markdown` turns a student's (or the course's) Markdown into HTML that carries no
script and loads nothing: CommonMark by markdown-it-py with raw HTML escaped, never passed
through; math (``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]``) converted by latex2mathml when the
HTML is made (MathML, which browsers draw without any script), its output rebuilt from a list
of MathML elements and attributes (:mod:`.mathml`), so no ``href``, ``style`` or HTML that a
formula smuggles in (``\\text{<script>}``) survives; a formula that cannot be converted, or is
longer than :data:`MAX_FORMULA_CHARS`, is shown as escaped code. Images come only from the
answer's attachments (:mod:`.answer_images`) as ``data:`` URIs; any other image is shown as its
alt text. Links keep only ``http``, ``https``, ``mailto`` and relative targets.

:func:`questions` reads the questions' text from the exercise notebook, with the same parse
that reads the students' answers (:func:`.notebook.think_questions`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from mdit_py_plugins.dollarmath import dollarmath_plugin
from mdit_py_plugins.texmath import texmath_plugin

from .answer_images import raster_image
from .mathml import MAX_FORMULA_CHARS, formula_html
from .notebook import think_questions

__all__ = ["Question", "questions", "render_markdown", "MAX_FORMULA_CHARS", "MAX_TEXT_CHARS", "QuestionsError"]

#: Longer text is rendered up to this length only (a stored answer has at most 5,000 characters).
MAX_TEXT_CHARS = 50_000


@dataclass(frozen=True)
class Question:
    """One "think about it" question of an exercise notebook.

    Args:
        assignment: the assignment's name (``02_self_attention``).
        id: the question id, the label of the book link (``ch02-nb-mean-shift``).
        text: the question's Markdown, from ``**Think about it.**`` up to the answer placeholder.
        number: its 1-based order in the exercise notebook.
    """

    assignment: str
    id: str
    text: str
    number: int


class QuestionsError(ValueError):
    """The exercise notebook of an assignment is missing; the message names the path."""


def questions(exercises: str | Path, assignment: str) -> dict[str, Question]:
    """The assignment's questions from its exercise notebook (``exercises/<assignment>.ipynb``), in order.

    Args:
        exercises: the folder of the exercise notebooks.
        assignment: the assignment's name.

    Returns:
        Question id -> :class:`Question`, in the notebook's order.

    Raises:
        QuestionsError: ``assignment`` is not a plain name, or there is no such notebook.
    """
    if not isinstance(assignment, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", assignment) or assignment[0] == ".":
        raise QuestionsError(f"assignment: expected a notebook's name such as '02_self_attention', got {assignment!r}")
    path = Path(exercises) / f"{assignment}.ipynb"
    if not path.is_file():
        raise QuestionsError(
            f"exercises: no exercise notebook {path} for assignment {assignment!r} (the questions' text is read from it)"
        )
    found = think_questions(path.read_bytes())
    return {qid: Question(assignment, qid, text, n) for n, (qid, text) in enumerate(found, 1)}


#: Link schemes kept; a link with any other is shown as its text.
_LINK_SCHEMES = ("http", "https", "mailto")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_ATTACHMENT = "attachment:"


def _safe_link(url: str) -> bool:
    """Whether a link may lead to ``url``: http(s), mailto or relative (markdown-it has percent-encoded
    the spaces and control characters a browser would skip, so the scheme is what it reads)."""
    scheme = _SCHEME.match(url)
    return scheme is None or scheme.group(1).lower() in _LINK_SCHEMES


def _any_link(url: str) -> bool:
    """markdown-it makes every link and image; the renderers below decide what each becomes."""
    return True


def _render_math(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    return formula_html(token.content, display=token.type != "math_inline")


def _render_image(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    alt = self.renderInlineAsText(token.children or [], options, env)
    src = str(token.attrGet("src") or "")
    if src.startswith(_ATTACHMENT):
        image = raster_image(env.get("attachments", {}).get(unquote(src[len(_ATTACHMENT) :])))
        if image is not None:
            mime, b64, _ = image
            return f'<img src="data:{mime};base64,{b64}" alt="{escape(alt, quote=True)}">'
    return f'<span class="image-not-loaded">[image not loaded: {escape(alt or "no description")}]</span>'


def _render_link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    href = str(token.attrGet("href") or "")
    if not _safe_link(href):
        return "<a>"
    return f'<a href="{escape(href, quote=True)}" rel="noopener noreferrer nofollow">'


def _display_in_text(state: StateInline, silent: bool) -> bool:
    """``\\[..\\]`` inside a paragraph: a display formula (texmath reads it only as a block of its own)."""
    if not state.src.startswith("\\[", state.pos):
        return False
    end = state.src.find("\\]", state.pos + 2)
    if end < 0:
        return False
    if not silent:
        token = state.push("math_inline_double", "math", 0)
        token.content, token.markup = state.src[state.pos + 2 : end], "\\["
    state.pos = end + 2
    return True


@functools.cache
def _markdown() -> MarkdownIt:
    """The one parser (CommonMark, no raw HTML) with the math rules and the safe renderers."""
    md = MarkdownIt("commonmark", {"html": False})
    md.use(dollarmath_plugin, allow_labels=False, allow_space=False, allow_digits=False, double_inline=True)
    md.use(texmath_plugin, delimiters="brackets")
    md.inline.ruler.before("escape", "math_display_in_text", _display_in_text)
    md.validateLink = _any_link  # type: ignore[method-assign]
    for rule in ("math_inline", "math_inline_double", "math_block", "math_block_eqno"):
        md.add_render_rule(rule, _render_math)
    md.add_render_rule("image", _render_image)
    md.add_render_rule("link_open", _render_link_open)
    return md


def _attachments_key(
    attachments: Mapping[str, Mapping[str, str]],
) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    return tuple(
        sorted(
            (str(name), tuple(sorted((str(m), str(d)) for m, d in bundle.items())))
            for name, bundle in attachments.items()
            if isinstance(bundle, Mapping)
        )
    )


@functools.lru_cache(maxsize=8192)
def _render_text(text: str) -> str:
    return _markdown().render(text, {"attachments": {}})


@functools.lru_cache(maxsize=64)  # each entry holds its images: a few, at most 1 MB each in a record
def _render_with_images(text: str, key: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]) -> str:
    attachments = {name: dict(bundle) for name, bundle in key}
    return _markdown().render(text, {"attachments": attachments})


def render_markdown(text: str, attachments: Mapping[str, Mapping[str, str]] | None = None) -> str:
    """Safe HTML of student (or course) Markdown (see the module's docstring).

    Args:
        text: the Markdown.
        attachments: the answer's images, ``{name: {mime: base64}}`` (a record's answer's
            ``"attachments"``); only these can be shown, as ``![alt](attachment:NAME)``.

    Returns:
        The HTML (block elements, no surrounding container); the same text and attachments give
        the same HTML, from a cache after the first time. Text over :data:`MAX_TEXT_CHARS` is cut
        there, and says so.

    Raises:
        TypeError: ``text`` is not a string or ``attachments`` not a mapping.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected a str, got {type(text).__name__}")
    if attachments is not None and not isinstance(attachments, Mapping):
        raise TypeError(
            f"attachments: expected a mapping of name to {{mime: base64}}, got {type(attachments).__name__}"
        )
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + f"\n\n(cut at {MAX_TEXT_CHARS:,} characters)"
    key = _attachments_key(attachments) if attachments else ()
    return _render_with_images(text, key) if key else _render_text(text)
