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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .feedback import errors_of, mistakes_of

if TYPE_CHECKING:
    from .report import Report, TestResult

__all__ = ["split_fix", "as_text", "as_html", "inline_code"]

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


def _names(tests: list[str]) -> str:
    quoted = [f"'{t}'" for t in tests]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _which(tests: list[str]) -> str:
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
    for error, tests in errors_of(report.results):
        head, hint = split_hint(error)
        lines.append(f"  Error ({_which(tests)}): {head}")
        if hint:
            lines.append(f"    {HINT_LABEL}: {hint}")
    for message, tests in mistakes_of(report.results):
        head, fix = split_fix(message)
        lines.append(f"  Likely mistake ({_which(tests)}): {head}")
        if fix:
            lines.append(f"    {FIX_LABEL}: {fix}")
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


def _errors_html(report: Report) -> list[str]:
    out = []
    for error, tests in errors_of(report.results):
        head, hint = split_hint(error)
        out.append(
            f'<p class="course-lib-error" style="{_P}"><strong>Error</strong> '
            f"({html.escape(_which(tests))}): {inline_code(head)}</p>"
        )
        if hint:
            out.append(_folded(HINT_LABEL, hint))
    return out


def _mistakes_html(report: Report) -> list[str]:
    out = []
    for message, tests in mistakes_of(report.results):
        head, fix = split_fix(message)
        out.append(
            f'<p class="course-lib-mistake" style="{_P}"><strong>Likely mistake</strong> '
            f"({html.escape(_which(tests))}): {inline_code(head)}</p>"
        )
        if fix:
            out.append(_folded(FIX_LABEL, fix))
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
        out += _errors_html(report)
        out += _mistakes_html(report)
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
