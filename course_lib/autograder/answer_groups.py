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
- **Near-identical** answers are merged by :func:`similarity`: the Indel similarity of their
  *token* sequences (RapidFuzz's ``Indel.normalized_similarity``, what ``fuzz.ratio`` computes,
  over words, numbers and runs of symbols), taken in the answer's order and with its sentences
  sorted, whichever is higher. Why this scorer:

  - against ``fuzz.token_set_ratio``: an answer whose words are a subset of another's scores
    100 there ("the mean can be far below the max" inside a paragraph that says much more),
    and word order is thrown away ("the max is not the mean" = "the mean is not the max");
    the sorted sentences keep the order inside each sentence;
  - against ``fuzz.ratio`` on characters: a changed word costs its letters there, so
    "overflows" / "underflows" or "can" / "cannot" cost 2-3 characters of a 300-character
    answer; over tokens each costs one token. Characters are also slow: a 400-character answer
    is 7 machine words of bit-parallel work per character, about 6 times its 70 tokens, and
    ``process.cdist`` over 1,000 such answers alone took 0.4 s;
  - edits lower it in proportion to the tokens touched. In ``benchmarks/answer_corpus.py``'s
    answers (about 50 tokens): a typo (one word of 50) gives 0.98, an added 8-token sentence
    0.93, the first sentence moved to the end 1.0 (sorted sentences), while two students
    writing the same line of reasoning in their own words score 0.5 to 0.8.

  No pair of answers is compared in Python, nor all pairs by RapidFuzz: a matrix product
  bounds every pair's score from above (below), and ``rapidfuzz.process.cpdist`` scores only
  the pairs whose bound reaches the threshold (a few per answer). The bound: a common
  subsequence uses each token at most as often as both texts have it, so
  ``LCS <= sum_t min(a_t, b_t) <= sum_t sqrt(a_t) sqrt(b_t)``, a dot product of the square
  roots of the token counts (the 200 most frequent tokens of the class counted apart, the
  rarer ones pooled in 56 columns, which only raises the bound); the similarity is
  ``2 LCS / (len a + len b)``.
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
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from rapidfuzz import process
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
#: Columns of the token-count matrix of the bound: the most frequent tokens own one each.
_WIDTH, _OWN = 256, 200
#: Rows of the bound computed at once (memory: rows x texts x 4 bytes).
_BLOCK = 1024
#: The token between sorted sentences (no text's token has this id).
_SEPARATOR = 2**62
#: Slack for float32 rounding in the bound (it only adds candidates).
_SLACK = 1e-3

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
    if "[" in text:
        text = _LINK.sub(r"\1", text)
    if "*" in text or "_" in text or "~" in text:
        text = _EMPHASIS.sub("", text)
    return text.casefold()


def normalise_answer(text: str) -> str:
    """An answer as compared: NFKC, Markdown markup and case dropped outside math and code,
    whitespace collapsed, trailing punctuation dropped.

    Args:
        text: the student's Markdown.

    Returns:
        The normalised text ("" when nothing but markup and punctuation).
    """
    text = _LINE_MARKUP.sub("", unicodedata.normalize("NFKC", text))
    if "$" not in text and "`" not in text:
        joined = _prose(text)
    else:
        parts, start = [], 0
        for m in _PROTECTED.finditer(text):
            parts.append(_prose(text[start : m.start()]))
            span = m.group()
            parts.append(span.strip("`") if span.startswith("`") else span)
            start = m.end()
        parts.append(_prose(text[start:]))
        joined = "".join(parts)
    return _TRAILING.sub("", _SPACE.sub(" ", joined).strip())


def answer_tokens(normalised: str) -> list[str]:
    """The tokens :func:`similarity` compares: words and numbers, and runs of other symbols.

    Args:
        normalised: a text from :func:`normalise_answer`.

    Returns:
        The tokens in order.
    """
    return _TOKEN.findall(normalised)


def _sentences_sorted(ids: list[int], ends: frozenset[int]) -> list[int]:
    """The token ids with the answer's sentences (split after the ids in ``ends``) sorted."""
    sentences, current = [], []
    for t in ids:
        current.append(t)
        if t in ends:
            sentences.append(current[:-1])
            current = []
    sentences.append(current)
    return [t for sentence in sorted(sentences) for t in (*sentence, _SEPARATOR)]


