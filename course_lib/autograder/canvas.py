"""The Canvas gradebook import: scores into the instructor's existing Canvas assignments.

Canvas's importer (``GradebookImporter``, canvas-lms ``app/models/gradebook_importer.rb``)
reads a header ``Student, ID, SIS User ID, SIS Login ID, Section, ...``, then one column per
assignment titled ``TITLE (ID)``: a column whose id is an assignment of the course updates it,
any other column *creates a new assignment*. So every notebook's column here is a column of the
instructor's own Canvas gradebook export (the roster): mapped with ``--map
05_layer_norm="Layer Norm Exercises (4243)"`` (the whole title, the id ``4243`` or the title
alone), or found when the column's title is the notebook's name (``02 Self Attention (4242)``:
case, spaces and underscores aside). An assignment with no column is an error that names it
and lists the roster's assignment columns; nothing is ever written under a new title.

The ``Points Possible`` row repeats the roster's own (Canvas's) points, so the import changes
no assignment's points; ``scale`` rescales each score to them from the notebook's points
possible (the checks' and the questions graded by hand: :attr:`.record.Record.points_possible`),
and without it a column whose points differ from the notebook's is a warning. A roster student without a submission gets an
empty cell (Canvas leaves the grade as it is) or, with ``missing="zero"``, 0.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from .exports import CANVAS_IDENTITY, POINTS_POSSIBLE, RosterError, gradebook_table, read_roster
from .record import Record
from .untrusted_text import csv_cell

__all__ = ["CanvasColumn", "CanvasExport", "canvas_columns", "export_canvas", "parse_maps"]

#: Canvas's ``Assignment.title_and_id``: ``TITLE (ID)``.
_TITLE_AND_ID = re.compile(r"\A(.*)\s\((\d+)\)\Z", re.S)
#: Columns of a Canvas export that are no assignment (GradebookImporter's
#: ``NON_ASSIGNMENT_COLUMN_HEADERS``; "Unposted ..." variants contain them).
_NOT_ASSIGNMENTS = re.compile(r"Current (Score|Points|Grade)|Final (Score|Points|Grade)|Override (Score|Grade|Status)")


@dataclass(frozen=True)
class CanvasColumn:
    """An assignment column of a Canvas gradebook export.

    Args:
        header: the column's header as Canvas wrote it (``Layer Norm Exercises (4243)``).
        title: the assignment's title (``Layer Norm Exercises``).
        canvas_id: the assignment's Canvas id (``4243``).
        points_possible: the value of its ``Points Possible`` row (None when absent or not a number).
    """

    header: str
    title: str
    canvas_id: str
    points_possible: float | None


@dataclass(frozen=True)
class CanvasExport:
    """What :func:`export_canvas` wrote.

    Args:
        rows: the number of student rows.
        not_in_roster: students with submissions who are not in the roster (nothing of theirs written).
        columns: assignment -> the Canvas column its scores went to.
        warnings: what the instructor should check (points that differ without ``scale``).
    """

    rows: int
    not_in_roster: list[str]
    columns: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def canvas_columns(path: str | Path) -> list[CanvasColumn]:
    """The assignment columns of a Canvas gradebook export, with their points possible."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            table = list(csv.reader(f))
    except UnicodeDecodeError:
        raise RosterError(f"roster {path} is not UTF-8 text") from None
    header = table[0] if table else []
    points = next((row for row in table[1:] if row and "Points Possible" in row[0]), [])
    columns = []
    for i, name in enumerate(header):
        m = _TITLE_AND_ID.match(name.strip())
        if m and not _NOT_ASSIGNMENTS.search(name):
            columns.append(CanvasColumn(name, m.group(1).strip(), m.group(2), _number(points[i : i + 1])))
    return columns


def _number(cell: list[str]) -> float | None:
    try:
        return float(cell[0]) if cell else None
    except ValueError:
        return None


def parse_maps(values: list[str] | None) -> dict[str, str]:
    """``--map ASSIGNMENT=COLUMN`` options as a dict (a ValueError names the bad one)."""
    maps: dict[str, str] = {}
    for value in values or ():
        slug, eq, column = value.partition("=")
        if not eq or not slug.strip() or not column.strip():
            raise ValueError(f'--map: expected ASSIGNMENT="Canvas title (id)", e.g. 05_layer_norm=4243, got {value!r}')
        if slug.strip() in maps:
            raise ValueError(f"--map: {slug.strip()} is mapped twice")
        maps[slug.strip()] = column.strip()
    return maps


def _norm(title: str) -> str:
    return re.sub(r"[\s_-]+", "_", title.strip().lower())


def _listing(columns: list[CanvasColumn]) -> str:
    return ", ".join(repr(c.header) for c in columns) or "none"


