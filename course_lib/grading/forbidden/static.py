"""The static environment: what names mean in a notebook's cells, read without running them.

The autograder never runs student code in its own process, so it reads every module-level
binding of the notebook (:class:`StaticEnvironment`) and walks from a graded name through
them (:class:`StaticScan`, the :class:`~.walk.Environment` of :func:`scan`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, cast

from ..aliases import Aliases, dotted
from ..aliases import resolve as resolve_aliases
from ..harmless import harmless, membership_reads
from ..liveness import LiveBindings
from ..ownership import Owned, Proof, owned, static_proof
from ..parsing import walk as nodes_of
from .refs import FUNCTIONS, Chain, Ref, local_imports, refs, stored_names
from .rules import Rules, check_path, graded_note, method_note
from .walk import Note, Scope, walk

__all__ = ["StaticEnvironment", "StaticScan", "scan", "reached_definitions"]


class StaticEnvironment:
    """What module-level names mean in a notebook, read from its cells without running them.

    A name may be bound several times (in different cells, or rebound later); every binding
    counts, since the scanner cannot know which one is current when the function runs.
    """

    def __init__(self, trees: Iterable[ast.Module]):
        self.imports: dict[str, set[str]] = {}
        self.star: set[str] = set()  # modules imported with `from m import *`
        self.bindings: dict[str, list[ast.AST]] = {}
        self.attr_bindings: dict[str, list[ast.AST]] = {}  # "torch.exp" = ... (monkeypatching)
        self.dynamic_bindings: list[ast.AST] = []  # values stored through globals()[...] or setattr()
        self._read: dict[tuple[str, int], tuple[ast.AST, Any]] = {}  # (what, id) -> (node, what it has)
        self._attr_stores: list[tuple[Chain, ast.AST]] = []  # torch.exp = ...: keyed once all is bound
        self.trees = list(trees)
        for tree in self.trees:
            for stmt in tree.body:
                self._module_statement(stmt)
            nodes = nodes_of(tree)
            if not any(isinstance(node, ast.Global) for node in nodes):
                continue
            for node in nodes:  # `global x` inside functions binds x at module level
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inside = nodes_of(node)
                    declared = {n for g in inside if isinstance(g, ast.Global) for n in g.names}
                    if declared:
                        for sub in inside:
                            self._store(sub, only=declared)
        self.aliases: Aliases = resolve_aliases(self.bindings, self.imports, self.star)
        for chain, value in self._attr_stores:
            for path in self.paths(chain) or {".".join(chain)}:
                self.attr_bindings.setdefault(path, []).append(value)

    def _cached(self, what: str, node: ast.AST, read: Callable[[ast.AST], Any]) -> Any:
        """``read(node)``, once per notebook (each graded name's scan and the review flags read
        the same functions); the node is kept alive with it, and callers never change it."""
        if (what, id(node)) not in self._read:
            self._read[what, id(node)] = (node, read(node))
        return self._read[what, id(node)][1]

    def local_imports(self, node: ast.AST) -> dict[str, str]:
        return cast(dict[str, str], self._cached("imports", node, local_imports))

    def refs(self, node: ast.AST) -> list[Ref]:
        return cast(list[Ref], self._cached("refs", node, lambda n: list(refs(n))))

    def membership_reads(self, node: ast.AST) -> set[int]:
        return cast(set[int], self._cached("reads", node, membership_reads))

    @functools.cached_property
    def proof(self) -> Proof:
        """What the notebook proves about its own objects (:func:`~.ownership.static_proof`)."""
        return static_proof(self.trees, self.bindings, self.imports)

    def owned(self, node: ast.AST) -> Owned:
        return cast(Owned, self._cached("owned", node, lambda n: owned(n, self.proof)))

    def _bind(self, name: str, value: ast.AST) -> None:
        self.bindings.setdefault(name, []).append(value)

    def _module_statement(self, stmt: ast.stmt) -> None:
        for node in _module_level_nodes(stmt):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self.imports.setdefault(a.asname, set()).add(a.name)
                    else:
                        root = a.name.split(".")[0]
                        self.imports.setdefault(root, set()).add(root)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    if a.name == "*":
                        self.star.add(node.module)
                    else:
                        self.imports.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._bind(node.name, node)
            else:
                self._store(node)

    def _store(self, node: ast.AST, only: set[str] | None = None) -> None:
        """Record what an assignment-like node binds (``only``: just these names, bound by a
        ``global`` statement inside a function)."""
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and only and node.name in only:
            self._bind(node.name, node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            self.dynamic_bindings.extend(node.args[2:3])
        for target, value in _assigned(node):
            for t in nodes_of(target):
                if isinstance(t, ast.Name) and (only is None or t.id in only):
                    self._bind(t.id, value)
                elif only is None:
                    self._store_into(t, value)

    def _store_into(self, target: ast.AST, value: ast.AST) -> None:
        """Record a value stored into an attribute or an item (``obj.fn = ...``, ``table[k] = ...``)."""
        if isinstance(target, ast.Attribute):
            chain = dotted(target)
            if chain and chain[0] != "<expr>":
                self._attr_stores.append((chain, value))
                if chain[0] not in self.imports:
                    self._bind(chain[0], value)  # obj.fn = ...: reading obj may reach it
        elif isinstance(target, ast.Subscript):
            base = dotted(target.value) or []
            if isinstance(target.value, ast.Call) or base[:1] in (["globals"], ["vars"], ["locals"]):
                self.dynamic_bindings.append(value)  # globals()["name"] = ...
            elif base and base[0] != "<expr>":
                self._bind(base[0], value)  # table["key"] = ...: reading table may reach it

    def paths(self, chain: Chain) -> set[str]:
        """The dotted paths a chain may stand for (``F.softmax`` -> ``torch.nn.functional.softmax``),
        through every binding of its first name, however long the chain of aliases
        (:mod:`.aliases`: each binding is expanded once per notebook)."""
        rest = chain[1:]
        return {".".join([p, *rest]) for p in self.aliases.of(chain[0])}

    def values(self, name: str) -> list[ast.AST]:
        return self.bindings.get(name, [])

    @functools.cached_property
    def live_values(self) -> Callable[[str], list[ast.AST]]:
        """The bindings of a name that graded code can reach (:class:`~.liveness.LiveBindings`)."""
        opaque = bool(self.star or self.dynamic_bindings or "check" in self.bindings)
        return LiveBindings(self.trees, self.bindings, self.imports, opaque)


def _assigned(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """The (target, value) pairs an assignment-like node stores (an assignment, a loop, a ``with``)."""
    if isinstance(node, ast.Assign):
        return [(t, node.value) for t in node.targets]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        return [(node.target, node.value)]
    if isinstance(node, ast.NamedExpr):
        return [(node.target, node.value)]
    if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        return [(node.target, node.iter)]
    if isinstance(node, (ast.With, ast.AsyncWith)):
        return [(item.optional_vars, item.context_expr) for item in node.items if item.optional_vars]
    return []


def _module_level_nodes(stmt: ast.stmt) -> Iterator[ast.AST]:
    """A module-level statement and the statements nested in its blocks (if, for, try, with),
    but not inside function or class bodies."""
    stack: list[ast.AST] = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.stmt, ast.NamedExpr, ast.comprehension, ast.Call)) or isinstance(child, ast.expr):
                stack.append(child)


class StaticScan:
    """The walk from one graded name through a notebook's bindings (a :class:`~.walk.Environment`).

    Every binding of every name the code reads is read in turn (once each): the graded name's
    own bindings, values stored through ``globals()[...]`` or ``setattr``, and attributes
    stored into a module (``torch.exp = torch.softmax``).

    Args:
        env: the notebook's names.
        name: the graded name to start from.
        rules: the exercise's forbidden calls.
        boundary: graded callees whose bindings are not read: the reference stands in for
            them, and what they call is charged to them (:mod:`..charging`).
    """

    def __init__(self, env: StaticEnvironment, name: str, rules: Sequence[str], boundary: Collection[str] = ()):
        self.env = env
        self.name = name
        self.rules = Rules.of(rules, live=False)
        self.boundary = frozenset(boundary) - {name}
        self._seen: set[int] = set()
        self._seen_names: set[str] = set()

    def start(self, note: Note) -> list[ast.AST]:
        reached = self._visit_name(self.name, note)
        for path in self.env.imports.get(self.name, ()):  # from torch import softmax
            note(check_path(path, self.name, self.rules))
        for value in self.env.dynamic_bindings:  # globals()["name"] = ..., setattr(module, ...)
            reached.extend(self._reach(value))
        return reached

    def open(self, node: ast.AST, note: Note) -> tuple[list[ast.AST], Scope]:
        local = stored_names(node) if isinstance(node, (*FUNCTIONS, ast.ClassDef)) else set()
        if isinstance(node, (*FUNCTIONS, ast.ClassDef)) and hasattr(node, "name"):
            local.discard(node.name)
        own = functools.partial(self.env.owned, node)
        scope = Scope(self.env.refs(node), local, self.env.local_imports(node), self.env.membership_reads(node), own)
        return [], scope

    def unbound_builtin(self, head: str, scope: Scope) -> bool:
        return head not in self.env.bindings and head not in self.env.imports

    def resolve(self, ref: Ref, scope: Scope, note: Note) -> list[ast.AST]:
        env, head = self.env, ref.chain[0]
        paths = env.paths(ref.chain)
        if head in env.aliases.overflow:
            note(f"could not be checked: {head} may stand for too many dotted paths")
        reached: list[ast.AST] = []
        for path in paths:
            note(None if harmless(path, ref.node, scope.reads) else check_path(path, ref.written, self.rules))
            for value in env.attr_bindings.get(path, ()):  # torch.exp = torch.softmax
                reached.extend(self._reach(value))
        note(method_note(ref, self.rules, next(iter(paths)) if len(paths) == 1 else None, scope.own))
        if head in env.bindings:
            reached.extend(self._visit_name(head, note))
        return reached

    def _visit_name(self, n: str, note: Note) -> list[ast.AST]:
        """The bindings of module-level name ``n`` not read yet (none the second time)."""
        if n in self._seen_names:
            return []
        self._seen_names.add(n)
        if n in self.rules.graded and n != self.name and self.env.values(n):
            note(graded_note(n))
        if n in self.boundary:
            return []
        return [node for value in self.env.live_values(n) for node in self._reach(value)]

    def _reach(self, node: ast.AST) -> list[ast.AST]:
        """``[node]`` the first time, ``[]`` after."""
        if id(node) in self._seen:
            return []
        self._seen.add(id(node))
        return [node]


def scan(name: str, rules: Sequence[str], env: StaticEnvironment, boundary: Collection[str] = ()) -> list[str]:
    """Forbidden uses reachable from the graded name ``name`` in a notebook (static).

    Args:
        name: the graded function's name.
        rules: the exercise's forbidden calls.
        env: the notebook's names.
        boundary: graded callees not to read (see :class:`StaticScan`).

    Returns:
        The notes, each once, in the order found.
    """
    return walk(StaticScan(env, name, rules, boundary))


class _Reaching(StaticScan):
    """A :class:`StaticScan` without rules that keeps the functions and classes it opens."""

    def __init__(self, env: StaticEnvironment, name: str, boundary: Collection[str]):
        super().__init__(env, name, (), boundary)
        self.definitions: list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = []

    def open(self, node: ast.AST, note: Note) -> tuple[list[ast.AST], Scope]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != self.name:
            self.definitions.append(node)
        return super().open(node, note)


def reached_definitions(
    env: StaticEnvironment, name: str, boundary: Collection[str] = ()
) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    """The notebook's own functions and classes that the graded name ``name`` reaches: the
    definitions the forbidden-call scan (:func:`scan`) reads from it, transitively.

    Args:
        env: the notebook's names.
        name: the graded function's name (its own definitions are not listed).
        boundary: names whose bindings are not followed (the other graded functions).

    Returns:
        The ``def`` and ``class`` nodes, each once, in the order the walk opened them.
    """
    reaching = _Reaching(env, name, boundary)
    walk(reaching)
    return reaching.definitions
