"""Toy tasks generated in code: reverse, copy, sort, and dates (human-written dates to ISO).

Every task draws examples from a seeded generator and assigns each *source* string to
one split (train, validation or test) by a stable hash, so the splits are disjoint and
the same every time, however many fresh examples are drawn.

Two rules keep a split a fair sample of the task (issue 27). A split draws its lengths as
the task does: the length first, then sources of that length until one is in the split, so
no length weighs more in the test split because fewer of its sources landed there. And a
length with fewer than :data:`MIN_SPLIT_SOURCES` possible sources is not split at all: its
sources are in every split. With 10 tokens that is length 1 alone: its ten sequences would
otherwise put two in the test split (``"0"`` and ``"9"``), a test of two items that the
hash, not the model, decides.
"""

from __future__ import annotations

import datetime as _dt
import functools
import itertools
import random
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "Vocab",
    "Task",
    "SequenceTask",
    "DatesTask",
    "get_task",
    "TASKS",
    "PAD",
    "BOS",
    "EOS",
    "SPLITS",
    "MIN_SPLIT_SOURCES",
]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
SPLITS = {"train": range(0, 8), "validation": range(8, 9), "test": range(9, 10)}  # hash % 10
#: A length with fewer possible sources than this is in every split (see the module's docstring).
MIN_SPLIT_SOURCES = 100


