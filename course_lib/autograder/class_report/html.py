"""The class report as a static site: ``index.html`` and one page per assignment.

No script, no external request: a little inline CSS (light and dark, from the reader's
``prefers-color-scheme``) and a Content-Security-Policy that lets the pages load only their
own figures and the images pasted into answers (``data:`` URIs). Every text that came from a
submission (student ids, code, feedback) is escaped with :func:`html.escape`; the questions and
answers are Markdown rendered by :func:`.answer_text.render_markdown` (raw HTML escaped, math
written as MathML when the page is made); file names come from assignment names only.
"""

from __future__ import annotations

from html import escape
from typing import Any

from ..answer_text import render_markdown
from ..code_view import numbered_code
from .answers import Images

__all__ = ["index_page", "assignment_page", "DETAILED_PAIRS", "LISTED_PAIRS"]

#: Look-alike pairs shown side by side on a page (the most similar first); more are listed only.
DETAILED_PAIRS = 30
#: Look-alike pairs listed in a page's table (all of them are in data.json).
LISTED_PAIRS = 300

_CSS = """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1d1d1f; --muted: #5f6368; --line: #d0d4da;
  --head: #f1f3f5; --mark: #fff0a8; --flag: #b3261e; --link: #0b57d0; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #16181c; --fg: #e6e6e6; --muted: #a0a4aa; --line: #3a3f46; --head: #22262c;
    --mark: #5a4b00; --flag: #ff8a80; --link: #8ab4f8; } }
body { background: var(--bg); color: var(--fg); font: 15px/1.5 system-ui, sans-serif; margin: 0 auto;
  max-width: 72rem; padding: 1rem 1.5rem 4rem; }
a { color: var(--link); }
h1, h2, h3 { line-height: 1.25; } h2 { border-bottom: 1px solid var(--line); padding-bottom: .2rem; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; width: 100%; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--head); } td.num, th.num { text-align: right; white-space: nowrap; }
.muted, .note { color: var(--muted); } .flag { color: var(--flag); font-weight: 600; }
img.figure { max-width: 100%; height: auto; }
pre { margin: 0; overflow-x: auto; font: 12.5px/1.4 ui-monospace, monospace; border: 1px solid var(--line); }
.code { overflow-x: auto; } .code pre { overflow: visible; width: max-content; min-width: 100%; box-sizing: border-box; }
.code:focus-visible { outline: 2px solid var(--link); outline-offset: 2px; }
pre span { display: block; padding: 0 .4rem; white-space: pre; } pre span.hl { background: var(--mark); }
pre span i { color: var(--muted); font-style: normal; display: inline-block; width: 3em; user-select: none; }
pre span.hl i { color: var(--fg); }
.side { display: grid; grid-template-columns: 1fr 1fr; gap: .75rem; margin: .5rem 0 1.5rem; }
.side > div { min-width: 0; } .answer { overflow-wrap: anywhere; } .answer > :first-child { margin-top: 0; }
.answer > :last-child { margin-bottom: 0; } .answer img { max-width: 100%; height: auto; }
.answer pre, .question pre { padding: .3rem .4rem; white-space: pre-wrap; }
.question { border-left: 3px solid var(--line); padding: 0 .75rem; margin: .5rem 0; }
.image-not-loaded, .math-source { color: var(--muted); } math[display="block"] { margin: .4rem 0; }
details summary { cursor: pointer; color: var(--muted); } code { overflow-wrap: anywhere; }
"""

_CSP = "default-src 'none'; img-src 'self' file: data:; style-src 'unsafe-inline'"


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _code(source: str, ranges: list[tuple[int, ...]], label: str) -> str:
    """A student's code, numbered and highlighted, in a region the keyboard can focus (and so
    scroll sideways: a page without script has no other way to reach a long line)."""
    lines = [(r[0], r[-1]) for r in ranges]
    return f'<div class="code" role="region" aria-label="{_e(label)}" tabindex="0">{numbered_code(source, lines)}</div>'


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:.0f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="color-scheme" content="light dark">\n'
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )


