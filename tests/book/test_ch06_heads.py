"""The transformer chapter's sentence about its heads follows the measured shares."""

from __future__ import annotations

import ch06_heads
import pytest


def test_one_layer_all_heads_on_the_mirror():
    text = ch06_heads.heads_sentence([[0.88, 1.0, 0.88, 0.88]])
    assert text.startswith("In the decoder's single layer, all four heads put their strongest weight")
    assert "at least 88% of the queries (head 1 for every one of them)" in text
    assert "first" not in text and "last" not in text  # one layer: nothing to compare
    assert "much the same lookup" in text and "look elsewhere" not in text


def test_one_layer_all_perfect_names_no_head():
    text = ch06_heads.heads_sentence([[1.0, 1.0]])
    assert "both heads put their strongest weight on the mirrored position for at least 100%" in text
    assert "(head" not in text


def test_some_heads_elsewhere():
    text = ch06_heads.heads_sentence([[0.25, 1.0, 0.5, 0.125]])
    assert "head 1 puts its strongest weight on the mirrored position for 100% of the queries" in text
    assert "the other heads do so for at most 50%" in text
    assert "look elsewhere" in text and "much the same" not in text


def test_no_head_on_the_mirror():
    text = ch06_heads.heads_sentence([[0.25, 0.5]])
    assert "no head puts its strongest weight on the mirrored position for most queries" in text
    assert "head 1, does so for 50%" in text


def test_several_layers_compare_first_and_last():
    text = ch06_heads.heads_sentence([[0.5, 0.75, 0.25], [1.0, 0.875, 1.0]])
    assert text.startswith("In the last of the two decoder layers, all three heads")
    assert "in the first layer the best head, head 1, does so for 75%." in text


def test_single_head():
    text = ch06_heads.heads_sentence([[0.9]])
    assert "its head puts its strongest weight" in text
    assert "heads" not in text


@pytest.mark.parametrize("hits", [[], [[]], [[1.5]], [[-0.1, 0.5]]])
def test_bad_input(hits):
    with pytest.raises(ValueError):
        ch06_heads.heads_sentence(hits)


def test_number_word():
    assert ch06_heads.number_word(4) == "four"
    assert ch06_heads.number_word(12) == "12"
