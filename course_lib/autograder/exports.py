"""Out of the gradebook: a CSV for the LMS, Gradescope ``results.json`` files, feedback reports.

Feedback and exports carry what the checks say (test titles, feedback sentences, likely
mistakes) and never the hidden inputs: no test case stores its input values in a record, and
messages that came from student code were shortened and stripped of number runs when graded.
Everything a student controls is treated as data: every per-student file name carries a hash
of the exact student id (so no folder name can overwrite another student's file), Markdown
and HTML are escaped, and a CSV cell that a spreadsheet would run as a formula is neutralised.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from pathlib import Path

from ..grading.feedback import composition_lines, mistake_lines
from ..grading.registry import ASSIGNMENTS
from .gradebook import Gradebook
from .text import csv_cell, markdown_escape, valid_utf8

__all__ = ["export_csv", "export_gradescope", "write_feedback", "file_stem"]


def file_stem(student: str) -> str:
    """A file name for a student: a readable part and a hash of the exact id, always (two ids
    that read alike, such as ``Ana María`` and ``Ana_Mar_a``, never share a file)."""
    student = valid_utf8(student)
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", student)[:60].lstrip(".") or "_"
    digest = hashlib.sha256(student.encode("utf-8")).hexdigest()[:12]
    return f"{readable}-{digest}"


def export_csv(db: str | Path, out: str | Path) -> int:
    """One row per student and assignment: student, assignment, score, max_score, status,
    flags (forbidden calls, tampering, use of the reference; ``|``-separated), seed, then the
    points of every graded function (empty where the assignment does not grade it).

    Returns the number of rows written.
    """
    functions = [f for names in ASSIGNMENTS.values() for f in names]
    n = 0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(db) as book, open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "score", "max_score", "status", "flags", "seed", *functions])
        for student, rec in book.rows():
            points = {r["function"]: r["score"] for r in rec["functions"]}
            seed = rec.get("seed")
            w.writerow(
                [
                    csv_cell(student),
                    csv_cell(rec["assignment"]),
                    f"{rec['score']:g}",
                    f"{rec['max_score']:g}",
                    csv_cell(rec["status"]),
                    csv_cell(" | ".join(rec.get("flags", []))),
                    "" if seed is None else str(seed),
                    *(f"{points[fn]:g}" if fn in points else "" for fn in functions),
                ]
            )
            n += 1
    return n


def gradescope_results(rec: dict) -> dict:
    """One submission in Gradescope's autograder results format."""
    tests = []
    for fr in rec["functions"]:
        said: dict[str, str] = {}  # each likely mistake in full once, on the first test it explains
        for r in fr["results"]:
            lines = [r["feedback"]] if r["feedback"] else ["passed"]
            for message in r.get("diagnoses") or ([r["diagnosis"]] if r["diagnosis"] else []):
                if message in said:
                    lines.append(f"Likely mistake: the one named in test '{said[message]}'")
                else:
                    said[message] = r["name"]
                    lines.append(f"Likely mistake: {message}")
            if r is fr["results"][-1]:
                lines += composition_lines(fr["function"], fr.get("composition"), fr["max_score"])
            tests.append(
                {
                    "name": f"{fr['function']}: {r['checks']}",
                    "score": r["points"],
                    "max_score": r["max_points"],
                    "output": "\n".join(lines),
                    "visibility": "visible",
                }
            )
    return {
        "score": rec["score"],
        "output": "\n".join(rec["messages"]) or f"{rec['assignment']}: {rec['score']:g}/{rec['max_score']:g}",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def export_gradescope(db: str | Path, out: str | Path) -> int:
    """``OUT/<student file stem>/<assignment>/results.json`` per submission; returns how many."""
    n = 0
    with Gradebook(db) as book:
        for student, rec in book.rows():
            path = Path(out) / file_stem(student) / rec["assignment"] / "results.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(gradescope_results(rec), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            n += 1
    return n


def feedback_markdown(student: str, recs: list[dict]) -> str:
    """A student's report: per assignment and function, every test with its feedback. Every
    piece of text is escaped, so nothing in it can become a heading, a link or HTML."""
    e = markdown_escape
    lines = [f"# Feedback for {e(student)}", ""]
    for rec in recs:
        lines += [f"## {e(rec['assignment'])}: {rec['score']:g} / {rec['max_score']:g} points", ""]
        for m in rec["messages"]:
            lines.append(f"> {e(m)}")
        if rec["messages"]:
            lines.append("")
        for fr in rec["functions"]:
            lines += [f"### `{e(fr['function'])}`: {fr['score']:g} / {fr['max_score']:g}", ""]
            for note in fr["notes"]:
                lines.append(f"- **Note:** {e(note)}")
            if fr["status"] == "not implemented":
                lines += ["Not implemented yet.", ""]
                continue
            for r in fr["results"]:
                mark = "passed" if r["passed"] else "failed"
                line = f"- {mark} ({r['points']:g}/{r['max_points']:g}) **{e(r['name'])}**: {e(r['checks'])}"
                if r["feedback"] and not fr["notes"]:
                    line += f". {e(r['feedback'])}"
                lines.append(line)
            for m in mistake_lines(fr["results"]):
                head, _, message = m.partition(": ")
                lines.append(f"- *{e(head)}:* {e(message)}")
            lines += [f"- {e(c)}" for c in composition_lines(fr["function"], fr.get("composition"), fr["max_score"])]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def feedback_html(student: str, recs: list[dict]) -> str:
    """The same report as a standalone HTML page, every piece of text escaped."""
    h = html.escape
    body = [f"<h1>Feedback for {h(valid_utf8(student))}</h1>"]
    for rec in recs:
        body.append(f"<h2>{h(rec['assignment'])}: {rec['score']:g} / {rec['max_score']:g} points</h2>")
        body += [f"<blockquote>{h(m)}</blockquote>" for m in rec["messages"]]
        for fr in rec["functions"]:
            body.append(f"<h3><code>{h(fr['function'])}</code>: {fr['score']:g} / {fr['max_score']:g}</h3>")
            body += [f"<p><b>Note:</b> {h(n)}</p>" for n in fr["notes"]]
            if fr["status"] == "not implemented":
                body.append("<p>Not implemented yet.</p>")
                continue
            items = []
            for r in fr["results"]:
                mark = "passed" if r["passed"] else "failed"
                item = f"{mark} ({r['points']:g}/{r['max_points']:g}) <b>{h(r['name'])}</b>: {h(r['checks'])}"
                if r["feedback"] and not fr["notes"]:
                    item += f". {h(r['feedback'])}"
                items.append(f"<li>{item}</li>")
            for m in mistake_lines(fr["results"]):
                head, _, message = m.partition(": ")
                items.append(f"<li><i>{h(head)}:</i> {h(message)}</li>")
            comp = composition_lines(fr["function"], fr.get("composition"), fr["max_score"])
            items += [f"<li>{h(c)}</li>" for c in comp]
            body.append("<ul>" + "".join(items) + "</ul>")
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Feedback for '
        f"{h(valid_utf8(student))}</title></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_feedback(db: str | Path, out: str | Path, fmt: str = "md") -> int:
    """``OUT/<student file stem>.md`` (or ``.html``) per student; returns how many."""
    if fmt not in ("md", "html"):
        raise ValueError(f"feedback: format must be 'md' or 'html', got {fmt!r}")
    per_student: dict[str, list[dict]] = {}
    with Gradebook(db) as book:
        for student, rec in book.rows():
            per_student.setdefault(student, []).append(rec)
    Path(out).mkdir(parents=True, exist_ok=True)
    for student, recs in per_student.items():
        text = feedback_markdown(student, recs) if fmt == "md" else feedback_html(student, recs)
        (Path(out) / f"{file_stem(student)}.{fmt}").write_text(text, encoding="utf-8")
    return len(per_student)
