"""A notebook as the autograder reads it: its cells, their names, and what holds it for review."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..aliases import overflow_flags
from ..harmless import harmless, membership_reads
from ..parsing import SHARED_CHARS
from .cells import ParsedCell, cell_reading, parse_cells
from .refs import local_imports
from .rules import REVIEW_ATTRS, REVIEW_BUILTINS, REVIEW_PATHS, torch_internal, under
from .static import StaticEnvironment, scan

__all__ = ["review_flags", "NotebookScan", "violations_in_source"]


def review_flags(cells: Sequence[ParsedCell], env: StaticEnvironment) -> list[str]:
    """Uses, anywhere in the notebook, of tools that read the grader's state in the student's
    process or replace torch's dispatch (``ctypes``, frames, ``gc.get_objects``, torch's
    dispatcher internals). Each is a reason to hold the submission for review."""
    flags: list[str] = []
    for cell in cells:
        if cell.tree is None:
            continue
        if len(cell.source) <= SHARED_CHARS:
            local, refs, reads = cell_reading(cell.source)
        else:
            local, refs, reads = local_imports(cell.tree), env.refs(cell.tree), membership_reads(cell.tree)
        for ref in refs:
            if ref.dynamic:
                continue
            reason = None
            for part in ref.chain[1:]:
                if part in REVIEW_ATTRS:
                    reason = f"the attribute {part}"
            head = ref.chain[0]
            paths = {".".join([local[head], *ref.chain[1:]])} if head in local else env.paths(ref.chain)
            if head in REVIEW_BUILTINS and head not in env.bindings and head not in local:
                reason = f"{head}()" if head != "__builtins__" else head
            for path in paths:
                if (under(path, REVIEW_PATHS) or torch_internal(path)) and not harmless(path, ref.node, reads):
                    reason = path
            if reason:
                line = getattr(ref.node, "lineno", 0)
                flag = f"cell {cell.index}, line {line}: uses {reason}"
                if flag not in flags:
                    flags.append(flag)
    too_many = [(c.index, c.tree) for c in cells if c.tree is not None]
    return (overflow_flags(env.aliases, env.bindings, too_many) + flags)[:20]


class NotebookScan:
    """A notebook's cells, parsed once, with the static environment built from them."""

    def __init__(self, sources: Sequence[str]):
        self.cells = parse_cells(sources)
        self.env = StaticEnvironment(c.tree for c in self.cells if c.tree is not None)

    @property
    def problems(self) -> list[str]:
        """``cell N: <why>`` for every cell that cannot be read (and so is not run)."""
        return [f"cell {c.index}: {c.problem}" for c in self.cells if c.problem]

    def runnable_sources(self) -> list[str]:
        """What the sandbox runs: each readable cell as it is, an unreadable cell as nothing."""
        return [c.source if c.tree is not None else "" for c in self.cells]

    def violations(self, name: str, rules: Sequence[str], boundary: Collection[str] = ()) -> list[str]:
        return scan(name, rules, self.env, boundary)

    def review_flags(self) -> list[str]:
        return review_flags(self.cells, self.env)


def violations_in_source(source: str, name: str, rules: Sequence[str]) -> list[str]:
    """Forbidden uses reachable from ``name`` in one piece of source (a notebook's cells
    joined, or a module)."""
    return NotebookScan([source]).violations(name, rules)
