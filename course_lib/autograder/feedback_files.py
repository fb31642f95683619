"""Per-student feedback files (``course-lib feedback``): one Markdown or HTML file per student,
each function's report rendered as the notebook shows it (:mod:`course_lib.grading.rendering`).

Per assignment: its score, any late penalty and notebook-level messages, then each graded
function's report in the order a student reads it, then the questions graded by hand
(:mod:`.manual_feedback`: points, rubric items applied, the grader's comment). A report: the score, the notes, each error with its
hint and each likely mistake with its fix (said once per function, with the tests they
affect), the failing tests, one sentence for the tests whose points wait for the value tests
(withheld, not failed), the passing tests (folded in HTML, one line in Markdown).

The HTML is one self-contained page: no script, no request (a Content-Security-Policy that
allows inline styles only), its colours from the reader's light or dark scheme
(``prefers-color-scheme``), readable on a phone (a viewport; on a narrow screen each test's
row of a table is a block of lines; long words and code broken anywhere). The Markdown is CommonMark: text from a submission is escaped outside code spans
and verbatim inside them (:func:`~course_lib.grading.rendering.md_inline`).
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..grading.rendering import as_html, as_markdown, md_inline
from ..grading.report import Report
from .exports import adjustment_line, file_stem, late_line
from .gradebook import Gradebook
from .identity import identity
from .manual_feedback import manual_html, manual_markdown
from .record import Record
from .untrusted_text import valid_utf8

__all__ = ["FORMATS", "FeedbackFilterError", "FeedbackWritten", "feedback_markdown", "feedback_html", "write_feedback"]

#: The formats of a feedback file, by file extension.
FORMATS = ("md", "html")

_CSS = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1d1d1f; --muted: #5f6368; --line: #d0d4da;
  --code: #eef0f3; --box: #f8f9fa; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16181c; --fg: #e6e6e6; --muted: #a8adb4; --line: #3a3f46; --code: #262a31; --box: #1c1f24; } }
html { -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
body { background: var(--bg); color: var(--fg); font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif;
  margin: 0 auto; max-width: 50rem; padding: 1rem; overflow-wrap: anywhere; }
h1 { font-size: 1.5rem; line-height: 1.25; margin: .5rem 0 1rem; }
h2 { font-size: 1.2rem; line-height: 1.3; border-bottom: 1px solid var(--line); padding-bottom: .2rem; margin-top: 2rem; }
code { font: .9em/1.4 ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; background: var(--code);
  border-radius: 3px; padding: 0 .2em; overflow-wrap: anywhere; }
.course-lib-report { background: var(--box); border: 1px solid var(--line); border-radius: 6px;
  padding: .25rem .75rem; margin: .75rem 0; }
.course-lib-report table { max-width: 100%; }
.course-lib-report th, .course-lib-report td { overflow-wrap: anywhere; border-bottom: 1px solid var(--line); }
@media (max-width: 40rem) {
  .course-lib-report table, .course-lib-report tbody, .course-lib-report tr, .course-lib-report td {
    display: block; width: auto !important; }
  .course-lib-report thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  .course-lib-report tr { border-bottom: 1px solid var(--line); padding: .35rem 0; }
  .course-lib-report td { border: 0; padding: 0 !important; }
  .course-lib-report td:first-child { font-weight: 600; }
  .course-lib-report td:nth-child(2)::before { content: "checks: "; color: var(--muted); }
  .course-lib-report td:nth-child(3)::before { content: "points: "; color: var(--muted); }
  .course-lib-report td:nth-child(4)::before { content: "feedback: "; color: var(--muted); } }
details summary { color: var(--muted); }
details[open] summary { margin-bottom: .25rem; }
blockquote { border-left: .25rem solid var(--line); margin: .5rem 0; padding: 0 .75rem; }
.standing { font-weight: 600; }
.manual .comment { border-left: .25rem solid var(--line); padding: 0 .75rem; }
"""

_CSP = "default-src 'none'; style-src 'unsafe-inline'"


class FeedbackFilterError(ValueError):
    """An ``--assignment`` or ``--student`` that the gradebook does not hold."""


@dataclass(frozen=True)
class FeedbackWritten:
    """What :func:`write_feedback` wrote.

    Args:
        files: the files written, one per student, in the gradebook's order of students.
        without: the students asked for by name who have no record of the assignments asked
            for (no file is written for them).
    """

    files: tuple[Path, ...]
    without: tuple[str, ...] = field(default_factory=tuple)


