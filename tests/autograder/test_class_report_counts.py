"""One mistake, one count: the class report's named mistakes (``class_report.data.mistakes``)
count a student once when two named mistakes explain the same failed tests of the student's
function, by the grader's own rule (``grading.judging._diagnose``).

The records are a real ``-1e9`` student's: the report of the course's own ``-1e9`` fill mistake
of ``scaled_dot_product_attention`` (``course_lib.grading.check``), as a record graded before the
grader merged the two fills carries it (both the -1e9 and the -1e4 mistakes on the same tests).
"""

from __future__ import annotations

import copy

import pytest

from course_lib.autograder.class_report.data import explained, mistakes
from course_lib.autograder.record import STAMP_KEYS, Record

F = "scaled_dot_product_attention"


@pytest.fixture(scope="module")
def fills() -> dict[str, dict]:
    """The reports of the -1e9 and the -1e4 fill mistakes (``Report.to_dict()``), and their messages."""
    from course_lib.grading import check
    from course_lib.grading.registry import exercise

    found = {}
    for m in exercise(F).mistakes:
        for fill in ("-1e9", "-1e4"):
            if f"({fill})" in m.message:
                found[fill] = {"message": m.message, "report": check(m.implementation, F).to_dict()}
    assert set(found) == {"-1e9", "-1e4"}
    return found


def record(report: dict) -> Record:
    return Record(
        assignment="02_self_attention",
        sha256="",
        status="graded",
        raw_score=float(report["score"]),
        max_score=float(report["max_score"]),
        functions=(report,),
        absent=STAMP_KEYS,
    )


def also(report: dict, message: str, where=lambda res: bool(res.get("diagnoses"))) -> dict:
    """``report`` with ``message`` added to the diagnoses of the results ``where`` selects."""
    out = copy.deepcopy(report)
    for res in out["results"]:
        if where(res):
            res["diagnoses"] = [*res["diagnoses"], message]
    return out


def counts(rows: list[tuple[str, Record]]) -> dict[str, list[str]]:
    (entry,) = mistakes(rows, [F])
    return {e["mistake"]: e["students"] for e in entry["named"]}


def test_a_fill_that_two_named_mistakes_explain_counts_the_student_once(fills):
    e9, e4 = fills["-1e9"], fills["-1e4"]
    old = also(e9["report"], e4["message"])  # a -1e9 student, both fills named on the same tests
    assert [res["diagnoses"] for res in old["results"] if res["diagnoses"]] == [[e9["message"], e4["message"]]] * 2
    rows = [("ada", record(old)), ("bob", record(e4["report"]))]
    assert counts(rows) == {e9["message"]: ["ada"], e4["message"]: ["bob"]}


def test_a_record_graded_today_is_counted_as_before(fills):
    e9 = fills["-1e9"]
    assert counts([("ada", record(e9["report"]))]) == {e9["message"]: ["ada"]}


def test_a_mistake_that_explains_only_some_of_the_same_tests_is_not_counted(fills):
    e9, e4 = fills["-1e9"], fills["-1e4"]
    first = next(res["name"] for res in e9["report"]["results"] if res["diagnoses"])
    old = also(e9["report"], e4["message"], lambda res: res["name"] == first)
    assert explained(old, F) == {e9["message"]: [r["name"] for r in old["results"] if r["diagnoses"]]}
    assert counts([("ada", record(old))]) == {e9["message"]: ["ada"]}


def test_two_mistakes_on_different_tests_are_both_counted(fills):
    e9 = fills["-1e9"]
    failed = [res["name"] for res in e9["report"]["results"] if res["diagnoses"]]
    report = copy.deepcopy(e9["report"])
    for res in report["results"]:
        if res["name"] == failed[1]:
            res["diagnoses"] = ["forgetting to scale the scores by 1/sqrt(D)"]
    got = counts([("ada", record(report))])
    assert got == {e9["message"]: ["ada"], "forgetting to scale the scores by 1/sqrt(D)": ["ada"]}


def test_an_in_place_change_is_counted_besides_the_mistake_it_shares_tests_with(fills):
    e9 = fills["-1e9"]
    inplace = f"your {F} changed its argument `q` in place (`q.mul_(...)`), so the caller's tensor is no longer ..."
    got = counts([("ada", record(also(e9["report"], inplace)))])
    assert got == {e9["message"]: ["ada"], inplace: ["ada"]}
