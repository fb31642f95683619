"""benchmarks/answer_corpus.py: the made-up class whose answers the answer-group benchmark groups."""

from __future__ import annotations

import importlib.util
import sys

from conftest import ROOT

_SPEC = importlib.util.spec_from_file_location("answer_corpus", ROOT / "benchmarks" / "answer_corpus.py")
assert _SPEC is not None and _SPEC.loader is not None
corpus = importlib.util.module_from_spec(_SPEC)
sys.modules["answer_corpus"] = corpus
_SPEC.loader.exec_module(corpus)


def test_the_same_seed_makes_the_same_class_and_another_seed_another():
    assert corpus.realistic_answers(300, 1) == corpus.realistic_answers(300, 1)
    assert corpus.realistic_answers(300, 1) != corpus.realistic_answers(300, 2)


def test_the_class_has_the_planted_proportions():
    made = corpus.realistic_class(1000, 0)
    assert sorted(made.answers) == [f"s{k:04d}" for k in range(1000)]
    assert sum(a == "" for a in made.answers.values()) == round(1000 * corpus.BLANK)
    copied = sum(s != src for s, src in made.sources.items())
    assert copied == round(1000 * corpus.COPIERS) + round(1000 * corpus.PARAPHRASERS)
    sizes = [len(c) for c in made.clusters()]
    assert sizes[0] == 25 and min(sizes) == 2
    assert max(len(a) for a in made.answers.values()) <= 800


def test_a_copy_comes_from_a_student_who_wrote_alone():
    made = corpus.realistic_class(500, 3)
    for student, source in made.sources.items():
        assert made.sources[source] == source, student
        if student != source:
            assert made.answers[source]


def test_an_edit_changes_the_answer():
    import random

    rng = random.Random(0)
    text = "The mean is not the max. So the exponent overflows and the softmax gives nan."
    for edit in corpus.EDITS:
        assert corpus.edit_once(text, edit, rng) != text, edit
