"""The class report as a short Markdown summary for the terminal (``--format md``).

Per assignment: the scores, the most common named mistakes, the flagged items and the most
similar look-alike pairs, the same numbers as ``data.json``. Student text is escaped with
:func:`~course_lib.autograder.untrusted_text.markdown_escape` (one line, no control characters, so no
terminal escape sequence from a submission reaches the screen); the functions' names and the
rubric's mistakes are CommonMark (a code span verbatim, no backslash inside it).
"""

from __future__ import annotations

from typing import Any

from ...grading.rendering import md_code, md_inline
from ..untrusted_text import markdown_escape

__all__ = ["summary_markdown", "TOP"]

#: How many mistakes and look-alike pairs are listed per assignment.
TOP = 5


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def summary_markdown(data: dict[str, Any]) -> str:
    """The terminal summary of a report's data (the dict written to ``data.json``)."""
    lines = [f"# Class report: {data['records']} record(s)", ""]
    if data["without_sources"] or data["without_answers"]:
        lines += [
            f"{data['without_sources']} record(s) without sources and {data['without_answers']} without answers "
            "(graded before records carried them).",
            "",
        ]
    for a in data["assignments"]:
        s = a["scores"]
        statuses = ", ".join(f"{k} {v}" for k, v in s["statuses"].items() if v)
        lines += [
            f"## {markdown_escape(a['assignment'])}",
            "",
            f"- records {s['records']}, class (graded) {a['class_size']}; statuses: {statuses or 'none'}",
            f"- mean {_num(s['mean'])} / {s['max_score']:g}, median {_num(s['median'])}, "
            f"full marks {s['full_marks']}, zero {s['zero']}, late {s['late']}",
        ]
        named = sorted(
            ((m, f["function"]) for f in a["mistakes"] for m in f["named"]), key=lambda mf: (-mf[0]["count"], mf[1])
        )
        if named:
            lines.append("- top mistakes:")
            lines += [
                f"  - {m['count']} ({_pct(m['share'])}) {md_code(fn)}: {md_inline(m['mistake'])}"
                for m, fn in named[:TOP]
            ]
        flagged = [it for it in a["items"] if it["flags"]]
        if flagged:
            lines.append(f"- flagged items ({len(flagged)}):")
            lines += [
                f"  - {md_code(it['function'])} {markdown_escape(it['test'])}: pass rate "
                f"{_pct(it['pass_rate'])}, discrimination {_num(it['discrimination'])} ({', '.join(it['flags'])})"
                for it in flagged
            ]
        look = a["lookalikes"]
        if look is not None:
            lines.append(
                f"- look-alikes: {look['student_pairs']} student pair(s), {look['reference_pairs']} match(es) with "
                "the reference solution (evidence to read, not a verdict)"
            )
            for p in look["pairs"][:TOP]:
                other = "the reference solution" if p["reference"] else markdown_escape(p["b"])
                d = p.get("decision")
                decided = f"; {d['verdict']} by {markdown_escape(d['by'])}" if d else ""
                lines.append(
                    f"  - {markdown_escape(p['a'])} ~ {other}: similarity {_pct(p['similarity'])}, "
                    f"{p['shared']} shared{decided}"
                )
        lines.append("")
    return "\n".join(lines)
