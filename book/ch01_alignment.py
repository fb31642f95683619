"""Where a date model's output steps that copy nothing look, put into words (chapter 1).

A date in ISO form has steps that copy no source character: its hyphens and the final
``<eos>``. The chapter's heatmap shows where the trained model's weights go at those steps,
and the sentence under it must say what the weights say, for the model this build trained.
:func:`idle_steps` reads the steps off the attention rows and :func:`describe` writes the
sentence from them, so the prose cannot claim a pattern the weights do not show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

EOS = "<eos>"
ORDINALS = ("first", "second", "third", "fourth", "fifth")


@dataclass(frozen=True)
class IdleStep:
    """One output step that copies no source character, and where its weight goes."""

    name: str  # "the first hyphen", "the final `<eos>` step"
    step: int  # the output step t (a row of the weights)
    eos_weight: float  # its weight on the source's <eos> (the last column)
    top: str  # the source label with its largest weight
    top_weight: float
    top_part: str | None  # the part of the source that holds ``top`` ("day", ...), if given and unique


def _rows(weights) -> list[list[float]]:
    return [[float(x) for x in row] for row in (weights.tolist() if hasattr(weights, "tolist") else weights)]


def idle_steps(
    weights,
    src_labels: Sequence[str],
    out_labels: Sequence[str],
    parts: Mapping[str, slice] | None = None,
) -> list[IdleStep]:
    """The hyphens and the final ``<eos>`` of an output, with where each one's weight goes.

    Args:
        weights: the attention rows, (at least len(out_labels), len(src_labels)), a tensor or lists.
        src_labels: the source characters, ``<eos>`` last.
        out_labels: the output characters, ``<eos>`` last.
        parts: optional names for spans of source positions (``{"day": slice(0, 3), ...}``);
            the part that alone holds a step's top position is reported with it.

    Returns:
        One :class:`IdleStep` per hyphen, in order, then one for the final ``<eos>``.
    """
    rows = _rows(weights)
    if src_labels[-1] != EOS or out_labels[-1] != EOS:
        raise ValueError("idle_steps: source and output labels must both end with <eos>")
    if len(rows) < len(out_labels) or any(len(row) != len(src_labels) for row in rows):
        raise ValueError(f"idle_steps: need {len(out_labels)} rows of {len(src_labels)} weights, got {len(rows)} rows")
    steps = [(t, "hyphen") for t, ch in enumerate(out_labels[:-1]) if ch == "-"] + [(len(out_labels) - 1, EOS)]
    result, hyphens = [], 0
    for t, kind in steps:
        if kind == "hyphen":
            name = f"the {ORDINALS[hyphens] if hyphens < len(ORDINALS) else f'{hyphens + 1}th'} hyphen"
            hyphens += 1
        else:
            name = "the final `<eos>` step"
        row = rows[t]
        j = max(range(len(row)), key=row.__getitem__)
        holders = [p for p, span in (parts or {}).items() if j in range(len(src_labels))[span]]
        result.append(IdleStep(name, t, row[-1], src_labels[j], row[j], holders[0] if len(holders) == 1 else None))
    return result


def _label(label: str) -> str:
    return "`<eos>`" if label == EOS else f"`{'␣' if label == ' ' else label}`"


def _join(clauses: list[str]) -> str:
    return clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + " and " + clauses[-1]


def describe(example: str, steps: Sequence[IdleStep]) -> str:
    """One Markdown sentence: where each idle step of ``example`` puts its largest weight."""
    clauses = []
    for s in steps:
        if s.top == EOS:
            clauses.append(f"{s.name} leans most on `<eos>` ({s.top_weight:.2f})")
        else:
            part = f" in the {s.top_part}" if s.top_part else ""
            clauses.append(
                f"{s.name} leans most on {_label(s.top)}{part} ({s.top_weight:.2f}; {s.eos_weight:.2f} on `<eos>`)"
            )
    return f"In '{example}', {_join(clauses)}."


def lead(steps: Sequence[IdleStep]) -> str:
    """How many of ``steps`` (from any examples) put their largest weight on ``<eos>``, as a clause."""
    parked = sum(s.top == EOS for s in steps)
    if parked == len(steps):
        return "every step that copies no source character puts its largest weight there"
    if parked == 0:
        return "no step that copies no source character puts its largest weight there"
    return "only some of the steps that copy no source character put their largest weight there"


def conclusion(steps: Sequence[IdleStep]) -> str:
    """The sentence that sums ``steps`` up (from any examples): what the final ``<eos>`` steps
    look back at, or that the idle steps all park on ``<eos>``."""
    finals = [s for s in steps if s.name.startswith("the final")]
    parts = sorted({s.top_part for s in finals if s.top_part})
    if finals and all(s.top_part for s in finals) and len(parts) == 1:
        return (
            f"So `<eos>` is not where every idle step parks its weight: to write the final `<eos>`, "
            f"the model looks back at the {parts[0]}, the last part it wrote."
        )
    if any(s.top != EOS for s in steps):
        return (
            "So `<eos>` is a common place to park weight, not the only one: where an output step "
            "copies nothing, the model may also look back at a part of the date it already wrote."
        )
    return "So `<eos>` is where the idle steps park their weight: the one source position that is never copied."
