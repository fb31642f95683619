"""How a :class:`~.report.Report` is shown: as text (a terminal, ``course-lib check``, the
notebook's ``text/plain``) and as HTML (JupyterLab, a browser).

Both say, in the order a student reads them: the headline (the score), the notes (a refused
call, said once), each error raised with the tests it affects and its hint (folded in HTML),
each likely mistake with the tests it explains and its fix (folded in HTML,
one click away, for a student who wants to think first), the failing tests with their
feedback, the tests that pass but wait for the value tests (said once), the passing tests (one
line; folded in HTML), and how the function scored with the student's own callees.

In HTML every piece of text is escaped (feedback quotes the student's own code, which is
untrusted) and text in backticks is shown as ``<code>``. Styles are inline, on the elements
emitted: JupyterLab's CSS right-aligns and centres tables in rendered output, and a report
must not restyle the page around it. Colours are inherited from the page (light or dark
theme); only the headline's border marks the verdict.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .feedback import errors_of, mistakes_of

if TYPE_CHECKING:
    from .report import Report, TestResult

__all__ = [
    "Said",
    "said_once",
    "split_fix",
    "split_hint",
    "as_text",
    "as_html",
    "as_markdown",
    "inline_code",
    "md_text",
    "md_code",
    "md_inline",
]

#: The words of a test that passes but waits for the value tests (:data:`~.judging.PROPERTY_GATE`).
WAITING = "once the value tests pass"
FIX_LABEL = "Why, and how to fix it"
HINT_LABEL = "Hint"

_CELL = "text-align:left;vertical-align:top;padding:0.2em 1em 0.2em 0"
_TABLE = "margin:0.25em 0 0.75em 0;border-collapse:collapse;table-layout:auto;width:auto"
_P = "margin:0.4em 0;text-align:left"


@dataclass
class _Parts:
    """A report's tests, by what the student does with them."""

    failing: list[TestResult]
    waiting: list[TestResult]  # passed, points withheld until the value tests pass
    passing: list[TestResult]


@dataclass(frozen=True)
class Said:
    """An error raised, or a likely mistake, said once for the tests it affects: ``head`` in
    the open, ``detail`` (the hint, or why and the fix) under ``label``, folded in HTML.

    Args:
        css: the HTML class (``course-lib-error``, ``course-lib-mistake``).
        title: ``Error`` or ``Likely mistake``.
        tests: the names of the tests it affects, in order.
        head: what was raised, or what was done.
        detail: the hint, or why it is wrong and the fix (``""`` when none).
        label: the words that open ``detail`` (:data:`HINT_LABEL`, :data:`FIX_LABEL`).
    """

    css: str
    title: str
    tests: tuple[str, ...]
    head: str
    detail: str
    label: str


def said_once(report: Report) -> list[Said]:
    """The report's errors (each split at its hint, :func:`split_hint`), then its likely
    mistakes (each split at its fix, :func:`split_fix`), each once with its tests."""
    kinds = (
        ("course-lib-error", "Error", errors_of, split_hint, HINT_LABEL),
        ("course-lib-mistake", "Likely mistake", mistakes_of, split_fix, FIX_LABEL),
    )
    out = []
    for css, title, found, split, label in kinds:
        for message, tests in found(report.results):
            head, detail = split(message)
            out.append(Said(css, title, tuple(tests), head, detail, label))
    return out


def _for_the_notes(report: Report, parts: _Parts) -> str:
    """One line for failing tests that have no feedback of their own because the report's
    notes say why (a refused call, a missing function), or ``""``."""
    if not report.notes or not parts.failing or any(r.feedback for r in parts.failing):
        return ""
    n, points = len(parts.failing), _points(sum(r.max_points for r in parts.failing))
    every = "all " if n == len(report.results) else ""
    return f"Failing: {every}{n} test{'' if n == 1 else 's'} ({points} points), for the reason above"


