"""Look-alike submissions: winnowed fingerprints of the graded functions, as MOSS finds them.

Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document fingerprinting"
(SIGMOD 2003). Student code is only read with :mod:`tokenize`; nothing is run or evaluated.

- **Normalisation.** Comments, blank lines, line breaks inside brackets, backslash
  continuations and spacing leave no token. A statement made only of string literals (a
  docstring, or a string used as a comment) is dropped. Formatting that black and people differ
  on is undone: a trailing comma before a closing bracket, redundant parentheses around a whole
  right-hand side (after ``= += return yield in if elif while del``), ``class A():``,
  ``a; b`` and ``if c: a`` on one line. Every literal (number, string, implicitly concatenated
  strings) becomes one ``<lit>`` token and every identifier the student chooses one ``<id>``
  token. Kept as written: keywords, operators, brackets, the block structure (``<nl>``,
  ``<in>``, ``<de>``), every name right after ``.`` (``torch.einsum``, ``.transpose``), Python's
  builtins (``range``, ``len``, ``float``) and the module names in :data:`MODULES`. So renaming
  ``scores`` to ``s`` changes nothing, while ``torch.einsum``, ``@`` and a loop stay different.
- **Fingerprints.** Hashes of the k-grams of normalised tokens (a Rabin-Karp rolling hash over
  blake2b hashes of the tokens: the same on every machine and run), robustly winnowed with a
  window of ``W`` k-grams: any match of at least ``t = W + K - 1`` normalised tokens
  (:data:`GUARANTEE`) shares a fingerprint; none shorter than ``K`` does.
- **What is compared.** Per graded function, the text records store (:mod:`.compared`): the
  function, then the notebook's own helpers it reaches, so a one-line wrapper is compared by
  what it wraps. Fingerprints are matched only within the same graded function.
- **Provided text never counts** (:mod:`.lookalike_regions`). Every k-gram of the release (the
  starter stubs and every code cell of the exercise notebook: signatures, docstrings, comments,
  provided helpers), not only its winnowed ones, is excluded. A fingerprint whose k-gram touches
  a line that is a line of a starter stub (the signature, the docstring, the placeholder) is
  dropped too, and no region runs across one: a provided docstring is never highlighted.
  Between students, the solution's fingerprints (MOSS's base file) and those in more than
  ``common`` of the submissions (at least :data:`COMMON_FLOOR`: idioms every correct solution
  has, like MOSS's ``-m``) are dropped too. Against the solution itself (the pair with
  :data:`REFERENCE`) only the provided text is dropped.
- **Similarity** of two submissions: shared distinct kept fingerprints / max(the distinct kept
  fingerprints of the smaller one, :data:`EVIDENCE`). So a copy inside a longer submission
  still scores 1, and **tiny code is no evidence**: code with fewer than ``EVIDENCE = 16``
  kept fingerprints scores at most its size / 16. Measured on the course's own functions
  (solutions/*.ipynb, provided text excluded): a one-line body keeps 1 (``return MyPE(d)(x)``)
  to 7 (a chain of four method calls), so two identical one-liners score at most 7/16, under
  :data:`THRESHOLD`; two identical statements (a stable softmax) keep 10 and score 0.625; a
  short function keeps 3 to 18 (``dot_score`` 3, ``merge_heads`` 7,
  ``scaled_dot_product_attention`` 18), and a copy of one alone reaches 0.5 from 8; a whole
  assignment's solution keeps 20 (05, layer norm) to 122 (07), so a copy of any real
  submission is never scaled down. Submissions with fewer than :data:`MIN_FINGERPRINTS` kept
  fingerprints (blanks) are never paired. Candidate pairs come from an inverted index
  (fingerprint -> submissions), not from comparing all pairs.

A pair is evidence for a person to look at, not a verdict: short functions that have one natural
form look alike without any copying.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import keyword
import math
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any

from .lookalike_regions import Gram, Printed, Region, printed, provided_lines, regions

__all__ = [
    "REFERENCE",
    "EVIDENCE",
    "K",
    "W",
    "GUARANTEE",
    "MODULES",
    "KEPT_NAMES",
    "Region",
    "Pair",
    "normalise",
    "fingerprints",
    "find_lookalikes",
]

#: The name of the solution in a :class:`Pair`.
REFERENCE = "(reference solution)"
#: Normalised tokens per k-gram.
K = 6
#: Winnowing window, in k-grams.
W = 4
#: Every match of at least this many normalised tokens shares a fingerprint.
GUARANTEE = W + K - 1
#: The smallest similarity :func:`find_lookalikes` reports by default.
THRESHOLD = 0.5
#: Fingerprints in more than this share of the submissions are common idioms.
COMMON = 0.1
#: ... but a fingerprint in at most this many submissions is never common (small classes).
COMMON_FLOOR = 5
#: Submissions with fewer kept fingerprints than this (blanks) are not compared.
MIN_FINGERPRINTS = 4
#: Below this many kept fingerprints, a submission is too small to be evidence: a pair's similarity
#: is its shared fingerprints over max(the smaller submission's kept fingerprints, EVIDENCE).
EVIDENCE = 16

#: Module names (and their usual aliases) kept as written: ``torch.sum`` is not ``np.sum``.
MODULES = frozenset(
    {"torch", "nn", "F", "functional", "math", "np", "numpy", "einops", "scipy", "itertools", "functools", "operator"}
)
#: Every name kept as written (not replaced by ``<id>``), besides keywords and attributes.
KEPT_NAMES = MODULES | frozenset(n for n in dir(builtins) if not n.startswith("_"))

_LIT, _ID, _NL, _IN, _DE = "<lit>", "<id>", "<nl>", "<in>", "<de>"
_COMPOUND = frozenset({"if", "elif", "else", "for", "while", "with", "try", "except", "finally", "def", "class"})
_BEFORE_REDUNDANT = frozenset({"=", "return", "yield", "in", "if", "elif", "while", "del"}) | frozenset(
    op + "=" for op in ("+", "-", "*", "/", "//", "%", "@", "&", "|", "^", ">>", "<<", "**")
)
_CLOSERS = frozenset({")", "]", "}"})
_SKIPPED = frozenset({tokenize.ENCODING, tokenize.COMMENT, tokenize.NL, tokenize.ENDMARKER})
_P = (1 << 61) - 1  # a Mersenne prime: the rolling hash's modulus
_B = 1_000_003


@dataclass(frozen=True)
class Pair:
    """Two look-alike submissions (``b`` may be :data:`REFERENCE`)."""

    a: str
    b: str
    similarity: float
    shared: int
    regions: tuple[Region, ...]

    def to_dict(self) -> dict[str, Any]:
        """The pair as plain JSON data."""
        return {
            "a": self.a,
            "b": self.b,
            "similarity": self.similarity,
            "shared": self.shared,
            "regions": [
                {"function": r.function, "a_lines": list(r.a_lines), "b_lines": list(r.b_lines)} for r in self.regions
            ],
        }


def normalise(source: str) -> list[tuple[str, int]]:
    """The normalised tokens of ``source``, each with the source line it came from.

    Args:
        source: Python source text (one function, or any module text).

    Returns:
        ``(token, line)`` pairs (module docstring explains the rules).

    Raises:
        ValueError: ``source`` does not tokenize (a syntax error).
    """
    out: list[tuple[str, int]] = []
    line: list[tokenize.TokenInfo] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in _SKIPPED:
                continue
            if tok.type == tokenize.ERRORTOKEN:
                if tok.string.strip():
                    raise ValueError(f"source: does not tokenize (line {tok.start[0]}: {tok.string!r})")
            elif tok.type == tokenize.NEWLINE:
                _logical_line(line, out)
                line = []
            elif tok.type == tokenize.INDENT:
                out.append((_IN, tok.start[0]))
            elif tok.type == tokenize.DEDENT:
                out.append((_DE, out[-1][1] if out else tok.start[0]))
            else:
                line.append(tok)
    except (tokenize.TokenError, SyntaxError) as e:
        raise ValueError(f"source: does not tokenize ({e})") from None
    _logical_line(line, out)
    return out


def _logical_line(toks: list[tokenize.TokenInfo], out: list[tuple[str, int]]) -> None:
    """Append one logical line's statements; ``if c: a; b`` comes out as its block form."""
    if not toks:
        return
    colon = _header_colon(toks) if toks[0].string in _COMPOUND or toks[0].string == "async" else None
    if colon is None or colon == len(toks) - 1:
        for stmt in _split(toks, ";"):
            _statement(stmt, out)
        return
    _statement(toks[: colon + 1], out)
    out.append((_IN, toks[colon + 1].start[0]))
    for stmt in _split(toks[colon + 1 :], ";"):
        _statement(stmt, out)
    out.append((_DE, out[-1][1]))


