"""``course-lib release``: per-assignment student bundles for a graded course.

Each bundle ``DIST/<assignment>/`` (and the same as ``DIST/<assignment>.zip``) holds:

- the exercise notebook, made from ``solutions/`` as ``course-lib assign`` makes it, stamped with
  ``metadata["course_lib"] = {"assignment", "release", "released_at", "book_url"}`` (``collect``
  recognises a renamed notebook by ``assignment``), its links to the book made absolute
  (``../book/NN_x.md#label`` becomes ``BOOK_URL/book/NN_x.html#label``), and a first cell that
  says how to install the self-check (and the release date, when given);
- ``course_lib_student-VERSION-py3-none-any.whl``: ``course_lib.grading`` without the rubrics
  and without any reference implementation, plus each released assignment's self-check data
  (:mod:`course_lib.grading.released`). ``check()`` in the notebooks works unchanged with it.

The book's URL is one setting, ``html.baseurl`` in ``_config.yml`` (``--book-url`` overrides it).
Every released bundle holds the same wheel, with the data of every assignment of this release.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import io
import json
import re
import shutil
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .assign import dumps, make_exercise
from .wheel import WheelSpec, wheel_name, write_wheel

__all__ = ["Bundle", "Release", "ReleaseError", "release", "absolute_links", "student_files", "add_release"]

#: The students' distribution. Its import package is ``course_lib``: the notebooks import
#: ``course_lib.grading`` and the grader reads that import, so they need no change.
DISTRIBUTION = "course_lib_student"
#: The files of course_lib (relative to its folder) that the students' package ships, besides
#: ``grading/`` without ``grading/rubrics/``; its ``__init__.py`` is written anew (:data:`_INIT`).
_SHIPPED = ("_validation.py", "_ast_lock.py", "assignments.py")
_INIT = '''"""course_lib for the students of a graded course: the self-check, without the reference
implementations (course-lib release). ``from course_lib.grading import check``."""

from .assignments import GRADED_FUNCTIONS

__version__ = {version!r}
RELEASED = {assignments!r}
'''
_LINK = re.compile(r"\]\(\s*([^)\s]+)\s*\)")
_BOOK_PAGE = re.compile(r"^(?:\.\./)?book/([A-Za-z0-9_]+)\.(?:md|ipynb)(#[A-Za-z0-9_.-]*)?$")


class ReleaseError(ValueError):
    """Input ``release`` cannot use, said with the argument, what was expected and what was given."""


@dataclass(frozen=True)
class Bundle:
    """One assignment's student bundle: the folder, its notebook, its wheel and its zip."""

    assignment: str
    folder: str
    notebook: str
    wheel: str
    archive: str


@dataclass(frozen=True)
class Release:
    """What one ``course-lib release`` wrote (``DIST/release.json``)."""

    version: str
    released_at: str | None
    book_url: str
    assignments: list[str]
    bundles: list[Bundle]


def parse_release_date(text: str) -> str:
    """``text`` as an ISO 8601 date (``2026-12-01``) or date-time; a date-time without a zone is UTC."""
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return dt.date.fromisoformat(text).isoformat()
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ReleaseError(
            f"release: --release-date must be an ISO 8601 date or date-time (2026-12-01, 2026-12-01T09:00+01:00), "
            f"got {text!r}"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).isoformat()


def book_url_from(config: str | Path, given: str | None) -> str:
    """The book's URL: ``given`` (``--book-url``), else ``html.baseurl`` of ``config`` (``_config.yml``)."""
    url = given
    if url is None:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:  # the book's extra brings it; course_lib alone does not
            raise ReleaseError(
                f"release: reading html.baseurl from {config} needs PyYAML; or pass --book-url URL"
            ) from None
        path = Path(config)
        settings = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
        url = ((settings or {}).get("html") or {}).get("baseurl") or ""
        if not url:
            raise ReleaseError(f"release: no book URL: pass --book-url URL or set html.baseurl in {config}")
    if not re.match(r"^https?://[^\s/]+", url):
        raise ReleaseError(
            f"release: --book-url must be an absolute http(s) URL such as https://example.org/book, got {url!r}"
        )
    return url.rstrip("/")


