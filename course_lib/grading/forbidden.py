"""Find calls a graded function may not use, by reading the code (the static layer).

Each exercise lists calls the student must write themselves (``torch.softmax`` inside
``softmax``, ``F.scaled_dot_product_attention`` inside ``scaled_dot_product_attention``).
Any use of ``course_lib`` (the reference implementations) is always forbidden, and so is
*dynamic access*, code that hides what it calls: ``eval``/``exec``, ``getattr`` with a
computed name, ``globals()``, frames, ``ctypes``, torch's dispatcher internals.

One scanner serves the notebook's :func:`course_lib.grading.check` and the autograder. It
starts from every binding of the graded name and follows, transitively, every name the
code reads: helper functions, lambdas, classes, module-level aliases (``sm = torch.softmax``,
``nn = torch.nn``), containers, decorators and default arguments, and a later rebinding of
the graded name. What a name means comes from an *environment*:

- :class:`StaticEnvironment` (the autograder, which never runs student code in its own
  process): every module-level binding in the notebook's cells, each cell parsed once and
  on its own, so one cell that cannot be parsed is reported instead of hiding the others;
- :class:`LiveEnvironment` (a notebook): the function's globals and closure, as live
  objects, and the source of the functions and classes they point to.

The runtime layer (:mod:`course_lib.grading.opwatch`) then watches which torch functions and
operators actually run, so a call the scanner could not see still counts.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import types
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from .aliases import Aliases, dotted, overflow_flags
from .aliases import resolve as resolve_aliases
from .graded_names import main_attribute
from .harmless import harmless, membership_reads
from .livecode import code_loads, defined_here, object_path, source_tree
from .liveness import LiveBindings
from .oplists import OPS_OF_RULE
from .opwatch import resolve
from .ownership import Owned, Proof, live_owned, own_bound_method, owned, static_proof
from .parsing import SHARED_CHARS, SHARED_TOTAL_CHARS, parse_shared, walk
from .sourcecache import SourceCache

__all__ = [
    "ParsedCell",
    "parse_cells",
    "NotebookScan",
    "StaticEnvironment",
    "LiveEnvironment",
    "scan",
    "review_flags",
    "violations_in_function",
    "violations_in_source",
    "watch_spec",
    "OPS_OF_RULE",
]

REFERENCE_PACKAGE = "course_lib"

#: Builtins that hide what code does (a call through them cannot be checked).
DYNAMIC_BUILTINS = {
    "eval",
    "exec",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "breakpoint",
    "setattr",
    "delattr",
}
#: Ways to reach a frame (the grader's locals included) or to trace or audit execution.
FRAME_ACCESS = (
    "inspect.currentframe",
    "inspect.stack",
    "inspect.getouterframes",
    "inspect.getinnerframes",
    "inspect.trace",
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
)
#: Modules (and module attributes) that give access to frames, memory, file descriptors or
#: torch's dispatcher, through which a forbidden call or the grader's own state can be reached.
DYNAMIC_PATHS = (
    "ctypes",
    "gc",
    "importlib",
    *(f"builtins.{b}" for b in sorted(DYNAMIC_BUILTINS)),
    "builtins.__builtins__",
    *FRAME_ACCESS,
    "sys.modules",
    "os.read",
    "os.write",
    "os.pread",
    "os.pwrite",
    "os.readv",
    "os.writev",
    "os.dup",
    "os.dup2",
    "os.fdopen",
    "os.sendfile",
    "os.splice",
    "os.fork",
    "os.kill",
    "io.FileIO",
    "socket.fromfd",
    "mmap",
    "fcntl",
    "marshal",
    "torch._C",
    "torch.ops",
    "torch._ops",
    "torch.library",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch._dispatch",
    "torch._dynamo",
)
#: Attributes that reach into functions, frames and namespaces.
DYNAMIC_ATTRS = {
    "__globals__",
    "__code__",
    "__closure__",
    "__builtins__",
    "__dict__",
    "__subclasses__",
    "__mro__",
    "__bases__",
    "__base__",
    "__getattribute__",
    "__import__",
    "__loader__",
    "__spec__",
    "__self__",
    "__func__",
    "__wrapped__",
    "__reduce__",
    "__reduce_ex__",
    "__torch_function__",
    "__torch_dispatch__",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "gi_frame",
    "gi_code",
    "cr_frame",
    "ag_frame",
    "tb_frame",
    "tb_next",
}
#: What a notebook may not use anywhere, even outside graded functions: the tools that read
#: the grader's own state in the student's process (its frames, its objects, its memory) or
#: replace torch's dispatch. A notebook that uses them is held for review.
REVIEW_PATHS = (
    "ctypes",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    *FRAME_ACCESS,
    "torch._C",
    "torch.ops",
    "torch._ops",
    "torch.library",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch._dispatch",
    "sys.modules",
    "importlib",
    *(f"builtins.{b}" for b in ("eval", "exec", "compile", "__import__")),
)
#: Parts of torch's dispatcher, wherever they are reached from (``torch.nn.modules.torch._C``).
TORCH_INTERNALS = {"_C", "_ops", "ops", "_python_dispatch", "overrides", "_dynamo", "library", "_dispatch"}
REVIEW_BUILTINS = {"eval", "exec", "compile", "__import__", "__builtins__"}
REVIEW_ATTRS = {
    "__globals__",
    "__code__",
    "__closure__",
    "__builtins__",
    "__torch_function__",
    "__torch_dispatch__",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "tb_frame",
}


def watch_spec(rules: Sequence[str]) -> dict[str, list[str]]:
    """What the runtime layer watches for an exercise's rules: torch functions by dotted path,
    tensor methods by name, and aten operators (plain data, sent to the sandbox)."""
    functions = sorted({r for r in rules if ":" not in r})
    methods = sorted({r.split(":", 1)[1] for r in rules if r.startswith("method:")})
    ops = sorted({op for r in rules for op in OPS_OF_RULE.get(r, ())})
    return {"functions": functions, "methods": methods, "ops": ops}


# ---------------------------------------------------------------------------------------
# Cells: parsed once each, failing closed
# ---------------------------------------------------------------------------------------


@dataclass
class ParsedCell:
    """One code cell: its number (1-based, among code cells), source, syntax tree, and why it
    cannot run (``problem``; then ``tree`` is None and the sandbox does not run the cell)."""

    index: int
    source: str
    tree: ast.Module | None
    problem: str = ""


def parse_cells(sources: Sequence[str], first: int = 1) -> list[ParsedCell]:
    """Parse every cell on its own. A cell that cannot be parsed (syntax error, nesting too
    deep, invalid characters) gets a ``problem`` and no tree: it is reported and not run."""
    cells = []
    for i, src in enumerate(sources, first):
        tree, problem = _parse_cell(src)
        cells.append(ParsedCell(i, src, tree, problem))
    return cells


def _parse_cell(src: str) -> tuple[ast.Module | None, str]:
    """(tree, "") or (None, why the cell cannot be read). The tree is shared with every notebook
    that has the same cell (:func:`~course_lib.grading.parsing.parse_shared`): only read here."""
    try:
        return parse_shared(src), ""
    except SyntaxError as e:
        where = f" (line {e.lineno})" if e.lineno else ""
        msg = " ".join(str(e.msg).split())[:200]
        return None, f"{type(e).__name__}: {msg}{where}"
    except RecursionError:
        return None, "the code is nested too deeply to be read"
    except MemoryError:
        return None, "the code is too large to be read"
    except (ValueError, UnicodeError, OverflowError) as e:
        return None, f"the code cannot be read ({type(e).__name__})"


def _read_cell(src: str) -> tuple[dict[str, str], list[Ref], set[int]]:
    tree = parse_shared(src)
    return _local_imports(tree), list(_refs(tree)), membership_reads(tree)


#: The local imports, the refs and the harmless ``sys.modules`` reads
#: (:func:`~.harmless.membership_reads`) of a readable cell of at most
#: :data:`~course_lib.grading.parsing.SHARED_CHARS` characters, read once from its shared tree
#: while it is among the most recently used :data:`~.parsing.SHARED_TOTAL_CHARS` characters
#: (the refs keep the tree alive: as much memory again as the parse cache, at most): only
#: read, never changed.
_cell_reading: SourceCache[tuple[dict[str, str], list[Ref], set[int]]] = SourceCache(
    _read_cell, SHARED_TOTAL_CHARS, SHARED_CHARS
)


# ---------------------------------------------------------------------------------------
# Reading code: dotted names, scopes
# ---------------------------------------------------------------------------------------

Chain = list[str]
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


_chain = dotted


@dataclass
class Ref:
    """A dotted name read somewhere in the code, or a dynamic construct found there."""

    chain: Chain
    written: str
    node: ast.AST
    dynamic: str = ""  # a reason, when the construct itself hides what is called


def _refs(root: ast.AST) -> Iterator[Ref]:
    """Every dotted name read inside ``root`` (whole chains only), ``getattr`` with a constant
    name as the attribute it reads, and dynamic constructs."""
    nodes = walk(root)
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    for node in nodes:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                base = _chain(node.args[0]) or ["<expr>"]
                read = base + [node.args[1].value]
                yield Ref(read, ".".join(read), node)
            elif node.func.id == "getattr":
                yield Ref(["getattr"], "getattr", node, "getattr() with a computed name")
        if id(node) in inner:
            continue  # part of a longer dotted name, which is read whole
        chain: list[str] | None = None
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            chain = [node.id]
        if chain:
            yield Ref(chain, ".".join(chain), node)


def _stored_names(root: ast.AST) -> set[str]:
    """Names bound inside a function (parameters and stores), the function's locals."""
    names: set[str] = set()
    declared: set[str] = set()
    for node in walk(root):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not root:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names - declared


