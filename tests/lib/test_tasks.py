"""Specification of the toy tasks: generators, vocabularies, splits, batching."""

import datetime
import itertools
import random
import zlib
from collections import Counter

import pytest
import torch

from course_lib.tasks import BOS, EOS, MIN_SPLIT_SOURCES, PAD, SPLITS, TASKS, SequenceTask, get_task


@pytest.mark.parametrize("name", TASKS)
def test_vocabulary_starts_with_pad_bos_eos(name):
    task = get_task(name)
    for vocab in (task.src_vocab, task.tgt_vocab):
        assert vocab.symbols[:3] == ("<pad>", "<bos>", "<eos>")
        assert (PAD, BOS, EOS) == (0, 1, 2)
        assert len(set(vocab.symbols)) == len(vocab)


@pytest.mark.parametrize("name", TASKS)
def test_same_seed_gives_same_examples_and_other_seed_differs(name):
    task = get_task(name)
    assert task.examples("train", 50, seed=3) == task.examples("train", 50, seed=3)
    assert task.examples("train", 50, seed=3) != task.examples("train", 50, seed=4)


@pytest.mark.parametrize("name", TASKS)
def test_splits_are_disjoint_by_source_beyond_the_lengths_too_short_to_split(name):
    task = get_task(name)
    vocab = len(task.src_vocab) - 3

    def split_sources(split):  # sources of lengths with at least MIN_SPLIT_SOURCES possible sources
        return {" ".join(s) for s, _ in task.examples(split, 600, seed=0) if vocab ** len(s) >= MIN_SPLIT_SOURCES}

    sources = {split: split_sources(split) for split in SPLITS}
    assert all(len(found) > 400 for found in sources.values())
    assert not sources["train"] & sources["test"]
    assert not sources["train"] & sources["validation"]
    assert not sources["validation"] & sources["test"]


def test_the_ten_length_one_sources_are_in_every_split():
    task = get_task("reverse")
    for split in SPLITS:
        lone = {s[0] for s, _ in task.examples(split, 2000, seed=1) if len(s) == 1}
        assert lone == {str(i) for i in range(10)}, split


@pytest.mark.parametrize("split", list(SPLITS))
def test_every_split_draws_lengths_uniformly_as_the_task_does(split):
    # Rejection sampling over whole examples made a length weigh more in a split that holds a
    # larger share of its sources (length 1 was 12.8% of the test split, not 1/16).
    lengths = Counter(len(s) for s, _ in get_task("reverse").examples(split, 16_000, seed=2))
    assert sorted(lengths) == list(range(1, 17))
    assert all(abs(n - 1000) < 130 for n in lengths.values()), lengths  # binomial sd about 31


def test_length_power_draws_long_training_sources_more_often():
    lengths = Counter(
        len(s) for s, _ in itertools.islice(get_task("copy").stream("train", 0, length_power=1.0), 13_600)
    )
    assert abs(lengths[16] / lengths[1] - 16) < 5  # probability proportional to the length
    with pytest.raises(ValueError, match="length_power applies to the sequence tasks only"):
        next(get_task("dates").stream("train", 0, length_power=0.5))


@pytest.mark.parametrize(
    "name,relation", [("reverse", lambda s: s[::-1]), ("copy", list), ("sort", lambda s: sorted(s, key=int))]
)
def test_sequence_task_targets(name, relation):
    task = get_task(name, vocab_size=12, min_len=1, max_len=16)
    lengths = set()
    for src, tgt in task.examples("train", 500, seed=1):
        assert tgt == relation(src)
        assert all(0 <= int(s) < 12 for s in src)
        lengths.add(len(src))
    assert lengths == set(range(1, 17))


def test_dates_targets_are_the_iso_form_of_the_written_date():
    task = get_task("dates")
    for src, tgt in task.examples("train", 500, seed=0):
        iso = "".join(tgt)
        date = datetime.date.fromisoformat(iso)  # raises if not a valid ISO date
        assert datetime.date(1950, 1, 1) <= date <= datetime.date(2049, 12, 31)
        text = "".join(src).lower()
        assert str(date.year % 100).zfill(2) in text  # the year is written in every format
        assert len(src) <= task.max_src_len


def test_dates_cover_many_formats_including_the_issue_examples():
    task = get_task("dates")
    texts = ["".join(s) for s, _ in task.examples("train", 2000, seed=0)]
    assert any("/" in t for t in texts) and any("," in t for t in texts) and any("." in t for t in texts)
    assert any(t[0].isupper() for t in texts) and any(t.islower() for t in texts)


def test_batch_pads_and_adds_bos_and_eos():
    task = get_task("reverse")
    examples = [(["1", "2", "3"], ["3", "2", "1"]), (["4"], ["4"])]
    src, tgt_in, tgt_out = task.batch(examples)
    one, two, three, four = (task.src_vocab.encode([c])[0] for c in "1234")
    assert src.tolist() == [[one, two, three, EOS], [four, EOS, PAD, PAD]]
    assert tgt_in.tolist() == [[BOS, three, two, one], [BOS, four, PAD, PAD]]
    assert tgt_out.tolist() == [[three, two, one, EOS], [four, EOS, PAD, PAD]]
    assert src.dtype == torch.long


def test_vocab_decode_stops_at_eos_and_skips_specials():
    vocab = get_task("dates").tgt_vocab
    ids = [BOS, *vocab.encode(list("2026")), EOS, *vocab.encode(list("99"))]
    assert vocab.decode(ids) == list("2026")


def test_unknown_task_and_unknown_symbol_give_clear_errors():
    with pytest.raises(ValueError, match="unknown task 'nope'; choose from reverse, copy, sort, dates"):
        get_task("nope")
    with pytest.raises(ValueError, match=r"symbols \['x'\] are not in the vocabulary"):
        get_task("reverse").src_vocab.encode(["1", "x"])
    with pytest.raises(ValueError, match="unknown split"):
        get_task("copy").examples("dev", 3, 0)


def test_split_is_assigned_by_a_stable_hash_of_the_source():
    # The same source always lands in the same split, on any machine and in any process.
    task = get_task("reverse")
    for src, _ in task.examples("test", 40, seed=0):
        if len(src) == 1:  # in every split
            continue
        assert zlib.crc32("\x1f".join(src).encode()) % 10 in SPLITS["test"]


def test_sequence_sources_are_drawn_as_randrange_draws_them_so_seeds_keep_their_data():
    task = SequenceTask("reverse", vocab_size=10, min_len=1, max_len=16)
    ours, theirs = random.Random(7), random.Random(7)
    for length in (1, 5, 16):
        assert task._source(ours, length) == [str(theirs.randrange(10)) for _ in range(length)]
