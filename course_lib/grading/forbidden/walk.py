"""The one walker: from a graded function to everything its code can reach.

The walker keeps a stack of things to read. An :class:`Environment` opens each one into a
:class:`Scope` (a piece of code with what its names mean locally) and the things it leads
to; the walker reads every reference of the scope, makes the checks that do not depend on
where the code came from (dynamic constructs, attributes that reach into functions and
frames, the function's own imports and locals, dynamic builtins), and asks the environment
what a module-level name means (:meth:`Environment.resolve`): the notes that name breaks,
and what it reaches, to read in turn.

Two environments implement it: :class:`~.static.StaticScan` (a notebook's cells, read
without running them) and :class:`~.live.LiveEnvironment` (a live function, its globals and
closure).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from ..ownership import Owned
from .refs import Ref
from .rules import DYNAMIC_BUILTINS, Rules, attr_note, builtin_note, check_path, dynamic_note, method_note

__all__ = ["Note", "Scope", "Environment", "Notes", "walk"]

#: Where a check's note goes (None: nothing to report).
Note = Callable[[str | None], None]


@dataclass
class Scope:
    """One piece of code to read: a function, lambda, class or bound value.

    Args:
        refs: the names the code reads (:func:`~.refs.refs`), in order.
        local: the names the code binds itself (parameters, assignments, local imports).
        imports: what its own ``import`` statements bind (local name -> dotted path).
        reads: the ids of its harmless ``sys.modules`` reads (:func:`~..harmless.membership_reads`).
        own: what it proves about its own objects (:mod:`..ownership`), computed when needed.
        trusted: the code is the reference's own, which may use the reference package.
    """

    refs: Iterable[Ref]
    local: set[str]
    imports: dict[str, str]
    reads: set[int]
    own: Callable[[], Owned]
    trusted: bool = False


S = TypeVar("S", bound=Scope)


class Environment(Protocol, Generic[S]):
    """What module-level names mean, for one walk from one graded function."""

    rules: Rules

    def start(self, note: Note) -> list[Any]:
        """The things to read first (the graded function's bindings)."""
        ...

    def open(self, item: Any, note: Note) -> tuple[list[Any], S | None]:
        """The things ``item`` leads to without code of its own (a container's items), and the
        code to read in it, if any; ``([], None)`` for an item already read."""
        ...

    def unbound_builtin(self, head: str, scope: S) -> bool:
        """Whether the name ``head`` (one of :data:`~.rules.DYNAMIC_BUILTINS`) is the builtin."""
        ...

    def resolve(self, ref: Ref, scope: S, note: Note) -> list[Any]:
        """Check a reference whose first name is not local to ``scope``; returns what it
        reaches, to read in turn."""
        ...


class Notes:
    """The notes of one walk, each once, in the order they were found."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def add(self, msg: str | None) -> None:
        if msg and msg not in self.found:
            self.found.append(msg)


def walk(env: Environment[S]) -> list[str]:
    """Every forbidden use reachable from where ``env`` starts, as notes for the student.

    Returns:
        The notes, each once, in the order found; a walk that nests too deeply ends with a note
        that says so.
    """
    notes = Notes()
    todo = env.start(notes.add)
    try:
        while todo:
            more, scope = env.open(todo.pop(), notes.add)
            todo.extend(more)
            if scope is not None:
                todo.extend(_read(scope, env, notes.add))
    except RecursionError:
        notes.add("could not be checked: the code is nested too deeply")
    return notes.found


def _read(scope: S, env: Environment[S], note: Note) -> list[Any]:
    """Check every reference of ``scope``; returns what they reach."""
    reached: list[Any] = []
    for ref in scope.refs:
        if _local_ref(ref, scope, env.rules, note):
            continue
        head = ref.chain[0]
        if head in DYNAMIC_BUILTINS and env.unbound_builtin(head, scope):
            note(builtin_note(head, ref, scope.own))
            continue
        reached.extend(env.resolve(ref, scope, note))
    return reached


def _local_ref(ref: Ref, scope: Scope, r: Rules, note: Note) -> bool:
    """The checks that do not depend on the environment: dynamic constructs, attributes that
    reach into functions and frames, imports made inside the code, names local to it. True when
    the reference needs nothing more (no module-level name to resolve)."""
    if ref.dynamic:
        note(dynamic_note(ref.dynamic))
        return True
    note(attr_note(ref))
    head = ref.chain[0]
    if head in scope.imports:
        path = ".".join([scope.imports[head], *ref.chain[1:]])
        note(check_path(path, ref.written, r, scope.trusted))
        note(method_note(ref, r, path))
        return True
    if head in scope.local or head == "<expr>":
        note(method_note(ref, r, None, scope.own))
        return True
    return False