def _local_imports(root: ast.AST) -> dict[str, str]:
    """``import ...`` inside a function body: local name -> dotted path."""
    found: dict[str, str] = {}
    for node in walk(root):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    found[a.asname] = a.name
                else:
                    found[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                if a.name != "*":
                    found[a.asname or a.name] = f"{node.module}.{a.name}"
    return found


def _under(path: str, prefixes: Iterable[str]) -> str | None:
    for p in prefixes:
        if path == p or path.startswith(p + "."):
            return p
    return None


def _describe(path: str, written: str) -> str:
    shown = path if path == written else f"{path} (written {written})"
    if path.split(".")[0] == REFERENCE_PACKAGE:
        return f"uses {shown}, a reference implementation: graded functions must be your own code"
    return f"uses {shown}, which this exercise asks you to write yourself"


def _graded_note(name: str) -> str:
    return f"calls your own {name}, which this exercise asks you to do without (write it out here)"


def _dynamic_note(what: str) -> str:
    return f"uses {what}, which graded functions may not use (it can hide what the code calls)"


# ---------------------------------------------------------------------------------------
# Environments
# ---------------------------------------------------------------------------------------


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
            nodes = walk(tree)
            if not any(isinstance(node, ast.Global) for node in nodes):
                continue
            for node in nodes:  # `global x` inside functions binds x at module level
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    inside = walk(node)
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
        return cast(dict[str, str], self._cached("imports", node, _local_imports))

    def refs(self, node: ast.AST) -> list[Ref]:
        return cast(list[Ref], self._cached("refs", node, lambda n: list(_refs(n))))

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
        """Record what an assignment-like node binds."""
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.NamedExpr):
            pairs = [(node.target, node.value)]
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            pairs = [(item.optional_vars, item.context_expr) for item in node.items if item.optional_vars]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and only and node.name in only:
            self._bind(node.name, node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            self.dynamic_bindings.extend(node.args[2:3])
        for target, value in pairs:
            for t in walk(target):
                if isinstance(t, ast.Name) and (only is None or t.id in only):
                    self._bind(t.id, value)
                elif isinstance(t, ast.Attribute) and only is None:
                    chain = _chain(t)
                    if chain and chain[0] != "<expr>":
                        self._attr_stores.append((chain, value))
                        if chain[0] not in self.imports:
                            self._bind(chain[0], value)  # obj.fn = ...: reading obj may reach it
                elif isinstance(t, ast.Subscript) and only is None:
                    base = _chain(t.value) or []
                    if isinstance(t.value, ast.Call) or base[:1] in (["globals"], ["vars"], ["locals"]):
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


class LiveEnvironment:
    """What names mean inside a live function: its globals, closure and builtins."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn


# ---------------------------------------------------------------------------------------
# The scan
# ---------------------------------------------------------------------------------------


@dataclass
class _Rules:
    exact: set[str]
    methods: set[str]
    objects: dict[int, str] = field(default_factory=dict)  # live mode: id(object) -> rule
    graded: set[str] = field(default_factory=set)  # the notebook's own graded functions not to call

    @classmethod
    def of(cls, rules: Sequence[str], live: bool) -> _Rules:
        r = cls(
            {x for x in rules if ":" not in x},
            {x.split(":", 1)[1] for x in rules if x.startswith("method:")},
            graded={x.split(":", 1)[1] for x in rules if x.startswith("graded:")},
        )
        if live:
            for rule in r.exact:
                obj = resolve(rule)
                if obj is not None:
                    r.objects[id(obj)] = rule
        return r


def _torch_internal(path: str) -> bool:
    parts = path.split(".")
    return parts[0] == "torch" and any(p in TORCH_INTERNALS for p in parts[1:])


def _check_path(path: str, written: str, rules: _Rules, trusted: bool = False) -> str | None:
    own = main_attribute(path)  # __main__.multi_head_attention is the graded name itself
    if own is not None and own in rules.graded:
        return _graded_note(own)
    if path in rules.exact:
        return _describe(path, written)
    if path.split(".")[0] == REFERENCE_PACKAGE and not trusted:
        return _describe(path, written)
    if _under(path, DYNAMIC_PATHS) or _torch_internal(path):
        return _dynamic_note(path if path == written else f"{path} (written {written})")
    return None


def _method_note(ref: Ref, rules: _Rules, path: str | None, own: Callable[[], Owned] | None = None) -> str | None:
    """A forbidden tensor method, unless ``own`` proves it a method of the student's own object."""
    if len(ref.chain) > 1 and ref.chain[-1] in rules.methods:
        if path is None or path == f"torch.Tensor.{ref.chain[-1]}" or ref.chain[0] == "<expr>":
            if own is None or len(ref.chain) != 2 or id(ref.node) not in own().methods:
                return _describe(f"the tensor method .{ref.chain[-1]}()", ref.written)
    return None


def _builtin_note(head: str, ref: Ref, own: Callable[[], Owned]) -> str | None:
    """A dynamic builtin, unless it is ``setattr`` on the student's own object (:mod:`.ownership`)."""
    return None if head == "setattr" and id(ref.node) in own().setattrs else _dynamic_note(f"{head}()")


def _attr_note(ref: Ref) -> str | None:
    for part in ref.chain[1:]:
        if part in DYNAMIC_ATTRS:
            return _dynamic_note(f"the attribute {part}")
    return None


def _local_ref(
    ref: Ref,
    imports: dict[str, str],
    local: set[str],
    r: _Rules,
    note: Callable[[str | None], None],
    trusted: bool = False,
    own: Callable[[], Owned] | None = None,
) -> bool:
    """The checks every environment shares: dynamic constructs, attributes that reach into
    functions and frames, imports made inside the function, names local to it. True when the
    reference needs nothing more (no module-level name to resolve)."""
    if ref.dynamic:
        note(_dynamic_note(ref.dynamic))
        return True
    note(_attr_note(ref))
    head = ref.chain[0]
    if head in imports:
        path = ".".join([imports[head], *ref.chain[1:]])
        note(_check_path(path, ref.written, r, trusted))
        note(_method_note(ref, r, path))
        return True
    if head in local or head == "<expr>":
        note(_method_note(ref, r, None, own))
        return True
    return False


def scan(name: str, rules: Sequence[str], env: StaticEnvironment) -> list[str]:
    """Forbidden uses reachable from the graded name ``name`` in a notebook (static)."""
    r = _Rules.of(rules, live=False)
    found: list[str] = []

    def note(msg: str | None) -> None:
        if msg and msg not in found:
            found.append(msg)

    todo: list[tuple[ast.AST, set[str], dict[str, str]]] = []
    seen: set[int] = set()
    seen_names: set[str] = set()

    def visit_name(n: str) -> None:
        if n in seen_names:
            return
        seen_names.add(n)
        if n in r.graded and n != name and env.values(n):
            note(_graded_note(n))
        for value in env.live_values(n):
            push(value)

    def push(node: ast.AST) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        local = _stored_names(node) if isinstance(node, (*_FUNCTIONS, ast.ClassDef)) else set()
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)) and hasattr(node, "name"):
            local.discard(node.name)
        todo.append((node, local, env.local_imports(node)))

    visit_name(name)
    for path in env.imports.get(name, ()):  # from torch import softmax
        note(_check_path(path, name, r))
    for value in env.dynamic_bindings:  # globals()["name"] = ..., setattr(module, ...)
        push(value)
    try:
        while todo:
            node, local, imports = todo.pop()
            reads = env.membership_reads(node)
            own = functools.partial(env.owned, node)
            for ref in env.refs(node):
                if _local_ref(ref, imports, local, r, note, own=own):
                    continue
                head = ref.chain[0]
                if head in DYNAMIC_BUILTINS and head not in env.bindings and head not in env.imports:
                    note(_builtin_note(head, ref, own))
                    continue
                paths = env.paths(ref.chain)
                if head in env.aliases.overflow:
                    note(f"could not be checked: {head} may stand for too many dotted paths")
                for path in paths:
                    note(None if harmless(path, ref.node, reads) else _check_path(path, ref.written, r))
                    for value in env.attr_bindings.get(path, ()):  # torch.exp = torch.softmax
                        push(value)
                note(_method_note(ref, r, next(iter(paths)) if len(paths) == 1 else None, own))
                if head in env.bindings:
                    visit_name(head)
    except RecursionError:
        note("could not be checked: the code is nested too deeply")
    return found


