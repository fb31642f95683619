"""What a cell transformed by IPython calls, in the sandbox (standard library only).

The grader turns every cell into Python with IPython's own input transformer
(:func:`course_lib.autograder.notebook.python_source`): ``%time f(x)``, ``!pip install ...``
and ``torch.amax?`` become ``get_ipython().run_line_magic(...)``, ``.system(...)`` and
``.run_line_magic('pinfo', ...)``. In the sandbox there is no kernel, and none of these is
part of grading, so :func:`get_ipython` returns a shell on which each of them does nothing
(``getoutput``, as in ``files = !ls``, gives an empty list). This module holds nothing else:
its functions' globals are only this shell.
"""

from __future__ import annotations

from typing import Any

__all__ = ["get_ipython"]


class _Shell:
    """IPython's shell, as the transformed cells use it: every call does nothing."""

    def run_line_magic(self, *args: Any, **kwargs: Any) -> None:
        return None

    def run_cell_magic(self, *args: Any, **kwargs: Any) -> None:
        return None

    def system(self, *args: Any, **kwargs: Any) -> None:
        return None

    def getoutput(self, *args: Any, **kwargs: Any) -> list[str]:
        return []


_SHELL = _Shell()


def get_ipython() -> _Shell:
    """The sandbox's stand-in for IPython's ``get_ipython()``."""
    return _SHELL