def _header_colon(toks: list[tokenize.TokenInfo]) -> int | None:
    """The index of a compound statement header's ``:`` (not a lambda's, not in brackets)."""
    depth = lambdas = 0
    for i, t in enumerate(toks):
        s = t.string
        if t.type != tokenize.OP and s != "lambda":
            continue
        if s in "([{":
            depth += 1
        elif s in _CLOSERS:
            depth -= 1
        elif depth == 0 and s == "lambda":
            lambdas += 1
        elif depth == 0 and s == ":":
            if not lambdas:
                return i
            lambdas -= 1
    return None


def _split(toks: list[tokenize.TokenInfo], sep: str) -> Iterator[list[tokenize.TokenInfo]]:
    """``toks`` split at ``sep`` outside brackets (empty parts left out)."""
    depth, start = 0, 0
    for i, t in enumerate(toks):
        if t.type == tokenize.OP:
            if t.string in "([{":
                depth += 1
            elif t.string in _CLOSERS:
                depth -= 1
            elif depth == 0 and t.string == sep:
                if i > start:
                    yield toks[start:i]
                start = i + 1
    if start < len(toks):
        yield toks[start:]


def _statement(toks: list[tokenize.TokenInfo], out: list[tuple[str, int]]) -> None:
    """Append one simple statement or header, normalised, and its ``<nl>``."""
    if all(t.type == tokenize.STRING for t in toks):
        return  # a docstring, or a string used as a comment
    toks = _drop_redundant(toks)
    prev = ""
    for i, t in enumerate(toks):
        s, typ = t.string, t.type
        if typ in (tokenize.STRING, tokenize.NUMBER):
            if typ == tokenize.STRING and i and toks[i - 1].type == tokenize.STRING:
                continue  # "a" "b" is one literal
            s = _LIT
        elif typ == tokenize.NAME and not (prev == "." or keyword.iskeyword(s) or s in KEPT_NAMES):
            s = _ID
        out.append((s, t.start[0]))
        prev = t.string
    out.append((_NL, toks[-1].start[0]))