def review_flags(cells: Sequence[ParsedCell], env: StaticEnvironment) -> list[str]:
    """Uses, anywhere in the notebook, of tools that read the grader's state in the student's
    process or replace torch's dispatch (``ctypes``, frames, ``gc.get_objects``, torch's
    dispatcher internals). Each is a reason to hold the submission for review."""
    flags: list[str] = []
    for cell in cells:
        if cell.tree is None:
            continue
        if len(cell.source) <= SHARED_CHARS:
            local, refs, reads = _cell_reading(cell.source)
        else:
            local, refs, reads = _local_imports(cell.tree), env.refs(cell.tree), membership_reads(cell.tree)
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
                if (_under(path, REVIEW_PATHS) or _torch_internal(path)) and not harmless(path, ref.node, reads):
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

    def violations(self, name: str, rules: Sequence[str]) -> list[str]:
        return scan(name, rules, self.env)

    def review_flags(self) -> list[str]:
        return review_flags(self.cells, self.env)


def violations_in_source(source: str, name: str, rules: Sequence[str]) -> list[str]:
    """Forbidden uses reachable from ``name`` in one piece of source (a notebook's cells
    joined, or a module)."""
    return NotebookScan([source]).violations(name, rules)


# ---------------------------------------------------------------------------------------
# A live function (a notebook's check())
# ---------------------------------------------------------------------------------------