def _table(head: list[str], rows: list[list[str]], num: set[int] | None = None) -> str:
    """A table of already escaped cells; columns in ``num`` are right-aligned."""
    num = num or set()
    th = "".join(f"<th{' class=num' if i in num else ''}>{h}</th>" for i, h in enumerate(head))
    body = "".join(
        "<tr>" + "".join(f"<td{' class=num' if i in num else ''}>{c}</td>" for i, c in enumerate(r)) + "</tr>\n"
        for r in rows
    )
    return f"<table>\n<thead><tr>{th}</tr></thead>\n<tbody>\n{body}</tbody>\n</table>\n"


def _students(names: list[str], limit: int = 2000) -> str:
    shown = ", ".join(_e(s) for s in names[:limit])
    more = f" and {len(names) - limit} more (see data.json)" if len(names) > limit else ""
    return f"<details><summary>{len(names)} student(s)</summary>{shown}{more}</details>"


def index_page(data: dict[str, Any]) -> str:
    """The index: every assignment with its class size, mean and links."""
    rows = []
    for a in data["assignments"]:
        s = a["scores"]
        look = a["lookalikes"]
        rows.append(
            [
                f'<a href="{_e(a["page"])}">{_e(a["assignment"])}</a>',
                str(s["records"]),
                str(a["class_size"]),
                f"{_num(s['mean'])} / {s['max_score']:g}",
                _num(s["median"]),
                str(s["full_marks"]),
                str(s["zero"]),
                str(look["student_pairs"]) if look else "n/a",
            ]
        )
    head = ["assignment", "records", "class (graded)", "mean", "median", "full marks", "zero", "look-alike pairs"]
    notes = []
    if data["without_sources"] or data["without_answers"]:
        notes.append(
            f"<p class=note>{data['without_sources']} of {data['records']} record(s) were graded before records "
            f"carried the functions' sources, and {data['without_answers']} before they carried the answers: "
            "they are missing from the look-alike search and the answers (grade again with --force to add them).</p>"
        )
    body = (
        "<h1>Class report</h1>\n"
        f"<p>{data['records']} record(s) in {len(data['assignments'])} assignment(s). The same numbers as plain "
        'JSON: <a href="data.json">data.json</a>.</p>\n'
        + "".join(notes)
        + _table(head, rows, num={1, 2, 3, 4, 5, 6, 7})
    )
    return _page("Class report", body)


def _scores(a: dict[str, Any]) -> str:
    s = a["scores"]
    rows = [
        ["records", str(s["records"])],
        ["class (graded records)", str(a["class_size"])],
        ["mean", f"{_num(s['mean'])} / {s['max_score']:g}"],
        ["median", _num(s["median"])],
        ["full marks", str(s["full_marks"])],
        ["zero", str(s["zero"])],
        ["late", str(s["late"])],
    ]
    statuses = [[_e(k), str(v)] for k, v in s["statuses"].items()]
    return (
        '<h2 id="scores">1. Scores</h2>\n'
        f'<img class="figure" src="{_e(a["figure"])}" alt="Histogram of the scores of {_e(a["assignment"])}" '
        'width="600" height="260">\n'
        '<div class="side"><div>'
        + _table(["", "value"], rows, {1})
        + "</div><div>"
        + _table(["status", "records"], statuses, {1})
        + "</div></div>\n"
    )


def _mistakes(a: dict[str, Any]) -> str:
    out = [
        '<h2 id="mistakes">2. Mistakes</h2>\n<p class=note>Named mistakes are the checks\' diagnoses; a share is of '
        f"the class ({a['class_size']} graded record(s)).</p>\n"
    ]
    for f in a["mistakes"]:
        statuses = ", ".join(f"{_e(k)}: {v}" for k, v in f["statuses"].items()) or "no graded records"
        out.append(f"<h3><code>{_e(f['function'])}</code></h3>\n<p class=muted>{statuses}</p>\n")
        if f["named"]:
            rows = [
                [
                    _e(m["mistake"]),
                    str(m["count"]),
                    _pct(m["share"]),
                    _e(", ".join(m["tests"])),
                    _e(m["feedback"]),
                    _students(m["students"]),
                ]
                for m in f["named"]
            ]
            out.append(_table(["named mistake", "students", "share", "tests", "feedback", "who"], rows, {1, 2}))
        else:
            out.append("<p>No named mistake.</p>\n")
        if f["unrecognised"]:
            rows = [
                [_e(u["test"]), str(u["count"]), _pct(u["share"]), _students(u["students"])] for u in f["unrecognised"]
            ]
            out.append("<p>Failed with no named mistake (not recognised by the checks):</p>\n")
            out.append(_table(["test", "students", "share", "who"], rows, {1, 2}))
    return "".join(out)


