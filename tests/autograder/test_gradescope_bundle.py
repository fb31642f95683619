"""Gradescope for real: ``results.json`` as Gradescope's specification asks, and the
``autograder.zip`` of ``course-lib export --format gradescope-autograder`` run as Gradescope runs it.

Gradescope (``gradescope/autograder_samples``, ``docs/specs.md``) unzips the bundle into
``/autograder/source``, runs ``setup.sh`` once, then for each submission puts the student's
files in ``/autograder/submission``, runs ``run_autograder`` from ``/autograder`` and reads
``/autograder/results/results.json``. The end-to-end test plays that in a temporary root
(``AUTOGRADER_ROOT``): the generated ``setup.sh`` runs with its real pip lines, offline
(``PIP_NO_INDEX``: torch and the other dependencies are found installed, through a ``.pth``
file of the prepared environment that points at this machine's packages; the bundled
``course_lib`` wheel is really installed), and ``apt-get`` is a stub that records what it was
asked for (the machine is not changed). Everything else here builds records and folders in code
and starts no sandbox.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import HONEST_SOFTMAX, ROOT, notebook

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.exports import export_gradescope, file_stem, gradescope_results
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.gradescope import (
    CONFIG_NAME,
    RUN_AUTOGRADER,
    BundleConfig,
    BundleError,
    build_bundle,
)
from course_lib.autograder.gradescope_run import assignment_in_name, find_notebook, grade_submission_folder
from course_lib.autograder.sandbox import isolation
from course_lib.grading.judging import PROPERTY_GATE
from course_lib.grading.report import Report
from course_lib.grading.report import TestResult as Result

A = "02_self_attention"  # 34 points


def _record_with(results: list[Result], notes: tuple[str, ...] = ()):
    """A graded record of ``A`` whose softmax report has these results."""
    rec = refused_record(A, "stand-in")
    report = Report("softmax", results, "failed", list(notes))
    functions = (report.to_dict(), *rec.functions[1:])
    return replace(rec, status="graded", raw_score=sum(r.points for r in results), messages=(), functions=functions)


def _check_spec_shape(res: dict, visibility: str) -> None:
    """What Gradescope's specification asks of ``results.json``, and what this grader promises."""
    assert res["visibility"] == visibility and res["stdout_visibility"] == "hidden"
    assert res["output_format"] == res["test_output_format"] == res["test_name_format"] == "text"
    assert {"seed", "flags", "status"} <= set(res["extra_data"])
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output", "visibility"}, t
        assert t["status"] in ("passed", "failed") and t["visibility"] == visibility
    assert res["score"] == pytest.approx(sum(t["score"] for t in res["tests"]))


# --------------------------------------------------------------------------- results.json


def test_every_test_has_a_status_and_withheld_points_are_not_shown_as_failed():
    rec = _record_with(
        [
            Result("value", "matches the reference", 4.0, 4.0, True),
            Result("wrong dim", "sums to one over dim", 0.0, 3.0, False, "rows do not sum to 1", "used dim=0"),
            Result("uniform", "rows sum to one", 0.0, 2.0, False, PROPERTY_GATE, withheld=True),
        ]
    )
    res = gradescope_results(rec, "after_published")
    _check_spec_shape(res, "after_published")
    value, wrong, uniform = res["tests"][:3]
    assert value["status"] == "passed" and wrong["status"] == "failed"
    # it passed: Gradescope shows 0/2 as passed, and the output says the points are withheld
    assert uniform["status"] == "passed" and uniform["score"] == 0
    assert uniform["output"].startswith("Passed, points withheld: it earns its points only once")
    assert "Likely mistake: used dim=0" in wrong["output"]


def test_a_function_refused_whole_says_why_and_none_of_its_tests_reads_passed():
    rec = refused_record(A, "no notebook in your submission")
    res = gradescope_results(rec)
    _check_spec_shape(res, "visible")
    assert all(t["status"] == "failed" and t["output"] != "passed" for t in res["tests"])
    first = next(t for t in res["tests"] if t["name"].startswith("softmax: "))
    assert "Note: Not graded: no notebook in your submission." in first["output"]
    assert res["extra_data"]["status"] == "invalid" and res["score"] == 0


