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

What a hook cannot see or should not refuse is listed in ``docs/threat-model.md`` (reads
of ``__globals__`` and ``__closure__``, frames: ``sys._getframe``, tracebacks and trace functions
are everyday tools of honest code and of CPython itself): nothing that decides points depends
on it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

_REFUSED = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames"})
_MEM_FILE = re.compile(r"^/proc/(self|thread-self|\d+)(/task/\d+)?/mem$")


#: The event that arms the policy hook (its argument: the function that reports a refusal).
ARM_EVENT = "course_lib.grader.arm"


class Policy:
    """The installed hook's switch. :meth:`arm` raises :data:`ARM_EVENT`, which turns the hook
    on for good in this process: the hook's state lives only in its closure, so no object that
    code can reach can turn it off (an extra ``arm`` only finds it armed)."""

    def arm(self, report: Callable[[str], None]) -> None:
        sys.audit(ARM_EVENT, report)


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
    not change.

    Everything the hook uses is bound here and in the factories it calls (:func:`_refuser`,
    :func:`_checker`), in closures: the module's globals and the builtins (``id``,
    ``isinstance``...) can be rebound by student code, these names cannot."""
    state: dict[str, Any] = {"armed": False, "report": None, "busy": False}
    check = _checker(ctypes_code, guarded_types, _refuser(state))
    arm_event, _callable = ARM_EVENT, callable

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if state["busy"]:
            return
        if event == arm_event:
            if not state["armed"] and args and _callable(args[0]):
                state["report"], state["armed"] = args[0], True
            return
        if state["armed"]:
            check(event, args)

    sys.addaudithook(hook)
    return Policy()


def _refuser(state: dict[str, Any]) -> Callable[[str], NoReturn]:
    """The hook's ``refuse(what)``: report ``what`` once (through ``state["report"]``, with
    the hook idle meanwhile: ``state["busy"]``), then raise ``RuntimeError``."""
    _error, _base = RuntimeError, BaseException

    def refuse(what: str) -> NoReturn:
        report = state["report"]
        if report is not None and not state["busy"]:
            state["busy"] = True
            try:
                report(what)
            except _base:  # the refusal stands regardless
                pass
            finally:
                state["busy"] = False
        raise _error(f"{what} is not available while grading")

    return refuse


def _checker(
    ctypes_code: Sequence[Any], guarded_types: Sequence[type], refuse: Callable[[str], NoReturn]
) -> Callable[[str, tuple[Any, ...]], None]:
    """The armed hook's ``check(event, args)``: ``refuse`` the events listed in the module's
    docstring (arguments as for :func:`install`)."""
    native = {id(c): c for c in ctypes_code}  # the objects kept alive: their ids stay theirs
    guarded = {id(t): t for t in guarded_types}
    getframe, refused_events, mem_file, module_of = sys._getframe, _REFUSED, _MEM_FILE, _module_of
    loaded = ("_course_opwatch", "_course_operands")  # the grader's modules run from source (.stubs)
    _id, _isinstance, _len, _getattr, _str, _bytes = id, isinstance, len, getattr, str, bytes

    def own(obj: Any) -> bool:
        if _id(obj) in guarded:
            return True
        mod = module_of(obj)  # the worker's package is imported as ``worker`` in the sandbox
        return mod in loaded or mod.startswith(("course_lib.", "worker."))

    def called_from(codes: dict[int, Any]) -> bool:
        """Whether the code that raised the event is one of ``codes``."""
        f: Any = getframe(3)  # 0: this function, 1: check, 2: the hook, 3: the caller
        return f is not None and _id(f.f_code) in codes

    def check(event: str, args: tuple[Any, ...]) -> None:
        if event in refused_events or event == "sys.addaudithook":
            refuse(event)
        elif event.startswith("ctypes.") and not called_from(native):
            refuse(event)
        elif event == "open":
            path: Any = args[0] if args else None
            if _isinstance(path, _bytes):
                path = path.decode("utf-8", "replace")
            if _isinstance(path, _str) and mem_file.match(path.replace("//", "/")):
                refuse(f"opening {path}")
        elif event in ("object.__setattr__", "object.__delattr__") and args and own(args[0]):
            name = args[1] if _len(args) > 1 else "?"
            refuse(f"changing {module_of(args[0])}.{_getattr(args[0], '__qualname__', '?')}.{name}")

    return check


def keep(objects: list[Any]) -> None:
    """Hold ``objects`` for the life of the process, out of reach of any code (call it before
    the policy is armed: an armed policy refuses new hooks)."""

    def holder(event: str, args: tuple[Any, ...], _held: list[Any] = objects) -> None:
        return None

    sys.addaudithook(holder)
