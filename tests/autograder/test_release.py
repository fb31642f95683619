"""`course-lib release`: per-assignment student bundles whose self-check works without the
reference implementations (course_lib/autograder/release.py, course_lib/grading/released.py)."""

from __future__ import annotations

import ast
import base64
import hashlib
import inspect
import io
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import honest_code as honest
import pytest
import torch
from conftest import ROOT

import course_lib
from course_lib.assignments import ASSIGNMENTS, GRADED_FUNCTIONS
from course_lib.autograder.assign import make_exercise
from course_lib.autograder.release import (
    ReleaseError,
    absolute_links,
    book_url_from,
    parse_release_date,
    release,
)
from course_lib.cli import main
from course_lib.grading import check, exercise, exercises_of, judge, run_calls
from course_lib.grading.released import from_plain, thaw

RELEASED = ["02_self_attention", "05_layer_norm"]
URL = "https://example.org/attention"
#: A function of an assignment that the wheel under test does not release.
NOT_RELEASED = "def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n"
PROBE = Path(__file__).with_name("release_probe.py")
#: A softmax without the max subtracted: a named mistake (it overflows on large scores).
UNSTABLE_SOFTMAX = (
    "import torch\n\ndef softmax(x, dim=-1):\n    e = torch.exp(x)\n    return e / e.sum(dim=dim, keepdim=True)\n"
)


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    done = release(out, RELEASED, release_date="2026-12-01", book_url=URL + "/", source=ROOT / "solutions")
    return out, done


def _wheel(dist) -> Path:
    _, done = dist
    return Path(done.bundles[0].wheel)


def _markdown(nb: dict) -> str:
    return "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")


def test_every_assignment_gets_a_folder_and_a_zip_with_its_notebook_and_the_one_wheel(dist):
    out, done = dist
    assert [b.assignment for b in done.bundles] == RELEASED
    wheel_name = Path(done.bundles[0].wheel).name
    assert re.fullmatch(r"course_lib_student-\d+(\.\d+)*\+r[0-9a-f]{12}-py3-none-any\.whl", wheel_name)
    for slug in RELEASED:
        assert sorted(p.name for p in (out / slug).iterdir()) == sorted([f"{slug}.ipynb", wheel_name])
        with zipfile.ZipFile(out / f"{slug}.zip") as z:
            assert sorted(z.namelist()) == sorted([f"{slug}/{slug}.ipynb", f"{slug}/{wheel_name}"])
    manifest = json.loads((out / "release.json").read_text())
    assert manifest["assignments"] == RELEASED and manifest["released_at"] == "2026-12-01"


def test_the_notebook_is_the_exercise_stamped_with_its_assignment_release_and_date(dist):
    out, done = dist
    for slug in RELEASED:
        nb = json.loads((out / slug / f"{slug}.ipynb").read_text())
        assert nb["metadata"]["course_lib"] == {
            "assignment": slug,
            "release": done.version,
            "released_at": "2026-12-01",
            "book_url": URL,
        }
        first = nb["cells"][0]["source"]
        assert "Released 2026-12-01" in first and Path(done.bundles[0].wheel).name in first
        exercise_nb = make_exercise(json.loads((ROOT / "solutions" / f"{slug}.ipynb").read_text()))
        code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
        assert code == [c["source"] for c in exercise_nb["cells"] if c["cell_type"] == "code"]
        assert "### BEGIN SOLUTION" not in json.dumps(nb)


def test_links_to_the_book_are_absolute(dist):
    out, _ = dist
    for slug in RELEASED:
        before = _markdown(make_exercise(json.loads((ROOT / "solutions" / f"{slug}.ipynb").read_text())))
        after = _markdown(json.loads((out / slug / f"{slug}.ipynb").read_text()))
        relative = re.findall(r"\]\(\.\./book/(\w+)\.md(#[\w-]+)?\)", before)
        assert relative, "the exercise links the book by a relative path"
        assert "](../" not in after
        for page, anchor in relative:
            assert f"]({URL}/book/{page}.html{anchor})" in after


def test_a_relative_link_that_is_not_the_books_stops_the_release():
    assert absolute_links("[x](#here) [y](https://a.org/b) [c](book/01_a.md)", URL, "nb") == (
        f"[x](#here) [y](https://a.org/b) [c]({URL}/book/01_a.html)"
    )
    with pytest.raises(ReleaseError, match=r"nb links to '\.\./docs/instructor-guide\.md'"):
        absolute_links("see [the guide](../docs/instructor-guide.md)", URL, "nb")
    for form in ['<a href="../book/01_a.md">', "[a]: ../book/01_a.md", '[a](../book/01_a.md "title")']:
        with pytest.raises(ReleaseError, match="in a form the release cannot make absolute"):
            absolute_links(form, URL, "nb")


