"""Russian adjective agreement as a task for one self-attention layer (self-attention chapter).

A phrase of a few words holds one adjective whose ending is hidden, one noun, and filler words
that carry no agreement (adverbs such as "очень", "very"). The hidden ending depends only on the
noun's gender, number and case: "зелён[?] яблоко" -> "ое", "зелён[?] капусту" -> "ую",
"зелён[?] яблоки" -> "ые". Every inflected form and every gold ending comes from the Russian
dictionary of pymorphy3 (``MorphAnalyzer().parse(word)[0].inflect(...)``); the word lists below
give only the dictionary forms. Some nouns are held out for the test set.

The model sees each word only through its last one, two and three letters (that is where
Russian writes gender, number and case), so it can read a noun it has never seen. One
self-attention layer (:func:`course_lib.self_attention`) lets the hidden ending look at the
other words; its output there, added to its own vector, predicts the ending.

Conventions: batch-first; N phrases, L words per phrase, E the model width.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pymorphy3
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_lib import self_attention

__all__ = [
    "ADJECTIVES",
    "NOUNS",
    "FILLERS",
    "ENDINGS",
    "NounForm",
    "Phrase",
    "Split",
    "Batch",
    "Vocabulary",
    "AgreementModel",
    "Adam",
    "Training",
    "Evaluation",
    "morph",
    "noun_forms",
    "adjective_form",
    "hidden_ending",
    "held_out_nouns",
    "make_phrases",
    "make_split",
    "encode",
    "train",
    "evaluate",
]

#: Adjectives that decline like "зелёный" (green): -ый, -ая, -ое, -ые, -ую.
ADJECTIVES: tuple[str, ...] = tuple(
    "красный белый чёрный зелёный жёлтый серый новый старый спелый целый тёплый холодный "
    "круглый длинный быстрый мокрый грязный чистый полный тяжёлый весёлый добрый умный "
    "красивый важный нужный трудный странный модный дешёвый светлый тёмный острый скучный "
    "вкусный кислый бумажный деревянный стеклянный железный".split()
)
#: Inanimate nouns, masculine, feminine and neuter, in their dictionary form (nominative singular).
#: None ends in "ь": a feminine noun in "ь" ("тетрадь") is the same in the nominative and the
#: accusative, so the phrase would not decide between "ая" and "ую".
NOUNS: tuple[str, ...] = tuple(
    "стол дом стул сад лес мост город шкаф нож ключ торт сыр суп чай банан лимон апельсин "
    "автобус телефон компьютер журнал карандаш мяч цветок помидор огурец билет подарок шарф "
    "костюм пиджак зонт диван ковёр "
    "капуста книга машина лампа груша слива вишня дыня сумка ручка чашка тарелка рубашка юбка "
    "шапка куртка стена комната квартира школа улица река гора картина газета песня игрушка "
    "ложка вилка конфета шляпа коробка "
    "яблоко окно кресло зеркало письмо платье блюдо озеро море поле облако колесо ведро яйцо "
    "слово дерево место лицо вино кольцо одеяло полотенце сердце здание упражнение задание".split()
)
#: Words that carry no agreement: adverbs and particles.
FILLERS: tuple[str, ...] = tuple(
    "очень совсем уже ещё вот тут там здесь тоже даже почти вчера сегодня теперь опять всегда".split()
)
#: The five endings of a "зелёный" adjective in the nominative and accusative; the class labels.
ENDINGS: tuple[str, ...] = ("ый", "ая", "ое", "ые", "ую")
#: The noun forms used: (number, case). Inanimate nouns only, so the accusative of a masculine
#: or neuter noun, and every plural accusative, is the same word as its nominative.
FORMS: tuple[tuple[str, str], ...] = (("sing", "nomn"), ("sing", "accs"), ("plur", "nomn"), ("plur", "accs"))
#: Longest word ending the model sees: each word is the sum of its last 1, 2, ..., SUFFIX letters.
SUFFIX = 3


@functools.cache
def morph() -> pymorphy3.MorphAnalyzer:
    """The Russian dictionary (pymorphy3-dicts-ru), loaded once."""
    return pymorphy3.MorphAnalyzer()


@dataclass(frozen=True)
class NounForm:
    """One inflected form of a noun, as the dictionary gives it.

    ``grammemes`` is every (number, case) that this word spells: "стол" is both the nominative
    and the accusative singular.
    """

    word: str
    lemma: str
    gender: str  # "masc", "femn" or "neut"
    number: str  # "sing" or "plur"
    grammemes: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Phrase:
    """A phrase with one hidden adjective ending.

    ``words[slot]`` is the adjective's stem ("зелён"); ``words[noun]`` the noun's form.
    """

    words: tuple[str, ...]
    slot: int
    noun: int
    adjective: str  # dictionary form, "зелёный"
    noun_form: NounForm
    ending: str  # the gold ending, one of ENDINGS

    def text(self) -> str:
        """The phrase as the reader sees it: ``"очень зелён[?] яблоко"``."""
        return " ".join(w + "[?]" if i == self.slot else w for i, w in enumerate(self.words))

    def labels(self) -> list[str]:
        """One label per word, for a plot's axis."""
        return [w + "[?]" if i == self.slot else w for i, w in enumerate(self.words)]


