"""Out of the gradebook: a CSV for the LMS, Gradescope ``results.json`` files, feedback reports.

Feedback and exports carry what the checks say (test titles, feedback sentences, likely
mistakes) and never the hidden inputs: no test case stores its input values in a record.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from pathlib import Path

from .gradebook import Gradebook
from .registry import ASSIGNMENTS

__all__ = ["export_csv", "export_gradescope", "write_feedback"]


def _safe(name: str) -> str:
    """A file name made from a student's folder name (distinct names stay distinct)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80].lstrip(".") or "_"
    if safe != name:
        safe += "-" + hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return safe


def export_csv(db: str | Path, out: str | Path) -> int:
    """One row per student and assignment: student, assignment, score, max_score, status,
    then the points of every graded function (empty where the assignment does not grade it).

    Returns the number of rows written.
    """
    functions = [f for names in ASSIGNMENTS.values() for f in names]
    n = 0
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with Gradebook(db) as book, open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["student", "assignment", "score", "max_score", "status", *functions])
        for student, rec in book.rows():
            points = {r["function"]: r["score"] for r in rec["functions"]}
            w.writerow([student, rec["assignment"], f"{rec['score']:g}", f"{rec['max_score']:g}", rec["status"],
                        *(f"{points[fn]:g}" if fn in points else "" for fn in functions)])
            n += 1
    return n


def gradescope_results(rec: dict) -> dict:
    """One submission in Gradescope's autograder results format."""
    tests = []
    for fr in rec["functions"]:
        for r in fr["results"]:
            lines = [r["feedback"]] if r["feedback"] else ["passed"]
            if r["diagnosis"]:
                lines.append(f"Likely mistake: {r['diagnosis']}")
            tests.append({
                "name": f"{fr['function']}: {r['checks']}",
                "score": r["points"],
                "max_score": r["max_points"],
                "output": "\n".join(lines),
                "visibility": "visible",
            })
    return {
        "score": rec["score"],
        "output": "\n".join(rec["messages"]) or f"{rec['assignment']}: {rec['score']:g}/{rec['max_score']:g}",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def export_gradescope(db: str | Path, out: str | Path) -> int:
    """``OUT/<student>/<assignment>/results.json`` per submission; returns how many."""
    n = 0
    with Gradebook(db) as book:
        for student, rec in book.rows():
            path = Path(out) / _safe(student) / rec["assignment"] / "results.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(gradescope_results(rec), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
            n += 1
    return n


def feedback_markdown(student: str, recs: list[dict]) -> str:
    """A student's report: per assignment and function, every test with its feedback."""
    lines = [f"# Feedback for {student}", ""]
    for rec in recs:
        lines += [f"## {rec['assignment']}: {rec['score']:g} / {rec['max_score']:g} points", ""]
        for m in rec["messages"]:
            lines.append(f"> {m}")
        if rec["messages"]:
            lines.append("")
        for fr in rec["functions"]:
            lines += [f"### `{fr['function']}`: {fr['score']:g} / {fr['max_score']:g}", ""]
            for note in fr["notes"]:
                lines.append(f"- **Note:** {note}")
            if fr["status"] == "not implemented":
                lines += ["Not implemented yet.", ""]
                continue
            for r in fr["results"]:
                mark = "passed" if r["passed"] else "failed"
                line = f"- {mark} ({r['points']:g}/{r['max_points']:g}) **{r['name']}**: {r['checks']}"
                if r["feedback"] and not fr["notes"]:
                    line += f". {r['feedback']}"
                if r["diagnosis"]:
                    line += f". *Likely mistake:* {r['diagnosis']}"
                lines.append(line)
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _markdown_to_html(student: str, md: str) -> str:
    body = []
    for line in md.splitlines():
        esc = html.escape(line)
        esc = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", esc)
        esc = re.sub(r"\*(.+?)\*", r"<i>\1</i>", esc)
        esc = re.sub(r"`(.+?)`", r"<code>\1</code>", esc)
        if line.startswith("### "):
            body.append(f"<h3>{esc[4:]}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{esc[3:]}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{esc[2:]}</h1>")
        elif line.startswith("&gt; "):
            body.append(f"<blockquote>{esc[5:]}</blockquote>")
        elif line.startswith("- "):
            body.append(f"<li>{esc[2:]}</li>")
        elif line:
            body.append(f"<p>{esc}</p>")
    return ("<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Feedback for "
            f"{html.escape(student)}</title></head><body>" + "\n".join(body) + "</body></html>\n")


def write_feedback(db: str | Path, out: str | Path, fmt: str = "md") -> int:
    """``OUT/<student>.md`` (or ``.html``) per student; returns how many."""
    if fmt not in ("md", "html"):
        raise ValueError(f"feedback: format must be 'md' or 'html', got {fmt!r}")
    per_student: dict[str, list[dict]] = {}
    with Gradebook(db) as book:
        for student, rec in book.rows():
            per_student.setdefault(student, []).append(rec)
    Path(out).mkdir(parents=True, exist_ok=True)
    for student, recs in per_student.items():
        md = feedback_markdown(student, recs)
        text = md if fmt == "md" else _markdown_to_html(student, md)
        (Path(out) / f"{_safe(student)}.{fmt}").write_text(text, encoding="utf-8")
    return len(per_student)