def test_the_gradescope_export_uses_the_chosen_visibility_and_refuses_an_unknown_one(tmp_path):
    db = tmp_path / "g.sqlite"
    with Gradebook(db) as gb:
        gb.save("ann", _record_with([Result("v", "c", 1.0, 1.0, True)]), "c", 1.0)
    assert export_gradescope(db, tmp_path / "gs", visibility="after_due_date") == 1
    res = json.loads((tmp_path / "gs" / file_stem("ann") / A / "results.json").read_text())
    _check_spec_shape(res, "after_due_date")
    with pytest.raises(ValueError, match=r"--visibility must be one of visible, .*got 'later'"):
        export_gradescope(db, tmp_path / "gs2", visibility="later")


def test_bad_bundle_options_are_refused_naming_the_option_the_expected_and_the_actual():
    with pytest.raises(BundleError, match=r"--assignment: expected one of 01_seq2seq_attention, .*got '02'"):
        BundleConfig(assignment="02")
    with pytest.raises(BundleError, match=r"--visibility: expected one of visible, .*got 'public'"):
        BundleConfig(visibility="public")
    with pytest.raises(BundleError, match=r"--sandbox: expected one of auto, required, off, got 'on'"):
        BundleConfig(sandbox="on")
    config = BundleConfig(A, "hidden", 7, "required")
    assert BundleConfig.from_json(json.loads(json.dumps(config.to_json()))) == config


# --------------------------------------------------------------------------- the submission


@pytest.mark.parametrize(
    "name, slug",
    [
        ("02_self_attention.ipynb", A),
        ("Copy of 02_self_attention (1).ipynb", A),
        ("02_self_attention-Copy1.ipynb", A),
        ("smith_john_12345_67890_05_layer_norm.ipynb", "05_layer_norm"),
        ("05_layer_norm (2).ipynb", "05_layer_norm"),
        ("homework.ipynb", None),
        ("102_self_attention_v2.ipynb", None),
    ],
)
def test_the_assignment_is_read_from_a_renamed_file(name, slug):
    assert assignment_in_name(name) == slug


def test_the_notebook_is_found_among_other_files_renamed_and_not_through_links(tmp_path):
    sub = tmp_path / "submission"
    (sub / "__MACOSX").mkdir(parents=True)
    (sub / "__MACOSX" / "._02_self_attention.ipynb").write_bytes(b"\0\0")
    (sub / "notes.ipynb").write_bytes(notebook("x = 1"))
    (sub / "Copy of 02_self_attention (1).ipynb").write_bytes(notebook("def softmax(x, dim=-1):\n    return x"))
    (sub / "README.md").write_text("hi")
    path, slug, note = find_notebook(sub, A)
    assert path is not None and path.name == "Copy of 02_self_attention (1).ipynb" and slug == A
    assert "of 2 notebooks" in note
    # without --assignment: the name says which
    path, slug, _ = find_notebook(sub, None)
    assert path is not None and path.name.startswith("Copy of") and slug == A
    # a link to a file elsewhere is not a notebook of the submission
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "02_self_attention.ipynb").write_bytes(notebook("x = 1"))
    only_link = tmp_path / "linked"
    only_link.mkdir()
    (only_link / "sub").symlink_to(other, target_is_directory=True)
    path, _, note = find_notebook(only_link, A)
    assert path is None and "no notebook" in note


def test_without_an_assignment_a_notebook_is_told_by_the_functions_it_defines(tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "homework.ipynb").write_bytes(
        notebook("def layer_norm(x, g, b):\n    pass\ndef add_and_norm(x, y):\n    pass")
    )
    path, slug, note = find_notebook(sub, None)
    assert path is not None and slug == "05_layer_norm" and "from the functions it defines" in note


def _root(tmp_path: Path, config: BundleConfig, files: dict[str, bytes]) -> Path:
    """Gradescope's layout: the bundle's configuration in source/, the student's files in submission/."""
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    (root / "submission").mkdir()
    (root / "source" / CONFIG_NAME).write_text(json.dumps(config.to_json()))
    for name, data in files.items():
        (root / "submission" / name).write_bytes(data)
    return root