def absolute_links(text: str, book_url: str, where: str) -> str:
    """``text`` (Markdown) with every relative link to a page of the book made absolute.

    Raises:
        ReleaseError: a relative link that is not a page of the book (a student could not follow it).
    """

    def absolute(m: re.Match[str]) -> str:
        target = m.group(1)
        if target.startswith("#") or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target):
            return m.group(0)  # an anchor in the notebook, or a URL (https:, mailto:, attachment:)
        page = _BOOK_PAGE.match(target)
        if page is None:
            raise ReleaseError(f"release: {where} links to {target!r}, which is not a page of the book")
        return f"]({book_url}/book/{page.group(1)}.html{page.group(2) or ''})"

    made = _LINK.sub(absolute, text)
    left = re.search(r"""(?:\]:\s*|href=["']|\]\()(\.\./[^\s"')]*)""", made)
    if left:  # a reference-style link, an HTML link or a link with a title: not rewritten above
        raise ReleaseError(f"release: {where} links to {left.group(1)!r} in a form the release cannot make absolute")
    return made


def _student_notebook(source: Path, slug: str, version: str, released_at: str | None, book_url: str, wheel: str) -> str:
    nb = make_exercise(json.loads(source.read_text(encoding="utf-8")), source.name)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            cell["source"] = absolute_links(cell["source"], book_url, f"{source.name}, cell {i}")
    when = f"Released {released_at}. " if released_at else ""
    intro = (
        f"*{when}To check your work with `check(...)`, install the self-check once, in the environment that "
        f"runs this notebook: `pip install {wheel}` (the file that came with this notebook). "
        f"The book: <{book_url}/>.*"
    )
    nb["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": intro})
    nb["metadata"]["course_lib"] = {
        "assignment": slug,
        "release": version,
        "released_at": released_at,
        "book_url": book_url,
    }
    return dumps(nb)


def _assignment_data(slug: str) -> bytes:
    import torch

    from ..grading import exercises_of
    from ..grading.released import freeze, to_plain

    buffer = io.BytesIO()
    torch.save({"assignment": slug, "exercises": [to_plain(freeze(ex)) for ex in exercises_of(slug)]}, buffer)
    return buffer.getvalue()