def test_the_book_url_is_one_setting_html_baseurl_and_the_option_overrides_it(tmp_path):
    config = tmp_path / "_config.yml"
    config.write_text("title: t\nhtml:\n  baseurl: https://course.example.edu/book/\n")
    assert book_url_from(config, None) == "https://course.example.edu/book"
    assert book_url_from(config, "http://other.org/") == "http://other.org"
    config.write_text("title: t\nhtml:\n  baseurl: ''\n")
    with pytest.raises(ReleaseError, match=r"pass --book-url URL or set html\.baseurl in"):
        book_url_from(config, None)
    with pytest.raises(ReleaseError, match=r"--book-url must be an absolute http\(s\) URL .*got 'example\.org/book'"):
        book_url_from(config, "example.org/book")


def test_bad_dates_and_assignments_are_named_with_what_was_expected(tmp_path):
    assert parse_release_date("2026-12-01") == "2026-12-01"
    assert parse_release_date("2026-12-01T09:00") == "2026-12-01T09:00:00+00:00"
    assert parse_release_date("2026-12-01T09:00+01:00") == "2026-12-01T09:00:00+01:00"
    with pytest.raises(ReleaseError, match=r"--release-date must be an ISO 8601 date .*got 'next monday'"):
        parse_release_date("next monday")
    with pytest.raises(
        ReleaseError, match=r"--assignment must be one of 01_seq2seq_attention, .*got '02_selfattention'"
    ):
        release(tmp_path, ["02_selfattention"], book_url=URL)
    with pytest.raises(ReleaseError, match=r"no solution notebook 05_layer_norm\.ipynb in .*nowhere"):
        release(tmp_path, ["05_layer_norm"], book_url=URL, source=tmp_path / "nowhere")
    assert not any(tmp_path.iterdir())


def test_the_command_names_a_bad_argument_and_exits_2(tmp_path, capsys):
    assert main(["release", "--out", str(tmp_path), "--release-date", "soon", "--book-url", URL]) == 2
    assert "--release-date must be an ISO 8601 date" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert main(["release", "--out", str(tmp_path / "file"), "--assignment", "05_layer_norm", "--book-url", URL]) == 2
    assert "--out must be a folder for the bundles, got the file" in capsys.readouterr().err


def test_the_wheel_follows_the_wheel_spec(dist):
    wheel = _wheel(dist)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/WHEEL"))
        assert info == wheel.name.split("-py3")[0] + ".dist-info"
        assert "Tag: py3-none-any" in z.read(f"{info}/WHEEL").decode()
        metadata = z.read(f"{info}/METADATA").decode()
        assert "Name: course_lib_student" in metadata and "Requires-Dist: torch" in metadata
        record = [line.split(",") for line in z.read(f"{info}/RECORD").decode().splitlines()]
        assert sorted(r[0] for r in record) == sorted(names)
        for path, digest, size in record:
            if path.endswith("RECORD"):
                assert digest == size == ""
                continue
            data = z.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (f"sha256={expected}", len(data))


def _reference_lines(name: str) -> list[str]:
    """The lines of a reference implementation's body (its docstring left out) long enough to be its own."""
    source = inspect.cleandoc("\n" + inspect.getsource(getattr(course_lib, name)))
    fn = ast.parse(source).body[0]
    assert isinstance(fn, ast.FunctionDef)
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    lines = source.splitlines()[body[0].lineno - 1 : body[-1].end_lineno]
    return [line.strip() for line in lines if len(line.strip()) >= 30 and not line.strip().startswith("#")]


