"""No one waits on one notebook (course_lib.autograder.pacing): tasks that never hold two of one
student's notebooks, a slow job that holds only its own grading process, a progress line that
names the notebook it waits on, and the per-cell limit as a documented option."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_pool import _Stub

from course_lib.autograder import autograde, pacing
from course_lib.autograder.autograde import refused_record, sha256
from course_lib.autograder.batch import grade_all
from course_lib.autograder.cli import _limits
from course_lib.autograder.config import GradeConfig
from course_lib.autograder.pacing import Running, label, spread
from course_lib.autograder.pool import grade_in_processes
from course_lib.autograder.sandbox import Limits
from course_lib.cli import build_parser

A = "02_self_attention"


@dataclass(frozen=True)
class _Sub:
    student: str
    assignment: str = A


@dataclass(frozen=True)
class _Job:
    """What the pacing reads of a job: its submission's student and its assignment."""

    submission: _Sub
    seconds: float = 0.0

    @property
    def assignment(self) -> str:
        return self.submission.assignment


def _student(job: _Job) -> str:
    return job.submission.student


def test_a_students_two_notebooks_go_to_different_tasks_and_each_task_starts_with_one():
    jobs = [_Job(_Sub("s0", "02_self_attention")), _Job(_Sub("s0", "05_layer_norm"))]
    jobs += [_Job(_Sub(f"s{i}")) for i in range(1, 5)]
    assert spread(jobs, 3, _student) == [[0, 2, 3], [1, 4, 5]]  # not [[0, 1, 2], [3, 4, 5]]


def test_a_student_with_more_notebooks_than_there_are_other_students_gets_smaller_tasks():
    jobs = [_Job(_Sub("s0", f"0{n}_x")) for n in range(1, 5)] + [_Job(_Sub("s1"))]
    assert spread(jobs, 8, _student) == [[0, 4], [1], [2], [3]]
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        spread(jobs, 0, _student)


@given(st.lists(st.integers(0, 6), max_size=40), st.integers(1, 9))
def test_spread_keeps_every_job_once_in_order_and_no_task_holds_a_student_twice(students, size):
    jobs = [_Job(_Sub(f"s{s}", f"n{i}")) for i, s in enumerate(students)]
    tasks = spread(jobs, size, _student)
    assert sorted(i for task in tasks for i in task) == list(range(len(jobs)))
    assert all(1 <= len(task) <= size for task in tasks)
    for task in tasks:
        assert len({students[i] for i in task}) == len(task)
    for s in set(students):  # a student's notebooks in their order
        mine = [i for task in tasks for i in task if students[i] == s]
        assert mine == sorted(mine)
    # no more tasks than the jobs need: the busiest student's notebooks, or all of them cut in size
    busiest = max((students.count(s) for s in set(students)), default=0)
    assert len(tasks) == max(busiest, -(-len(jobs) // size))


def test_the_progress_line_names_the_notebook_that_has_run_longest():
    now = [100.0]
    running = Running(clock=lambda: now[0])
    fast, slow = _Job(_Sub("bob")), _Job(_Sub("alice"))
    assert running.waiting_on() == ""
    running.began(slow)
    now[0] += 30
    running.began(fast)
    now[0] += 11
    assert running.waiting_on() == "waiting on alice/02_self_attention (41 s)"
    running.finished(slow)
    assert running.waiting_on() == "waiting on bob/02_self_attention (11 s)"
    running.finished(fast)
    assert running.waiting_on() == "" and running.longest() is None
    running.began(fast)
    now[0] += pacing.SHOW_AFTER / 2
    assert running.waiting_on() == ""  # a notebook that has just begun is not named


def test_a_students_folder_name_cannot_draw_on_the_instructors_terminal():
    assert label(_Job(_Sub("eve\x1b[2J\x1b[31m"))) == "eve\\x1b[2J\\x1b[31m/02_self_attention"
    assert len(label(_Job(_Sub("x" * 200)))) == 60


def test_a_slow_job_holds_only_its_own_grading_process_and_the_line_names_it():
    jobs = [_Job(_Sub("slow"), seconds=2.0)] + [_Job(_Sub(f"s{i}"), seconds=0.02) for i in range(8)]
    running = Running()
    saved: list[tuple[str, str]] = []

    def grade(runner, job):
        time.sleep(job.seconds)
        return {}

    def save(job, record, seconds):
        saved.append((job.submission.student, running.waiting_on(after=0.0)))

    t0 = time.monotonic()
    grade_in_processes(jobs, 2, _Stub, grade, save, lambda *a: {}, watch=running)
    assert time.monotonic() - t0 < 3.5
    assert [s for s, _ in saved][-1] == "slow"  # the other eight came back while it ran
    assert all(line.startswith("waiting on slow/02_self_attention (") for s, line in saved[:-1])
    assert running.longest() is None


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_progress_bar_of_a_run_names_the_notebook_it_waits_on(tmp_path, monkeypatch, capsys):
    for student in ("alice", "bob", "carol"):
        (tmp_path / "subs" / student).mkdir(parents=True)
        (tmp_path / "subs" / student / f"{A}.ipynb").write_text(json.dumps({"student": student}))

    def stand_in(data, assignment, runner, seed=None):
        if json.loads(data)["student"] == "alice":
            time.sleep(2.5)
        return replace(refused_record(assignment, "x", sha256(data)), status="graded", raw_score=30.0)

    monkeypatch.setattr(autograde, "grade_submission", stand_in)
    monkeypatch.setattr(pacing, "SHOW_AFTER", 0.5)
    summary = grade_all(tmp_path / "subs", tmp_path / "g.sqlite", GradeConfig(jobs=2, sandbox="auto"))
    assert summary.graded == 3
    err = capsys.readouterr().err
    assert "waiting on alice/02_self_attention (" in err
    assert "waiting on bob" not in err and "waiting on carol" not in err


def test_the_per_cell_limit_is_an_option_of_grade_and_half_the_submission_limit_by_default():
    parser = build_parser()
    args = parser.parse_args(["grade", "subs", "--cell-seconds", "5", "--submission-seconds", "40"])
    assert _limits(args) == Limits(submission_seconds=40.0, cell_seconds=5.0)
    default = _limits(parser.parse_args(["grade", "subs"]))
    assert default.cell_seconds is None and default.submission_seconds == 60.0
    assert "--cell-seconds" in parser._subparsers._group_actions[0].choices["grade"].format_help()


@pytest.mark.parametrize("bad", ["0", "-3", "nan", "inf"])
def test_a_cell_limit_that_is_not_a_positive_number_of_seconds_is_refused_by_name(bad, capsys):
    parser = build_parser()
    with pytest.raises(ValueError, match=r"--cell-seconds: cell_seconds must be a finite number of seconds > 0"):
        _limits(parser.parse_args(["grade", "subs", "--cell-seconds", bad]))
    with pytest.raises(ValueError, match=r"got 0"):
        Limits(cell_seconds=0)