def _items(a: dict[str, Any], flags: dict[str, str]) -> str:
    rows = []
    for it in a["items"]:
        marks = "; ".join(f'<span class=flag title="{_e(flags[f])}">{_e(f)}</span>' for f in it["flags"])
        rows.append(
            [
                f"<code>{_e(it['function'])}</code>",
                _e(it["test"]),
                f"{it['max_points']:g}",
                str(it["students"]),
                _pct(it["pass_rate"]),
                _num(it["discrimination"]),
                marks,
            ]
        )
    legend = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in flags.items())
    return (
        '<h2 id="items">3. Items</h2>\n<p class=note>Discrimination: the correlation between passing the test and '
        "the rest of the score (this test's points removed); n/a where it is undefined (no variance).</p>\n"
        + _table(["function", "test", "points", "students", "pass rate", "discrimination", "flags"], rows, {2, 3, 4, 5})
        + f"<ul class=muted>{legend}</ul>\n"
    )


def _decision(d: dict[str, Any] | None) -> str:
    """A grader's decision on a pair (``course-lib review``), escaped:
    ``confirmed by ann at 2026-12-01T10:00:00Z: note``."""
    if not d:
        return "<span class=muted>undecided</span>"
    note = f": {_e(d['note'])}" if d["note"] else ""
    return f"<b>{_e(d['verdict'])}</b> by {_e(d['by'])} at {_e(d['at'])}{note}"


def _lookalikes(a: dict[str, Any], sources: dict[str, dict[str, str]]) -> str:
    look = a["lookalikes"]
    out = ['<h2 id="lookalikes">4. Look-alike submissions</h2>\n']
    if look is None:
        return out[0] + "<p>Not computed.</p>\n"
    out.append(
        "<p class=note>Pairs of submissions whose graded functions share unusually many code fingerprints after "
        "names, literals, comments and formatting are normalised away (the starter code, the solution's parts and "
        "code most of the class shares are left out). A high similarity is evidence for a person to read, not a "
        "verdict: students may have worked together as allowed, or followed the same hint. Similarity: shared "
        f"fingerprints over those of the smaller submission. {look['compared']} submission(s) compared; "
        f"{look['student_pairs']} student pair(s) and {look['reference_pairs']} match(es) with the reference "
        "solution at or above the threshold.</p>\n"
    )
    pairs = look["pairs"]
    rows = []
    for i, p in enumerate(pairs[:LISTED_PAIRS], 1):
        other = "<em>matches the reference solution</em>" if p["reference"] else _e(p["b"])
        link = f'<a href="#pair-{i}">{i}</a>' if i <= DETAILED_PAIRS else str(i)
        functions = sorted({r["function"] for r in p["regions"]})
        row = [link, _e(p["a"]), other, _pct(p["similarity"]), str(p["shared"]), _e(", ".join(functions))]
        rows.append([*row, _decision(p.get("decision"))])
    if rows:
        head = ["#", "student", "looks like", "similarity", "shared", "functions", "decision"]
        out.append(_table(head, rows, {3, 4}))
    if len(pairs) > LISTED_PAIRS:
        out.append(f"<p class=muted>{len(pairs) - LISTED_PAIRS} more pair(s) in data.json.</p>\n")
    for i, p in enumerate(pairs[:DETAILED_PAIRS], 1):
        ref = p["reference"]
        title = f"{_e(p['a'])} matches the reference solution" if ref else f"{_e(p['a'])} and {_e(p['b'])}"
        out.append(f'<h3 id="pair-{i}">{i}. {title} ({_pct(p["similarity"])}, {p["shared"]} shared)</h3>\n')
        out.append(f"<p>Decision: {_decision(p.get('decision'))}</p>\n")
        by_function: dict[str, list[dict[str, Any]]] = {}
        for r in p["regions"]:
            by_function.setdefault(r["function"], []).append(r)
        for function, regions in by_function.items():
            a_src = sources.get(p["a"], {}).get(function, "")
            left = f"<div><p><b>{_e(p['a'])}</b>: <code>{_e(function)}</code></p>{_code(a_src, [tuple(r['a_lines']) for r in regions], function + ' of ' + p['a'])}</div>"
            if ref:  # never the solution's code
                right = "<div><p><em>matches the reference solution</em>: the highlighted lines share fingerprints with it (its code is not shown).</p></div>"
            else:
                b_src = sources.get(p["b"], {}).get(function, "")
                right = f"<div><p><b>{_e(p['b'])}</b>: <code>{_e(function)}</code></p>{_code(b_src, [tuple(r['b_lines']) for r in regions], function + ' of ' + p['b'])}</div>"
            out.append(f'<div class="side">{left}{right}</div>\n')
    return "".join(out)