def test_the_wheel_holds_no_reference_implementation(dist):
    with zipfile.ZipFile(_wheel(dist)) as z:
        files = {n: z.read(n) for n in z.namelist()}
    reference_modules = {
        inspect.getmodule(getattr(course_lib, n)).__name__.replace(".", "/") + ".py"
        for n in GRADED_FUNCTIONS
        if hasattr(course_lib, n)
    }
    assert reference_modules and not reference_modules & set(files)
    assert not [n for n in files if n.endswith((".pyc", ".so")) or "/rubrics/" in n]
    defined = {
        node.name
        for path, data in files.items()
        if path.endswith(".py")
        for node in ast.walk(ast.parse(data))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    assert not defined & set(GRADED_FUNCTIONS)
    text = b"\n".join(files.values())
    for name in GRADED_FUNCTIONS:
        if hasattr(course_lib, name):
            for line in _reference_lines(name):
                assert line.encode() not in text, (name, line)
    for path, data in files.items():
        if path.endswith(".pt"):  # plain data read with weights_only=True: no code, no course_lib object
            with zipfile.ZipFile(io.BytesIO(data)) as pt:
                pickled = b"".join(pt.read(n) for n in pt.namelist() if n.endswith(".pkl"))
            assert b"course_lib" not in pickled
            torch.load(io.BytesIO(data), weights_only=True)


def _parameters(fn) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _released_exercises(dist, slug: str):
    with zipfile.ZipFile(_wheel(dist)) as z:
        data = torch.load(io.BytesIO(z.read(f"course_lib/grading/_release/{slug}.pt")), weights_only=True)
    return [thaw(from_plain(d)) for d in data["exercises"]]


@pytest.mark.parametrize("slug", RELEASED)
def test_the_released_data_scores_the_reference_and_every_named_mistake_as_the_full_course_does(dist, slug):
    for full, released in zip(exercises_of(slug), _released_exercises(dist, slug), strict=True):
        assert released.name == full.name
        assert _parameters(released.reference) == _parameters(full.reference)
        for fn in [full.reference, *(m.implementation for m in full.mistakes)]:
            want, got = judge(full, run_calls(fn, full)), judge(released, run_calls(fn, released))
            assert (got.status, got.score, got.max_score) == (want.status, want.score, want.max_score), fn
        assert judge(released, run_calls(full.reference, released)).passed


def test_the_self_checks_outputs_earn_nothing_under_the_graders_seed(dist):
    """A student who returns the released outputs for the released inputs passes the self-check
    and fails the grader, which draws fresh inputs from its --seed."""
    released = _released_exercises(dist, "02_self_attention")[0]
    table = [(c.args, out) for case, outs in zip(released.cases(), released.expected(), strict=True)
             for c, out in zip(case.calls, outs, strict=True)]  # fmt: skip

    def softmax(x, dim=-1):
        for args, out in table:
            if isinstance(args[0], torch.Tensor) and args[0].shape == x.shape and torch.equal(args[0], x):
                return out.clone()
        return torch.zeros_like(x)

    assert judge(released, run_calls(softmax, released)).passed
    full = exercise("softmax")
    graded = judge(full, run_calls(softmax, full, seed=3001), seed=3001)
    assert graded.score == 0.0 < graded.max_score, str(graded)


def _solution_cells(slug: str) -> list[str]:
    nb = json.loads((ROOT / "solutions" / f"{slug}.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    return [s for s in code if "import torch" in s or s.startswith("def ")]


def _probe(target: Path, tmp_path: Path, steps: list[tuple[list[str], list[str]]]) -> dict:
    """Run ``steps`` (cells to run, then functions to check) in a fresh Python with only the wheel."""
    cells = iter(range(1000))
    request = {"steps": [{"cells": [[str(tmp_path / f"cell{next(cells)}.py"), s] for s in sources], "names": names}
                         for sources, names in steps]}  # fmt: skip
    env = {"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, str(PROBE), str(target)], input=json.dumps(request), capture_output=True, text=True,
        cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_wheel_installs_offline_and_checks_students_without_the_references(dist, tmp_path):
    target = tmp_path / "site"
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--target",
        str(target),
        str(_wheel(dist)),
    ]
    subprocess.run(pip, check=True, capture_output=True, timeout=120)
    layer_norms = [inspect.getsource(honest.layer_norm), inspect.getsource(honest.add_and_norm)]
    student = _probe(
        target,
        tmp_path,
        [
            ([*_solution_cells("02_self_attention"), *layer_norms], [*ASSIGNMENTS["02_self_attention"], *ASSIGNMENTS["05_layer_norm"]]),
            ([UNSTABLE_SOFTMAX, NOT_RELEASED], ["softmax", "scaled_dot_product_attention", "causal_mask"]),
        ],
    )  # fmt: skip
    assert student["course_lib"].startswith(str(target))
    assert student["modules"] == [] and student["graded_attributes"] == []
    assert "raise RuntimeError" in student["reference_softmax"]
    honest_reports, wrong = student["steps"]
    for name, report in honest_reports.items():
        assert report["status"] == "passed" and report["score"] == report["max_score"] > 0, (name, report)
    namespace: dict = {}
    exec(UNSTABLE_SOFTMAX, namespace)  # what the full course says of the same code
    full = check(namespace["softmax"])
    assert wrong["softmax"]["diagnoses"] == full.diagnoses != []
    assert wrong["softmax"]["score"] == full.score < full.max_score
    notes = wrong["scaled_dot_product_attention"]["notes"]
    assert any("calls your softmax, which fails its own check: fix it first" in n for n in notes), notes
    unreleased = wrong["causal_mask"]
    assert unreleased["status"] == "error" and unreleased["max_score"] == 0, unreleased
    assert unreleased["notes"] == [
        "06_transformer is not part of the self-check you installed (course_lib_student); install the wheel "
        "that came with this notebook"
    ]
