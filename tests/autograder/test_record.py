"""The record of a graded submission: read from any gradebook written so far, written back as it was.

No sandbox starts: records are JSON here.
"""

from __future__ import annotations

import json

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.deadlines import LatePolicy
from course_lib.autograder.record import Late, Record

A = "02_self_attention"
FUNCTION = {"function": "softmax", "status": "passed", "score": 10.0, "max_score": 10.0, "results": [], "notes": []}

#: A record as the first gradebooks stored it (2026-11-21): no seed, flags, fixed cases,
#: sources, answers, submission time, raw score or late penalty.
FIRST_FORMAT = {
    "assignment": A,
    "sha256": "ab" * 32,
    "status": "graded",
    "score": 10.0,
    "max_score": 34.0,
    "messages": ["Error while running your notebook, in code cell 2"],
    "functions": [FUNCTION],
    "isolation": "bubblewrap",
}

#: A record as grading stores it today, late.
LATE = {
    **FIRST_FORMAT,
    "seed": 7,
    "fixed_cases": 1,
    "flags": ["forbidden: softmax torch.softmax"],
    "sources": {"softmax": "def softmax(x, dim=-1):\n    return x\n"},
    "answers": [{"id": "ch02-nb-mean-shift", "answer": "It cancels."}],
    "submitted_at": "2026-11-25T10:00:00+00:00",
    "raw_score": 10.0,
    "score": 8.0,
    "late": {
        "days": 2,
        "fraction": 0.2,
        "points": 2.0,
        "submitted": "2026-11-25T10:00:00+00:00",
        "deadline": "2026-11-23T23:59:00+00:00",
        "rate": 0.1,
        "cap": 1.0,
    },
}


def column(data: dict) -> str:
    """The gradebook's ``record`` column for this JSON."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False)


def test_a_first_format_record_reads_with_defaults_for_every_later_key():
    rec = Record.from_json(FIRST_FORMAT)
    assert (rec.raw_score, rec.score, rec.late, rec.submitted_at) == (10.0, 10.0, None, None)
    assert (rec.seed, rec.fixed_cases, rec.flags, rec.sources, rec.answers) == (None, 0, (), {}, ())
    assert rec.messages == tuple(FIRST_FORMAT["messages"]) and rec.functions == (FUNCTION,)
    assert not rec.stamped
    assert rec.absent == {"seed", "fixed_cases", "flags", "sources", "answers", "submitted_at", "raw_score", "late"}


def test_a_first_format_record_is_written_back_byte_for_byte():
    assert column(Record.from_json(FIRST_FORMAT).to_json()) == column(FIRST_FORMAT)


def test_a_record_without_isolation_reads_as_none_and_stays_without_it():
    old = {k: v for k, v in FIRST_FORMAT.items() if k != "isolation"}
    rec = Record.from_json(old)
    assert rec.isolation == "none" and column(rec.to_json()) == column(old)


def test_a_late_record_round_trips_byte_for_byte_and_its_score_is_raw_less_the_penalty():
    rec = Record.from_json(LATE)
    assert rec.late == Late(2, 0.2, 2.0, "2026-11-25T10:00:00+00:00", "2026-11-23T23:59:00+00:00", 0.1, 1.0)
    assert rec.stamped and rec.raw_score == 10.0 and rec.score == 8.0
    assert column(rec.to_json()) == column(LATE)
    assert Record.from_json(rec.to_json()) == rec


def test_stamping_an_old_record_adds_the_stamp_and_nothing_else():
    policy = LatePolicy.parse("2026-11-23T23:59:00+00:00", "10%/day")
    submitted = "2026-11-25T10:00:00+00:00"
    rec = Record.from_json(FIRST_FORMAT)
    stamped = rec.stamp(submitted, policy.penalty(rec.raw_score, submitted)).to_json()
    assert set(stamped) == set(FIRST_FORMAT) | {"submitted_at", "raw_score", "late"}
    assert (stamped["raw_score"], stamped["score"], stamped["late"]["points"]) == (10.0, 8.0, 2.0)


def test_a_new_penalty_is_computed_from_the_raw_score_not_the_last_final_score():
    rec = Record.from_json(LATE)
    policy = LatePolicy.parse("2026-11-23T23:59:00+00:00", "5%/day")
    again = rec.stamp(rec.submitted_at, policy.penalty(rec.raw_score, rec.submitted_at))
    assert again.late is not None and again.late.points == 1.0 and again.score == 9.0


def test_a_record_made_by_grading_is_not_stamped_and_stores_no_stamp_keys():
    rec = refused_record(A, "the file is not valid JSON", "cd" * 32, "bubblewrap", 7)
    data = rec.to_json()
    assert not rec.stamped and not {"submitted_at", "raw_score", "late"} & set(data)
    assert data["score"] == 0.0 and data["status"] == "invalid" and data["seed"] == 7
    assert Record.from_json(data) == rec
