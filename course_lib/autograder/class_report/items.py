"""Item statistics: how each test case of an assignment separates strong from weak students.

An item is one test of one graded function, ``(function, test name)``. Over the class (the
assignment's graded records): its pass rate, and its discrimination, the corrected item-total
correlation: the point-biserial (Pearson) correlation between passing the item (1 or 0) and
the rest of the student's score (the checks' points of every test of the assignment, this
item's points removed). A test whose points are withheld counts as not passed (it earned
nothing). Zero variance (everyone or nobody passes, or every rest score is equal) makes the
correlation undefined: it is None, shown as "n/a", never NaN.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .data import Row, graded

__all__ = ["item_statistics", "FLAGS"]

#: The flags an item can get, and what each says.
FLAGS = {
    "everyone passes": "every student passed it: it tells no one apart",
    "nobody passes": "no student passed it: check the test or the teaching",
    "negative discrimination": "students with higher other scores pass it less often than weaker ones",
}


def item_statistics(rows: list[Row], functions: list[str]) -> list[dict[str, Any]]:
    """The items of one assignment, in notebook and test order.

    Args:
        rows: the assignment's records (only status ``graded`` counts).
        functions: its graded functions, in order.

    Returns:
        One dict per item: ``function``, ``test``, ``max_points``, ``students`` (graded records
        with this test), ``passed`` (how many passed it), ``pass_rate`` (None with no students),
        ``discrimination`` (a float in [-1, 1] or None) and ``flags`` (keys of :data:`FLAGS`).
    """
    cls = graded(rows)
    keys: dict[tuple[str, str], float] = {}
    for _, record in cls:
        for fr in record.functions:
            for res in fr.get("results", []):
                keys.setdefault(
                    (str(fr.get("function", "")), str(res.get("name", ""))), float(res.get("max_points", 0))
                )
    order = {f: i for i, f in enumerate(functions)}
    items = sorted(keys, key=lambda k: order.get(k[0], len(order)))  # stable: test order kept within a function
    index = {k: j for j, k in enumerate(items)}
    n, m = len(cls), len(items)
    passed = np.zeros((n, m))
    points = np.zeros((n, m))
    present = np.zeros((n, m), dtype=bool)
    for i, (_, record) in enumerate(cls):
        for fr in record.functions:
            for res in fr.get("results", []):
                j = index[(str(fr.get("function", "")), str(res.get("name", "")))]
                present[i, j] = True
                passed[i, j] = 1.0 if res.get("passed") else 0.0
                points[i, j] = float(res.get("points", 0.0))
    rest = points.sum(axis=1, keepdims=True) - points
    counts = present.sum(axis=0)
    discrimination = _masked_correlation(passed, rest, present)
    out = []
    for j, (function, test) in enumerate(items):
        k = int(counts[j])
        npass = int(passed[present[:, j], j].sum())
        rate = npass / k if k else None
        d = discrimination[j]
        flags = []
        if rate == 1.0:
            flags.append("everyone passes")
        if rate == 0.0:
            flags.append("nobody passes")
        if d is not None and d < 0:
            flags.append("negative discrimination")
        out.append(
            {
                "function": function,
                "test": test,
                "max_points": keys[(function, test)],
                "students": k,
                "passed": npass,
                "pass_rate": rate,
                "discrimination": d,
                "flags": flags,
            }
        )
    return out


def _masked_correlation(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> list[float | None]:
    """Pearson correlation of each column of ``x`` with the same column of ``y``, over the rows
    where ``mask`` holds; None where a column has fewer than two rows or no variance."""
    w = mask.astype(float)
    k = w.sum(axis=0)
    safe = np.maximum(k, 1.0)
    xc = (x - (x * w).sum(axis=0) / safe) * w
    yc = (y - (y * w).sum(axis=0) / safe) * w
    sxx, syy, sxy = (xc * xc).sum(axis=0), (yc * yc).sum(axis=0), (xc * yc).sum(axis=0)
    out: list[float | None] = []
    for j in range(x.shape[1]):
        if k[j] < 2 or sxx[j] <= 1e-12 or syy[j] <= 1e-12:
            out.append(None)
        else:
            out.append(float(np.clip(sxy[j] / np.sqrt(sxx[j] * syy[j]), -1.0, 1.0)))
    return out
