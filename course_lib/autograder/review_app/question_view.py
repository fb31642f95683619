"""One question's page as plain data: its text, setup, answer groups and their grades (no Flask here).

The groups come from :func:`course_lib.autograder.answer_groups.group_answers` over the
non-blank answers, the students a grader split off kept apart; they are cached by the answers'
content (a page opened again after a save groups nothing anew). Each group's answer is rendered
once (its representative's), and a member's own text only when it differs from it. A grade
given to an answer the student has changed since (a resubmission) does not count: the member
shows "answer changed since graded by X on DATE", the group's status counts them as not
graded, and the form keeps the earlier grade filled in, so one save confirms it for the new answer.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..answer_groups import AnswerGroup, group_answers
from ..answer_text import QuestionsError, questions, render_markdown
from ..gradebook import Gradebook
from ..manual import AnswerGrade, QuestionSetup
from .data import Answer, answers_of

__all__ = [
    "Member",
    "GroupView",
    "QuestionView",
    "QuestionSummary",
    "question_view",
    "summaries",
    "grouped",
    "grade_status",
]

GradeStatus = Literal["none", "uniform", "mixed"]


@dataclass(frozen=True)
class Member:
    """One student of an answer group.

    Args:
        student: the student's id.
        html: their answer rendered, "" when it is the group's answer as written.
        split: whether a grader split them off (a group alone).
        grade: their grade, None when ungraded (kept when ``changed``: the form starts from it).
        changed: their answer changed since ``grade`` was given: it does not count.
    """

    student: str
    html: str
    split: bool
    grade: AnswerGrade | None
    changed: bool = False

    @property
    def counted(self) -> AnswerGrade | None:
        """Their grade when it counts (given to the answer as it is now), else None."""
        return None if self.changed else self.grade


@dataclass(frozen=True)
class GroupView:
    """One answer group on the question's page.

    Args:
        group: the group (its key, members, similarity).
        number: its 1-based place on the page.
        html: the representative's answer rendered.
        members: every member, the representative first.
        status: ``none`` (no member graded), ``uniform`` (all graded alike) or ``mixed``; a
            grade given to an answer changed since is not counted.
        grade: the members' common grade when ``uniform``, else None.
        expected: each member's grade version (0: ungraded), what a save of the group is based on.
        prefill: the grade the group's form starts from: ``grade``, else the members' common
            grade counting those given to answers changed since (None when none or not alike).
        seen: each member's answer as shown (its digest; empty when the group is not rendered),
            what a save of the group is based on: an answer changed since is refused.
    """

    group: AnswerGroup
    number: int
    html: str
    members: tuple[Member, ...]
    status: GradeStatus
    grade: AnswerGrade | None
    expected: dict[str, int]
    prefill: AnswerGrade | None = None
    seen: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> tuple[Member, ...]:
        """The members whose answer changed since it was graded."""
        return tuple(m for m in self.members if m.changed)


@dataclass(frozen=True)
class QuestionView:
    """A question's page.

    Args:
        assignment: the assignment's name.
        question: the question's id.
        number: its order in the exercise notebook (0 when the notebook lacks it).
        text_html: the question's text rendered ("" when the exercise notebook is missing or lacks it).
        text_note: why there is no text ("" when there is).
        setup: its points and rubric.
        groups: its answer groups, largest first.
        unanswered: the students who left it blank.
    """

    assignment: str
    question: str
    number: int
    text_html: str
    text_note: str
    setup: QuestionSetup
    groups: tuple[GroupView, ...]
    unanswered: tuple[str, ...]

    @property
    def answered(self) -> int:
        """How many students answered."""
        return sum(len(g.members) for g in self.groups)

    @property
    def graded(self) -> int:
        """How many answers have a grade that counts (not one given to an answer changed since)."""
        return sum(1 for g in self.groups for m in g.members if m.counted is not None)

    @property
    def changed(self) -> int:
        """How many answers changed since they were graded."""
        return sum(len(g.changed) for g in self.groups)


_CACHE: OrderedDict[str, list[AnswerGroup]] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 64


def grouped(answers: Mapping[str, Answer], apart: frozenset[str], *, compute: bool = True) -> list[AnswerGroup] | None:
    """:func:`group_answers` of ``answers`` with ``apart`` kept alone (and answers that show other
    pictures apart), cached by their content.

    Args:
        answers: student -> non-blank answer.
        apart: the students split off their group.
        compute: whether to group them when they are not cached (else None).

    Returns:
        The groups, largest first (None: not cached and ``compute`` false).
    """
    texts = {s: a.text for s, a in answers.items()}
    pictures = {s: a.pictures for s, a in answers.items()}
    key_of = hashlib.sha256()
    for student in sorted(texts):
        key_of.update(f"{len(student)}:{student}{len(texts[student])}:{texts[student]}{pictures[student]}".encode())
    key_of.update(repr(sorted(apart)).encode())
    key = key_of.hexdigest()
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    if not compute:
        return None
    groups = group_answers(texts, apart=apart, pictures=pictures)
    with _CACHE_LOCK:
        _CACHE[key] = groups
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return groups


@dataclass(frozen=True)
class QuestionSummary:
    """One question's line on the index.

    Args:
        id: the question's id.
        answered: how many students answered it.
        groups: into how many groups the answers fall (None: not counted yet, see :func:`summaries`).
        graded: how many answers have a grade that counts (given to the answer as it is now).
        max_points: its points (0: not graded by hand).
    """

    id: str
    answered: int
    groups: int | None
    graded: int
    max_points: float


def summaries(book: Gradebook, exercises: str, assignment: str, deadline: float) -> list[QuestionSummary]:
    """The index's lines of one assignment: the questions its exercise notebook asks, in order,
    then any other question its answers have. Answers are grouped until ``deadline``
    (``time.monotonic()``), later only when cached, so the index of a large course opens fast."""
    by_question = answers_of(book, assignment)
    try:
        asked = list(questions(exercises, assignment))
    except QuestionsError:
        asked = []
    setups = book.manual.setups(assignment)
    out = []
    for qid in asked + [q for q in by_question if q not in asked]:
        texts = {s: a for s, a in by_question.get(qid, {}).items() if not a.blank}
        groups = grouped(texts, book.manual.splits(assignment, qid) & texts.keys(), compute=time.monotonic() < deadline)
        grades = book.manual.grades(assignment, qid)
        graded = sum(1 for s, grade in grades.items() if s in texts and not grade.changed(texts[s].digest))
        max_points = setups[qid].max_points if qid in setups else 0.0
        out.append(QuestionSummary(qid, len(texts), None if groups is None else len(groups), graded, max_points))
    return out


def grade_status(grades: list[AnswerGrade | None]) -> tuple[GradeStatus, AnswerGrade | None]:
    """Whether a group's members are graded: none of them, all alike (the common grade), or mixed."""
    if all(g is None for g in grades):
        return "none", None
    first = grades[0]
    if first is not None and all(
        g is not None and (g.items, g.adjust, g.comment) == (first.items, first.adjust, first.comment) for g in grades
    ):
        return "uniform", first
    return "mixed", None


