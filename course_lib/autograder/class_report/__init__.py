"""The instructor's class report: ``course-lib report --db gradebook.sqlite --out report/``.

Read from the gradebook alone (plus the course's exercise and solution notebooks for the
look-alike search): per assignment, the scores, the named mistakes, the items (tests), the
look-alike submissions and the "think about it" answers. Written as a static site
(:mod:`.html`, figures from :mod:`.figures`), as ``data.json``, or as a Markdown summary
(:mod:`.markdown`).

``data.json`` keys:

- ``records``, ``without_sources``, ``without_answers``: records in the gradebook, and how many
  were graded before records carried the functions' sources or the answers.
- ``assignments``: one object per assignment, in course order:

  - ``assignment``, ``page`` (its HTML file), ``figure`` (its histogram), ``functions``;
  - ``class_size``: its records with status ``graded`` (the class that mistakes, items and
    shares are counted over);
  - ``scores`` (over every record): ``records``, ``max_score``, ``mean``, ``median``,
    ``full_marks``, ``zero``, ``statuses`` (records per status, every status listed), ``late``,
    ``histogram`` (``edges``, ``counts``);
  - ``mistakes``: per function, ``function``, ``statuses``, ``named`` (``mistake``, ``count``,
    ``share``, ``students``, ``tests``, ``feedback``) and ``unrecognised`` (``test``, ``count``,
    ``share``, ``students``): see :func:`.data.mistakes`;
  - ``items``: per test, ``function``, ``test``, ``max_points``, ``students``, ``passed``,
    ``pass_rate``, ``discrimination`` (null when undefined), ``flags``: see :mod:`.items`;
  - ``lookalikes``: ``compared``, ``student_pairs``, ``reference_pairs``, ``pairs`` (``a``,
    ``b``, ``similarity``, ``shared``, ``regions``: see :mod:`course_lib.autograder.lookalike`;
    ``reference``: true when ``b`` is the reference solution, whose lines are then not shown;
    ``decision``: a grader's decision in ``course-lib review``, ``verdict`` (``confirmed`` or
    ``dismissed``), ``note``, ``by``, ``at``, or null when undecided: see :mod:`.decisions`),
    ``confirmed_pairs``, ``dismissed_pairs``;
  - ``answers``: per question of the exercise notebook (then any other id the records hold),
    ``id``, ``number``, ``question`` (its Markdown), ``answered``, ``unanswered``, ``answers``
    (``student``, ``answer`` as the student wrote it, ``images``: the names of its pasted images,
    which are on the page but not in ``data.json``): see :mod:`.answers`.

- ``item_flags``: what each item flag means.

Numbers that are undefined (a mean of no records, a correlation without variance) are null,
never NaN.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..answer_text import Question, QuestionsError, questions
from .answers import Images, answer_images, answers_by_question
from .data import ReportError, functions_of, load, mistakes, page_name, score_summary
from .decisions import pair_decisions, with_decisions
from .items import FLAGS, item_statistics
from .pairs import assignment_lookalikes, student_sources

__all__ = ["build_data", "write_report", "ReportResult", "ReportError"]


@dataclass
class ReportResult:
    """What :func:`write_report` made: the data, the files written and seconds per stage."""

    data: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    text: str = ""  # the Markdown summary (format md)


def build_data(
    db: str | Path,
    *,
    exercises: str | Path = "exercises",
    solutions: str | Path = "solutions",
    threshold: float | None = None,
    seconds: dict[str, float] | None = None,
    images: dict[str, Images] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, str]]]]:
    """The report's numbers from the gradebook ``db``.

    Args:
        db: the gradebook file.
        exercises: folder of the exercise notebooks (the starter code).
        solutions: folder of the solution notebooks.
        threshold: the smallest look-alike similarity reported (None: the search's default).
        seconds: filled with the seconds of each stage (``load``, ``statistics``, ``look-alikes``).
        images: filled with, per assignment, student -> question id -> the answer's pasted
            images (``{name: {mime: base64}}``), for the pages (not part of ``data.json``).

    Returns:
        ``(data, sources)``: the ``data.json`` content and, per assignment, student -> function
        -> source (for the side-by-side views; not part of ``data.json``).

    Raises:
        ReportError: no gradebook at ``db``, or a notebook the look-alike search or the questions need is missing.
    """
    if threshold is not None and not (isinstance(threshold, int | float) and 0.0 <= threshold <= 1.0):
        raise ReportError(f"--threshold: expected a number between 0 and 1, got {threshold!r}")
    seconds = {} if seconds is None else seconds
    t0 = time.perf_counter()
    cls = load(db)
    seconds["load"] = time.perf_counter() - t0
    seconds["statistics"] = seconds["look-alikes"] = 0.0
    data: dict[str, Any] = {
        "records": cls.records,
        "without_sources": cls.without_sources,
        "without_answers": cls.without_answers,
        "item_flags": dict(FLAGS),
        "assignments": [],
    }
    all_sources = {}
    decided = pair_decisions(db, cls.assignments)
    for i, (name, rows) in enumerate(cls.assignments.items()):
        t0 = time.perf_counter()
        functions = functions_of(name, rows)
        stem = page_name(name, i)
        entry: dict[str, Any] = {
            "assignment": name,
            "page": f"{stem}.html",
            "figure": f"{stem}-scores.svg",
            "functions": functions,
            "class_size": sum(1 for _, r in rows if r.status == "graded"),
            "scores": score_summary(rows),
            "mistakes": mistakes(rows, functions),
            "items": item_statistics(rows, functions),
        }
        t1 = time.perf_counter()
        seconds["statistics"] += t1 - t0
        pairs, summary = assignment_lookalikes(
            rows, name, functions, exercises=exercises, solutions=solutions, threshold=threshold
        )
        with_decisions(pairs, summary, decided[name])
        entry["answers"] = answers_by_question(rows, _questions(exercises, name))
        if images is not None:
            images[name] = answer_images(rows)
        entry["lookalikes"] = {**summary, "pairs": pairs}
        all_sources[name] = student_sources(rows)
        seconds["look-alikes"] += time.perf_counter() - t1
        data["assignments"].append(entry)
    return data, all_sources


def _questions(exercises: str | Path, assignment: str) -> dict[str, Question]:
    try:
        return questions(exercises, assignment)
    except QuestionsError as err:
        raise ReportError(f"--exercises: {err}") from None


def write_report(
    db: str | Path,
    out: str | Path | None,
    *,
    fmt: str = "html",
    exercises: str | Path = "exercises",
    solutions: str | Path = "solutions",
    threshold: float | None = None,
) -> ReportResult:
    """Make the class report of the gradebook ``db``.

    Args:
        db: the gradebook file.
        out: the folder for the site (format ``html``; created); unused for ``md``.
        fmt: ``html`` (the site, its figures and ``data.json``) or ``md`` (returned as
            ``text``; nothing written).
        exercises: folder of the exercise notebooks.
        solutions: folder of the solution notebooks.
        threshold: the smallest look-alike similarity reported.

    Returns:
        A :class:`ReportResult`; ``seconds`` has ``load``, ``statistics``, ``look-alikes``,
        ``figures`` and ``html`` (the pages and data.json).

    Raises:
        ReportError: bad arguments, no gradebook, or a missing notebook.
    """
    if fmt not in ("html", "md"):
        raise ReportError(f"--format: expected 'html' or 'md', got {fmt!r}")
    if fmt == "html" and out is None:
        raise ReportError("--out: the html format needs a folder for the site")
    result = ReportResult(data={})
    images: dict[str, Images] = {}
    data, sources = build_data(
        db, exercises=exercises, solutions=solutions, threshold=threshold, seconds=result.seconds, images=images
    )
    result.data = data
    if fmt == "md":
        from .markdown import summary_markdown

        result.text = summary_markdown(data)
        return result
    from .figures import score_histogram
    from .html import assignment_page, index_page

    folder = Path(str(out))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for a in data["assignments"]:
        s = a["scores"]
        result.files.append(score_histogram(s["histogram"], s["max_score"], folder / a["figure"], a["assignment"]))
    t1 = time.perf_counter()
    result.seconds["figures"] = t1 - t0
    for a in data["assignments"]:
        path = folder / a["page"]
        page = assignment_page(a, sources[a["assignment"]], FLAGS, images[a["assignment"]])
        path.write_text(page, encoding="utf-8")
        result.files.append(path)
    (folder / "index.html").write_text(index_page(data), encoding="utf-8")
    text = json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False)
    (folder / "data.json").write_text(text + "\n", encoding="utf-8")
    result.files += [folder / "index.html", folder / "data.json"]
    result.seconds["html"] = time.perf_counter() - t1
    return result
