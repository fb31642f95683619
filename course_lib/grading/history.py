"""A live notebook's own cells, for :func:`course_lib.grading.check`: IPython keeps every cell it
ran, as its input transformer made it, in the notebook's globals (``In``, the same list as
``_ih``). A name the grader cannot see otherwise (a function whose cell failed, a class used in
another cell) is looked up there. Where there is no history (a script, a test module), the
module's own source stands in for it; where there is neither, nothing is known.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from typing import Any

__all__ = ["executed_cells", "notebook_sources"]


def executed_cells(namespace: Mapping[str, Any]) -> list[str] | None:
    """The cells IPython ran in the notebook whose globals are ``namespace`` (``In`` and
    ``_ih``, each only where it is a list of str), or None where there is no such history."""
    found: list[str] = []
    seen: set[int] = set()
    for key in ("In", "_ih"):
        cells = namespace.get(key)
        if isinstance(cells, list) and id(cells) not in seen and all(isinstance(c, str) for c in cells):
            seen.add(id(cells))
            found += cells
    return found if seen else None


def notebook_sources(namespace: Mapping[str, Any]) -> list[str] | None:
    """The notebook's cells (:func:`executed_cells`), else the source of the module whose
    globals ``namespace`` is, else None."""
    cells = executed_cells(namespace)
    if cells is not None:
        return cells
    name = namespace.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or vars(module) is not namespace:
        return None
    try:
        return [inspect.getsource(module)]
    except (OSError, TypeError):
        return None
