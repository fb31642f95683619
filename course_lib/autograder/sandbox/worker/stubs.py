"""The fake ``course_lib`` a notebook imports while it is graded, and the grader's modules the
worker runs from their source (:func:`load_modules`)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .channels import _Sender


def _install_stubs(sender: _Sender) -> None:
    """Fake ``course_lib`` modules: check() and when_implemented work; anything else is refused and reported."""
    import importlib.machinery

    seen: set[tuple[str, str]] = set()

    def report(name: str, kind: str = "accessed") -> None:
        if (name, kind) not in seen:
            seen.add((name, kind))
            sender.send({"t": "ref", "name": name, "kind": kind})

    class StubModule(types.ModuleType):
        def __getattr__(self, attr: str) -> Any:
            if attr.startswith("__") and attr.endswith("__"):
                raise AttributeError(attr)
            name = f"{self.__name__}.{attr}"
            report(name)
            raise AttributeError(_refusal(name))

        def __setattr__(self, attr: str, value: Any) -> None:
            name = f"{self.__name__}.{attr}"
            report(name, "modified")
            raise AttributeError(f"{name} cannot be changed while grading")

        def __delattr__(self, attr: str) -> None:
            name = f"{self.__name__}.{attr}"
            report(name, "modified")
            raise AttributeError(f"{name} cannot be changed while grading")

    def make(name: str, **attrs: Any) -> types.ModuleType:
        m = StubModule(name)
        m.__dict__["__spec__"] = importlib.machinery.ModuleSpec(name, None, is_package=True)
        m.__dict__["__path__"] = []
        m.__dict__["__loader__"] = None
        m.__dict__["__package__"] = name
        m.__dict__.update(attrs)
        return m

    def check(*args: Any, **kwargs: Any) -> None:
        """No-op while grading: the grader runs the checks itself."""
        return None

    class when_implemented:
        """As in the course library, in one line: ``NotImplementedError`` prints the reminder and
        any other ``Exception`` one line, so a demo block never fails a graded run."""

        def __init__(self, *functions: Any) -> None:
            pass

        def __enter__(self) -> when_implemented:
            return self

        def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
            if not isinstance(exc, Exception):
                return False  # no error, or KeyboardInterrupt / SystemExit / the grader's deadline
            if isinstance(exc, NotImplementedError):
                print("Not implemented yet: finish the function(s) above, then run this cell again.")
            else:
                print(f"This demo stopped: {type(exc).__name__}: {str(exc).strip()[:120]}".split("\n")[0])
            return True

    grading = make("course_lib.grading", check=check, when_implemented=when_implemented)
    root = make("course_lib", grading=grading)
    sys.modules["course_lib"] = root  # the warm worker left no other course_lib module (zygote.warm_up)
    sys.modules["course_lib.grading"] = grading

    sys.meta_path.insert(0, _course_lib_finder(report))


def _refusal(name: str) -> str:
    """The error message for a reference implementation ``name`` that a notebook reached for."""
    return (
        f"{name} is one of the course's reference implementations; it is not available while "
        "grading (graded code must be your own)"
    )


def _course_lib_finder(report: Callable[[str], None]) -> Any:
    """An import finder that refuses (and ``report``s) every ``course_lib`` module but the stubs."""

    class CourseLibFinder:
        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> None:
            if (name == "course_lib" or name.startswith("course_lib.")) and name not in sys.modules:
                report(name)
                raise ImportError(_refusal(name), name=name)
            return None

        @staticmethod
        def invalidate_caches() -> None:
            pass

    return CourseLibFinder


#: The names the grader's modules run under (no import finds them; see also ``.audit``).
OPWATCH_MODULE = "_course_opwatch"
OPERANDS_MODULE = "_course_operands"


@dataclass(frozen=True)
class GraderModules:
    """The grader's modules in the worker, which may not import ``course_lib``: each run from
    the source the grader handed over when the worker started, in the warm worker, before any
    job (:func:`load_modules`)."""

    #: the runtime watch (``course_lib/grading/opwatch.py``: standard library and torch)
    opwatch: types.ModuleType
    #: a failing line's operands in words (``course_lib/grading/operands.py``: standard
    #: library only), the same code as ``check``'s
    operands: types.ModuleType


def _load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name.removeprefix('_course_')}>", "exec"), module.__dict__)
    return module


def load_modules(opwatch_source: str, operands_source: str) -> GraderModules:
    """The grader's modules, from their sources (read when the worker started)."""
    return GraderModules(_load(OPWATCH_MODULE, opwatch_source), _load(OPERANDS_MODULE, operands_source))
