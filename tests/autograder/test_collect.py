"""``course-lib collect``: LMS downloads, built here in each LMS's exact layout, into the
folders ``grade`` reads; every file a record; and ``grade``'s summary and exit status.

No sandbox starts: grading runs replace the notebook's grading with a stand-in.
"""

from __future__ import annotations

import csv
import io
import json
import stat
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from course_lib.autograder import autograde
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.collect import MANIFEST, Manifest, assignment_from_name, collect
from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.lms_downloads import CollectError
from course_lib.cli import main

A = "02_self_attention"
B = "05_layer_norm"
NFD_ZOE = "zoe\u0308.a\u030aberg"  # as macOS writes zoë.åberg
NFC_ZOE = "zo\u00eb.\u00e5berg"


def notebook(tag: str = "", stamp: str | None = None) -> bytes:
    """A minimal nbformat 4 notebook (``tag`` makes each one's bytes differ)."""
    nb: dict = {
        "cells": [{"cell_type": "code", "source": f"x = 1  # {tag}", "metadata": {}, "outputs": []}],
        "metadata": {} if stamp is None else {"course_lib": {"assignment": stamp}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(nb).encode()


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def entries(out: Path) -> dict[str, dict]:
    manifest = Manifest.load(out)
    assert manifest is not None
    return {e.origin: e.__dict__ for e in manifest.entries}


@pytest.fixture
def canvas_roster(tmp_path: Path) -> Path:
    """A Canvas gradebook export (Grades -> Export): ID is Canvas's user id."""
    path = tmp_path / "roster.csv"
    path.write_text(
        "Student,ID,SIS User ID,SIS Login ID,Section,Layer Norm Exercises (4243)\n"
        "    Points Possible,,,,,19\n"
        '"Smith, Bob",340934,S1,bsmith,A,\n'
        f'"\u00c5berg, Zo\u00eb",340935,S2,{NFC_ZOE},A,\n',
        encoding="utf-8",
    )
    return path


def test_canvas_download_is_filed_by_user_id_with_copies_late_work_and_a_py_export(tmp_path, canvas_roster):
    download = make_zip(
        tmp_path / "submissions.zip",
        {
            f"smithbob_340934_208490284_{A}.ipynb": notebook("bob"),
            "aberzoe_LATE_340935_208490300_Copy of 05_layer_norm (1).ipynb": notebook("zoe"),
            f"smithbob_340934_208490290_{A}.py": b"def softmax(x): ...\n",
            "smithbob_340934_208490291_notes.txt": b"see attached",
            "smithbob_340934_208490292_work.zip": b"PK\x05\x06" + b"\0" * 18,
            f"newstudent_777_208490293_{A}.ipynb": notebook("new"),  # added to the course after the export
        },
    )
    manifest = collect(download, tmp_path / "subs", roster=canvas_roster)
    got = entries(tmp_path / "subs")
    assert (tmp_path / "subs" / "bsmith" / f"{A}.ipynb").read_bytes() == notebook("bob")
    assert (tmp_path / "subs" / NFC_ZOE / f"{B}.ipynb").read_bytes() == notebook("zoe")  # by id, not the name
    zoe = got["aberzoe_LATE_340935_208490300_Copy of 05_layer_norm (1).ipynb"]
    assert (
        zoe["late"] and zoe["lms_id"] == "340935" and zoe["lms"] == "canvas" and zoe["matched_by"].endswith("roster id")
    )
    py = got[f"smithbob_340934_208490290_{A}.py"]
    assert py["status"] == "unmatched" and "a Python file (its name says 02_self_attention)" in py["reason"]
    assert got["smithbob_340934_208490291_notes.txt"]["status"] == "unmatched"
    assert "a zip inside the download, not opened" in got["smithbob_340934_208490292_work.zip"]["reason"]
    new = got[f"newstudent_777_208490293_{A}.ipynb"]
    assert new["status"] == "unmatched" and new["reason"] == "no roster student is 'newstudent, 777'"
    assert len(manifest.entries) == 6  # every file a record


def test_a_canvas_resubmission_keeps_the_newest_upload_and_records_the_older_as_superseded(tmp_path):
    download = make_zip(
        tmp_path / "s.zip",
        {
            f"smithbob_340934_208490999_{A}-1.ipynb": notebook("new"),  # Canvas's name for a second upload
            f"smithbob_340934_208490284_{A}.ipynb": notebook("old"),
        },
    )
    collect(download, tmp_path / "subs")
    assert (tmp_path / "subs" / "smithbob" / f"{A}.ipynb").read_bytes() == notebook("new")
    old = entries(tmp_path / "subs")[f"smithbob_340934_208490284_{A}.ipynb"]
    assert old["status"] == "superseded" and f"{A}-1.ipynb" in old["reason"]


def test_moodle_download_in_folders_and_flat_matches_students_by_name(tmp_path, canvas_roster):
    folders = make_zip(
        tmp_path / "moodle.zip",
        {
            "Zoe\u0308 A\u030aberg_123456_assignsubmission_file_/Copy of 05_layer_norm.ipynb": notebook("z"),
            "Bob Smith_123457_assignsubmission_file_/05_layer_norm-Copy1.ipynb": notebook("b"),
            "Bob Smith_123457_assignsubmission_onlinetext_/onlinetext.html": b"<p>hi</p>",
        },
    )
    collect(folders, tmp_path / "subs", roster=canvas_roster)
    assert (tmp_path / "subs" / NFC_ZOE / f"{B}.ipynb").read_bytes() == notebook("z")
    assert (tmp_path / "subs" / "bsmith" / f"{B}.ipynb").read_bytes() == notebook("b")
    online = entries(tmp_path / "subs")["Bob Smith_123457_assignsubmission_onlinetext_/onlinetext.html"]
    assert online["status"] == "unmatched" and online["student"] == "bsmith"

    flat = make_zip(
        tmp_path / "flat.zip", {"Bob Smith_123457_assignsubmission_file_02_self_attention.ipynb": notebook()}
    )
    collect(flat, tmp_path / "subs2", roster=canvas_roster)
    assert (tmp_path / "subs2" / "bsmith" / f"{A}.ipynb").is_file()


def test_gradescope_export_reads_its_metadata_group_submitters_and_the_stamp(tmp_path):
    metadata = (
        "submission_1001:\n"
        "  :submitters:\n"
        "  - :name: Ann Lee\n"
        "    :sid: '1'\n"
        "    :email: ann@uni.edu\n"
        "  :created_at: 2026-11-20 10:00:00.000000000 -08:00\n"
        "  :score: 0.0\n"
        "  :history:\n"
        "  - :id: 7\n"
        "    :score: 0.0\n"
        "submission_1002:\n"
        "  :submitters:\n"
        "  - :name: Cy Dee\n"
        "    :sid: '2'\n"
        "    :email: cy@uni.edu\n"
        "  - :name: Eve Fox\n"
        "    :sid: '3'\n"
        "    :email: eve@uni.edu\n"
        "  :created_at: 2026-11-20 11:00:00.000000000 -08:00\n"
    )
    download = make_zip(
        tmp_path / "export.zip",
        {
            "assignment_42_export/submission_metadata.yml": metadata.encode(),
            "assignment_42_export/submission_1001/my work.ipynb": notebook("ann", stamp=A),  # renamed: the stamp says
            "assignment_42_export/submission_1002/02_self_attention.ipynb": notebook("pair"),
            "assignment_42_export/submission_9999/02_self_attention.ipynb": notebook("who"),
        },
    )
    roster = tmp_path / "r.csv"
    roster.write_text("login,email\nann,ann@uni.edu\ncy,cy@uni.edu\neve,eve@uni.edu\n", encoding="utf-8")
    collect(download, tmp_path / "subs", roster=roster)
    assert (tmp_path / "subs" / "ann" / f"{A}.ipynb").read_bytes() == notebook("ann", stamp=A)
    assert (tmp_path / "subs" / "cy" / f"{A}.ipynb").is_file() and (tmp_path / "subs" / "eve" / f"{A}.ipynb").is_file()
    got = entries(tmp_path / "subs")
    ann = got["assignment_42_export/submission_1001/my work.ipynb"]
    assert ann["matched_by"].startswith("assignment by notebook metadata") and ann["submitted_at"].startswith(
        "2026-11-20 10"
    )
    assert got["assignment_42_export/submission_9999/02_self_attention.ipynb"]["status"] == "unmatched"
    assert got["assignment_42_export/submission_metadata.yml"]["status"] == "ignored"


def test_a_macos_nfd_folder_matches_the_nfc_roster_and_near_identical_names_are_warned(tmp_path, capsys):
    download = tmp_path / "download"
    for folder, tag in ((NFD_ZOE, "zoe"), ("zoe.aberg", "other")):
        (download / folder).mkdir(parents=True)
        (download / folder / f"{A}.ipynb").write_bytes(notebook(tag))
    (download / f"{B}.ipynb").write_bytes(notebook("stray"))  # a stray top-level notebook
    roster = tmp_path / "r.csv"
    roster.write_text(f"login\n{NFC_ZOE}\nzoe.aberg\n", encoding="utf-8")
    assert main(["collect", str(download), "--out", str(tmp_path / "subs"), "--roster", str(roster)]) == 1
    said = capsys.readouterr()
    assert sorted(p.name for p in (tmp_path / "subs").iterdir()) == sorted([MANIFEST, NFC_ZOE, "zoe.aberg"])
    assert "U+007A U+006F U+00EB U+002E U+00E5" in said.err and "U+007A U+006F U+0065 U+002E U+0061" in said.err
    assert f"unmatched: {B}.ipynb: not in a student's folder" in said.out


def test_flat_folder_and_file_names_with_copies(tmp_path):
    download = tmp_path / "flat"
    download.mkdir()
    (download / f"alice_{A} (1).ipynb").write_bytes(notebook("a"))
    (download / "notes.txt").write_bytes(b"x")
    collect(download, tmp_path / "subs", lms="flat")
    assert (tmp_path / "subs" / "alice" / f"{A}.ipynb").is_file()
    assert entries(tmp_path / "subs")["notes.txt"]["status"] == "unmatched"
    for name in (f"Copy of {A}.ipynb", f"{A} (1).ipynb", f"{A}-Copy1.ipynb", "02 Self Attention.ipynb", f"{A}-2.ipynb"):
        assert assignment_from_name(name) == A, name
    assert assignment_from_name("02_self_attention_v2.ipynb") == ""


def test_hostile_zip_members_are_invalid_records_and_nothing_leaves_the_output(tmp_path):
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"../{A}.ipynb", notebook())
        zf.writestr(f"/tmp/{A}.ipynb", notebook())
        link = zipfile.ZipInfo(f"bob/{A}.ipynb")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr(f"carl/{A}.ipynb", b"\0" * 3_000_000)  # a bomb: 3 MB from a few kB
        zf.writestr(f"dora/{A}.ipynb", notebook("dora" * 500))
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(f"dora/{A}.ipynb")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + 10] ^= 0xFF  # a broken member
    path.write_bytes(bytes(data))
    manifest = collect(path, tmp_path / "out" / "subs", lms="folders")
    reasons = {e.origin: (e.status, e.reason) for e in manifest.entries}
    assert reasons[f"../{A}.ipynb"][0] == "invalid" and "leaves the download" in reasons[f"../{A}.ipynb"][1]
    assert reasons[f"tmp/{A}.ipynb"][0] == "invalid" and "absolute" in reasons[f"tmp/{A}.ipynb"][1]
    assert reasons[f"bob/{A}.ipynb"] == ("invalid", "a link: not read")
    assert "zip bomb" in reasons[f"carl/{A}.ipynb"][1]
    assert reasons[f"dora/{A}.ipynb"][0] == "invalid" and "cannot be read from the zip" in reasons[f"dora/{A}.ipynb"][1]
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["evil.zip", f"out/subs/{MANIFEST}"]


