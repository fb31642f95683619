"""A class's answers to one "think about it" question, made like a real class (for benchmarks).

The question (exercises/02_self_attention.ipynb, ``ch02-nb-mean-shift``): "Subtracting the *mean*
score is also a constant shift, so it gives the same softmax mathematically. Why is it not a
safe choice? Find scores for which it overflows."

No class's answers are at hand, so **every proportion here is an assumption**, chosen to be
plausible, not measured:

- :data:`BLANK` 2% leave it blank (""; a caller drops these before grouping) and
  :data:`LOW_EFFORT` 3% write "idk", "not sure", "?" and the like;
- :data:`COPIERS` 12% copy one friend's answer verbatim (only the markup, case or spacing may
  differ), in clusters of 2 to 25 students (sizes drawn from a Zipf-like law, most clusters 2-3;
  the issue that asked for answer groups found 25 identical answers in one class, so one cluster
  of 25 is planted from 500 students up);
- :data:`PARAPHRASERS` 6% copy a friend and edit lightly: a typo or two, a synonym, a reordered
  clause, an added sentence (one to three of these edits each);
- the rest write their own from one of seven lines of reasoning (:data:`REASONS`: five right,
  two wrong), each sentence drawn from several wordings, with optional openers, examples with
  their own numbers and extra sentences; :data:`MATH` 30% of them write some math as ``$..$``.

Lengths come out between about 20 characters ("idk" aside) and 800. :func:`realistic_class`
also returns the truth: which students share a source (a friend's answer copied or edited).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

__all__ = ["AnswerCorpus", "realistic_answers", "realistic_class"]

BLANK, LOW_EFFORT, COPIERS, PARAPHRASERS, MATH = 0.02, 0.03, 0.12, 0.06, 0.30

_LOW = ("idk", "not sure", "?", "I don't know", "no idea", "IDK.", "skip", "not sure tbh", "...", "?? ")

_OPENERS = ("", "", "", "I think ", "Basically, ", "Because ", "The problem is that ", "Well, ", "In short, ")
_SYN = {
    "{big}": ("huge", "very large", "large", "big", "enormous"),
    "{over}": ("overflows", "overflows to inf", "blows up to inf", "becomes inf", "goes to infinity"),
    "{far}": ("far above", "much larger than", "way above", "a lot bigger than", "much higher than"),
    "{score}": ("score", "logit", "value", "entry"),
    "{nan}": ("nan", "NaN", "not a number"),
    "{so}": ("so", "therefore", "which means", "and then", "hence"),
}

#: Lines of reasoning: each a list of sentence slots, each slot a list of wordings.
REASONS: dict[str, list[list[str]]] = {
    "max_far_above_mean": [
        [
            "the largest {score} can lie {far} the mean, {so} after subtracting the mean it is still {big}",
            "subtracting the mean does not bound the top: the max {score} can be {far} the mean",
            "the mean only centres the scores, the biggest {score} can still be {far} it",
            "after subtracting the mean the largest exponent is max minus mean, which can be {big}",
        ],
        [
            "and exp of it {over}",
            "{so} exp(x - mean) {over} for the largest entry",
            "and then the exponential {over} in float32 above about 88",
            "{so} e^x {over} and the softmax gives {nan}",
        ],
    ],
    "example_numbers": [
        [
            "take scores ({a}, 0, -{a}): the mean is 0 so nothing changes and exp({a}) {over}",
            "for example with ({a}, 0, -{a}) the mean is zero, the shift does nothing and e^{a} {over}",
            "scores like [0, -{a}, -{a}] have a mean of about -{b}, {so} the first exponent is about {b} and {over}",
            "e.g. x = (0, -{a}, -{a}): subtracting the mean gives roughly ({b}, -{c}, -{c}) and exp({b}) {over}",
        ],
    ],
    "max_bounds_both": [
        [
            "with the max every exponent is at most 0, {so} no term exceeds 1",
            "subtracting the max makes all exponents <= 0 so nothing can overflow",
            "the max shift guarantees x_i - m <= 0 for every i",
        ],
        [
            "and the largest term is exactly 1, {so} the denominator is at least 1",
            "and one term is e^0 = 1 so the sum never underflows to 0",
            "plus the denominator is >= 1, no division by zero",
        ],
        [
            "the mean gives neither guarantee",
            "the mean does not give these bounds",
            "with the mean neither holds",
        ],
    ],
    "masked_minus_inf": [
        [
            "with a masked {score} of -inf the mean itself is -inf",
            "if one entry is masked to -inf, the mean is -inf too",
            "masking puts -inf in the row and then the mean is -inf",
        ],
        [
            "{so} x - mean is +inf for every finite entry and {nan} for the masked one",
            "and subtracting -inf gives inf everywhere and inf - inf = {nan}",
            "{so} the whole row turns into {nan}",
        ],
    ],
    "denominator_underflow": [
        [
            "if all scores are far below the mean after the shift, every exp underflows to 0",
            "the exponents can all be very negative, {so} the denominator underflows to 0 and we divide by zero",
            "nothing guarantees a term of size 1, {so} the sum can become 0 and 0/0 is {nan}",
        ],
    ],
    "wrong_not_constant": [
        [
            "the mean is not a constant, it depends on the scores, {so} the softmax changes",
            "subtracting the mean changes the probabilities because the mean is different for every row",
            "it is not the same softmax since the mean is computed from the inputs",
        ],
    ],
    "wrong_is_safe": [
        [
            "it is actually safe, the mean is always smaller than the max {so} nothing overflows",
            "I think the mean is fine, the values get centred around 0 {so} exp stays small",
            "centring the scores at 0 keeps them small, it only fails for {big} inputs",
        ],
    ],
}
_REASON_WEIGHTS = {"max_far_above_mean": 30, "example_numbers": 20, "max_bounds_both": 15, "masked_minus_inf": 8}
_REASON_WEIGHTS |= {"denominator_underflow": 7, "wrong_not_constant": 12, "wrong_is_safe": 8}
_EXTRA = (
    "float32 overflows above about 88.7",
    "that is why the max is used instead",
    "the book says to subtract the max",
    "inf / inf is {nan}",
    "I checked it in the notebook and got {nan}",
    "the softmax is the same in exact math but not in floating point",
    "torch.softmax subtracts the max internally",
    "mathematically any constant cancels out",
)
_MATH_FORMS = (
    ("exp(x - mean)", "$e^{x_i - \\bar{x}}$"),
    ("e^x", "$e^{x}$"),
    ("x_i - m <= 0", "$x_i - m \\le 0$"),
    ("e^0 = 1", "$e^0 = 1$"),
    ("exp({a})", "$e^{{a}}$"),
)
#: Each student's own words: one choice per line, kept through the whole answer (first = as written).
_STYLE = (
    ("subtracting", "taking away", "removing", "if we subtract"),
    ("the mean", "the average", "the mean value", "the row mean"),
    ("the max", "the maximum", "the largest score", "the row max"),
    ("scores", "logits", "inputs", "values"),
    ("because", "since", "as"),
    ("is not", "isn't", "is never"),
    ("does not", "doesn't", "won't"),
    ("can", "could", "may", "might"),
    ("every", "each", "any"),
    ("float32", "fp32", "single precision"),
    ("denominator", "normaliser", "sum below"),
    ("exponent", "power", "argument of exp"),
    ("very", "really", "extremely", "quite"),
    ("still", "also", "even then"),
    ("largest", "biggest", "highest", "top"),
    ("gives", "produces", "results in", "returns"),
    ("the whole row", "all of the row", "every output"),
    ("changes", "is different", "will change"),
)
_TYPOS = {"the": "teh", "mean": "maen", "overflows": "overflwos", "largest": "largets", "because": "becuase"}


@dataclass(frozen=True)
class AnswerCorpus:
    """A made-up class's answers and where they came from.

    Args:
        answers: student id -> answer (Markdown; "" when blank).
        sources: student id -> the id of the student whose answer it copies or edits (itself when
            written alone).
    """

    answers: dict[str, str]
    sources: dict[str, str]

    def clusters(self) -> list[frozenset[str]]:
        """The planted copy clusters: students sharing a source, two or more, largest first.

        Returns:
            The clusters, each the source and its copiers and editors.
        """
        by: dict[str, set[str]] = {}
        for student, source in self.sources.items():
            by.setdefault(source, set()).add(student)
        return sorted((frozenset(s) for s in by.values() if len(s) > 1), key=lambda c: (-len(c), min(c)))


def _fill(text: str, rng: random.Random, numbers: dict[str, int]) -> str:
    for slot, words in _SYN.items():
        while slot in text:
            text = text.replace(slot, rng.choice(words), 1)
    return text.format(**numbers)


def _own(rng: random.Random) -> str:
    """One answer written alone: a line of reasoning, worded by this student."""
    reason = rng.choices(list(_REASON_WEIGHTS), weights=list(_REASON_WEIGHTS.values()))[0]
    a = rng.choice((100, 500, 1000, 2000, 5000, 10000, 10**4, 300, 800))
    numbers = {"a": a, "b": round(2 * a / 3), "c": round(a / 3)}
    slots = REASONS[reason]
    parts = [_fill(rng.choice(slots[0]), rng, numbers)]
    parts += [_fill(rng.choice(slot), rng, numbers) for slot in slots[1:] if rng.random() < 0.85]
    long = rng.random() < 0.15  # a few write at length: more lines of reasoning, more asides
    for other in rng.sample([r for r in REASONS if r != reason], 3 if long else int(rng.random() < 0.5)):
        parts += [_fill(rng.choice(slot), rng, numbers) for slot in REASONS[other]]
    parts += [
        _fill(e, rng, numbers) for e in rng.sample(_EXTRA, rng.choice((0, 0, 1, 1, 2, 3) if not long else (3, 4)))
    ]
    text = ". ".join(p[0].upper() + p[1:] for p in parts) + rng.choice((".", ".", "", "!"))
    for words in _STYLE:
        text = re.sub(rf"\b{words[0]}\b", rng.choice(words), text)
    opener = rng.choice(_OPENERS)
    text = opener + (text[0].lower() + text[1:] if opener else text)
    if rng.random() < MATH:
        for plain, math in _MATH_FORMS:
            text = text.replace(plain.replace("{a}", str(a)), math.replace("{a}", str(a)))
    if rng.random() < 0.1:
        text = "**" + text.replace(". ", ".** ", 1) if ". " in text else "*" + text + "*"
    return text


def _restyle(text: str, rng: random.Random) -> str:
    """A verbatim copy: the same words, perhaps another case, spacing or emphasis."""
    kind = rng.choice(("same", "same", "same", "lower", "spaces", "bold", "period"))
    if kind == "lower":
        return text.lower()
    if kind == "spaces":
        return "  " + text.replace(" ", "  ", 3) + "\n"
    if kind == "bold":
        return "**" + text + "**"
    return text.rstrip(".!") + "." if kind == "period" else text


def _edit(text: str, rng: random.Random) -> str:
    """A light paraphrase: one to three edits (typos, a synonym, a moved clause, a sentence added)."""
    for edit in rng.sample(("typo", "synonym", "reorder", "add"), rng.randint(1, 3)):
        words = text.split(" ")
        if edit == "typo":
            spots = [k for k, w in enumerate(words) if w in _TYPOS] or [rng.randrange(len(words))]
            k = rng.choice(spots)
            words[k] = _TYPOS.get(words[k], words[k][::-1])
            text = " ".join(words)
        elif edit == "synonym":
            for options in _SYN.values():
                hits = [o for o in options if f" {o} " in f" {text} "]
                if hits:
                    text = f" {text} ".replace(f" {hits[0]} ", f" {rng.choice(options)} ", 1).strip()
                    break
        elif edit == "reorder" and ". " in text:
            first, rest = text.split(". ", 1)
            text = rest.rstrip(".!") + ". " + first + "."
        elif edit == "add":
            text = text.rstrip() + " " + _fill(rng.choice(_EXTRA), rng, {"a": 0, "b": 0, "c": 0}).capitalize() + "."
    return text


def _cluster_sizes(copiers: int, n: int, rng: random.Random) -> list[int]:
    """Sizes of the verbatim clusters (the source and its copiers) using ``copiers`` copiers."""
    sizes = [25] if n >= 500 and copiers >= 24 else []
    left = copiers - sum(size - 1 for size in sizes)
    while left > 0:
        size = min(left + 1, int(1 / (1 - rng.random()) ** 0.7) + 1, 25)
        sizes.append(size)
        left -= size - 1
    return sizes


def realistic_class(n: int, seed: int) -> AnswerCorpus:
    """``n`` students' answers to the mean-shift question, with who copied whom.

    Args:
        n: the number of students (ids ``s0000``, ``s0001``...).
        seed: the random seed; the same seed gives the same class.

    Returns:
        The answers and their sources.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"realistic_class: n must be an int >= 0, got {n!r}")
    rng = random.Random(seed)
    ids = [f"s{k:04d}" for k in range(n)]
    order = ids[:]
    rng.shuffle(order)
    answers: dict[str, str] = {}
    sources: dict[str, str] = {}
    blank, low = round(n * BLANK), round(n * LOW_EFFORT)
    copiers, editors = round(n * COPIERS), round(n * PARAPHRASERS)
    for s in order[:blank]:
        answers[s], sources[s] = "", s
    for s in order[blank : blank + low]:
        answers[s], sources[s] = rng.choice(_LOW), s
    writers = order[blank + low + copiers + editors :]
    for s in writers:
        answers[s], sources[s] = _own(rng), s
    pos = blank + low
    sizes = _cluster_sizes(copiers, n, rng) if writers else []
    for size, source in zip(sizes, rng.sample(writers, min(len(sizes), len(writers))), strict=False):
        for s in order[pos : pos + size - 1]:
            answers[s], sources[s] = _restyle(answers[source], rng), source
        pos += size - 1
    for s in order[pos : blank + low + copiers + editors]:
        source = rng.choice(writers) if writers else s
        answers[s], sources[s] = (_edit(answers[source], rng), source) if writers else (_own(rng), s)
    return AnswerCorpus({s: answers[s] for s in ids}, {s: sources[s] for s in ids})


def realistic_answers(n: int, seed: int) -> dict[str, str]:
    """``n`` students' answers to the mean-shift question (see the module's docstring).

    Args:
        n: the number of students.
        seed: the random seed.

    Returns:
        Student id -> answer (Markdown; "" for the blank ones).
    """
    return realistic_class(n, seed).answers
