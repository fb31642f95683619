"""The one lock under which this process builds an AST (see :mod:`course_lib.grading.parsing`).

CPython 3.11 counts the depth of the AST it is building in state shared by the whole
interpreter, so two threads must never parse at once (cpython gh-106905). The lock lives here,
imported by both the grading checks (:mod:`course_lib.grading.parsing`) and the sandbox's
codec (numpy's ``.npy`` header reader parses with ``ast.literal_eval``), so that neither of
those imports the other.
"""

from __future__ import annotations

import threading

#: Held while the grader builds an AST (``ast.parse``, ``ast.literal_eval``).
LOCK = threading.Lock()