@dataclass(frozen=True)
class Vocab:
    """Symbols <-> ids, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2 first."""

    symbols: tuple[str, ...]

    @classmethod
    def from_symbols(cls, symbols: Iterable[str]) -> Vocab:
        return cls(SPECIALS + tuple(symbols))

    def __len__(self) -> int:
        return len(self.symbols)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.symbols)}

    def encode(self, symbols: list[str]) -> list[int]:
        index = self._index
        unknown = sorted({s for s in symbols if s not in index or s in SPECIALS})
        if unknown:
            raise ValueError(f"symbols {unknown} are not in the vocabulary {list(self.symbols[3:])}")
        return [index[s] for s in symbols]

    def decode(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Symbols up to the first ``<eos>``, skipping ``<pad>`` and ``<bos>``."""
        out = []
        for i in (int(i) for i in ids):
            if i == EOS:
                break
            if i not in (PAD, BOS):
                out.append(self.symbols[i])
        return out


@functools.lru_cache(maxsize=64)
def _cumulative_powers(lengths: range, power: float) -> list[float]:
    """The running sums of L ** power over ``lengths``: ``random.choices``' ``cum_weights``."""
    return list(itertools.accumulate(n**power for n in lengths))


def _split_of(source: list[str]) -> str:
    bucket = zlib.crc32("\x1f".join(source).encode()) % 10
    return next(name for name, r in SPLITS.items() if bucket in r)


class Task:
    """A seq2seq task: sample (source, target) symbol lists, batch them into tensors."""

    name: str
    src_vocab: Vocab
    tgt_vocab: Vocab
    max_src_len: int
    max_tgt_len: int

    def sample(self, rng: random.Random) -> tuple[list[str], list[str]]:
        raise NotImplementedError

    def parse(self, text: str) -> list[str]:
        """Turn a user's input string into source symbols."""
        raise NotImplementedError

    def render(self, symbols: list[str]) -> str:
        """Turn target symbols into the string shown to a user."""
        raise NotImplementedError

    def sample_in(self, rng: random.Random, split: str, length_power: float = 0.0) -> tuple[list[str], list[str]]:
        """One example of ``split``: examples drawn until one is in it (``length_power``: see
        :meth:`SequenceTask.sample_in`; only 0 here)."""
        if length_power:
            raise ValueError(f"{self.name}: length_power applies to the sequence tasks only, got {length_power}")
        while True:
            src, tgt = self.sample(rng)
            if _split_of(src) == split:
                return src, tgt

    def stream(self, split: str, seed: int, length_power: float = 0.0) -> Iterator[tuple[list[str], list[str]]]:
        """An endless iterator of examples of one split, the same for the same seed.

        ``length_power`` (training only, sequence tasks): draw a source of length L with
        probability proportional to L ** length_power instead of the task's uniform lengths.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {list(SPLITS)}")
        rng = random.Random(f"{self.name}:{split}:{seed}")
        while True:
            yield self.sample_in(rng, split, length_power)

    def examples(self, split: str, n: int, seed: int) -> list[tuple[list[str], list[str]]]:
        """``n`` examples of one split, the same for the same seed."""
        return list(itertools.islice(self.stream(split, seed), n))

    def batch(self, examples: Sequence[tuple[list[str], list[str]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pad a list of examples into ``(src, tgt_in, tgt_out)`` id tensors.

        The source ends with ``<eos>`` too: a marker at the end of the real tokens lets
        attention find positions relative to the end (reversing needs exactly that).

        Shape:
            - src: :math:`(N, S)`, the source then ``<eos>``, padded with ``<pad>``
            - tgt_in: :math:`(N, T)`, ``<bos>`` then the target
            - tgt_out: :math:`(N, T)`, the target then ``<eos>``
        """
        srcs = [[*self.src_vocab.encode(s), EOS] for s, _ in examples]
        tgts = [self.tgt_vocab.encode(t) for _, t in examples]
        S, T = max(map(len, srcs)), max(map(len, tgts)) + 1
        # Padded lists first, then one tensor each: a tensor per row costs more than the model
        # step itself for small batches.
        src = torch.tensor([s + [PAD] * (S - len(s)) for s in srcs], dtype=torch.long)
        tgt_in = torch.tensor([[BOS, *t] + [PAD] * (T - 1 - len(t)) for t in tgts], dtype=torch.long)
        tgt_out = torch.tensor([[*t, EOS] + [PAD] * (T - 1 - len(t)) for t in tgts], dtype=torch.long)
        return src, tgt_in, tgt_out

    def config(self) -> dict:
        """What :func:`get_task` needs to rebuild this task (stored in checkpoints)."""
        return {"name": self.name}


class SequenceTask(Task):
    """Random token sequences; the target is the source reversed, copied or sorted.

    Args:
        name: ``"reverse"``, ``"copy"`` or ``"sort"``.
        vocab_size: number of ordinary tokens ("0", "1", ...).
        min_len, max_len: source lengths are uniform in [min_len, max_len].
    """

    def __init__(self, name: str, vocab_size: int = 10, min_len: int = 1, max_len: int = 16):
        if name not in ("reverse", "copy", "sort"):
            raise ValueError(f"SequenceTask: unknown name {name!r}")
        if not 1 <= min_len <= max_len:
            raise ValueError(f"SequenceTask: need 1 <= min_len <= max_len, got {min_len}, {max_len}")
        self.name, self.vocab_size, self.min_len, self.max_len = name, vocab_size, min_len, max_len
        self.symbols = [str(i) for i in range(vocab_size)]
        self.src_vocab = self.tgt_vocab = Vocab.from_symbols(self.symbols)
        self.max_src_len = self.max_tgt_len = max_len

    def sample(self, rng):
        return self._example(self._source(rng, rng.randint(self.min_len, self.max_len)))

    def _source(self, rng: random.Random, length: int) -> list[str]:
        # rng.choice(symbols) draws what str(rng.randrange(vocab_size)) would, for less time.
        return [rng.choice(self.symbols) for _ in range(length)]

    def sample_in(self, rng, split, length_power=0.0):
        """One example of ``split``: the length first, as :meth:`sample` draws it, then sources
        of that length until one is in the split (or any, for a length too short to split).

        With ``length_power`` p != 0 the length L is drawn with probability proportional to
        L ** p: a training recipe's choice, which :func:`course_lib.training.train` applies to
        the training split only, so that evaluation keeps the task's uniform lengths.
        """
        if length_power:
            lengths = range(self.min_len, self.max_len + 1)
            length = rng.choices(lengths, cum_weights=_cumulative_powers(lengths, length_power))[0]
        else:
            length = rng.randint(self.min_len, self.max_len)
        for _ in range(100_000):
            src = self._source(rng, length)
            if self.vocab_size**length < MIN_SPLIT_SOURCES or _split_of(src) == split:
                return self._example(src)
        raise RuntimeError(f"{self.name}: no source of length {length} found in split {split!r}")

    def _example(self, src: list[str]) -> tuple[list[str], list[str]]:
        if self.name == "reverse":
            return src, src[::-1]
        if self.name == "sort":
            return src, sorted(src, key=int)
        return src, list(src)

    def parse(self, text):
        return text.split()

    def render(self, symbols):
        return " ".join(symbols)

    def config(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "min_len": self.min_len, "max_len": self.max_len}


_MONTHS = ("january february march april may june july august september october november december").split()
_DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# Each format turns a date into text. Two-digit years are read as 1950-2049, which is
# exactly the range of dates drawn, so every format is unambiguous.
_DATE_FORMATS = (
    lambda d: f"{d.day} {_MONTHS[d.month - 1][:3].title()} {d.year}",  # 21 Nov 2026
    lambda d: f"{_MONTHS[d.month - 1]} {d.day}, {d.year}",  # november 21, 2026
    lambda d: f"{d.day:02d}/{d.month:02d}/{d.year % 100:02d}",  # 21/11/26
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 21.11.2026
    lambda d: (
        f"{_DAYS[d.weekday()].title()}, {d.day} {_MONTHS[d.month - 1].title()} {d.year}"
    ),  # Saturday, 21 November 2026
    lambda d: f"{_MONTHS[d.month - 1][:3]} {d.day} {d.year}",  # nov 21 2026
    lambda d: f"{d.day} {_MONTHS[d.month - 1].upper()} {d.year}",  # 21 NOVEMBER 2026
    lambda d: f"{d.year}/{d.month}/{d.day}",  # 2026/11/21
    lambda d: f"{d.day:02d}-{_MONTHS[d.month - 1][:3].title()}-{d.year % 100:02d}",  # 21-Nov-26
    lambda d: f"the {_ordinal(d.day)} of {_MONTHS[d.month - 1]} {d.year}",  # the 21st of november 2026
    lambda d: f"{_MONTHS[d.month - 1].title()} {_ordinal(d.day)} {d.year}",  # November 21st 2026
)
_FIRST_DATE, _LAST_DATE = _dt.date(1950, 1, 1), _dt.date(2049, 12, 31)
_SRC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,./-"


class DatesTask(Task):
    """Human-written dates in many formats to ISO 8601 ("21 Nov 2026" -> "2026-11-21").

    Dates are uniform over 1950-01-01 .. 2049-12-31; the format is uniform over
    :data:`_DATE_FORMATS`. Source and target are sequences of characters.
    """

    name = "dates"

    def __init__(self):
        self.src_vocab = Vocab.from_symbols(_SRC_CHARS)
        self.tgt_vocab = Vocab.from_symbols("0123456789-")
        september = [_dt.date(2049, 9, day) for day in range(20, 27)]  # every weekday, longest month
        self.max_src_len = max(len(f(d)) for f in _DATE_FORMATS for d in september)
        self.max_tgt_len = 10

    def sample(self, rng):
        date = _FIRST_DATE + _dt.timedelta(days=rng.randrange((_LAST_DATE - _FIRST_DATE).days + 1))
        text = rng.choice(_DATE_FORMATS)(date)
        return list(text), list(date.isoformat())

    def parse(self, text):
        return list(text.strip())

    def render(self, symbols):
        return "".join(symbols)


TASKS = ("reverse", "copy", "sort", "dates")


def get_task(name: str, **kwargs: int) -> Task:
    """Build a task by name: ``reverse``, ``copy``, ``sort`` (kwargs as :class:`SequenceTask`) or ``dates``."""
    if name == "dates":
        return DatesTask()
    if name in ("reverse", "copy", "sort"):
        return SequenceTask(name, **kwargs)
    raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