def _parts(report: Report) -> _Parts:
    results = report.results
    return _Parts(
        failing=[r for r in results if not r.passed and not r.withheld],
        waiting=[r for r in results if r.withheld],
        passing=[r for r in results if r.passed],
    )


def split_fix(message: str) -> tuple[str, str]:
    """A named mistake as (what was done, why it is wrong and the fix): split at its first
    ``": "`` outside brackets and backticks, else at its first ``"; "``; ``(message, "")``
    when there is neither (``"... instead of ..."`` says its fix itself)."""
    for separator in (":", ";"):
        at = _outside_brackets(message, separator)
        if at > 0:
            return message[:at], message[at + 2 :]
    return message, ""


def _outside_brackets(message: str, separator: str) -> int:
    """Where ``separator`` followed by a space first occurs outside brackets and backticks, or -1."""
    depth, code = 0, False
    for i, ch in enumerate(message):
        if ch == "`":
            code = not code
        elif code:
            continue
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == separator and depth == 0 and message[i + 1 : i + 2] == " ":
            return i
    return -1


def _points(x: float) -> str:
    return f"{x:g}"


def _names(tests: Sequence[str]) -> str:
    quoted = [f"'{t}'" for t in tests]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _which(tests: Sequence[str]) -> str:
    quoted = ", ".join(f"'{t}'" for t in tests)
    return f"{'test' if len(tests) == 1 else 'tests'} {quoted}"


def _waiting_sentence(waiting: list[TestResult]) -> str:
    points = _points(sum(r.max_points for r in waiting))
    if len(waiting) == 1:
        head = f"{_names([waiting[0].name])} passes and earns its {points} point{'' if points == '1' else 's'}"
    else:
        head = f"{_names([r.name for r in waiting])} pass and earn their {points} points"
    return f"{head} {WAITING} (a property alone can be met by outputs that are not an implementation)"


def _passing_sentence(parts: _Parts, total: int, names: bool) -> str:
    n = len(parts.passing)
    points = _points(sum(r.points for r in parts.passing))
    said = f"Passing: all {n} tests" if n == total else f"Passing: {n} of {total} tests"
    said += f" ({points} point{'' if points == '1' else 's'})"
    return f"{said}: {', '.join(r.name for r in parts.passing)}" if names else said


def as_text(report: Report) -> str:
    """The report as plain text, in the order of the HTML; the passing tests in one line."""
    lines = [report.headline()]
    lines += [f"  ! {n}" for n in report.notes]
    if report.status == "not implemented":
        return "\n".join(lines)
    for said in said_once(report):
        lines.append(f"  {said.title} ({_which(said.tests)}): {said.head}")
        if said.detail:
            lines.append(f"    {said.label}: {said.detail}")
    parts = _parts(report)
    if _for_the_notes(report, parts):
        lines.append(f"  {_for_the_notes(report, parts)}")
    elif parts.failing:
        lines.append("  Failing tests:")
        for r in parts.failing:
            lines.append(f"    FAIL {_points(r.points)}/{_points(r.max_points)}  {r.name}: {r.checks}")
            if r.feedback:
                lines.append(f"         {r.feedback}")
    if parts.waiting:
        lines.append(f"  Waiting: {_waiting_sentence(parts.waiting)}")
    if parts.passing:
        lines.append(f"  {_passing_sentence(parts, len(report.results), names=True)}")
    lines += [f"  {c}" for c in report.composition_lines()]
    return "\n".join(lines)


def inline_code(text: str) -> str:
    """``text`` escaped for HTML, with each pair of backticks shown as ``<code>``; a backtick
    without its pair stays a backtick."""
    pieces = text.split("`")
    if len(pieces) % 2 == 0:  # an odd number of backticks: the last one is literal
        pieces = [*pieces[:-2], pieces[-2] + "`" + pieces[-1]]
    return "".join(f"<code>{html.escape(p)}</code>" if i % 2 else html.escape(p) for i, p in enumerate(pieces))