def _report(function: dict) -> Report:
    return Report.from_dict(function)


def _head(rec: Record) -> str:
    return f"{rec.assignment}: {rec.score:g} / {rec.points_possible:g} points"


def feedback_markdown(student: str, recs: Sequence[Record]) -> str:
    """A student's feedback as CommonMark: ``# Feedback for STUDENT``, per assignment a
    ``##`` heading with its score, the late penalty and messages, then each function's report
    (:func:`~course_lib.grading.rendering.as_markdown`, a ``###`` heading each)."""
    blocks = [f"# Feedback for {md_inline(valid_utf8(student))}"]
    for rec in recs:
        blocks.append(f"## {md_inline(_head(rec))}")
        blocks += [f"**{md_inline(line)}**" for line in (late_line(rec), adjustment_line(rec)) if line]
        blocks += [f"> {md_inline(m)}" for m in rec.messages]
        blocks += [as_markdown(_report(fr), level=3).rstrip("\n") for fr in rec.functions]
        blocks += manual_markdown(rec.manual, level=3)
    return "\n\n".join(blocks) + "\n"


def feedback_html(student: str, recs: Sequence[Record]) -> str:
    """A student's feedback as a self-contained HTML page (see the module's docstring); each
    function's report as in a notebook (:func:`~course_lib.grading.rendering.as_html`)."""
    h = html.escape
    name = h(valid_utf8(student))
    body = [f"<h1>Feedback for {name}</h1>"]
    for i, rec in enumerate(recs):
        body.append(f'<section aria-labelledby="a{i}"><h2 id="a{i}">{h(_head(rec))}</h2>')
        body += [f'<p class="standing">{h(line)}</p>' for line in (late_line(rec), adjustment_line(rec)) if line]
        body += [f"<blockquote><p>{h(m)}</p></blockquote>" for m in rec.messages]
        body += [as_html(_report(fr)) for fr in rec.functions]
        body += [manual_html(rec.manual, level=3)] if rec.manual else []
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>Feedback for {name}</title><style>{_CSS}</style></head>\n"
        "<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n"
    )


def _chosen(asked: Iterable[str], known: Iterable[str], what: str) -> set[str] | None:
    """The names asked for (None: all), each one the gradebook holds (compared in NFC)."""
    asked = [identity(valid_utf8(a)) for a in asked]
    if not asked:
        return None
    have = {identity(k) for k in known}
    unknown = [a for a in asked if a not in have]
    if unknown:
        raise FeedbackFilterError(
            f"feedback: --{what} {', '.join(repr(u) for u in unknown)}: not in the gradebook "
            f"(its {what}s: {', '.join(sorted(have)) or 'none'})"
        )
    return set(asked)


def write_feedback(
    db: str | Path,
    out: str | Path,
    fmt: str = "md",
    assignments: Sequence[str] = (),
    students: Sequence[str] = (),
) -> FeedbackWritten:
    """``OUT/<student file stem>.md`` (or ``.html``) per student.

    Args:
        db: the gradebook.
        out: the folder to write into (made if missing).
        fmt: ``"md"`` or ``"html"``.
        assignments: only these assignments (all when empty).
        students: only these students (all when empty); compared in Unicode NFC.

    Raises:
        ValueError: ``fmt`` is neither format.
        FeedbackFilterError: an assignment or student the gradebook does not hold (nothing is
            written).
    """
    if fmt not in FORMATS:
        raise ValueError(f"feedback: format must be 'md' or 'html', got {fmt!r}")
    per_student: dict[str, list[Record]] = {}
    with Gradebook(db) as book:
        for student, rec in book.rows():
            per_student.setdefault(student, []).append(rec)
    wanted_a = _chosen(assignments, {r.assignment for recs in per_student.values() for r in recs}, "assignment")
    wanted_s = _chosen(students, per_student, "student")
    files, without = [], []
    for student, recs in per_student.items():
        if wanted_s is not None and identity(student) not in wanted_s:
            continue
        chosen = [r for r in recs if wanted_a is None or identity(r.assignment) in wanted_a]
        if not chosen:
            if wanted_s is not None:
                without.append(student)
            continue
        text = feedback_markdown(student, chosen) if fmt == "md" else feedback_html(student, chosen)
        Path(out).mkdir(parents=True, exist_ok=True)
        path = Path(out) / f"{file_stem(student)}.{fmt}"
        path.write_text(text, encoding="utf-8")
        files.append(path)
    return FeedbackWritten(tuple(files), tuple(without))
