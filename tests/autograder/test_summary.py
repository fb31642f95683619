"""The grading run's summary: the submissions it lists as not graded in full, and its table."""

from __future__ import annotations

import io
import time
from dataclasses import replace

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.batch import Held, Summary, _finish
from course_lib.autograder.gradebook import Gradebook


def test_a_student_id_with_a_colon_and_space_is_counted_under_its_own_status():
    summary = Summary(
        attention=[
            Held("ann: the second", "02_self_attention", "review", "uses ctypes"),
            Held("bob", "02_self_attention", "invalid", "Not graded: the file is not valid JSON."),
        ]
    )
    lines = summary.attention_lines()
    assert lines[0] == "NOT GRADED IN FULL: 2 submission(s) (invalid 1, review 1):"
    assert lines[1:] == [
        "  ann: the second/02_self_attention: review: uses ctypes",
        "  bob/02_self_attention: invalid: Not graded: the file is not valid JSON.",
    ]
    assert summary.needs_attention


def test_the_table_counts_full_marks_against_the_points_possible_hand_graded_points_included(tmp_path):
    q = "ch02-nb-mean-shift"
    record = replace(refused_record("02_self_attention", "x"), status="graded", raw_score=10.0, max_score=10.0)
    record = replace(record, answers=({"id": q, "answer": "It overflows."},), absent=frozenset())
    book = Gradebook(tmp_path / "g.sqlite")
    book.save("ann", record, "c", 1.0)
    setup = book.manual.set_question(
        "02_self_attention", q, max_points=2, rubric=[(None, "right", 2)], by="p", expected=0
    )
    book.manual.grade("02_self_attention", q, ["ann"], items=[setup.rubric[0].id], adjust=0, comment="", by="p",
                      expected={"ann": 0})  # fmt: skip
    summary = _finish(Summary(), book, time.perf_counter(), io.StringIO(), set())
    row = summary.table().splitlines()[1].split()
    assert row == ["02_self_attention", "1", "12.0/12", "1"]  # 10 of the checks' and 2 given by hand