def _drop_redundant(toks: list[tokenize.TokenInfo]) -> list[tokenize.TokenInfo]:
    """``toks`` without trailing commas, parentheses around a whole right-hand side or condition,
    nor ``class A():``'s."""
    toks = [
        t for t, after in zip(toks, toks[1:] + toks[:1], strict=True) if t.string != "," or after.string not in _CLOSERS
    ]
    if len(toks) > 3 and toks[0].string == "class" and [t.string for t in toks[-3:]] == ["(", ")", ":"]:
        return toks[:-3] + toks[-1:]
    while True:
        for i in range(1, len(toks)):
            if toks[i].string != "(" or toks[i - 1].string not in _BEFORE_REDUNDANT:
                continue
            j = _closing(toks, i)
            last = len(toks) - 1
            if j == last or (j == last - 1 and toks[last].string == ":"):
                toks = toks[:i] + toks[i + 1 : j] + toks[j + 1 :]
                break
        else:
            return toks


def _closing(toks: list[tokenize.TokenInfo], i: int) -> int:
    """The index of the bracket that closes ``toks[i]`` (-1 if none)."""
    depth = 0
    for j in range(i, len(toks)):
        s = toks[j].string
        if toks[j].type != tokenize.OP:
            continue
        if s in "([{":
            depth += 1
        elif s in _CLOSERS:
            depth -= 1
            if depth == 0:
                return j
    return -1