def test_a_download_that_is_not_a_zip_or_folder_is_refused_naming_the_argument(tmp_path, capsys):
    bad = tmp_path / "grades.zip"
    bad.write_bytes(b"not a zip")
    assert main(["collect", str(bad), "--out", str(tmp_path / "subs")]) == 2
    assert "DOWNLOAD: grades.zip is not a readable zip file" in capsys.readouterr().err
    with pytest.raises(CollectError, match="does not exist"):
        collect(tmp_path / "missing.zip", tmp_path / "subs")


def graded_stand_in(data, assignment, runner, seed=None):
    """The notebook's grading: 30 points, or invalid for a notebook that says so."""
    rec = refused_record(assignment, "the file is not valid JSON", sha256(data))
    return rec if b"broken" in data else replace(rec, status="graded", raw_score=30.0, messages=())


@pytest.mark.parametrize("stray", [True, False])
def test_grade_records_counts_and_names_every_unmatched_file_and_exits_1(tmp_path, monkeypatch, capsys, stray):
    download = make_zip(
        tmp_path / "s.zip",
        {f"smithbob_340934_208490284_{A}.ipynb": notebook("bob")}
        | ({"smithbob_340934_208490285_Copy of 02_self_attention.py": b"x = 1"} if stray else {}),
    )
    collect(download, tmp_path / "subs")
    if stray:
        (tmp_path / "subs" / "smithbob" / "scratch.ipynb").write_bytes(notebook())
    monkeypatch.setattr(autograde, "grade_submission", graded_stand_in)
    db = tmp_path / "g.sqlite"
    code = main(["grade", str(tmp_path / "subs"), "--db", str(db), "--quiet", "--sandbox", "off", "--jobs", "1"])
    out = capsys.readouterr().out
    if not stray:  # the honest class: nothing to list, exit 0
        assert code == 0 and "NOT GRADED" not in out
        return
    assert code == 1
    assert "NOT GRADED: 2 file(s) are no submission (unmatched 2):" in out
    assert "  smithbob/scratch.ipynb: unmatched: not an assignment notebook" in out
    assert "s.zip: smithbob_340934_208490285_Copy of 02_self_attention.py: unmatched: a Python file" in out
    assert main(["export", "--db", str(db), "--format", "csv", "--out", str(tmp_path / "g.csv")]) == 0
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as f:
        rows = [r[:6] for r in csv.reader(f)][1:]
    assert rows[0][:5] == ["smithbob", A, "30", "34", "graded"]
    assert [r[4] for r in rows[1:]] == ["unmatched", "unmatched"] and rows[1][5].startswith("smithbob/scratch.ipynb")