def test_a_submission_without_a_notebook_gets_results_that_say_why(tmp_path):
    root = _root(tmp_path, BundleConfig(A, "after_due_date"), {"02_self_attention.py": b"def softmax(x): ..."})
    res = grade_submission_folder(root)
    _check_spec_shape(res, "after_due_date")
    assert res["score"] == 0 and res["extra_data"]["status"] == "invalid"
    assert "no notebook (.ipynb file) in your submission (files seen: 02_self_attention.py)" in res["output"]
    assert isinstance(res["execution_time"], int)


def test_a_notebook_of_no_assignment_gets_results_that_say_why(tmp_path):
    root = _root(tmp_path, BundleConfig(), {"homework.ipynb": notebook("x = 1")})
    res = grade_submission_folder(root)
    assert (
        res["score"] == 0 and res["tests"] == [] and "cannot tell which assignment homework.ipynb is" in res["output"]
    )


def test_sandbox_required_fails_closed_with_results_that_say_why(tmp_path, monkeypatch):
    """A container where neither bubblewrap nor namespaces work (Gradescope's may be one): with
    ``sandbox: required`` no student code runs, and the results say so."""
    monkeypatch.setattr(isolation, "_detected", None)
    monkeypatch.setattr(isolation, "probe", lambda level: False)
    root = _root(tmp_path, BundleConfig(A, sandbox="required"), {f"{A}.ipynb": notebook("import os")})
    res = grade_submission_folder(root)
    _check_spec_shape(res, "visible")
    assert res["score"] == 0 and res["extra_data"]["status"] == "error"
    assert "the autograder requires a sandbox and this container has none" in res["output"]
    assert all(t["status"] == "failed" for t in res["tests"])


def test_run_autograder_writes_results_even_when_python_cannot_start(tmp_path):
    root = tmp_path / "autograder"
    root.mkdir()
    script = tmp_path / "run_autograder"
    script.write_text(RUN_AUTOGRADER)
    env = {"PATH": os.environ["PATH"], "AUTOGRADER_ROOT": str(root), "AUTOGRADER_VENV": str(tmp_path / "none")}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    res = json.loads((root / "results" / "results.json").read_text())
    assert res["score"] == 0 and "could not start" in res["output"] and res["tests"] == []


# --------------------------------------------------------------------------- end to end