@lru_cache(maxsize=1 << 16)
def _token_value(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big") % _P


def _grams(source: str, k: int, window: int) -> list[Gram]:
    """The winnowed fingerprints of ``source`` as ``(hash, first line, last line, position)``, in
    order; ``position`` is the k-gram's index in the normalised tokens."""
    toks = normalise(source)
    hashes = _hashes(toks, k)
    return [(hashes[i], toks[i][1], toks[i + k - 1][1], i) for i in _winnow(hashes, window)] if hashes else []


def _hashes(toks: list[tuple[str, int]], k: int) -> list[int]:
    """The rolling hash of every k-gram of ``toks``, in order (none when fewer than ``k``)."""
    n = len(toks) - k + 1
    if n <= 0:
        return []
    values = [_token_value(t) for t, _ in toks]
    top = pow(_B, k - 1, _P)
    h = 0
    for v in values[:k]:
        h = (h * _B + v) % _P
    hashes = [h]
    for i in range(1, n):
        h = ((h - values[i - 1] * top) * _B + values[i + k - 1]) % _P
        hashes.append(h)
    return hashes


def _winnow(hashes: list[int], window: int) -> list[int]:
    """Robust winnowing: the positions of each window's minimum (the rightmost one, unless the
    one picked for the previous window is still in this window and minimal)."""
    w = min(window, len(hashes))
    picked: list[int] = []
    last = -1
    for start in range(len(hashes) - w + 1):
        win = hashes[start : start + w]
        m = min(win)
        if last >= start and hashes[last] == m:
            continue
        last = start + w - 1 - win[::-1].index(m)
        picked.append(last)
    return picked


def fingerprints(source: str, k: int = K, window: int = W) -> list[tuple[int, int]]:
    """(hash, line) of the winnowed fingerprints of one function's source.

    Args:
        source: the function's source text.
        k: normalised tokens per k-gram.
        window: the winnowing window, in k-grams.

    Returns:
        ``(hash, line)`` per fingerprint in source order; ``line`` (1-based) is where its
        k-gram starts. Empty when the source has fewer than ``k`` normalised tokens.

    Raises:
        TypeError: ``source`` is not a string.
        ValueError: ``source`` does not tokenize, or ``k`` or ``window`` is below 1.
    """
    if not isinstance(source, str):
        raise TypeError(f"source: expected str, got {type(source).__name__}")
    for name, value in (("k", k), ("window", window)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    return [(h, first) for h, first, _, _ in _grams(source, k, window)]


_Prints = dict[str, Printed]  # graded function -> its fingerprints
_Key = tuple[str, int]  # (graded function, hash)


def find_lookalikes(
    sources: Mapping[str, Mapping[str, str]],
    *,
    starter: Mapping[str, str],
    solution: Mapping[str, str],
    provided: Sequence[str] = (),
    threshold: float = THRESHOLD,
    common: float = COMMON,
) -> list[Pair]:
    """Pairs at or above threshold, most similar first (students' pairs and pairs with REFERENCE).

    Args:
        sources: student -> graded function -> that function's source (with the helpers it
            reaches: :mod:`.compared`). A source that does not tokenize is skipped (the
            student's other functions still count).
        starter: graded function -> the starter stub's source (``{}`` allowed): provided text.
        solution: graded function -> the solution's source (``{}`` allowed).
        provided: more text of the release (the exercise notebook's code cells): none of its
            k-grams counts.
        threshold: the smallest similarity reported, in [0, 1].
        common: fingerprints in more than this share of the (non-blank) submissions are
            ignored between students, in (0, 1].

    Returns:
        :class:`Pair` objects sorted by similarity, then shared fingerprints, then names.
        Students' pairs have ``a < b``; a pair with the solution has ``b == REFERENCE``.
    """
    _check(sources, starter, solution, provided, threshold, common)
    cache: dict[str, Printed] = {}
    lines = frozenset(line.strip() for src in starter.values() for line in src.split("\n"))
    base = _every_hash([*starter.values(), *provided])
    sol_prints = _prints_of(solution, cache, lines)
    sol_keys = _keys(sol_prints, base)
    prints = {s: _prints_of(functions, cache, lines) for s, functions in sources.items()}
    own = {s: _keys(p, base) for s, p in prints.items()}
    students = sorted(s for s in own if own[s])

    df = Counter(key for s in students for key in own[s])
    limit = max(common * len(students), COMMON_FLOOR)
    kept = {s: {key for key in own[s] if key not in sol_keys and df[key] <= limit} for s in students}
    index: defaultdict[_Key, list[int]] = defaultdict(list)
    for i, s in enumerate(students):
        if len(kept[s]) >= MIN_FINGERPRINTS:
            for key in kept[s]:
                index[key].append(i)
    counts: Counter[tuple[int, int]] = Counter()
    for ids in index.values():
        if len(ids) > 1:
            counts.update(combinations(ids, 2))

    pairs = []
    for (i, j), shared in counts.items():
        a, b = students[i], students[j]
        similarity = shared / max(min(len(kept[a]), len(kept[b])), EVIDENCE)
        if similarity >= threshold:
            pairs.append(Pair(a, b, similarity, shared, regions(prints[a], prints[b], kept[a] & kept[b], K)))
    if len(sol_keys) >= MIN_FINGERPRINTS:
        for s in students:
            both = own[s] & sol_keys
            if len(own[s]) < MIN_FINGERPRINTS or not both:
                continue
            similarity = len(both) / max(min(len(own[s]), len(sol_keys)), EVIDENCE)
            if similarity >= threshold:
                pairs.append(Pair(s, REFERENCE, similarity, len(both), regions(prints[s], sol_prints, both, K)))
    pairs.sort(key=lambda p: (-p.similarity, -p.shared, p.a, p.b))
    return pairs


def _every_hash(texts: Sequence[str]) -> set[int]:
    """The hash of every k-gram (winnowed or not) of ``texts``; a text that does not tokenize adds none."""
    out: set[int] = set()
    for text in texts:
        try:
            out.update(_hashes(normalise(text), K))
        except ValueError:
            continue
    return out


def _prints_of(functions: Mapping[str, str], cache: dict[str, Printed], lines: frozenset[str]) -> _Prints:
    """Each function's fingerprints, those touching a provided line (of ``lines``) left out
    (:func:`~.lookalike_regions.printed`); a source that does not tokenize is left out. ``cache``d by source."""
    out: _Prints = {}
    for f, src in functions.items():
        if src not in cache:
            try:
                cache[src] = printed(_grams(src, K, W), provided_lines(src, lines))
            except ValueError:
                continue
        out[f] = cache[src]
    return out


def _keys(prints: _Prints, base: set[int]) -> set[_Key]:
    return {(f, g[0]) for f, p in prints.items() for g in p.grams if g[0] not in base}


def _check(sources: Any, starter: Any, solution: Any, provided: Any, threshold: Any, common: Any) -> None:
    """A clear TypeError or ValueError for each argument of the wrong type or out of range."""
    if not isinstance(sources, Mapping):
        raise TypeError(f"sources: expected a mapping student -> functions, got {type(sources).__name__}")
    for student, functions in sources.items():
        if not isinstance(student, str):
            raise TypeError(f"sources: expected str student ids, got {type(student).__name__}")
        if student == REFERENCE:
            raise ValueError(f"sources: a student may not be named {REFERENCE!r}")
        _check_functions(f"sources[{student!r}]", functions)
    _check_functions("starter", starter)
    _check_functions("solution", solution)
    if isinstance(provided, str) or not isinstance(provided, Sequence):
        raise TypeError(f"provided: expected a sequence of str, got {type(provided).__name__}")
    for text in provided:
        if not isinstance(text, str):
            raise TypeError(f"provided: expected a sequence of str, got an item of type {type(text).__name__}")
    for name, value, low_open in (("threshold", threshold, False), ("common", common, True)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}: expected a float, got {type(value).__name__}")
        if not (0 < value <= 1 if low_open else 0 <= value <= 1) or math.isnan(value):
            raise ValueError(f"{name}: expected a number in {'(0' if low_open else '[0'}, 1], got {value!r}")


def _check_functions(name: str, functions: Any) -> None:
    if not isinstance(functions, Mapping):
        raise TypeError(f"{name}: expected a mapping function -> source, got {type(functions).__name__}")
    for f, src in functions.items():
        if not isinstance(f, str) or not isinstance(src, str):
            raise TypeError(f"{name}: expected str -> str, got {type(f).__name__} -> {type(src).__name__}")