@functools.cache
def noun_forms(lemma: str) -> tuple[NounForm, ...]:
    """The distinct nominative and accusative forms of an inanimate noun, from the dictionary.

    Args:
        lemma: the noun's dictionary form, e.g. ``"капуста"``.

    Returns:
        One :class:`NounForm` per distinct word: ``капуста`` (sing nomn), ``капусту`` (sing accs),
        ``капусты`` (plur nomn and accs).
    """
    parse = morph().parse(lemma)[0]
    if parse.tag.POS != "NOUN" or parse.tag.animacy != "inan":
        raise ValueError(f"{lemma!r} is not an inanimate noun in the dictionary: {parse.tag}")
    forms: dict[str, NounForm] = {}
    for number, case in FORMS:
        inflected = parse.inflect({number, case})
        if inflected is None:
            raise ValueError(f"the dictionary has no {number} {case} of {lemma!r}")
        old = forms.get(inflected.word)
        grammemes = (old.grammemes if old else ()) + ((number, case),)
        if old is not None and old.number != number:
            raise ValueError(f"{inflected.word!r} is both singular and plural")
        forms[inflected.word] = NounForm(inflected.word, lemma, str(parse.tag.gender), number, grammemes)
    return tuple(forms.values())


def adjective_form(adjective: str, noun: NounForm) -> str:
    """The adjective inflected to agree with the noun, from the dictionary.

    Args:
        adjective: dictionary form, e.g. ``"зелёный"``.
        noun: the noun form it must agree with (its first (number, case) is used).

    Returns:
        The inflected adjective, e.g. ``"зелёную"`` for ``капусту``.
    """
    number, case = noun.grammemes[0]
    grammemes = {number, case}
    if number == "sing":
        grammemes.add(noun.gender)
    if case == "accs" and (number == "plur" or noun.gender == "masc"):
        grammemes.add("inan")  # the inanimate accusative, "зелёные", not "зелёных"
    return _inflect_adjective(adjective, frozenset(grammemes))


@functools.cache
def _inflect_adjective(adjective: str, grammemes: frozenset[str]) -> str:
    """``MorphAnalyzer().parse(adjective)``'s first adjective reading, inflected (cached)."""
    parse = next(p for p in morph().parse(adjective) if p.tag.POS == "ADJF")
    inflected = parse.inflect(set(grammemes))
    if inflected is None:
        raise ValueError(f"the dictionary has no form of {adjective!r} with {sorted(grammemes)}")
    return inflected.word


def hidden_ending(adjective: str, noun: NounForm) -> str:
    """The ending that the phrase hides: the agreeing form less the stem (``"ую"`` for ``капусту``)."""
    stem, form = adjective[:-2], adjective_form(adjective, noun)
    if not form.startswith(stem) or form[len(stem) :] not in ENDINGS:
        raise ValueError(f"{adjective!r} does not decline like 'зелёный': {form!r}")
    return form[len(stem) :]


def held_out_nouns() -> tuple[str, ...]:
    """The test nouns: every fourth noun of :data:`NOUNS` (about a quarter of each gender)."""
    return NOUNS[3::4]


