"""Benchmark: answer groups (course_lib/autograder/answer_groups.py) on made-up classes.

Run with ``nice python benchmarks/answer_groups.py [--sizes 1000 5000] [--seeds 0 1 2 3 4]
[--threshold T]`` from the repository root. Prints numbers; nothing here is a timed test.
Target: 1,000 answers grouped in well under 0.3 s, 5,000 in a few seconds, on the 2-core machine.

Each class comes from ``benchmarks/answer_corpus.py`` (one question, copy clusters and light
edits planted, proportions assumed, see there); blank answers are left out, as the review app
leaves them out. Per class: the groups, the singletons, the largest group, and how the planted
copies came out, counted over pairs of students:

- *precision*: of the pairs put in one group, the share that share a source (a friend's answer
  copied or edited) or whose normalised texts are equal (two "idk" belong together);
- *recall, copies*: of the pairs made by a verbatim copy (the copy and its source, or two copies
  of one source), the share put in one group;
- *recall, edits*: likewise for a lightly edited copy and its source;
- *clusters whole*: planted clusters (source, copies and edits) all of whose members share one group.

The time is the best of three calls of ``group_answers`` (wall clock, ``time.perf_counter``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from answer_corpus import AnswerCorpus, realistic_class

from course_lib.autograder.answer_groups import THRESHOLD, group_answers, normalise_answer


@dataclass(frozen=True)
class Outcome:
    """One class grouped."""

    answers: int
    groups: int
    singletons: int
    largest: int
    precision: float
    recall_copies: float
    recall_edits: float
    clusters_whole: float
    seconds: float


def _pairs(corpus: AnswerCorpus, answers: dict[str, str]) -> tuple[set[frozenset[str]], set[frozenset[str]]]:
    """The planted pairs: (made by verbatim copies, made by an edited copy)."""
    norm = {s: normalise_answer(t) for s, t in answers.items()}
    copies, edits = set(), set()
    for cluster in corpus.clusters():
        for a, b in combinations(sorted(cluster & answers.keys()), 2):
            source = corpus.sources[a]
            verbatim = norm[a] == norm[source] and norm[b] == norm[source]
            (copies if verbatim else edits).add(frozenset((a, b)))
    return copies, edits


def measure(n: int, seed: int, threshold: float) -> Outcome:
    """Group one class and score it against the generator's truth.

    Args:
        n: students in the class.
        seed: the class's seed.
        threshold: passed to ``group_answers``.

    Returns:
        The counts, the scores and the best time of three.
    """
    corpus = realistic_class(n, seed)
    answers = {s: t for s, t in corpus.answers.items() if t.strip()}
    times = []
    for _ in range(3):
        start = time.perf_counter()
        groups = group_answers(answers, threshold=threshold)
        times.append(time.perf_counter() - start)
    where = {s: k for k, g in enumerate(groups) for s in g.students}
    norm = {s: normalise_answer(t) for s, t in answers.items()}
    grouped = [frozenset(p) for g in groups for p in combinations(g.students, 2)]
    right = sum(corpus.sources[a] == corpus.sources[b] or norm[a] == norm[b] for a, b in map(sorted, grouped))
    copies, edits = _pairs(corpus, answers)
    together = [len({where[s] for s in c if s in where}) == 1 for c in corpus.clusters()]
    return Outcome(
        answers=len(answers),
        groups=len(groups),
        singletons=sum(len(g.students) == 1 for g in groups),
        largest=max(len(g.students) for g in groups),
        precision=right / len(grouped) if grouped else 1.0,
        recall_copies=sum(where[a] == where[b] for a, b in map(sorted, copies)) / max(len(copies), 1),
        recall_edits=sum(where[a] == where[b] for a, b in map(sorted, edits)) / max(len(edits), 1),
        clusters_whole=sum(together) / max(len(together), 1),
        seconds=min(times),
    )


def _spread(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def main() -> None:
    """Print one line per class and the spread over the seeds per size."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args()
    fields = ("answers", "groups", "singletons", "largest", "precision", "recall_copies", "recall_edits")
    fields += ("clusters_whole", "seconds")
    print(f"threshold {args.threshold}; per size: median [min, max] over seeds {args.seeds}")
    print("n     seed " + " ".join(f"{f:>14}" for f in fields))
    for n in args.sizes:
        outcomes = []
        for seed in args.seeds:
            o = measure(n, seed, args.threshold)
            outcomes.append(o)
            cells = [
                f"{getattr(o, f):14.3f}" if isinstance(getattr(o, f), float) else f"{getattr(o, f):14d}" for f in fields
            ]
            print(f"{n:<5} {seed:<4} " + " ".join(cells))
        for f in fields:
            values = [float(getattr(o, f)) for o in outcomes]
            print(
                f"  n={n} {f:>14}: {_spread(values, 3 if f in ('precision', 'seconds') or 'recall' in f or 'whole' in f else 0)}"
            )


if __name__ == "__main__":
    main()