def _column_for(slug: str, wanted: str | None, columns: list[CanvasColumn], roster: str | Path) -> CanvasColumn:
    """The roster column of ``slug``: the mapped one, else the one titled like it."""
    if wanted is not None:
        found = [c for c in columns if wanted in (c.header, c.canvas_id)] or [c for c in columns if c.title == wanted]
        if len(found) == 1:
            return found[0]
        why = "several" if found else "no"
        raise RosterError(
            f"--map {slug}={wanted!r}: {why} assignment column(s) of the roster {roster} match; "
            f"its assignment columns: {_listing(found or columns)}"
        )
    found = [c for c in columns if _norm(c.title) == _norm(slug)]
    if len(found) == 1:
        return found[0]
    raise RosterError(
        f"assignment {slug} has {'several columns' if found else 'no column'} in the roster {roster} "
        f'(Canvas would create a new assignment); map it with --map {slug}="TITLE (ID)"; the roster\'s '
        f"assignment columns: {_listing(found or columns)}"
    )


def _mapped(
    points: dict[str, float], maps: dict[str, str], columns: list[CanvasColumn], roster: str | Path
) -> dict[str, CanvasColumn]:
    """Each graded assignment's Canvas column (a RosterError for a map or an assignment that
    finds none, or two assignments in one column)."""
    from ..grading.registry import ASSIGNMENTS

    for slug in maps:
        if slug not in points and slug not in ASSIGNMENTS:
            raise RosterError(
                f"--map {slug}: no such assignment; the gradebook's assignments: {', '.join(points) or 'none'}"
            )
    chosen = {slug: _column_for(slug, maps.get(slug), columns, roster) for slug in points}
    seen: dict[str, str] = {}
    for slug, column in chosen.items():
        if column.header in seen:
            raise RosterError(f"--map: {seen[column.header]} and {slug} both go to the column {column.header!r}")
        seen[column.header] = slug
    return chosen


def _cell(rec: Record | None, column: CanvasColumn, possible: float, missing: str, scale: bool) -> str:
    if rec is None:
        return "0" if missing == "zero" else ""
    score = rec.score
    if scale and column.points_possible is not None and possible:
        score = round(score * column.points_possible / possible, 2)
    return f"{score:g}"


def export_canvas(
    db: str | Path,
    out: str | Path,
    roster: str | Path,
    maps: dict[str, str] | None = None,
    missing: str = "blank",
    scale: bool = False,
) -> CanvasExport:
    """A CSV for Canvas's gradebook import (see the module's docstring): :data:`CANVAS_IDENTITY`,
    each graded assignment's column of the roster, the roster's ``Points Possible`` row, then
    one row per roster student with the scores that count (an override's, a resolution's).

    Args:
        db: the gradebook.
        out: the CSV to write.
        roster: the instructor's Canvas gradebook export.
        maps: assignment -> its column (header, id or title), as ``--map`` gives them.
        missing: ``blank`` (an empty cell) or ``zero`` for a roster student without a submission.
        scale: rescale each score to the column's points possible.
    """
    if missing not in ("blank", "zero"):
        raise ValueError(f"--missing: expected 'blank' or 'zero', got {missing!r}")
    _, key, students = read_roster(roster)
    columns = canvas_columns(roster)
    table, points = gradebook_table(db)
    chosen = _mapped(points, maps or {}, columns, roster)
    result = CanvasExport(0, [], {slug: c.header for slug, c in chosen.items()})
    for slug, column in chosen.items():
        pp = column.points_possible
        if scale and pp is None:
            raise RosterError(f"--scale: the roster {roster} has no Points Possible value for {column.header!r}")
        if not scale and pp is not None and pp != points[slug]:
            result.warnings.append(
                f"{slug} has {points[slug]:g} points, Canvas's {column.header!r} {pp:g}: scores are written as "
                "they are (pass --scale to rescale them)"
            )
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow([csv_cell(c) for c in (*CANVAS_IDENTITY, *(c.header for c in chosen.values()))])
        possible = [f"{points[s] if c.points_possible is None else c.points_possible:g}" for s, c in chosen.items()]
        w.writerow([csv_cell(c) for c in (POINTS_POSSIBLE, "", "", "", "", *possible)])
        for row in students:
            login = row[key]
            identity = [
                row.get("Student") or login,
                row.get("ID", ""),
                row.get("SIS User ID", ""),
                row.get("SIS Login ID") or login,
                row.get("Section", ""),
            ]
            recs = table.get(login, {})
            cells = [_cell(recs.get(s), c, points[s], missing, scale) for s, c in chosen.items()]
            w.writerow([csv_cell(c) for c in (*identity, *cells)])
    known = {row[key] for row in students}
    return CanvasExport(len(students), sorted(s for s in table if s not in known), result.columns, result.warnings)