def make_phrases(nouns: tuple[str, ...], length: int, per_form: int, generator: torch.Generator) -> list[Phrase]:
    """Each form of each noun with ``per_form`` random adjectives, each phrase of random layout.

    The adjective and the noun take two random positions (either may come first); the other
    places are distinct random fillers.

    Args:
        nouns: dictionary forms of the nouns to use.
        length: L, words per phrase (at least 2).
        per_form: adjectives drawn (without replacement) for each noun form.
        generator: the random choices.

    Returns:
        ``per_form * (number of noun forms)`` phrases.
    """
    phrases = []
    for lemma in nouns:
        for form in noun_forms(lemma):
            for a in torch.randperm(len(ADJECTIVES), generator=generator)[:per_form].tolist():
                adjective = ADJECTIVES[a]
                slot, noun = torch.randperm(length, generator=generator)[:2].tolist()
                fillers = torch.randperm(len(FILLERS), generator=generator)[:length].tolist()
                words = [FILLERS[i] for i in fillers]
                words[slot], words[noun] = adjective[:-2], form.word
                phrases.append(Phrase(tuple(words), slot, noun, adjective, form, hidden_ending(adjective, form)))
    return phrases


@dataclass(frozen=True)
class Split:
    """Training and test phrases; the test phrases use only held-out nouns."""

    train: list[Phrase]
    test: list[Phrase]


def make_split(seed: int = 0, length: int = 5, per_form: int = 8) -> Split:
    """The task's data: training phrases from most nouns, test phrases from :func:`held_out_nouns`.

    Args:
        seed: the random choices of adjectives and layouts.
        length: L, words per phrase.
        per_form: adjectives per noun form in the training set; the test set has every adjective.
    """
    generator = torch.Generator().manual_seed(seed)
    test_nouns = held_out_nouns()
    train_nouns = tuple(n for n in NOUNS if n not in test_nouns)
    train = make_phrases(train_nouns, length, per_form, generator)
    return Split(train, make_phrases(test_nouns, length, len(ADJECTIVES), generator))


@dataclass(frozen=True)
class Batch:
    """Phrases as tensors.

    Shape:
        - suffixes: :math:`(N, L, 3)`, the ids of each word's last 1, 2 and 3 letters
        - slot, noun, target: :math:`(N,)`, the positions of the hidden ending and of the noun,
          and the index of the gold ending in :data:`ENDINGS`
    """

    suffixes: torch.Tensor
    slot: torch.Tensor
    noun: torch.Tensor
    target: torch.Tensor


@dataclass(frozen=True)
class Vocabulary:
    """The word endings seen in training; id 0 is "unknown"."""

    ids: dict[str, int]

    @classmethod
    def from_phrases(cls, phrases: list[Phrase]) -> Vocabulary:
        """Every ending of 1 to :data:`SUFFIX` letters of every word in ``phrases``."""
        endings = sorted({f"{n}:{w[-n:]}" for p in phrases for w in p.words for n in range(1, SUFFIX + 1)})
        return cls({e: i + 1 for i, e in enumerate(endings)})

    def word(self, word: str) -> list[int]:
        """The ids of the word's last 1, 2 and 3 letters (0 for an ending never seen in training)."""
        return [self.ids.get(f"{n}:{word[-n:]}", 0) for n in range(1, SUFFIX + 1)]


def encode(phrases: list[Phrase], vocab: Vocabulary) -> Batch:
    """Turn phrases into a :class:`Batch` (all phrases must have the same length)."""
    return Batch(
        suffixes=torch.tensor([[vocab.word(w) for w in p.words] for p in phrases]),  # (N, L, 3)
        slot=torch.tensor([p.slot for p in phrases]),
        noun=torch.tensor([p.noun for p in phrases]),
        target=torch.tensor([ENDINGS.index(p.ending) for p in phrases]),
    )