def _refuse_references(files: dict[str, bytes]) -> None:
    """Refuse to ship a source that defines a graded function (a reference, or a mistake's code)."""
    from ..assignments import GRADED_FUNCTIONS

    for path, data in files.items():
        if not path.endswith(".py"):
            continue
        for node in ast.walk(ast.parse(data)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in GRADED_FUNCTIONS:
                raise ReleaseError(f"release: {path} defines {node.name}, a graded function; it must not be shipped")


def student_files(assignments: Sequence[str]) -> dict[str, bytes]:
    """The students' package, path inside the wheel -> bytes, with ``__version__`` left as ``"0"``:
    course_lib's shipped sources (never a reference implementation, never a rubric) and the data
    of ``assignments``."""
    root = Path(__file__).resolve().parent.parent
    files = {f"course_lib/{name}": (root / name).read_bytes() for name in _SHIPPED}
    for path in sorted((root / "grading").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith("grading/rubrics/"):
            files[f"course_lib/{rel}"] = path.read_bytes()
    _refuse_references(files)
    for slug in assignments:
        files[f"course_lib/grading/_release/{slug}.pt"] = _assignment_data(slug)
    return files


def _version(files: dict[str, bytes], assignments: Sequence[str]) -> str:
    from .. import __version__

    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    base = re.match(r"^[0-9]+(\.[0-9]+)*", __version__)
    return f"{base.group(0) if base else '0'}+r{digest.hexdigest()[:12]}"


def _chosen(assignments: Sequence[str] | None) -> list[str]:
    from ..assignments import ASSIGNMENTS

    chosen = list(dict.fromkeys(assignments or ASSIGNMENTS))
    unknown = [a for a in chosen if a not in ASSIGNMENTS]
    if unknown:
        raise ReleaseError(
            f"release: --assignment must be one of {', '.join(ASSIGNMENTS)}; got {', '.join(map(repr, unknown))}"
        )
    return chosen


def release(
    out: str | Path,
    assignments: Sequence[str] | None = None,
    release_date: str | None = None,
    book_url: str | None = None,
    source: str | Path = "solutions",
    config: str | Path = "_config.yml",
) -> Release:
    """Write one student bundle per assignment under ``out`` (see the module's docstring).

    Args:
        out: the folder for the bundles (``DIST``).
        assignments: the assignments to release (slugs); default all.
        release_date: ISO 8601 date or date-time stamped into the notebooks, or None.
        book_url: the book's URL; default ``html.baseurl`` of ``config``.
        source: the folder of solution notebooks.
        config: the book's ``_config.yml``.

    Raises:
        ReleaseError: an unknown assignment, a bad date or URL, a missing notebook, a relative
            link that is not the book's, or a shipped source that defines a graded function.
    """
    chosen = _chosen(assignments)
    if Path(out).exists() and not Path(out).is_dir():
        raise ReleaseError(f"release: --out must be a folder for the bundles, got the file {out}")
    released_at = parse_release_date(release_date) if release_date is not None else None
    url = book_url_from(config, book_url)
    missing = [s for s in chosen if not (Path(source) / f"{s}.ipynb").is_file()]
    if missing:
        raise ReleaseError(f"release: no solution notebook {', '.join(f'{s}.ipynb' for s in missing)} in {source}")
    files = student_files(chosen)
    version = _version(files, chosen)
    files["course_lib/__init__.py"] = _INIT.format(version=version, assignments=tuple(chosen)).encode()
    spec = WheelSpec(
        DISTRIBUTION, version, "The self-check of the course's exercises, without reference implementations",
        requires=("torch>=2.1",),
    )  # fmt: skip
    bundles = [_bundle(Path(out), slug, spec, files, released_at, url, Path(source)) for slug in chosen]
    result = Release(version, released_at, url, chosen, bundles)
    (Path(out) / "release.json").write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")
    return result


def _bundle(
    out: Path, slug: str, spec: WheelSpec, files: dict[str, bytes], released_at: str | None, url: str, source: Path
) -> Bundle:
    folder = out / slug
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    wheel = write_wheel(folder, spec, files)
    notebook = folder / f"{slug}.ipynb"
    text = _student_notebook(source / f"{slug}.ipynb", slug, spec.version, released_at, url, wheel_name(spec))
    notebook.write_text(text, encoding="utf-8")
    archive = out / f"{slug}.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for path in (notebook, wheel):
            z.write(path, f"{slug}/{path.name}")
    return Bundle(slug, str(folder), str(notebook), str(wheel), str(archive))


def add_release(sub: argparse._SubParsersAction) -> None:
    """``course-lib release``: per-assignment student bundles for a graded course."""
    p = sub.add_parser(
        "release",
        help="write per-assignment student bundles (notebook + self-check wheel without reference code)",
    )
    p.add_argument("--out", required=True, help="folder for the bundles (DIST)")
    p.add_argument(
        "--assignment", action="append", metavar="SLUG", help="release this assignment (repeat; default all)"
    )
    p.add_argument("--release-date", metavar="ISO", help="release date stamped into the notebooks (ISO 8601)")
    p.add_argument("--book-url", metavar="URL", help="the book's URL (default: html.baseurl in _config.yml)")
    p.add_argument("--source", default="solutions", help="folder of solution notebooks (default: solutions)")
    p.add_argument("--config", default="_config.yml", help="the book's configuration (default: _config.yml)")
    p.set_defaults(func=_cmd_release)


def _cmd_release(args: argparse.Namespace) -> int:
    try:
        done = release(args.out, args.assignment, args.release_date, args.book_url, args.source, args.config)
    except ReleaseError as err:
        print(f"course-lib {err}", file=sys.stderr)
        return 2
    except OSError as err:  # --out is a file, or a folder we may not write
        print(f"course-lib release: cannot write the bundles in --out {args.out}: {err}", file=sys.stderr)
        return 2
    for b in done.bundles:
        print(f"{b.assignment}: {b.archive} ({Path(b.notebook).name}, {Path(b.wheel).name})")
    print(f"release {done.version}: {len(done.bundles)} bundle(s) in {args.out}")
    return 0
