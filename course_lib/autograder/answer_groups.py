"""Answer groups: identical and near-identical free-text answers, graded once per group.

Gradescope's answer groups and PrairieLearn's manual grading let a grader grade a bucket of
alike answers at once and split off any member; this module proposes the buckets.

- **Normalisation** (:func:`normalise_answer`): Unicode NFKC; outside math and code spans,
  Markdown markup (emphasis ``* _ ~~``, headings, quotes, list bullets, link targets) dropped and
  case folded; whitespace collapsed; trailing punctuation dropped. Math (``$..$``, ``$$..$$``)
  and code spans keep their case and symbols (``$D$`` and ``$d$`` differ), only their spacing is
  collapsed. Images stay as written: the text of two pasted images is alike
  (``![image.png](attachment:image.png)``) although the pictures differ, so a caller whose
  answers carry attachments appends a digest of them to the text.
- **Identical** answers (equal normalised texts) form one group.
- **Near-identical** answers are merged by the Indel similarity of their *word* sequences
  (:func:`similarity`: RapidFuzz's ``Indel.normalized_similarity``, what ``fuzz.ratio``
  computes, over tokens: words, numbers and runs of symbols). Why this scorer:

  - against ``fuzz.token_set_ratio``: an answer whose words are a subset of another's scores
    100 there ("the mean can be far below the max" inside a paragraph that says much more),
    and word order is thrown away ("the max is not the mean" = "the mean is not the max");
  - against ``fuzz.ratio`` on characters: a changed word costs its letters there, so
    "overflows" / "underflows" or "can" / "cannot" cost 2-3 characters of a 300-character answer;
    over words each costs one word of the answer. Characters are also slow: a 400-character
    answer is 7 machine words of bit-parallel work per character, about 20 times more than its
    70 tokens, and 1,000 such answers took 0.4 s with ``process.cdist`` alone;
  - typos, an added sentence and a reordered clause lower it in proportion to the words
    touched: one misspelt word in a 40-word answer gives 0.975, an added 8-word sentence 0.91,
    a 4-word clause moved 0.9 (examples from ``benchmarks/answer_corpus.py``).

  Candidates come from ``rapidfuzz.process.cdist`` in C over one byte per token (the 200 most
  frequent tokens of the class each get their own byte, rarer ones share the rest); merging
  tokens only adds matches, so that score bounds the exact one from above and no pair above the
  threshold is lost. The exact score of the candidates is ``process.cpdist``. No Python loop
  runs over pairs.
- **Short answers** (under :data:`MIN_FUZZY_TOKENS` tokens: "yes", "no", "because it
  overflows") are grouped only when identical: there one word is the answer, and
  "because it overflows" / "because it underflows" are 0.75 apart by words but opposite.
- **Clusters**: texts are taken in a fixed order (most students first, then most near
  neighbours, then the first student's id); each one not yet placed becomes a representative
  and takes, most similar first, the unplaced neighbours that are within the threshold of the
  representative *and of every member taken so far* (complete linkage). So no chain drifts:
  with A ~ B ~ C and A far from C, A and C never share a group.
- A student in ``apart`` (split off by a grader) is always a group alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from rapidfuzz import fuzz, process
from rapidfuzz.distance import Indel

__all__ = [
    "THRESHOLD",
    "MIN_FUZZY_TOKENS",
    "AnswerGroup",
    "normalise_answer",
    "answer_tokens",
    "similarity",
    "group_answers",
]

#: The smallest word-level similarity of a member to its group (and to every other member).
THRESHOLD = 0.85
#: Answers with fewer tokens are grouped only when identical.
MIN_FUZZY_TOKENS = 10
#: Tokens that keep a byte of their own in the candidate search; the rest share the others.
_OWN_BYTES = 200
#: Rows of the candidate matrix computed at once (memory: rows x texts bytes).
_BLOCK = 2048

_PROTECTED = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$|`+[^`\n]+?`+", re.S)
_LINE_MARKUP = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?|[-+*][ \t]+|\d{1,3}[.)][ \t]+)", re.M)
_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\([^)\n]*\)")
_EMPHASIS = re.compile(r"\*+|~~|(?<!\w)_+|_+(?!\w)")
_SPACE = re.compile(r"\s+")
_TRAILING = re.compile(r"[\s.!?,;:\u2026]+$")
_TOKEN = re.compile(r"\w+|[^\w\s]+")


@dataclass(frozen=True)
class AnswerGroup:
    """Students whose answers are graded together.

    Args:
        key: stable name of the group: a short hash of its sorted member ids.
        students: the members, the representative first, then the others most similar first.
        identical: whether all members' normalised texts are equal.
        similarity: the smallest similarity of a member to the representative (1.0 when identical).
    """

    key: str
    students: tuple[str, ...]
    identical: bool
    similarity: float


def _prose(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    return _EMPHASIS.sub("", text).casefold()


def normalise_answer(text: str) -> str:
    """An answer as compared: NFKC, Markdown markup and case dropped outside math and code,
    whitespace collapsed, trailing punctuation dropped.

    Args:
        text: the student's Markdown.

    Returns:
        The normalised text ("" when nothing but markup and punctuation).
    """
    text = _LINE_MARKUP.sub("", unicodedata.normalize("NFKC", text))
    parts, start = [], 0
    for m in _PROTECTED.finditer(text):
        parts.append(_prose(text[start : m.start()]))
        span = m.group()
        parts.append(span.strip("`") if span.startswith("`") else span)
        start = m.end()
    parts.append(_prose(text[start:]))
    return _TRAILING.sub("", _SPACE.sub(" ", "".join(parts)).strip())


def answer_tokens(normalised: str) -> list[str]:
    """The tokens :func:`similarity` compares: words and numbers, and runs of other symbols.

    Args:
        normalised: a text from :func:`normalise_answer`.

    Returns:
        The tokens in order.
    """
    return _TOKEN.findall(normalised)


def _ids(token_lists: list[list[str]]) -> list[list[int]]:
    """Tokens as integers, equal for equal tokens (RapidFuzz compares integers as they are)."""
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(t, len(vocab)) for t in tokens] for tokens in token_lists]


def similarity(a: str, b: str) -> float:
    """How alike two answers are: the Indel similarity of their normalised token sequences.

    Args:
        a: one answer (raw Markdown).
        b: the other.

    Returns:
        1 - (tokens inserted or deleted to turn one into the other) / (tokens of both), in [0, 1].
    """
    ta, tb = _ids([answer_tokens(normalise_answer(a)), answer_tokens(normalise_answer(b))])
    return float(Indel.normalized_similarity(ta, tb))


def _check(answers: Mapping[str, str], apart: Collection[str], threshold: float) -> None:
    if not isinstance(answers, Mapping):
        raise TypeError(f"group_answers: answers must be a mapping student -> text, got {type(answers).__name__}")
    if isinstance(apart, str) or not isinstance(apart, Collection):
        raise TypeError(f"group_answers: apart must be a collection of student ids, got {apart!r}")
    for student, text in answers.items():
        if not isinstance(student, str):
            raise TypeError(f"group_answers: student ids must be str, got {type(student).__name__} ({student!r})")
        if not isinstance(text, str):
            raise TypeError(f"group_answers: the answer of student {student!r} must be str, got {type(text).__name__}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise ValueError(f"group_answers: threshold must be a number in (0, 1], got {threshold!r}")
    if math.isnan(threshold):
        raise ValueError("group_answers: threshold must be a number in (0, 1], got nan")


def _byte_codes(token_lists: list[list[str]]) -> list[str]:
    """Each text as one character below 256 per token (frequent tokens exact, rare ones shared)."""
    counts = Counter(t for tokens in token_lists for t in tokens)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    code = {t: chr(i if i < _OWN_BYTES else _OWN_BYTES + i % (256 - _OWN_BYTES)) for i, t in enumerate(ranked)}
    return ["".join(code[t] for t in tokens) for tokens in token_lists]


def _near_pairs(token_lists: list[list[str]], threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs (i < j) of texts whose similarity is at least ``threshold``, with it."""
    coded = _byte_codes(token_lists)
    cutoff = threshold * 100 - 1e-6
    rows, cols = [], []
    for a in range(0, len(coded), _BLOCK):
        block = coded[a : a + _BLOCK]
        scores = process.cdist(block, coded[a:], scorer=fuzz.ratio, score_cutoff=cutoff, dtype=np.uint8, workers=-1)
        i, j = np.nonzero(np.triu(scores, k=1))
        rows.append(i + a)
        cols.append(j + a)
    i = np.concatenate(rows) if rows else np.zeros(0, dtype=np.intp)
    j = np.concatenate(cols) if cols else np.zeros(0, dtype=np.intp)
    if not len(i):
        return i, j, np.zeros(0)
    ids = _ids(token_lists)
    exact = process.cpdist(
        [ids[k] for k in i], [ids[k] for k in j], scorer=Indel.normalized_similarity, dtype=np.float64
    )
    keep = exact >= threshold
    return i[keep], j[keep], exact[keep]


