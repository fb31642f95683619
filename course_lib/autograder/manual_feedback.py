"""The questions graded by hand in a student's feedback file (:mod:`.feedback_files`).

Per question: its points out of its maximum (``being graded by hand`` while it waits for a
grader, ``not answered`` for a blank answer), the rubric items applied and the grader's
comment. Rubric items and comments are the graders' Markdown: in the HTML they are rendered by
markdown-it-py (CommonMark, raw HTML escaped, an image shown as its alt text: the page makes no
request; links without ``javascript:`` or ``data:``); where markdown-it-py is not installed (it comes
with the ``instructor`` extra), as escaped text with code spans
(:func:`~course_lib.grading.rendering.inline_code`). In the Markdown file the items are list
entries and the comment a block quote, raw HTML in them shown as text (``<`` as ``&lt;``).
"""

from __future__ import annotations

import html
from functools import lru_cache
from typing import Any

from ..grading.rendering import inline_code, md_inline
from .manual_points import ManualPoints

__all__ = ["manual_markdown", "manual_html", "render_comment"]

_TITLE = "Questions graded by hand"


@lru_cache(maxsize=1)
def _renderer() -> Any:
    """markdown-it-py's CommonMark renderer with raw HTML escaped and images shown as their alt
    text (None when markdown-it-py is not installed)."""
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return None
    md = MarkdownIt("commonmark", {"html": False})
    md.add_render_rule("image", _image_as_alt)
    return md


def _image_as_alt(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    """An image shown as its alt text: the page fetches nothing."""
    return html.escape(renderer.renderInlineAsText(tokens[idx].children or [], options, env))


def render_comment(text: str, inline: bool = False) -> str:
    """A grader's Markdown as safe HTML (see the module's docstring).

    Args:
        text: the Markdown.
        inline: one line's content (a rubric item), no paragraph around it.

    Returns:
        The HTML.
    """
    md = _renderer()
    if md is not None:
        return str(md.renderInline(text) if inline else md.render(text)).strip()
    if inline:
        return inline_code(" ".join(text.split()))
    paragraphs = [p for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    return "".join(
        "<p>" + "<br>".join(inline_code(line) for line in p.strip().split("\n")) + "</p>" for p in paragraphs
    )


def _no_html(markdown: str) -> str:
    """A grader's Markdown with raw HTML shown as text (a comment may quote a student's answer)."""
    return markdown.replace("<", "&lt;")


def manual_markdown(manual: ManualPoints | None, level: int = 3) -> list[str]:
    """The Markdown blocks of a record's questions graded by hand (none without any).

    Args:
        manual: the record's manual points.
        level: the heading level of the section.

    Returns:
        CommonMark blocks: a heading, then per question a line, its items and its comment.
    """
    if manual is None:
        return []
    blocks = [f"{'#' * level} {_TITLE}"]
    for q in manual.questions:
        blocks.append(f"**{md_inline(q.question)}**: {md_inline(q.line())}")
        if q.items:
            blocks.append("\n".join(f"- {_no_html(' '.join(item.split()))}" for item in q.items))
        if q.comment.strip():
            blocks.append("\n".join(f"> {_no_html(line)}".rstrip() for line in q.comment.strip().splitlines()))
    return blocks


def manual_html(manual: ManualPoints | None, level: int = 3) -> str:
    """The HTML of a record's questions graded by hand ("" without any).

    Args:
        manual: the record's manual points.
        level: the heading level of the section.

    Returns:
        A heading and a list: per question its points, its items and its comment.
    """
    if manual is None:
        return ""
    out = [f"<h{level}>{_TITLE}</h{level}>", '<ul class="manual">']
    for q in manual.questions:
        out.append(f"<li><p><strong>{html.escape(q.question)}</strong>: {html.escape(q.line())}</p>")
        if q.items:
            out.append("<ul>" + "".join(f"<li>{render_comment(item, inline=True)}</li>" for item in q.items) + "</ul>")
        if q.comment.strip():
            out.append(f'<div class="comment">{render_comment(q.comment)}</div>')
        out.append("</li>")
    out.append("</ul>")
    return "\n".join(out)