def _answer_rows(q: dict[str, Any], images: Images) -> list[list[str]]:
    """One row per group of alike answers (shown once, with its members), then one per other answer."""

    def shown(x: dict[str, Any]) -> str:
        html = render_markdown(x["answer"], images.get(x["student"], {}).get(q["id"]))
        return f'<div class="answer">{html}</div>'

    by_student = {x["student"]: x for x in q["answers"]}
    rows, grouped = [], set()
    for g in q["groups"]:
        members = [by_student[s] for s in g["students"] if s in by_student]
        grouped |= {x["student"] for x in members}
        if g["identical"]:
            what = f"<b>{len(members)} students gave the same answer</b>"
            rest = ""
        else:
            what = (
                f"<b>{len(members)} students gave nearly the same answer</b> (at least {_pct(g['similarity'])} alike)"
            )
            rest = (
                "<details><summary>each answer of the group</summary>"
                + "".join(f"<p><b>{_e(x['student'])}</b></p>{shown(x)}" for x in members[1:])
                + "</details>"
            )
        names = ", ".join(_e(x["student"]) for x in members)
        rows.append([f'<p class="group">{what}: {names}</p>', shown(members[0]) + rest])
    rows += [[_e(x["student"]), shown(x)] for x in q["answers"] if x["student"] not in grouped]
    return rows


def _answers(a: dict[str, Any], images: Images) -> str:
    out = [
        '<h2 id="answers">5. Answers</h2>\n<p class=note>Questions from the exercise notebook. Answers that are '
        "the same, or nearly the same, after case, spacing and Markdown markup are set aside, are shown once "
        "with every student who gave them, first; near-identical ones keep each answer one click away.</p>\n"
    ]
    if not a["answers"]:
        out.append('<p>No "think about it" questions in the exercise notebook or answers in these records.</p>\n')
    for q in a["answers"]:
        number = f"Question {q['number']}: " if q["number"] is not None else ""
        groups = f", {len(q['groups'])} group(s) of alike answers" if q["groups"] else ""
        out.append(
            f"<h3>{number}<code>{_e(q['id'])}</code></h3>\n"
            + (f'<div class="question">{render_markdown(q["question"])}</div>\n' if q["question"] else "")
            + f"<p class=muted>{q['answered']} answer(s){groups}, {q['unanswered']} left unanswered.</p>\n"
        )
        rows = _answer_rows(q, images)
        if rows:
            out.append(_table(["student", "answer"], rows))
    return "".join(out)


def assignment_page(
    a: dict[str, Any], sources: dict[str, dict[str, str]], flags: dict[str, str], images: Images | None = None
) -> str:
    """One assignment's page: scores, mistakes, items, look-alikes and answers.

    Args:
        a: the assignment's entry of ``data.json``.
        sources: student -> function -> source, for the side-by-side views.
        flags: the item flags and what they say.
        images: student -> question id -> the answer's pasted images (``{name: {mime: base64}}``).
    """
    nav = (
        '<p><a href="index.html">All assignments</a> · <a href="#scores">Scores</a> · <a href="#mistakes">Mistakes</a>'
        ' · <a href="#items">Items</a> · <a href="#lookalikes">Look-alikes</a> · <a href="#answers">Answers</a></p>\n'
    )
    body = (
        f"<h1>{_e(a['assignment'])}</h1>\n{nav}"
        + _scores(a)
        + _mistakes(a)
        + _items(a, flags)
        + _lookalikes(a, sources)
        + _answers(a, images or {})
    )
    return _page(f"{a['assignment']}: class report", body)
