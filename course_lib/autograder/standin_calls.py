"""A reference call made in the grading process on a student's arguments, bounded in memory and time.

A stand-in (the reference answering for a student's graded callee, forwarded by the sandbox
to the autograder's hook, :class:`~course_lib.autograder.sandbox_adapter.StandInHook`) runs in the grading process, on
arguments the student's code chose. Small arguments can still ask for huge work: ``q`` of
shape ``(n, 1, 1, 1)`` and ``k`` of ``(1, n, 1, 1)`` broadcast into ``n``-squared scores,
12,000 of them enough to have the grading process killed for memory. So while the reference
runs, the process's address space may grow by at most ``max_bytes`` (``RLIMIT_AS``, put back
afterwards: an allocation past it fails, in torch or in Python, and the call is an error),
and each operator it runs first checks the call's time (a light ``TorchDispatchMode``).

The address-space limit is the whole process's: a grading process grades one submission at a
time (``course-lib grade``'s processes; Dask workers started with ``--nthreads 1``), so
nothing else allocates meanwhile.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from ..grading.model import Call, Outcome
from ..grading.run import call_once

__all__ = ["bounded_call"]


class _OutOfTime(BaseException):
    """Past the call's time; a BaseException, so that the call's own handling lets it through."""


class _Clock(TorchDispatchMode):
    def __init__(self, seconds: float):
        super().__init__()
        self.deadline = time.monotonic() + seconds

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as in opwatch: nothing here is compiled, and importing dynamo takes seconds

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if time.monotonic() > self.deadline:
            raise _OutOfTime()
        return func(*args, **(kwargs or {}))


def _address_space() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def bounded_call(fn: Callable[..., Any], call: Call, max_bytes: int, seconds: float) -> Outcome:
    """``fn(*call.args, **call.kwargs)`` as :func:`~course_lib.grading.run.call_once` makes it,
    with at most ``max_bytes`` more address space and ``seconds`` (checked between torch
    operators); past a bound, an ``error`` outcome that says which."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + max_bytes
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        with _Clock(seconds):
            out = call_once(fn, call, time_limit=None)
    except _OutOfTime:
        return Outcome("error", message=f"the reference took longer than {seconds:g} s on these arguments")
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if out.status == "error" and ("MemoryError" in out.message or "can't allocate memory" in out.message):
        return Outcome("error", message=f"the reference needed more than {max_bytes >> 20} MB on these arguments")
    return out
