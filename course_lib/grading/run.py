"""Calling a student's function: fresh copies of the inputs, a time limit, and whatever
happens turned into an :class:`~course_lib.grading.model.Outcome` (plain tensors, or a message).

A wrong return type, an exception, ``NotImplementedError`` or a timeout is an outcome, never an
error of the check itself. The autograder's sandbox makes the same outcomes in its worker.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

import torch

from .feedback import describe_exception
from .inplace import changed_paths
from .model import Call, Outcome

__all__ = ["CALL_TIME_LIMIT", "BadReturnType", "to_plain", "call_once"]

#: Seconds one call of a student's function may take before it counts as a failure.
CALL_TIME_LIMIT = 10.0


class BadReturnType(TypeError):
    """A returned value that is not plain data (:func:`to_plain`); its message is the feedback,
    ``"returned a ..., expected a torch.Tensor"``, and the call's outcome is ``"bad_type"``."""


class _CallTimeout(Exception):
    pass


def _copy_arg(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.clone()
    if type(a) in (tuple, list):
        return type(a)(_copy_arg(x) for x in a)  # a KV cache (K, V): its tensors are copied too
    return a


def to_plain(value: Any) -> Any:
    """Turn a returned value into plain data, or raise :class:`BadReturnType` saying why not.

    Accepts exactly ``torch.Tensor`` (not subclasses or look-alikes), Python numbers, and
    tuples or lists of those. Tensors are detached copies; methods of the object itself
    are never called, so an object that only pretends to be a tensor is refused.
    """
    t = type(value)
    if t is torch.Tensor:
        return torch.Tensor.detach(value).clone()
    if t in (tuple, list):
        return tuple(to_plain(v) for v in value)
    if t in (int, float, bool):
        return value
    if isinstance(value, torch.Tensor):
        raise BadReturnType(f"returned a {t.__name__} (a subclass of torch.Tensor), expected a plain torch.Tensor")
    raise BadReturnType(f"returned a {t.__module__}.{t.__qualname__}, expected a torch.Tensor")


def call_once(
    fn: Callable[..., Any],
    call: Call,
    time_limit: float | None = CALL_TIME_LIMIT,
    watch: dict[str, list[str]] | None = None,
) -> Outcome:
    """Call ``fn`` on fresh copies of the call's arguments and catch whatever happens.

    The copies are compared with the call's own arguments afterwards: the tensors the call
    changed in place are the outcome's ``changed`` (:mod:`course_lib.grading.inplace`).

    With ``watch`` (an exercise's :meth:`~course_lib.grading.exercise_spec.Exercise.watch`), the torch
    functions and operators it names are recorded in the outcome's ``seen`` when the call runs them.
    """
    args = tuple(_copy_arg(a) for a in call.args)
    kwargs = {k: _copy_arg(v) for k, v in call.kwargs.items()}
    w = None
    if watch:
        from .opwatch import OpWatch

        w = OpWatch(**watch)
    out = _call(fn, args, kwargs, time_limit, w)
    if w is not None:
        out.seen, out.largest = list(w.seen), int(w.largest)
    if out.status == "ok":  # after the watch: the comparison is not the student's memory
        out.changed = changed_paths(call, args, kwargs)
    return out


def _call(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any], time_limit: float | None, w: Any) -> Outcome:
    """One call, watched by ``w`` (an :class:`~.opwatch.OpWatch` or None) while ``fn`` runs:
    copying the inputs and the result is not part of what the watch sees."""
    use_alarm = (
        time_limit is not None
        and threading.current_thread() is threading.main_thread()
        and hasattr(signal, "setitimer")
    )
    old = None
    if use_alarm:

        def _on_alarm(signum, frame):
            raise _CallTimeout()

        old = signal.signal(signal.SIGALRM, _on_alarm)
        assert time_limit is not None  # use_alarm needs one
        signal.setitimer(signal.ITIMER_REAL, time_limit)
    try:
        if w is not None:
            with w:
                value = fn(*args, **kwargs)
        else:
            value = fn(*args, **kwargs)
        return Outcome("ok", to_plain(value))
    except _CallTimeout:
        return Outcome("timeout", message=f"took longer than {time_limit:g} s")
    except NotImplementedError:
        return Outcome("not_implemented", message="not implemented yet")
    except BadReturnType as e:
        return Outcome("bad_type", message=str(e))
    except RecursionError:
        return Outcome("error", message="raised RecursionError (infinite recursion?)")
    except Exception as e:  # noqa: BLE001 - any student error is a graded outcome
        return Outcome("error", message=describe_exception(e))
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