def _table(results: list[TestResult], label: str, feedback: bool) -> str:
    head = ["test", "checks", "points"] + (["feedback"] if feedback else [])
    rows = ["".join(f'<th scope="col" style="{_CELL}">{h}</th>' for h in head)]
    for r in results:
        cells = [
            inline_code(r.name),
            inline_code(r.checks),
            f"{_points(r.points)}/{_points(r.max_points)}",
        ] + ([inline_code(r.feedback)] if feedback else [])
        rows.append("".join(f'<td style="{_CELL}">{c}</td>' for c in cells))
    body = "".join(f"<tr>{row}</tr>" for row in rows[1:])
    return (
        f'<table aria-label="{html.escape(label)}" style="{_TABLE}"><thead><tr>{rows[0]}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def split_hint(error: str) -> tuple[str, str]:
    """An error as (what was raised, where and on what; the hint), split at its "Hint: "."""
    head, _, hint = error.partition(" Hint: ")
    return head, hint


def _folded(label: str, text: str) -> str:
    return (
        f'<details class="course-lib-fix" style="margin:0 0 0.6em 1em;text-align:left">'
        f'<summary style="cursor:pointer">{label}</summary>'
        f'<p style="{_P}">{inline_code(text)}</p></details>'
    )


def _said_html(report: Report) -> list[str]:
    out = []
    for said in said_once(report):
        out.append(
            f'<p class="{said.css}" style="{_P}"><strong>{said.title}</strong> '
            f"({html.escape(_which(said.tests))}): {inline_code(said.head)}</p>"
        )
        if said.detail:
            out.append(_folded(said.label, said.detail))
    return out


def as_html(report: Report) -> str:
    """The report as HTML, every piece of text escaped; the fix and the passing tests folded."""
    colour = "#1a7f37" if report.passed else "#b35900"
    out = [
        '<div class="course-lib-report" style="text-align:left">',
        f'<p class="course-lib-headline" style="{_P};font-weight:bold;border-left:0.3em solid {colour};'
        f'padding-left:0.5em">{html.escape(report.headline())}</p>',
    ]
    out += [f'<p class="course-lib-note" style="{_P}">&#9888; {inline_code(n)}</p>' for n in report.notes]
    if report.status != "not implemented" and report.results:
        parts = _parts(report)
        out += _said_html(report)
        if _for_the_notes(report, parts):
            out.append(f'<p style="{_P}">{html.escape(_for_the_notes(report, parts))}</p>')
        elif parts.failing:
            out.append(f'<p style="{_P}"><strong>Failing tests</strong></p>')
            out.append(_table(parts.failing, "failing tests", feedback=True))
        if parts.waiting:
            out.append(
                f'<p class="course-lib-waiting" style="{_P}">{html.escape(_waiting_sentence(parts.waiting))}</p>'
            )
        if parts.passing:
            out.append(
                f'<details class="course-lib-passing" style="margin:0.4em 0;text-align:left">'
                f'<summary style="cursor:pointer">{html.escape(_passing_sentence(parts, len(report.results), names=False))}'
                f"</summary>{_table(parts.passing, 'passing tests', feedback=False)}</details>"
            )
        out += [
            f'<p class="course-lib-composition" style="{_P}">{inline_code(c)}</p>' for c in report.composition_lines()
        ]
    out.append("</div>")
    return "".join(out)


# -- Markdown (CommonMark) ------------------------------------------------------------------------

#: Characters that start inline Markdown anywhere in a line (emphasis, code, links, HTML,
#: entities, escapes; ``#`` a heading's closing sequence; ``|`` and ``~`` GFM's tables and
#: strikethrough): escaped outside code spans.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>&#|~])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def md_text(text: str, start: bool = True) -> str:
    """``text`` on one line, shown literally by a CommonMark renderer: every character Markdown
    reads inline is backslash-escaped, and where ``start`` (the text starts a block's content),
    what would open a list or a setext underline there too."""
    text = " ".join(_CONTROL.sub(" ", text).split())
    text = _MD_SPECIAL.sub(r"\\\1", text)
    m = re.match(r"[-+=]|\d{1,9}[.)]", text) if start else None
    if m:
        text = text[: m.end() - 1] + "\\" + text[m.end() - 1 :]
    return text


def md_code(content: str) -> str:
    """``content`` as a CommonMark code span, verbatim (CommonMark reads no backslash escape
    inside code): fenced by one backtick more than its longest run of backticks, padded with a
    space where it starts or ends with a backtick, or starts and ends with a space."""
    content = _CONTROL.sub(" ", content)
    if not content:
        return ""
    fence = "`" * (max((len(run) for run in re.findall("`+", content)), default=0) + 1)
    spaced = content[0] == content[-1] == " " and content.strip(" ")
    pad = " " if content[0] == "`" or content[-1] == "`" or spaced else ""
    return f"{fence}{pad}{content}{pad}{fence}"


def md_inline(text: str) -> str:
    """``text`` as CommonMark: each pair of backticks a code span (:func:`md_code`), the rest
    literal (:func:`md_text`); a backtick without its pair stays a backtick (escaped), as in
    :func:`inline_code`."""
    pieces = text.split("`")
    if len(pieces) % 2 == 0:  # an odd number of backticks: the last one is literal
        pieces = [*pieces[:-2], pieces[-2] + "`" + pieces[-1]]
    out = []
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if i % 2:
            out.append(md_code(piece))
            continue
        words = md_text(piece, start=i == 0)
        before = " " if i and piece[:1].isspace() else ""
        after = " " if i < last and piece[-1:].isspace() else ""
        out.append(before + words + after if words else (" " if 0 < i < last and piece else ""))
    return "".join(out)


def as_markdown(report: Report, level: int = 3) -> str:
    """The report as CommonMark, in the order of the HTML: the headline as a heading of
    ``level``, the notes, each error and likely mistake once with its hint or fix in a nested
    item, the failing tests, the tests that wait for the value tests (one sentence), the
    passing tests (one line) and the composition. Text in backticks is code (:func:`md_inline`)."""
    blocks = [f"{'#' * level} {md_inline(report.headline())}"]
    blocks += [f"**Note:** {md_inline(n)}" for n in report.notes]
    if report.status == "not implemented" or not report.results:
        return "\n\n".join(blocks) + "\n"
    items = []
    for said in said_once(report):
        item = f"- **{said.title}** ({md_inline(_which(said.tests))}): {md_inline(said.head)}"
        items.append(item + (f"\n  - *{said.label}:* {md_inline(said.detail)}" if said.detail else ""))
    if items:
        blocks.append("\n".join(items))
    parts = _parts(report)
    if _for_the_notes(report, parts):
        blocks.append(md_inline(_for_the_notes(report, parts)))
    elif parts.failing:
        rows = [f"- **FAIL {_points(r.points)}/{_points(r.max_points)}** {_md_test(r)}" for r in parts.failing]
        blocks.append("**Failing tests**\n\n" + "\n".join(rows))
    if parts.waiting:
        blocks.append(f"*Waiting:* {md_inline(_waiting_sentence(parts.waiting))}")
    if parts.passing:
        blocks.append(md_inline(_passing_sentence(parts, len(report.results), names=True)))
    blocks += [md_inline(c) for c in report.composition_lines()]
    return "\n\n".join(blocks) + "\n"


def _md_test(r: TestResult) -> str:
    """A failing test's item: its name and what it checks, its feedback on the next line (a
    CommonMark hard line break: a backslash at the end of the line)."""
    said = f"{md_inline(r.name)}: {md_inline(r.checks)}"
    return f"{said}\\\n  {md_inline(r.feedback)}" if md_inline(r.feedback) else said