def _is_reference(obj: Any) -> bool:
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == REFERENCE_PACKAGE
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == REFERENCE_PACKAGE and callable(obj)


def violations_in_function(fn: Callable[..., Any], rules: Sequence[str]) -> list[str]:
    """Forbidden uses reachable from a live function: its code, and transitively the code of
    the functions, lambdas and classes its globals and closure point to."""
    r = _Rules.of(rules, live=True)
    trusted_root = _is_reference(fn)  # the reference itself may call its own helpers
    found: list[str] = []

    def note(msg: str | None) -> None:
        if msg and msg not in found:
            found.append(msg)

    seen: set[int] = set()
    todo: list[Any] = [fn]
    import torch

    own_globals = getattr(fn, "__globals__", None) or {}
    graded = {id(own_globals[n]): n for n in r.graded if callable(own_globals.get(n)) and own_globals[n] is not fn}
    try:
        while todo:
            obj = todo.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if id(obj) in graded:
                note(_graded_note(graded[id(obj)]))
                continue
            if isinstance(obj, types.MethodType):
                obj = obj.__func__
            if isinstance(obj, functools.partial):
                partial = cast(Any, obj)
                todo.append(partial.func)
                todo.extend(partial.args)
                continue
            if id(obj) in r.objects:
                note(_describe(r.objects[id(obj)], getattr(obj, "__name__", "?")))
                continue
            if type(obj) in (list, tuple, set, frozenset, dict):
                items = list(obj.values() if isinstance(obj, dict) else obj)[:100]
                todo.extend(i for i in items if callable(i) or type(i) in (list, tuple, set, frozenset, dict))
                continue
            if obj is not fn and _is_reference(obj):
                continue  # already reported where it was read; its own code is the reference
            if not isinstance(obj, (types.FunctionType, type)):
                if not isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)) and defined_here(type(obj)):
                    todo.append(type(obj))  # an instance of a notebook class: its methods
                continue
            if not defined_here(obj) and obj is not fn:
                continue  # library code (torch, numpy): the runtime layer watches what it runs
            trusted = trusted_root and _is_reference(obj)
            env = dict(vars(builtins))
            namespace = getattr(obj, "__globals__", None) or vars(inspect.getmodule(obj) or builtins)
            env.update(namespace)
            code = getattr(obj, "__code__", None)
            closure = getattr(obj, "__closure__", None)
            if code is not None and closure:
                for var, cell in zip(code.co_freevars, closure, strict=False):
                    try:
                        env[var] = cell.cell_contents
                    except ValueError:
                        pass
            tree = source_tree(obj)
            if isinstance(code, types.CodeType) and (tree is None or obj.__name__ == "<lambda>"):
                # no source to read (made with exec, or a lambda among others on its line): the
                # names its bytecode loads are checked instead, so it is never left unchecked
                todo.extend(_bytecode_refs(code, env, r, note, trusted))
            if tree is None:
                continue
            local = _stored_names(tree) - ({tree.name} if hasattr(tree, "name") else set())
            imports = _local_imports(tree)
            reads = membership_reads(tree)
            own = live_owned(tree, env, namespace)
            for ref in _refs(tree):
                if _local_ref(ref, imports, local, r, note, trusted, own):
                    continue
                head = ref.chain[0]
                if head not in env:
                    note(_method_note(ref, r, None))
                    continue
                if head in DYNAMIC_BUILTINS and env[head] is getattr(builtins, head, None):
                    note(_builtin_note(head, ref, own))
                    continue
                value: Any = env[head]
                written_path = (
                    ".".join([value.__name__, *ref.chain[1:]]) if isinstance(value, types.ModuleType) else None
                )
                if written_path and harmless(written_path, ref.node, reads):
                    continue
                base: Any = None
                ok = True
                for part in ref.chain[1:]:
                    base = value
                    try:
                        value = inspect.getattr_static(value, part) if isinstance(value, type) else getattr(value, part)
                    except Exception:  # noqa: BLE001 - an attribute that does not exist or raises
                        ok = False
                        break
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                path = object_path(value) if ok else None
                if ok and id(value) in r.objects:
                    note(_describe(r.objects[id(value)], ref.written))
                elif ok and not trusted and _is_reference(value):
                    note(_describe(path or ref.written, ref.written))
                elif ok and isinstance(value, types.ModuleType):
                    note(_check_path(value.__name__, ref.written, r, trusted))
                elif written_path and (_under(written_path, DYNAMIC_PATHS) or _torch_internal(written_path)):
                    note(_dynamic_note(f"{written_path} (written {ref.written})"))
                elif ok and any(value is getattr(builtins, b) for b in DYNAMIC_BUILTINS):
                    note(_dynamic_note(f"{value.__name__}() (written {ref.written})"))
                if (
                    len(ref.chain) > 1
                    and ref.chain[-1] in r.methods
                    and (base is torch.Tensor or not isinstance(base, (types.ModuleType, type)))
                    and not own_bound_method(value, base)
                ):
                    note(_describe(f"the tensor method .{ref.chain[-1]}()", ref.written))
                if ok:
                    todo.append(value)
    except RecursionError:
        note("could not be checked: the code is nested too deeply")
    return found