def test_grade_exit_status_and_summary_name_an_invalid_submission_even_when_skipped(tmp_path, monkeypatch, capsys):
    for student, data in (("ann", notebook("ok")), ("bob", b"broken")):
        (tmp_path / "subs" / student).mkdir(parents=True)
        (tmp_path / "subs" / student / f"{A}.ipynb").write_bytes(data)
    monkeypatch.setattr(autograde, "grade_submission", graded_stand_in)
    argv = [
        "grade",
        str(tmp_path / "subs"),
        "--db",
        str(tmp_path / "g.sqlite"),
        "--quiet",
        "--sandbox",
        "off",
        "--jobs",
        "1",
    ]
    for _ in range(2):  # graded, then skipped as unchanged: the same verdict
        assert main(argv) == 1
        out = capsys.readouterr().out
        assert "NOT GRADED IN FULL: 1 submission(s) (invalid 1):" in out
        assert "  bob/02_self_attention: invalid: Not graded: the file is not valid JSON." in out
    with Gradebook(tmp_path / "g.sqlite") as gb:
        assert gb.count() == 2


def test_collecting_a_second_download_keeps_the_first_and_a_recollect_replaces_its_own(tmp_path):
    a = make_zip(tmp_path / "a.zip", {f"smithbob_1_10_{A}.ipynb": notebook("a")})
    b = make_zip(tmp_path / "b.zip", {f"smithbob_1_20_{B}.ipynb": notebook("b"), "x.txt": b""})
    collect(a, tmp_path / "subs")
    collect(b, tmp_path / "subs")
    collect(b, tmp_path / "subs")
    manifest = Manifest.load(tmp_path / "subs")
    assert manifest is not None
    assert sorted((e.source, e.status) for e in manifest.entries) == [
        ("a.zip", "collected"),
        ("b.zip", "collected"),
        ("b.zip", "unmatched"),
    ]
    assert io.BytesIO((tmp_path / "subs" / "smithbob" / f"{A}.ipynb").read_bytes()).read() == notebook("a")
