"""Find calls a graded function may not use, by reading the code (the static layer).

Each exercise lists calls the student must write themselves (``torch.softmax`` inside
``softmax``, ``F.scaled_dot_product_attention`` inside ``scaled_dot_product_attention``).
Any use of ``course_lib`` (the reference implementations) is always forbidden, and so is
*dynamic access*, code that hides what it calls: ``eval``/``exec``, ``getattr`` with a
computed name, ``globals()``, frames, ``ctypes``, torch's dispatcher internals.

One walker (:mod:`.walk`) serves the notebook's :func:`course_lib.grading.check` and the
autograder. It starts from every binding of the graded name and follows, transitively, every
name the code reads: helper functions, lambdas, classes, module-level aliases
(``sm = torch.softmax``, ``nn = torch.nn``), containers, decorators and default arguments,
and a later rebinding of the graded name. What a name means comes from an *environment*:

- :class:`StaticEnvironment` (the autograder, which never runs student code in its own
  process, walked by :class:`~.static.StaticScan`): every module-level binding in the
  notebook's cells, each cell parsed once and on its own (:mod:`.cells`), so one cell that
  cannot be parsed is reported instead of hiding the others;
- :class:`LiveEnvironment` (a notebook): the function's globals and closure, as live
  objects, and the source of the functions and classes they point to (their bytecode when
  there is none, :mod:`.bytecode`).

The rules and the notes that report them are shared (:mod:`.rules`), and so is the reading of
code (:mod:`.refs`). The runtime layer (:mod:`course_lib.grading.opwatch`) then watches which
torch functions and operators actually run, so a call the walker could not see still counts.
"""

from .cells import ParsedCell, parse_cells
from .live import LiveEnvironment, violations_in_function
from .notebook import NotebookScan, review_flags, violations_in_source
from .rules import OPS_OF_RULE, watch_spec
from .static import StaticEnvironment, scan

__all__ = [
    "ParsedCell",
    "parse_cells",
    "NotebookScan",
    "StaticEnvironment",
    "LiveEnvironment",
    "scan",
    "review_flags",
    "violations_in_function",
    "violations_in_source",
    "watch_spec",
    "OPS_OF_RULE",
]