class AgreementModel(nn.Module):
    """Word endings + positions, one self-attention layer, a linear readout at the hidden ending.

    Args:
        vocab_size: number of ending ids (with 0, "unknown").
        length: L, words per phrase.
        width: E, the model width.
    """

    def __init__(self, vocab_size: int, length: int, width: int = 32):
        super().__init__()
        self.suffix = nn.Embedding(vocab_size, width, padding_idx=0)  # an unseen ending adds nothing
        self.position = nn.Embedding(length, width)
        self.hidden = nn.Parameter(torch.randn(width))  # marks the word whose ending is hidden
        self.W_q, self.W_k, self.W_v = (nn.Parameter(torch.randn(width, width) / math.sqrt(width)) for _ in range(3))
        self.readout = nn.Linear(width, len(ENDINGS))

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits for the hidden ending, and the attention weights.

        Shape:
            - logits: :math:`(N, 5)`, one score per ending of :data:`ENDINGS`
            - weights: :math:`(N, L, L)`; row ``slot`` is the hidden ending's attention
        """
        N, L, _ = batch.suffixes.shape
        rows = torch.arange(N)
        x = self.suffix(batch.suffixes).sum(dim=2) + self.position.weight[:L]  # (N, L, E)
        is_slot = torch.arange(L) == batch.slot[:, None]  # (N, L)
        x = x + is_slot[..., None] * self.hidden  # (N, L, E)
        out, weights = self_attention(x, self.W_q, self.W_k, self.W_v)  # (N, L, E), (N, L, L)
        h = x + out  # a residual connection: the word keeps its own vector
        return self.readout(h[rows, batch.slot]), weights  # (N, E) -> (N, 5)


class Adam:
    """Adam (Kingma and Ba, 2015) with ``torch.optim.Adam``'s defaults, in a few lines.

    ``torch.optim``'s first optimizer imports ``torch._dynamo``, which takes seconds; this
    chapter trains one tiny model at build time and does not need it.

    Args:
        params: the tensors to train.
        lr: the learning rate.
        betas: decay rates of the running means of the gradient and of its square.
        eps: added to the denominator.
    """

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        """One update from the gradients in ``p.grad``, which are then cleared."""
        self.t += 1
        (b1, b2), t = self.betas, self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            if p.grad is None:
                continue
            m.lerp_(p.grad, 1 - b1)  # m = b1 m + (1 - b1) g
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)  # v = b2 v + (1 - b2) g^2
            denominator = (v / (1 - b2**t)).sqrt_().add_(self.eps)
            p.addcdiv_(m, denominator, value=-self.lr / (1 - b1**t))
            p.grad = None


@dataclass
class Training:
    """A trained model and what it needs to read new phrases."""

    model: AgreementModel
    vocab: Vocabulary
    losses: list[float]  # training loss after each step


def train(phrases: list[Phrase], steps: int = 100, seed: int = 0, lr: float = 0.02) -> Training:
    """Train an :class:`AgreementModel` on ``phrases`` with :class:`Adam`, full batch.

    Args:
        phrases: the training phrases, all of one length.
        steps: optimizer steps.
        seed: the model's initialization (``torch.manual_seed``).
        lr: Adam's learning rate.

    Returns:
        The :class:`Training`, with the model in evaluation mode.
    """
    torch.manual_seed(seed)
    vocab = Vocabulary.from_phrases(phrases)
    batch = encode(phrases, vocab)
    model = AgreementModel(len(vocab.ids) + 1, batch.suffixes.shape[1])
    optimizer = Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        logits, _ = model(batch)
        loss = F.cross_entropy(logits, batch.target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return Training(model.eval(), vocab, losses)


@dataclass(frozen=True)
class Evaluation:
    """How a trained model does on some phrases.

    Shape:
        - predicted: :math:`(N,)`, the index in :data:`ENDINGS` of the predicted ending
        - weights: :math:`(N, L)`, the hidden ending's attention over the phrase
    """

    accuracy: float  # share of phrases whose ending is predicted right
    noun_on_top: float  # share of phrases where the hidden ending attends most to the noun
    noun_weight: float  # mean attention weight that the hidden ending gives the noun
    predicted: torch.Tensor
    weights: torch.Tensor


@torch.no_grad()
def evaluate(training: Training, phrases: list[Phrase]) -> Evaluation:
    """Accuracy and the hidden ending's attention on ``phrases``."""
    batch = encode(phrases, training.vocab)
    logits, weights = training.model(batch)
    rows = torch.arange(len(phrases))
    slot_weights = weights[rows, batch.slot]  # (N, L): the hidden ending's row
    predicted = logits.argmax(dim=-1)
    return Evaluation(
        accuracy=(predicted == batch.target).float().mean().item(),
        noun_on_top=(slot_weights.argmax(dim=-1) == batch.noun).float().mean().item(),
        noun_weight=slot_weights[rows, batch.noun].mean().item(),
        predicted=predicted,
        weights=slot_weights,
    )