def _clusters(order: list[int], near: dict[int, dict[int, float]]) -> list[list[int]]:
    """Complete-linkage clusters around representatives taken in ``order``.

    Args:
        order: every text's index, in the order representatives are chosen.
        near: text -> {neighbour: similarity} for the pairs at or above the threshold.

    Returns:
        The clusters, each its representative first.
    """
    placed: set[int] = set()
    out = []
    for r in order:
        if r in placed:
            continue
        placed.add(r)
        members = [r]
        around = near.get(r, {})
        # most similar first; text indices follow the first student's id, so ties are fixed
        for c in sorted((c for c in around if c not in placed), key=lambda c: (-around[c], c)):
            if all(m in near[c] for m in members):
                members.append(c)
                placed.add(c)
        out.append(members)
    return out


def _key(students: tuple[str, ...]) -> str:
    return hashlib.blake2b(json.dumps(sorted(students)).encode(), digest_size=6).hexdigest()


def group_answers(
    answers: Mapping[str, str], *, apart: Collection[str] = (), threshold: float = THRESHOLD
) -> list[AnswerGroup]:
    """Group students whose answers are identical or near-identical (see the module's docstring).

    Args:
        answers: student id -> answer text (Markdown); blank answers are left out by the caller.
        apart: students a grader split off: each is a group alone (ids not in ``answers`` are ignored).
        threshold: the smallest :func:`similarity` of a member to the representative and to every
            other member, in (0, 1]; 1 groups identical answers only.

    Returns:
        The groups, largest first, then by their smallest student id; every student of
        ``answers`` in exactly one. The same for the same input, whatever its order.

    Raises:
        TypeError: ``answers`` is no mapping, or a student id or an answer is not a str.
        ValueError: ``threshold`` is not in (0, 1].
    """
    _check(answers, apart, threshold)
    split = set(apart)
    alone = sorted(s for s in answers if s in split)
    by_text: dict[str, list[str]] = {}
    for student in sorted(s for s in answers if s not in split):
        by_text.setdefault(normalise_answer(answers[student]), []).append(student)
    texts = list(by_text)
    tokens = [answer_tokens(t) for t in texts]
    fuzzy = [k for k, t in enumerate(tokens) if len(t) >= MIN_FUZZY_TOKENS] if threshold < 1 else []
    i, j, sim = _near_pairs([tokens[k] for k in fuzzy], threshold) if len(fuzzy) > 1 else (np.zeros(0, int),) * 3
    index = np.asarray(fuzzy, dtype=np.intp)
    near: dict[int, dict[int, float]] = {}
    for a, b, x in zip(index[i.astype(np.intp)].tolist(), index[j.astype(np.intp)].tolist(), sim.tolist(), strict=True):
        near.setdefault(a, {})[b] = x
        near.setdefault(b, {})[a] = x
    order = sorted(range(len(texts)), key=lambda k: (-len(by_text[texts[k]]), -len(near.get(k, ())), k))
    groups = []
    for members in _clusters(order, near):
        rep = members[0]
        sims = {m: 1.0 if m == rep else near[rep][m] for m in members}
        students = tuple(s for m in sorted(members, key=lambda m: (-sims[m], m)) for s in by_text[texts[m]])
        groups.append(AnswerGroup(_key(students), students, len(members) == 1, min(sims.values())))
    groups += [AnswerGroup(_key((s,)), (s,), True, 1.0) for s in alone]
    return sorted(groups, key=lambda g: (-len(g.students), min(g.students)))
