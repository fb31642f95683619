"""``when_implemented``: a notebook's demo block that never stops Run All.

A demo block (a figure, a printed comparison) uses the student's functions. Until they are
written it prints a reminder; once they run but are wrong, the block prints one line that
says where the error came from and which check to read, instead of a traceback (JupyterLab's
Run All stops at a traceback, and the next ``check`` cell would never run)::

    with when_implemented(dot_score):  # naming the functions is optional
        plt.imshow(dot_score(q, k))

    # This demo stopped: it could not use what your functions returned (TypeError: Invalid
    # shape (4, 4, 6) for image data); your dot_score returned shape (4, 4, 6) here; see
    # check(dot_score) above.
"""

from __future__ import annotations

import functools
import os
import site
import sysconfig
from collections.abc import Callable, Iterator
from types import CodeType, FrameType, TracebackType
from typing import Any

from ..assignments import GRADED_FUNCTIONS

__all__ = ["when_implemented"]

NOT_IMPLEMENTED = "Not implemented yet: finish the function(s) above, then run this cell again."
_CLIP = 100  # characters of an exception's message that are shown


def _library_roots() -> tuple[str, ...]:
    """The folders of code a student did not write: the standard library, installed packages
    and the course library itself."""
    paths = [sysconfig.get_paths().get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    paths += [*getattr(site, "getsitepackages", list)(), site.getusersitepackages()]
    paths.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # course_lib
    return tuple(os.path.join(os.path.realpath(p), "") for p in paths if p)


_LIBRARY = _library_roots()


def _in_notebook(code: CodeType) -> bool:
    """True for code defined in the notebook (an IPython cell such as ``/tmp/ipykernel_1/2.py``
    or ``<ipython-input-3-…>``, or any file outside the libraries), False for library code."""
    name = code.co_filename
    if name.startswith("<"):
        return not name.startswith(("<frozen", "<string>"))
    return not os.path.join(os.path.realpath(name), "").startswith(_LIBRARY)


def _frames(tb: TracebackType | None) -> Iterator[FrameType]:
    while tb is not None:
        yield tb.tb_frame
        tb = tb.tb_next


def _failing_function(tb: TracebackType | None) -> str | None:
    """The name of the innermost notebook function the error passed through, below the block's
    own frame (the first of the traceback); None when it came from the block (its comprehensions
    and lambdas, ``<genexpr>``, included) or a library."""
    name = None
    for frame in list(_frames(tb))[1:]:
        if _in_notebook(frame.f_code) and not frame.f_code.co_name.startswith("<"):
            name = frame.f_code.co_name
    return name


def _short(exc: BaseException) -> str:
    """``TypeError: the message's first line``, clipped."""
    lines = str(exc).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else ""
    if len(text) > _CLIP:
        text = text[: _CLIP - 1].rstrip() + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _see_checks(names: list[str]) -> str:
    graded = [n for n in names if n in GRADED_FUNCTIONS]
    if not graded:
        return "see the checks above"
    return "see " + " and ".join(f"check({n})" for n in graded) + " above"


def _describe(value: Any) -> str:
    """What a function returned, in a few words: a shape, or a type (never values)."""
    shape = getattr(value, "shape", None)
    if isinstance(shape, tuple):  # torch.Size is a tuple
        return f"shape {tuple(shape)}"
    if isinstance(value, tuple):
        return "a tuple (" + ", ".join(_describe(v) for v in value[:4]) + (", …)" if len(value) > 4 else ")")
    return "None" if value is None else f"a {type(value).__name__}"


def demo_error_line(exc: Exception, tb: TracebackType | None, returned: dict[str, str] | None = None) -> str:
    """The one line a demo block prints for ``exc`` (see :class:`when_implemented`)."""
    name = _failing_function(tb)
    if name is not None:
        return f"This demo stopped: {name} raised {_short(exc)}; {_see_checks([name])}."
    returned = returned or {}
    said = " and ".join(f"your {n} returned {what}" for n, what in returned.items())
    said = f"; {said} here" if said else ""
    return (
        f"This demo stopped: it could not use what your functions returned ({_short(exc)}){said}; "
        f"{_see_checks(list(returned)) if returned else 'see the checks above'}."
    )


class when_implemented:
    """Run a plotting or demo block only once the functions it uses work.

    Args:
        *functions: optional; the student's functions the block uses. While the block runs,
            each is watched (through the notebook's name for it) so that an error can say what
            it returned.

    ``NotImplementedError`` from the block prints a reminder; any other ``Exception`` prints one
    line instead of a traceback (the function it came from, or what the named functions
    returned, and the check to read), so a notebook runs from top to bottom. ``KeyboardInterrupt``
    and ``SystemExit`` pass through. The error is kept in ``.error``::

        with when_implemented():
            plt.imshow(sinusoidal_positional_encoding(64, 32))
    """

    def __init__(self, *functions: Callable[..., Any]) -> None:
        for fn in functions:
            if not callable(fn):
                raise TypeError(f"when_implemented: expects the functions the demo uses, got {type(fn).__name__}")
        self.functions = functions
        self.returned: dict[str, str] = {}
        self.error: Exception | None = None
        self._swapped: list[tuple[dict[str, Any], str, Any, Any]] = []

    def _watched(self, fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def watched(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            self.returned[name] = _describe(result)
            return result

        return watched

    def __enter__(self) -> when_implemented:
        for fn in self.functions:
            namespace, name = getattr(fn, "__globals__", None), getattr(fn, "__name__", None)
            if isinstance(namespace, dict) and isinstance(name, str) and namespace.get(name) is fn:
                wrapper = self._watched(fn, name)
                namespace[name] = wrapper
                self._swapped.append((namespace, name, fn, wrapper))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        for namespace, name, fn, wrapper in reversed(self._swapped):
            if namespace.get(name) is wrapper:  # not redefined inside the block
                namespace[name] = fn
        self._swapped.clear()
        if exc is None or not isinstance(exc, Exception):
            return False  # no error, or KeyboardInterrupt / SystemExit: not the demo's to hide
        self.error = exc
        if isinstance(exc, NotImplementedError):
            print(NOT_IMPLEMENTED)
        else:
            print(demo_error_line(exc, tb, self.returned))
        return True
