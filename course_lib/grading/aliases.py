"""What a notebook's module-level names stand for, as dotted paths, each binding expanded once.

``F = torch.nn.functional`` makes ``F.softmax`` stand for ``torch.nn.functional.softmax``; a
name bound several times stands for every path of every binding. Following each binding
recursively, name by name, costs one expansion per *way* of reaching an import: a chain of
names each bound several times (``a1 = a2`` twice, ``a2 = a3`` twice, ..., ``a9 = torch``)
costs ``k**depth`` expansions, hours for a 1 KB cell. Here the paths of every name are found
once (:func:`resolve`): each path a name gets is carried along every binding that reads the
name (a worklist), so each (path, binding) pair is expanded at most once and the work is at
most :data:`MAX_PATHS` times the number of bindings, linear in the notebook's size. A chain
of any length is followed to its end.

Two bounds keep the sets finite:

- a cycle of bindings that adds attributes (``x = torch``, then ``x = x.nn`` in a loop) would
  give ever longer paths: along a binding inside a cycle, paths longer than
  :data:`MAX_CYCLE_PARTS` parts are not followed (such a path names nothing real; the runtime
  layer, :mod:`.opwatch`, sees what runs anyway);
- a name that would stand for more than :data:`MAX_PATHS` paths is listed in
  :attr:`Aliases.overflow`: it cannot be checked, and the notebook is held for review.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["MAX_PATHS", "MAX_CYCLE_PARTS", "Aliases", "dotted", "resolve"]

#: The most dotted paths one name may stand for; more and the notebook is held for review.
MAX_PATHS = 1000
#: The most parts of a path made by going round a cycle of bindings (``x = x.nn``).
MAX_CYCLE_PARTS = 24

Edges = dict[str, list[tuple[str, tuple[str, ...]]]]


def dotted(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; an attribute of an expression as ``["<expr>", ...]``.

    Args:
        node: an expression.

    Returns:
        The parts, or None when ``node`` is neither a name nor an attribute.
    """
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    if parts:
        return ["<expr>", *parts[::-1]]
    return None


@dataclass
class Aliases:
    """The dotted paths each module-level name stands for.

    Attributes:
        prefixes: name -> the paths it stands for (only names that stand for some).
        bound: names the notebook binds or imports (an unbound name may come from a star import).
        star: modules imported with ``from m import *``.
        expansions: (path, binding) pairs expanded while resolving: the work done, at most
            :data:`MAX_PATHS` times the number of bindings.
        overflow: names that would stand for more than :data:`MAX_PATHS` paths, first found first.
    """

    prefixes: dict[str, set[str]] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    star: tuple[str, ...] = ()
    expansions: int = 0
    overflow: list[str] = field(default_factory=list)

    def of(self, head: str) -> set[str]:
        """The paths the name ``head`` stands for (a star-imported module's attribute when the
        notebook neither binds nor imports it). Only read the set returned."""
        if head in self.prefixes:
            return self.prefixes[head]
        if head in self.bound or head == "<expr>":
            return set()
        return {f"{m}.{head}" for m in self.star}

    def add(self, name: str, path: str) -> bool:
        """Record that ``name`` stands for ``path``; True when it is new and within the bound."""
        paths = self.prefixes.setdefault(name, set())
        if path in paths:
            return False
        if len(paths) >= MAX_PATHS:
            if name not in self.overflow:
                self.overflow.append(name)
            return False
        paths.add(path)
        return True


def resolve(
    bindings: Mapping[str, Sequence[ast.AST]], imports: Mapping[str, Iterable[str]], star: Iterable[str]
) -> Aliases:
    """The paths of every module-level name, each (path, binding) pair expanded once.

    Args:
        bindings: name -> the values bound to it (a binding to a name or attribute,
            ``a = b.c``, makes ``a`` stand for what ``b`` stands for, with ``.c``).
        imports: name -> the modules or objects it is imported as.
        star: modules imported with ``from m import *``.

    Returns:
        The :class:`Aliases`.
    """
    edges = _edges(bindings)
    component = _components(edges)
    out = Aliases(bound=set(bindings) | set(imports), star=tuple(sorted(star)))
    todo: list[tuple[str, str]] = []
    for name, paths in imports.items():
        todo += [(name, p) for p in sorted(paths) if out.add(name, p)]
    for name in edges:
        if name not in out.bound:
            todo += [(name, p) for p in sorted(out.of(name)) if out.add(name, p)]
    while todo:
        source, path = todo.pop()
        for target, suffix in edges.get(source, ()):
            out.expansions += 1
            new = ".".join((path, *suffix))
            if component[source] == component[target] and new.count(".") >= MAX_CYCLE_PARTS:
                continue
            if out.add(target, new):
                todo.append((target, new))
    return out


def _edges(bindings: Mapping[str, Sequence[ast.AST]]) -> Edges:
    """name -> [(a name bound to it, with the attributes added)] (``a = b.c``: b -> (a, (c,)))."""
    edges: Edges = {}
    for name, values in bindings.items():
        for value in values:
            sub = dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
            if sub and sub[0] != "<expr>" and sub != [name]:
                edges.setdefault(sub[0], []).append((name, tuple(sub[1:])))
    return edges


def _components(edges: Edges) -> dict[str, int]:
    """The strongly connected component of every name in ``edges`` (Tarjan's algorithm, without
    recursion): two names share one when each reaches the other through bindings."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in list(edges):
        if root in index:
            continue
        enter(root)
        work = [(root, iter(edges.get(root, ())))]
        while work:
            node, targets = work[-1]
            for target, _ in targets:
                if target not in index:
                    enter(target)
                    work.append((target, iter(edges.get(target, ()))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = index[node]
                        if member == node:
                            break
    return component


def overflow_flags(
    aliases: Aliases, bindings: Mapping[str, Sequence[ast.AST]], cells: Iterable[tuple[int, ast.Module]]
) -> list[str]:
    """A review flag for each name (at most 5) that stands for too many paths to check.

    Args:
        aliases: the notebook's :class:`Aliases`.
        bindings: its module-level bindings (where each name is bound).
        cells: (cell number, tree) of every readable cell.

    Returns:
        ``cell N, line L: <name> may stand for more than ... paths ...``, one a name.
    """
    names = aliases.overflow[:5]
    if not names:
        return []
    first = {id(bindings[n][0]): n for n in names if bindings.get(n)}
    where: dict[str, str] = {}
    for index, tree in cells:
        for node in ast.walk(tree):
            if id(node) in first and first[id(node)] not in where:
                where[first[id(node)]] = f"cell {index}, line {getattr(node, 'lineno', 0)}"
    return [
        f"{where.get(n, 'the notebook')}: {n} may stand for more than {MAX_PATHS} dotted paths "
        "(names bound to names, many times over), too many to check"
        for n in names
    ]
