"""Answer groups (course_lib/autograder/answer_groups.py): what is grouped, what never is."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.autograder.answer_groups import (
    MIN_FUZZY_TOKENS,
    THRESHOLD,
    AnswerGroup,
    answer_tokens,
    group_answers,
    normalise_answer,
    similarity,
)

LONG = (
    "Subtracting the mean is not safe because the largest score can lie far above the mean, "
    "so after the shift its exponent is still huge and exp overflows to inf, and inf / inf is nan."
)


def _groups_of(groups: list[AnswerGroup]) -> set[frozenset[str]]:
    return {frozenset(g.students) for g in groups}


def _group_of(groups: list[AnswerGroup], student: str) -> AnswerGroup:
    (group,) = [g for g in groups if student in g.students]
    return group


# --- normalisation -------------------------------------------------------------------------------


def test_normalisation_drops_case_markup_spacing_and_trailing_punctuation():
    assert normalise_answer("  **Because** the _mean_\n\n can be   FAR below.  ") == "because the mean can be far below"
    assert normalise_answer("# Why\n- it ~~never~~ *overflows*!") == "why it never overflows"
    assert normalise_answer("see [the book](https://example.org/x) now.") == "see the book now"


def test_normalisation_folds_compatibility_characters_with_nfkc():
    assert normalise_answer(
        "\ufb01nite \uff2d\uff21\uff38"
    )  # fi ligature, full-width MAX == normalise_answer("finite max")


def test_normalisation_keeps_math_and_code_as_written():
    assert normalise_answer("Use $X_i - M$ here") == "use $X_i - M$ here"
    assert normalise_answer("$D$ grows") != normalise_answer("$d$ grows")
    assert normalise_answer("call `torch.Max_Value` once") == "call torch.Max_Value once"
    assert normalise_answer("a snake_case name") == "a snake_case name"


def test_tokens_are_words_numbers_and_symbol_runs():
    assert answer_tokens("exp(10^4) -> inf") == ["exp", "(", "10", "^", "4", ")", "->", "inf"]


# --- identical and near-identical ------------------------------------------------------------------


def test_identical_answers_fall_into_one_group():
    answers = {"s1": LONG, "s2": LONG.upper(), "s3": "  " + LONG.replace(" ", "  ") + "!!", "s4": "It is fine."}
    groups = group_answers(answers)
    assert groups[0].students == ("s1", "s2", "s3")
    assert groups[0].identical and groups[0].similarity == 1.0
    assert _groups_of(groups) == {frozenset({"s1", "s2", "s3"}), frozenset({"s4"})}


def test_a_typo_joins_the_group_as_near_identical():
    typo = LONG.replace("overflows", "overflwos")
    groups = group_answers({"a": LONG, "b": LONG, "c": typo})
    assert _groups_of(groups) == {frozenset("abc")}
    assert not groups[0].identical
    assert groups[0].students[:2] == ("a", "b")  # the identical pair's text is the representative
    assert groups[0].similarity == pytest.approx(similarity(LONG, typo)) and THRESHOLD <= groups[0].similarity < 1


def test_different_answers_stay_apart():
    other = "The mean is fine as long as no score is masked; masking with -inf makes the mean -inf and all nan."
    assert _groups_of(group_answers({"a": LONG, "b": other})) == {frozenset("a"), frozenset("b")}


def test_short_answers_group_only_when_identical():
    answers = {"a": "because it overflows", "b": "because it underflows", "c": "Because it overflows.", "d": "yes"}
    assert len(answer_tokens(normalise_answer(answers["a"]))) < MIN_FUZZY_TOKENS
    groups = group_answers(answers, threshold=0.5)  # even a lax threshold merges no short answers
    assert _groups_of(groups) == {frozenset("ac"), frozenset("b"), frozenset("d")}


def test_a_chain_does_not_drift_every_member_is_near_every_other():
    words = [f"w{k}" for k in range(40)]
    a = " ".join(words)
    b = " ".join([*words[:36], "x1", "x2", "x3", "x4"])  # 4 of 40 words changed
    c = " ".join([*words[:32], "x1", "x2", "x3", "x4", "y1", "y2", "y3", "y4"])
    assert similarity(a, b) >= 0.85 and similarity(b, c) >= 0.85 and similarity(a, c) < 0.85
    groups = group_answers({"a": a, "b": b, "c": c}, threshold=0.85)
    assert not any({"a", "c"} <= set(g.students) for g in groups)
    assert {len(g.students) for g in groups} == {2, 1}


def test_a_group_member_is_within_the_threshold_of_the_representative():
    base = LONG.split()
    answers = {f"s{k}": " ".join([*base[:k], "extra", *base[k:]]) for k in range(0, len(base), 3)}
    for group in group_answers(answers):
        rep = answers[group.students[0]]
        sims = [similarity(rep, answers[s]) for s in group.students[1:]]
        assert all(x >= THRESHOLD for x in sims)
        assert group.similarity == pytest.approx(min([1.0, *sims]))


def test_apart_students_are_always_alone():
    groups = group_answers({"a": LONG, "b": LONG, "c": LONG}, apart={"b", "not-a-student"})
    assert _groups_of(groups) == {frozenset("ac"), frozenset("b")}
    assert _group_of(groups, "b").identical


def test_threshold_one_groups_identical_answers_only():
    typo = LONG.replace("overflows", "overflwos")
    assert _groups_of(group_answers({"a": LONG, "b": typo}, threshold=1.0)) == {frozenset("a"), frozenset("b")}


def test_groups_come_largest_first_then_by_first_student():
    answers = {"z1": LONG, "z2": LONG, "a": "one thing", "b": "another thing", "c": "another thing"}
    assert [g.students for g in group_answers(answers)] == [("b", "c"), ("z1", "z2"), ("a",)]


def test_the_key_names_the_members_not_their_order():
    g1 = group_answers({"a": LONG, "b": LONG})[0]
    g2 = group_answers({"b": LONG, "a": LONG, "c": "else"})[0]
    g3 = group_answers({"a": LONG, "b": LONG, "c": LONG})[0]
    assert g1.key == g2.key != g3.key and len(g1.key) == 12


def test_the_grouping_does_not_depend_on_the_input_order():
    rng = random.Random(3)
    pool = [LONG, LONG.replace("huge", "large"), LONG.replace("overflows", "overflwos"), "idk", "no idea", "yes"]
    answers = {f"s{k:03d}": rng.choice(pool) for k in range(60)}
    expected = group_answers(answers)
    for _ in range(5):
        items = list(answers.items())
        rng.shuffle(items)
        assert group_answers(dict(items)) == expected


def test_no_answers_no_groups():
    assert group_answers({}) == []


def test_an_answer_that_is_no_text_is_a_type_error_naming_the_student():
    with pytest.raises(TypeError, match=r"student 'bob'.*str, got int"):
        group_answers({"alice": "x", "bob": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"student ids must be str, got int"):
        group_answers({7: "x"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="mapping"):
        group_answers([("a", "x")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="apart must be a collection"):
        group_answers({"a": "x"}, apart="a")


@pytest.mark.parametrize("threshold", [0, -0.5, 1.5, float("nan"), True, "0.9"])
def test_a_threshold_outside_zero_to_one_is_a_value_error(threshold):
    with pytest.raises(ValueError, match=r"threshold must be a number in \(0, 1\], got"):
        group_answers({"a": "x"}, threshold=threshold)


# --- properties ----------------------------------------------------------------------------------

_WORDS = st.sampled_from("the mean max score exp overflow inf nan shift is not safe far above $x_i$ **so** 0".split())
_TEXTS = st.lists(_WORDS, min_size=1, max_size=16).map(" ".join)
_CLASSES = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=3), _TEXTS, max_size=25)


@settings(max_examples=150, deadline=None)
@given(_CLASSES, st.data())
def test_every_student_is_in_exactly_one_group(answers, data):
    apart = data.draw(st.sets(st.sampled_from(sorted(answers)))) if answers else set()
    groups = group_answers(answers, apart=apart, threshold=0.7)
    members = [s for g in groups for s in g.students]
    assert sorted(members) == sorted(answers)
    assert all(g.students == (s,) for s in apart for g in groups if s in g.students)


@settings(max_examples=150, deadline=None)
@given(_CLASSES, st.data())
def test_identical_texts_are_together_unless_apart(answers, data):
    apart = data.draw(st.sets(st.sampled_from(sorted(answers)))) if answers else set()
    groups = group_answers(answers, apart=apart, threshold=0.7)
    where = {s: g.key for g in groups for s in g.students}
    for a in answers:
        for b in answers:
            if a not in apart and b not in apart and normalise_answer(answers[a]) == normalise_answer(answers[b]):
                assert where[a] == where[b]


@settings(max_examples=150, deadline=None)
@given(_CLASSES, st.floats(0.5, 1.0))
def test_members_are_within_the_threshold_of_the_representative_and_each_other(answers, threshold):
    for group in group_answers(answers, threshold=threshold):
        texts = [answers[s] for s in group.students]
        assert all(similarity(texts[0], t) >= threshold for t in texts)
        assert all(similarity(t, u) >= threshold for t in texts for u in texts)
        assert group.similarity == min(similarity(texts[0], t) for t in texts)
        assert group.identical == (len({normalise_answer(t) for t in texts}) == 1)


@settings(max_examples=100, deadline=None)
@given(_CLASSES, st.randoms())
def test_groups_are_deterministic(answers, rnd):
    items = list(answers.items())
    rnd.shuffle(items)
    assert group_answers(dict(items), threshold=0.7) == group_answers(answers, threshold=0.7)
