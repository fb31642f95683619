"""The student process's time limits: signals that raise in student code, never in the worker's own."""

from __future__ import annotations

import os
import signal
import sys
import types
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
D = TypeVar("D")


class _Deadline(BaseException):
    """Raised by the time-limit signals; a BaseException so ``except Exception`` does not eat it."""


_TIMER_SIGNALS = (signal.SIGALRM, signal.SIGPROF)
_OWN_DIR = os.path.dirname(__file__)  # the worker's own code: a deadline is never raised in it
_timer = {"armed": False, "fired": False}


def _own_code(frame: types.FrameType) -> bool:
    return os.path.dirname(frame.f_code.co_filename) == _OWN_DIR


def _on_timer(signum: int, frame: types.FrameType | None) -> None:
    """Past a time limit: raise in the student's code (again every 0.1 s until disarmed).

    An exception raised where Python ignores it (a fork hook, a destructor: "Exception
    ignored in ...") must not make the limit go away, so the frames that called the
    interrupted one are also marked to raise at their next line (through the trace hook).
    Never raised inside the worker's own code (between the student's code and the disarm).
    """
    if not _timer["armed"]:
        return
    _timer["fired"] = True
    if frame is None or _own_code(frame):
        return
    f, marked = frame.f_back, False
    while f is not None and not _own_code(f):
        f.f_trace = _trace_raise
        marked = True
        f = f.f_back
    if marked:
        sys.settrace(_trace_none)
    raise _Deadline()


def _trace_none(frame: types.FrameType, event: str, arg: Any) -> None:
    return None


def _trace_raise(frame: types.FrameType, event: str, arg: Any) -> Any:
    if _timer["armed"] and event == "line":
        raise _Deadline()
    return _trace_raise if _timer["armed"] else None


def _arm(wall: float, cpu: float | None = None) -> None:
    _timer["fired"] = False
    signal.signal(signal.SIGALRM, _on_timer)
    signal.signal(signal.SIGPROF, _on_timer)
    _timer["armed"] = True
    signal.setitimer(signal.ITIMER_REAL, max(wall, 0.001), 0.1)
    if cpu is not None:
        signal.setitimer(signal.ITIMER_PROF, max(cpu, 0.001), 0.1)


def _disarm() -> None:
    _timer["armed"] = False
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_PROF, 0)
    sys.settrace(None)


def _guarded(fn: Callable[[], T], default: D) -> T | D:
    """fn() with a 1 s limit (it may run student code: an exception's __str__), else default."""
    try:
        _arm(1.0)
        try:
            return fn()
        finally:
            _disarm()
    except BaseException:  # noqa: BLE001
        return default