def _bytecode_refs(
    code: types.CodeType, env: dict[str, Any], r: _Rules, note: Callable[[str | None], None], trusted: bool
) -> list[Any]:
    """Check the names a function's bytecode loads (when its source cannot be read); returns
    the objects they reach, to follow in turn. An attribute is forbidden when it is a forbidden
    tensor method, or the last part of a rule whose module the code also loads (``torch`` and
    ``softmax``)."""
    names, attrs = code_loads(code)
    modules = {v.__name__ for n in names if isinstance(v := env.get(n), types.ModuleType)}
    for a in sorted(attrs):
        if a in r.methods:
            note(_describe(f"the tensor method .{a}()", f"{a} (read from its bytecode)"))
        for rule in r.exact:
            parent, _, last = rule.rpartition(".")
            if last == a and any(parent == m or parent.startswith(m + ".") for m in modules):
                note(_describe(rule, f"{a} (read from its bytecode)"))
    reached = []
    for n in sorted(names):
        if n not in env:
            continue
        value = env[n]
        if id(value) in r.objects:
            note(_describe(r.objects[id(value)], n))
        elif not trusted and _is_reference(value):
            note(_describe(object_path(value) or n, n))
        elif any(value is getattr(builtins, b) for b in DYNAMIC_BUILTINS):
            note(_dynamic_note(f"{n}()"))
        elif isinstance(value, types.ModuleType):
            note(_check_path(value.__name__, n, r, trusted))
        reached.append(value)
    return reached
