"""The student process's audit hook (PEP 578): refuses the ways below Python's object model
that could reach or rewrite the grader's own machinery, and keeps what must outlive student code.

An audit hook cannot be removed once added, and nothing in Python lists the hooks, so what a
hook's closure holds is out of reach of the code it watches (short of the events it refuses).
:func:`install` adds the policy hook in the pristine worker, before any student code runs;
each phase's process turns it on with :func:`Policy.arm` (one-way) just before the first
student line. Once on, these events raise ``RuntimeError`` and are reported (the grader then
holds the submission for review, naming the construct):

* ``ctypes.*`` (raw memory and foreign calls; the worker's own system calls excepted), ``gc.get_objects`` / ``get_referrers`` /
  ``get_referents`` (walks to any object), ``sys._current_frames``;
* ``sys.addaudithook`` (CPython then silently skips adding it);
* opening a process's ``mem`` file;
* replacing the code or defaults of the grader's own functions, or the name, module or bases
  of its classes and of the torch mode classes its watch is built on (what CPython 3.11
  audits: a class's other attributes are set without an event, which is why nothing that
  decides points rests on the grader's classes staying as they are).

:func:`keep` parks objects in a hook of their own, where only the interpreter holds them: the
dispatcher libraries whose kernels refuse the forbidden operators
(:func:`course_lib.grading.opwatch.refuse_operators`) stay registered for the process's life.

What a hook cannot see or should not refuse is listed in the README's threat model (reads of
``__globals__`` and ``__closure__``, frames: ``sys._getframe``, tracebacks and trace functions
are everyday tools of honest code and of CPython itself): nothing that decides points depends
on it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

_REFUSED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"})
_MEM_FILE = re.compile(r"^/proc/(self|thread-self|\d+)(/task/\d+)?/mem$")


class Policy:
    """The installed hook's switch: :meth:`arm` turns refusal on for good in this process."""

    def __init__(self, arm: Callable[[Callable[[str], None]], None]):
        self.arm = arm


def _module_of(obj: Any) -> str:
    try:
        if isinstance(obj, type):
            mod = type.__getattribute__(obj, "__module__")
        else:
            mod = object.__getattribute__(obj, "__module__")
    except BaseException:  # noqa: BLE001
        return ""
    return mod if isinstance(mod, str) else ""


def install(ctypes_code: Sequence[Any], guarded_types: Sequence[type]) -> Policy:
    """Add the policy hook (not yet armed). ``ctypes_code``: the code objects allowed to use
    ctypes (the worker's system calls: a seccomp filter only ever restricts more);
    ``guarded_types``: classes besides the grader's own whose attributes student code may
    not change."""
    native = {id(c): c for c in ctypes_code}  # the objects kept alive: their ids stay theirs
    guarded = {id(t): t for t in guarded_types}
    state: dict[str, Any] = {"armed": False, "report": None, "busy": False}
    getframe = sys._getframe

    def refuse(what: str) -> None:
        report = state["report"]
        if report is not None and not state["busy"]:
            state["busy"] = True
            try:
                report(what)
            except BaseException:  # noqa: BLE001, S110 - the refusal stands regardless
                pass
            finally:
                state["busy"] = False
        raise RuntimeError(f"{what} is not available while grading")

    def own(obj: Any) -> bool:
        if id(obj) in guarded:
            return True
        mod = _module_of(obj)  # the worker's package is imported as ``worker`` in the sandbox
        return mod == "_course_opwatch" or mod.startswith(("course_lib.", "worker."))

    def called_from(codes: dict[int, Any], depth: int) -> bool:
        """Whether one of the ``depth`` frames nearest the event runs one of ``codes``."""
        f: Any = getframe(2)
        for _ in range(depth):
            if f is None:
                return False
            if id(f.f_code) in codes:
                return True
            f = f.f_back
        return False

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not state["armed"] or state["busy"]:
            return
        if event in _REFUSED:
            refuse(event)
        elif event.startswith("ctypes.") and not called_from(native, 1):
            refuse(event)
        elif event == "sys.addaudithook":
            refuse(event)
        elif event == "open":
            path = args[0] if args else None
            if isinstance(path, bytes):
                path = path.decode("utf-8", "replace")
            if isinstance(path, str) and _MEM_FILE.match(path.replace("//", "/")):
                refuse(f"opening {path}")
        elif event in ("object.__setattr__", "object.__delattr__") and args and own(args[0]):
            name = args[1] if len(args) > 1 else "?"
            refuse(f"changing {_module_of(args[0])}.{getattr(args[0], '__qualname__', '?')}.{name}")

    def arm(report: Callable[[str], None]) -> None:
        if not state["armed"]:
            state["report"] = report
            state["armed"] = True

    sys.addaudithook(hook)
    return Policy(arm)


def keep(objects: list[Any]) -> None:
    """Hold ``objects`` for the life of the process, out of reach of any code (call it before
    the policy is armed: an armed policy refuses new hooks)."""

    def holder(event: str, args: tuple[Any, ...], _held: list[Any] = objects) -> None:
        return None

    sys.addaudithook(holder)
