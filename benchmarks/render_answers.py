"""Benchmark: rendering 1,000 "think about it" answers as safe HTML (``answer_text.render_markdown``).

Run with ``nice python benchmarks/render_answers.py [--answers 1000] [--seed 0]``. Prints numbers;
nothing here is a timed test. Target: a question page of the review app shows 1,000 answers in at
most 1 s on the 2-core machine, everything included; rendering is one part of it.

The answers are made like a class's: a few sentences drawn from the phrases students write about
attention, about a third with inline math (from a pool of formulas written in several ways, so some
formulas repeat across students and some do not), some with display math, lists, bold text or code,
a few with a pasted image (a small PNG in the answer's attachments), and a few identical copies.
Printed: the first rendering of all of them (every cache empty: markdown-it's parse, latex2mathml
per formula), the same again (the answers' cache), and the characters and formulas rendered.
"""

from __future__ import annotations

import argparse
import base64
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib.autograder import answer_text, mathml

PHRASES = [
    "The mean can be far below the max, so the largest score minus the mean can still overflow",
    "Subtracting the max makes every exponent at most zero",
    "A nearly one-hot softmax has almost zero gradient for every other key",
    "The mask of shape (N, 1, S) hides the same keys from every query",
    "Without the mask each token could look at the future",
    "Dividing by the square root keeps the variance of the scores near one",
    "Causal attention is not permutation-equivariant because the mask ties positions to order",
    "The model needs positional encodings to know the order of its tokens",
    "Each head only sees a slice of width E / H",
    "Layer norm removes the mean and the scale of each token",
    "If all scores are equal the weights are uniform",
    "I checked it with torch.randperm and the outputs were shuffled the same way",
]
FORMULAS = [
    "\\sqrt{D}",
    "\\sqrt{d_k}",
    "\\frac{1}{\\sqrt{D}}",
    "e^{x_i - m}",
    "\\sum_j e^{s_j}",
    "O(T^2)",
    "\\mathrm{softmax}(QK^\\top / \\sqrt{D})V",
    "x_i - \\max_j x_j",
    "\\operatorname{Var}(q \\cdot k) = D",
    "W_v^{(h)} W_o^{(h)}",
    "10^{4}",
    "\\alpha_{ij}",
]
DISPLAY = [
    "\\mathrm{softmax}(x)_i = \\frac{e^{x_i}}{\\sum_j e^{x_j}}",
    "\\mathrm{Attention}(Q, K, V) = \\mathrm{softmax}\\left(\\frac{QK^\\top}{\\sqrt{d_k}}\\right) V",
    "\\sum_{i=1}^{D} q_i k_i \\sim \\mathcal{N}(0, D)",
]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(200)).decode()  # the renderer checks the header only


def one_answer(rng: random.Random) -> tuple[str, dict[str, dict[str, str]] | None]:
    """One student's answer and its attachments."""
    sentences = [rng.choice(PHRASES) for _ in range(rng.randint(1, 4))]
    if rng.random() < 0.35:
        k = rng.randrange(len(sentences))
        sentences[k] += f", since ${rng.choice(FORMULAS)}$" + (
            f" and ${rng.choice(FORMULAS)}$" if rng.random() < 0.4 else ""
        )
    text = ". ".join(sentences) + "."
    if rng.random() < 0.1:
        text += f"\n\n$${rng.choice(DISPLAY)}$$\n"
    if rng.random() < 0.1:
        text = "**Short answer:** " + text + "\n\n- first, `torch.amax`\n- then *subtract*"
    if rng.random() < 0.03:
        return text + "\n\n![image.png](attachment:image.png)", {"image.png": {"image/png": PNG}}
    return text, None


def corpus(n: int, seed: int) -> list[tuple[str, dict[str, dict[str, str]] | None]]:
    rng = random.Random(seed)
    out = [one_answer(rng) for _ in range(n)]
    for k in rng.sample(range(n), n // 20):  # a few copied answers
        out[k] = out[rng.randrange(n)]
    return out


def clear_caches() -> None:
    answer_text._render_text.cache_clear()
    answer_text._render_with_images.cache_clear()
    mathml.formula_html.cache_clear()


def render_all(answers: list[tuple[str, dict[str, dict[str, str]] | None]]) -> float:
    start = time.perf_counter()
    for text, attachments in answers:
        answer_text.render_markdown(text, attachments)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5, help="cold runs (the median is printed)")
    args = parser.parse_args()
    answers = corpus(args.answers, args.seed)
    answer_text.render_markdown("warm-up: $x$")  # the parser is built once per process
    cold = []
    for _ in range(args.repeat):
        clear_caches()
        cold.append(render_all(answers))
    warm = render_all(answers)
    formulas = sum(t.count("$") for t, _ in answers) // 2
    chars = sum(len(t) for t, _ in answers)
    print(
        f"{len(answers)} answers, {chars:,} characters, about {formulas} formulas, "
        f"{sum(a is not None for _, a in answers)} with an image"
    )
    print(
        f"first rendering (caches empty): median {statistics.median(cold):.3f} s of {args.repeat} "
        f"(min {min(cold):.3f}, max {max(cold):.3f}); {1e3 * statistics.median(cold) / len(answers):.2f} ms an answer"
    )
    print(f"again (cached): {warm * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