def question_view(
    book: Gradebook, exercises: str, assignment: str, question: str, shown: range | None = None
) -> QuestionView | None:
    """The page of ``question`` of ``assignment`` (None when neither the release nor any answer has it).

    Args:
        book: the gradebook.
        exercises: the folder of the exercise notebooks (the questions' text).
        assignment: the assignment's name.
        question: the question's id.
        shown: the indices (0-based, largest group first) of the groups the page shows: only
            their answers are rendered (None: every group's).
    """
    answers = answers_of(book, assignment).get(question, {})
    try:
        asked = questions(exercises, assignment).get(question)
        note = "" if asked else "the exercise notebook does not ask this question"
    except QuestionsError as err:
        asked, note = None, str(err)
    if asked is None and not answers:
        return None
    store = book.manual
    setup = store.setup(assignment, question)
    grades = store.grades(assignment, question)
    splits = store.splits(assignment, question)
    given = {s: a for s, a in answers.items() if not a.blank}
    groups = grouped(given, splits & given.keys()) or []
    views = tuple(
        _group_view(n, group, given, grades, splits, shown is None or n - 1 in shown)
        for n, group in enumerate(groups, 1)
    )
    return QuestionView(
        assignment=assignment,
        question=question,
        number=asked.number if asked else 0,
        text_html=render_markdown(asked.text) if asked else "",
        text_note=note,
        setup=setup,
        groups=views,
        unanswered=tuple(s for s, a in answers.items() if a.blank),
    )


def _group_view(
    number: int,
    group: AnswerGroup,
    given: Mapping[str, Answer],
    grades: Mapping[str, AnswerGrade],
    splits: frozenset[str],
    render: bool,
) -> GroupView:
    first = given[group.students[0]]
    members = []
    for student in group.students:
        answer, grade = given[student], grades.get(student)
        own = render and answer.text != first.text
        members.append(
            Member(
                student,
                render_markdown(answer.text, answer.attachments) if own else "",
                student in splits,
                grade,
                grade is not None and grade.changed(answer.digest),
            )
        )
    status, grade = grade_status([m.counted for m in members])
    prefill = grade if grade is not None else grade_status([m.grade for m in members])[1]
    expected = {m.student: (m.grade.version if m.grade else 0) for m in members}
    html = render_markdown(first.text, first.attachments) if render else ""
    seen = {s: given[s].digest for s in group.students} if render else {}
    return GroupView(group, number, html, tuple(members), status, grade, expected, prefill, seen)