def _prepare_environment(venv: Path) -> None:
    """The environment setup.sh installs into: a fresh venv that finds this machine's torch,
    numpy and the rest (a ``.pth`` file; no course_lib: that comes from the bundle's wheel)."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "_machine_packages.pth").write_text(str(Path(sys.prefix).resolve() / site.relative_to(venv)) + "\n")


@pytest.fixture
def open_tmp():
    """A temporary folder that every user may enter, as Gradescope's ``/autograder`` (pytest's
    ``tmp_path`` is inside a folder only its owner may enter, which would hide the files the
    test checks are locked from the student's uid)."""
    folder = Path(tempfile.mkdtemp(prefix="gradescope-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.sandbox
def test_the_bundle_installs_and_grades_as_gradescope_runs_it(open_tmp):
    tmp_path = open_tmp
    t0 = time.monotonic()
    bundle = tmp_path / "autograder.zip"
    names = build_bundle(bundle, BundleConfig(A, "after_due_date", seed=7))
    assert {"setup.sh", "run_autograder", CONFIG_NAME, "constraints.txt"} <= set(names)
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as zf:  # Gradescope: the zip's files at the root of source/
        zf.extractall(root / "source")
        assert all(zf.getinfo(n).external_attr >> 16 & 0o111 for n in ("setup.sh", "run_autograder"))
    for n in ("setup.sh", "run_autograder"):
        (root / "source" / n).chmod(0o755)
    _prepare_environment(root / "venv")
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "apt-get").write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/apt.log\n')
    (stub / "apt-get").chmod(0o755)
    env = {
        "PATH": f"{stub}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AUTOGRADER_ROOT": str(root),
        "PIP_NO_INDEX": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    setup = subprocess.run(["bash", str(root / "source" / "setup.sh")], env=env, capture_output=True, text=True)
    assert setup.returncode == 0, setup.stdout[-2000:] + setup.stderr[-2000:]
    assert "install -y --no-install-recommends bubblewrap" in (tmp_path / "apt.log").read_text()
    assert (next((root / "venv" / "lib").glob("python3*/site-packages")) / "course_lib" / "autograder").is_dir()
    t_setup = time.monotonic() - t0
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")  # as Gradescope's image build does

    def run(name: str, data: bytes) -> dict:
        shutil.rmtree(root / "submission", ignore_errors=True)
        (root / "submission").mkdir()
        (root / "submission" / name).write_bytes(data)
        out = subprocess.run([str(root / "run_autograder")], env=env, cwd=root, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        return json.loads((root / "results" / "results.json").read_text())

    honest = run("Copy of 02_self_attention (1).ipynb", (ROOT / "solutions" / f"{A}.ipynb").read_bytes())
    _check_spec_shape(honest, "after_due_date")
    assert honest["score"] == 34 and honest["extra_data"]["status"] == "graded"
    assert honest["extra_data"]["seed"] == 7 and honest["extra_data"]["isolation"] in ("bubblewrap", "namespaces")
    assert all(t["status"] == "passed" for t in honest["tests"]) and honest["execution_time"] >= 0
    broken = run(f"{A}.ipynb", b'{"cells": [')
    _check_spec_shape(broken, "after_due_date")
    assert broken["score"] == 0 and broken["extra_data"]["status"] == "invalid"
    assert "not" in broken["output"].lower() and all(t["status"] == "failed" for t in broken["tests"])
    if os.geteuid() == 0:  # as on Gradescope: the grader is root, the student's code is not
        _snooper_reads_nothing_without_a_sandbox(root, run)
    print(f"setup {t_setup:.1f} s, total {time.monotonic() - t0:.1f} s")


#: A cell that raises if it can read a file it names (the reference, the bundle's configuration).
SNOOP = """
for path in {paths!r}:
    try:
        open(path).read()
    except OSError:
        continue
    raise RuntimeError("could read " + path)
"""


def _snooper_reads_nothing_without_a_sandbox(root: Path, run) -> None:
    """A container that allows no sandbox (``isolation: none``): the student's code runs as an
    unprivileged uid with no walls, and the reference and the bundle (its seed) are root's alone."""
    config = root / "source" / CONFIG_NAME
    config.write_text(json.dumps({**json.loads(config.read_text()), "sandbox": "off"}))
    site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    paths = [str(site / "course_lib" / "softmax.py"), str(config)]
    res = run(f"{A}.ipynb", notebook("import torch", HONEST_SOFTMAX, SNOOP.format(paths=paths)))
    assert res["extra_data"]["isolation"] == "none"
    assert "Error while running" not in res["output"], res["output"]
    assert res["score"] == sum(t["max_score"] for t in res["tests"] if t["name"].startswith("softmax: ")) > 0


# --------------------------------------------------------------------------- the command line


def test_the_export_command_refuses_bad_bundle_options_before_building_anything(tmp_path, capsys):
    from course_lib.cli import main

    out = tmp_path / "autograder.zip"
    assert main(["export", "--format", "gradescope-autograder", "--assignment", "2", "--out", str(out)]) == 2
    assert "--assignment: expected one of 01_seq2seq_attention" in capsys.readouterr().err and not out.exists()
    # the bundle's options mean nothing to the gradebook's exports: said, not ignored
    assert main(["export", "--format", "csv", "--seed", "3", "--out", str(tmp_path / "g.csv")]) == 2
    assert "--seed and --sandbox go with --format gradescope-autograder" in capsys.readouterr().err
    assert main(["export", "--format", "wide", "--visibility", "hidden", "--out", str(tmp_path / "w.csv")]) == 2
    assert "--visibility goes with --format gradescope or gradescope-autograder" in capsys.readouterr().err