def _scores(ids: list[list[int]], i: np.ndarray, j: np.ndarray, ends: frozenset[int]) -> np.ndarray:
    """:func:`similarity` of the pairs ``(ids[i[k]], ids[j[k]])``, in C."""
    first, second = [ids[k] for k in i], [ids[k] for k in j]
    ordered = process.cpdist(first, second, scorer=Indel.normalized_similarity, dtype=np.float64, workers=-1)
    moved = {k: _sentences_sorted(ids[k], ends) for k in {*i.tolist(), *j.tolist()}}
    first, second = [moved[k] for k in i.tolist()], [moved[k] for k in j.tolist()]
    return np.maximum(ordered, process.cpdist(first, second, scorer=Indel.normalized_similarity, dtype=np.float64))


def _encode(tokens: list[list[str]]) -> tuple[list[list[int]], frozenset[int]]:
    """Token lists as token ids, and the ids of the tokens that end a sentence."""
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in row] for row in tokens]
    return ids, frozenset(k for t, k in vocab.items() if t[0] in ".!?")


def similarity(a: str, b: str) -> float:
    """How alike two answers are: the Indel similarity of their normalised token sequences, in
    the answers' order or with their sentences sorted, whichever is higher.

    Args:
        a: one answer (raw Markdown).
        b: the other.

    Returns:
        1 - (tokens inserted or deleted to turn one into the other) / (tokens of both), in [0, 1].
    """
    ids, ends = _encode([answer_tokens(normalise_answer(a)), answer_tokens(normalise_answer(b))])
    return float(_scores(ids, np.array([0]), np.array([1]), ends)[0])


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


def _candidates(ids: list[list[int]], threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i < j) whose similarity may reach ``threshold``: an upper bound, computed as a
    matrix product of square-rooted token counts (see the module's docstring)."""
    n = len(ids)
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=n)
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
    counts = np.bincount(flat)
    rank = np.empty_like(counts)
    rank[np.argsort(-counts, kind="stable")] = np.arange(len(counts))
    column = np.where(rank < _OWN, rank, _OWN + rank % (_WIDTH - _OWN))
    rows = np.repeat(np.arange(n), lengths)
    table = np.bincount(rows * _WIDTH + column[flat], minlength=n * _WIDTH).reshape(n, _WIDTH)
    root = np.sqrt(table).astype(np.float32)
    total = lengths.astype(np.float32) * np.float32(threshold - _SLACK)
    found_i, found_j = [], []
    for a in range(0, n, _BLOCK):
        shared = root[a : a + _BLOCK] @ root[a:].T
        i, j = np.nonzero(np.triu(2 * shared >= total[a : a + _BLOCK, None] + total[None, a:], k=1))
        found_i.append(i + a)
        found_j.append(j + a)
    if not found_i:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    return np.concatenate(found_i), np.concatenate(found_j)


def _near_pairs(tokens: list[list[str]], threshold: float) -> dict[int, dict[int, float]]:
    """Text -> {neighbour: similarity} for the pairs of texts (as tokens) at or above ``threshold``."""
    ids, ends = _encode(tokens)
    i, j = _candidates(ids, threshold)
    near: dict[int, dict[int, float]] = {}
    if not len(i):
        return near
    sims = _scores(ids, i, j, ends)
    keep = sims >= threshold
    for a, b, x in zip(i[keep].tolist(), j[keep].tolist(), sims[keep].tolist(), strict=True):
        near.setdefault(a, {})[b] = x
        near.setdefault(b, {})[a] = x
    return near


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
    near: dict[int, dict[int, float]] = {}
    if threshold < 1:
        tokens = [answer_tokens(t) for t in texts]
        fuzzy = [k for k, t in enumerate(tokens) if len(t) >= MIN_FUZZY_TOKENS]
        if len(fuzzy) > 1:
            found = _near_pairs([tokens[k] for k in fuzzy], threshold)
            near = {fuzzy[a]: {fuzzy[b]: x for b, x in row.items()} for a, row in found.items()}
    order = sorted(range(len(texts)), key=lambda k: (-len(by_text[texts[k]]), -len(near.get(k, ())), k))
    groups = []
    for members in _clusters(order, near):
        rep = members[0]
        sims = {m: 1.0 if m == rep else near[rep][m] for m in members}
        students = tuple(s for m in sorted(members, key=lambda m: (-sims[m], m)) for s in by_text[texts[m]])
        groups.append(AnswerGroup(_key(students), students, len(members) == 1, min(sims.values())))
    groups += [AnswerGroup(_key((s,)), (s,), True, 1.0) for s in alone]
    return sorted(groups, key=lambda g: (-len(g.students), min(g.students)))
