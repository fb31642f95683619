"""Chapter 1's sentence about the date model's hyphen and <eos> steps follows the weights."""

from __future__ import annotations

import ch01_alignment as al
import pytest
import torch

SRC = [*"21 Nov", "<eos>"]  # 7 source labels
OUT = [*"11-21", "<eos>"]  # one hyphen at t = 2, <eos> at t = 5
PARTS = {"month": slice(3, 6), "day": slice(0, 3)}


def _rows(tops: dict[int, tuple[int, float]]) -> torch.Tensor:
    """Rows that put ``weight`` on position ``j`` for the given steps, the rest spread evenly."""
    w = torch.full((len(OUT), len(SRC)), 0.0)
    for t in range(len(OUT)):
        j, weight = tops.get(t, (0, 1.0))
        w[t] = (1 - weight) / (len(SRC) - 1)
        w[t, j] = weight
    return w


def test_the_idle_steps_are_the_hyphens_then_the_final_eos():
    steps = al.idle_steps(_rows({2: (6, 0.5), 5: (1, 0.6)}), SRC, OUT, PARTS)
    assert [(s.name, s.step) for s in steps] == [("the first hyphen", 2), ("the final `<eos>` step", 5)]
    hyphen, eos = steps
    assert (hyphen.top, hyphen.top_weight, hyphen.eos_weight) == ("<eos>", 0.5, 0.5)
    assert (eos.top, eos.top_part) == ("1", "day")
    assert eos.top_weight == pytest.approx(0.6) and eos.eos_weight == pytest.approx(0.4 / 6)


def test_the_sentence_says_where_each_step_leans():
    steps = al.idle_steps(_rows({2: (6, 0.5), 5: (4, 0.6)}), SRC, OUT, PARTS)
    sentence = al.describe("21 Nov", steps)
    assert sentence == (
        "In '21 Nov', the first hyphen leans most on `<eos>` (0.50) and the final `<eos>` step "
        "leans most on `o` in the month (0.60; 0.07 on `<eos>`)."
    )


def test_the_lead_counts_the_steps_parked_on_eos():
    parked = al.idle_steps(_rows({2: (6, 0.5), 5: (6, 0.7)}), SRC, OUT)
    mixed = al.idle_steps(_rows({2: (6, 0.5), 5: (1, 0.7)}), SRC, OUT)
    elsewhere = al.idle_steps(_rows({2: (3, 0.5), 5: (1, 0.7)}), SRC, OUT)
    assert al.lead(parked).startswith("every step")
    assert al.lead(mixed).startswith("only some")
    assert al.lead(elsewhere).startswith("no step")
    assert al.lead(parked + elsewhere).startswith("only some")


def test_a_part_is_named_only_when_it_alone_holds_the_position():
    steps = al.idle_steps(_rows({5: (2, 0.9)}), SRC, OUT, {"a": slice(0, 3), "b": slice(2, 6)})
    assert steps[-1].top == " " and steps[-1].top_part is None
    assert "`␣`" in al.describe("x", steps)


def test_wrong_shapes_and_labels_are_refused():
    with pytest.raises(ValueError, match="end with <eos>"):
        al.idle_steps(_rows({}), [*SRC[:-1], "x"], OUT)
    with pytest.raises(ValueError, match="rows"):
        al.idle_steps(_rows({})[:3], SRC, OUT)


def test_the_conclusion_follows_where_the_final_steps_look():
    def step(name, top, part):
        return al.IdleStep(name, 0, 0.2, top, 0.5, part)

    hyphen_on_eos = step("the first hyphen", "<eos>", None)
    final_on_day = step("the final `<eos>` step", "1", "day")
    final_on_eos = step("the final `<eos>` step", "<eos>", None)
    assert "looks back at the day" in al.conclusion([hyphen_on_eos, final_on_day, final_on_day])
    mixed = al.conclusion([hyphen_on_eos, final_on_day, final_on_eos])
    assert "not the only one" in mixed and "looks back at the day" not in mixed
    assert "is where the idle steps park" in al.conclusion([hyphen_on_eos, final_on_eos])
