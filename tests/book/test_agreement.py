"""The Russian agreement task of the self-attention chapter (book/agreement.py).

The data must be what the dictionary says, the test set must be made of unseen nouns, and the
model must learn. These tests read the module directly; they need no built book.
"""

from __future__ import annotations

import agreement
import pytest
import torch
from agreement import ENDINGS, FILLERS, NOUNS, Phrase, encode, evaluate, make_split, morph, noun_forms, train


@pytest.fixture(scope="module")
def split() -> agreement.Split:
    return make_split(seed=0)


def test_every_gold_ending_is_the_dictionary_form(split):
    for phrase in split.train + split.test:
        written = phrase.words[phrase.slot] + phrase.ending
        readings = [p for p in morph().parse(written) if p.tag.POS == "ADJF" and p.normal_form == phrase.adjective]
        number, case = phrase.noun_form.grammemes[0]
        agreeing = [p for p in readings if {number, case} <= p.tag.grammemes]
        if number == "sing":
            agreeing = [p for p in agreeing if p.tag.gender == phrase.noun_form.gender]
        assert agreeing, f"{written!r} does not agree with {phrase.noun_form.word!r}"


def test_the_lecture_notes_examples():
    by_word = {f.word: f for lemma in ("яблоко", "капуста") for f in noun_forms(lemma)}
    assert agreement.hidden_ending("зелёный", by_word["яблоко"]) == "ое"
    assert agreement.hidden_ending("зелёный", by_word["яблоки"]) == "ые"
    assert agreement.hidden_ending("зелёный", by_word["капусту"]) == "ую"
    assert agreement.hidden_ending("зелёный", by_word["капуста"]) == "ая"


def test_every_noun_form_comes_from_the_dictionary():
    for lemma in NOUNS:
        forms = noun_forms(lemma)
        parse = morph().parse(lemma)[0]
        for form in forms:
            for number, case in form.grammemes:
                assert parse.inflect({number, case}).word == form.word
        assert {f.number for f in forms} == {"sing", "plur"}


def test_the_noun_form_decides_the_ending(split):
    endings: dict[str, set[str]] = {}
    for phrase in split.train + split.test:
        endings.setdefault(phrase.noun_form.word, set()).add(phrase.ending)
    assert all(len(e) == 1 for e in endings.values()), {w: e for w, e in endings.items() if len(e) > 1}
    assert set().union(*endings.values()) == set(ENDINGS)


def test_each_phrase_has_one_adjective_one_noun_and_fillers(split):
    for phrase in split.train[:200] + split.test[:200]:
        others = [w for i, w in enumerate(phrase.words) if i not in (phrase.slot, phrase.noun)]
        assert phrase.slot != phrase.noun
        assert phrase.words[phrase.slot] == phrase.adjective[:-2]
        assert phrase.words[phrase.noun] == phrase.noun_form.word
        assert all(w in FILLERS for w in others) and len(set(others)) == len(others)
        assert "[?]" in phrase.text() and phrase.text().count("[?]") == 1


def test_the_noun_is_found_at_every_position(split):
    assert {p.noun for p in split.train} == set(range(len(split.train[0].words)))
    assert {p.slot for p in split.train} == set(range(len(split.train[0].words)))


def test_held_out_nouns_never_appear_in_training(split):
    held_out = set(agreement.held_out_nouns())
    assert {p.noun_form.lemma for p in split.test} == held_out
    assert not held_out & {p.noun_form.lemma for p in split.train}
    test_words = {p.noun_form.word for p in split.test}
    assert not test_words & {w for p in split.train for w in p.words}


def test_the_held_out_nouns_cover_every_gender():
    genders = {noun_forms(n)[0].gender for n in agreement.held_out_nouns()}
    assert genders == {"masc", "femn", "neut"}


def test_same_seed_same_phrases():
    assert make_split(seed=3).train[:50] == make_split(seed=3).train[:50]
    assert make_split(seed=3).train[:50] != make_split(seed=4).train[:50]


def test_encoding_shapes_and_unknown_endings(split):
    vocab = agreement.Vocabulary.from_phrases(split.train)
    batch = encode(split.test[:7], vocab)
    assert batch.suffixes.shape == (7, 5, 3)
    assert batch.slot.shape == batch.noun.shape == batch.target.shape == (7,)
    assert vocab.word("щщщщ") == [0, 0, 0]
    assert all(i > 0 for i in vocab.word(split.train[0].words[0]))


def test_the_model_returns_logits_and_attention_rows_that_sum_to_one(split):
    vocab = agreement.Vocabulary.from_phrases(split.train)
    model = agreement.AgreementModel(len(vocab.ids) + 1, length=5, width=8)
    logits, weights = model(encode(split.train[:4], vocab))
    assert logits.shape == (4, len(ENDINGS))
    assert weights.shape == (4, 5, 5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 5))


def test_training_reduces_the_loss(split):
    training = train(split.train[:300], steps=15, seed=0)
    assert len(training.losses) == 15
    assert training.losses[-1] < 0.7 * training.losses[0]


def test_evaluation_reports_shares_and_the_hidden_endings_attention(split):
    training = train(split.train[:300], steps=5, seed=0)
    result = evaluate(training, split.test[:40])
    assert 0 <= result.accuracy <= 1 and 0 <= result.noun_on_top <= 1 and 0 <= result.noun_weight <= 1
    assert result.predicted.shape == (40,)
    assert result.weights.shape == (40, 5)
    torch.testing.assert_close(result.weights.sum(-1), torch.ones(40))


def test_phrase_text_marks_the_hidden_ending():
    form = noun_forms("яблоко")[0]
    phrase = Phrase(("очень", "зелён", "яблоко"), 1, 2, "зелёный", form, "ое")
    assert phrase.text() == "очень зелён[?] яблоко"
    assert phrase.labels() == ["очень", "зелён[?]", "яблоко"]


def test_an_ending_never_seen_in_training_adds_nothing(split):
    training = train(split.train[:300], steps=5, seed=0)
    assert torch.count_nonzero(training.model.suffix.weight[0]) == 0


def test_adam_takes_the_same_steps_as_torch_optim_adam():
    w_torch = torch.randn(5, 3, requires_grad=True)
    w_ours = w_torch.detach().clone().requires_grad_()
    reference, ours = torch.optim.Adam([w_torch], lr=0.02), agreement.Adam([w_ours], lr=0.02)
    for _ in range(20):
        (w_torch**3).sum().backward()
        reference.step()
        reference.zero_grad()
        (w_ours**3).sum().backward()
        ours.step()
    torch.testing.assert_close(w_ours, w_torch)
