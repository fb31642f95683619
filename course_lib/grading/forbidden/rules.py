"""The rules: what graded code may not reach, and the words that report it.

The tables name what hides what code calls (:data:`DYNAMIC_BUILTINS`, :data:`DYNAMIC_PATHS`,
:data:`DYNAMIC_ATTRS`) and what holds a whole notebook for review (:data:`REVIEW_PATHS`,
:data:`REVIEW_BUILTINS`, :data:`REVIEW_ATTRS`). :class:`Rules` is one exercise's list of
forbidden calls, and the ``*_note`` functions say why a reference breaks them; both
environments of the walker (:mod:`.walk`) share them, so a name is judged the same way
whether it was read from a cell or from a live object.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..graded_names import main_attribute
from ..oplists import OPS_OF_RULE
from ..opwatch import resolve
from ..ownership import Owned
from .refs import Ref

__all__ = [
    "REFERENCE_PACKAGE",
    "DYNAMIC_BUILTINS",
    "FRAME_ACCESS",
    "DYNAMIC_PATHS",
    "DYNAMIC_ATTRS",
    "REVIEW_PATHS",
    "TORCH_INTERNALS",
    "REVIEW_BUILTINS",
    "REVIEW_ATTRS",
    "OPS_OF_RULE",
    "NUMPY_BRIDGES",
    "Rules",
    "watch_spec",
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
#: torch's dispatcher: code reached through it runs outside the operator watch.
TORCH_DISPATCH = (
    "torch._C",
    "torch.ops",
    "torch._ops",
    "torch.library",
    "torch.overrides",
    "torch.utils._python_dispatch",
    "torch._dispatch",
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
    *TORCH_DISPATCH,
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
    *TORCH_DISPATCH,
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


@dataclass
class Rules:
    """One exercise's forbidden calls, read from its rule strings.

    Args:
        exact: torch functions by dotted path (``torch.softmax``).
        methods: tensor methods by name (``method:softmax``).
        objects: for a live scan, ``id(object) -> rule`` of every rule's live object.
        graded: the notebook's own graded functions not to call (``graded:softmax``).
        dynamic: for a live scan, ``id(object) -> path`` of the objects at
            :data:`DYNAMIC_PATHS` that are not modules (:func:`dynamic_objects`).
        modules: whole libraries the graded code may not use at all (``module:numpy``,
            where the rule is "only torch and math").
    """

    exact: set[str]
    methods: set[str]
    objects: dict[int, str] = field(default_factory=dict)
    graded: set[str] = field(default_factory=set)
    dynamic: dict[int, str] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, rules: Sequence[str], live: bool) -> Rules:
        r = cls(
            {x for x in rules if ":" not in x},
            {x.split(":", 1)[1] for x in rules if x.startswith("method:")},
            graded={x.split(":", 1)[1] for x in rules if x.startswith("graded:")},
            modules={x.split(":", 1)[1] for x in rules if x.startswith("module:")},
        )
        if live:
            for rule in r.exact:
                obj = resolve(rule)
                if obj is not None:
                    r.objects[id(obj)] = rule
            r.dynamic = dynamic_objects()
        return r


def dynamic_objects() -> dict[int, str]:
    """The functions and classes at :data:`DYNAMIC_PATHS` (``sys._getframe``, ``os.read``) or
    defined in a module there (``gc.get_objects``, ``ctypes.CDLL``), and ``sys.modules``, by id,
    in the modules already loaded (code can only hold an object of a loaded module; none is
    imported here). A live scan that reaches one under another name (``from sys import
    _getframe as gf``) reports it, as the static scan does."""
    found: dict[int, str] = {}
    for path in DYNAMIC_PATHS:
        module, _, attr = path.rpartition(".")
        if not module:  # a whole module: what it defines itself (not what it imports)
            held = vars(sys.modules[path]) if path in sys.modules else {}
            for name, obj in held.items():
                if callable(obj) and getattr(obj, "__module__", None) == path:
                    found.setdefault(id(obj), f"{path}.{name}")
            continue
        owner = sys.modules.get(module)
        obj = vars(owner).get(attr) if owner is not None else None  # no getattr: torch imports lazily
        if obj is not None and not isinstance(obj, types.ModuleType) and (callable(obj) or path == "sys.modules"):
            found.setdefault(id(obj), path)
    return found


def under(path: str, prefixes: Iterable[str]) -> str | None:
    """The prefix of ``prefixes`` that ``path`` is or lies under (``os`` for ``os.read``)."""
    for p in prefixes:
        if path == p or path.startswith(p + "."):
            return p
    return None


def torch_internal(path: str) -> bool:
    """Whether ``path`` reaches a part of torch's dispatcher (:data:`TORCH_INTERNALS`)."""
    parts = path.split(".")
    return parts[0] == "torch" and any(p in TORCH_INTERNALS for p in parts[1:])


def is_reference(obj: Any) -> bool:
    """Whether a live object is (a module or a callable of) the reference package."""
    if isinstance(obj, types.ModuleType):
        return obj.__name__.split(".")[0] == REFERENCE_PACKAGE
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == REFERENCE_PACKAGE and callable(obj)


#: The tensor methods that hand a tensor's memory to numpy (``np.asarray(x)`` calls the
#: second): forbidden with ``module:numpy``, and reported in its words.
NUMPY_BRIDGES = ("numpy", "__array__")


def describe(path: str, written: str) -> str:
    """The note for a forbidden call ``path``, read in the code as ``written``."""
    if path in [f"the tensor method .{m}()" for m in NUMPY_BRIDGES]:
        return module_note("numpy")
    shown = path if path == written else f"{path} (written {written})"
    if path.split(".")[0] == REFERENCE_PACKAGE:
        return f"uses {shown}, a reference implementation: graded functions must be your own code"
    return f"uses {shown}, which this exercise asks you to write yourself"


def graded_note(name: str) -> str:
    """The note for a call of the notebook's own graded function ``name``."""
    return f"calls your own {name}, which this exercise asks you to do without (write it out here)"


def module_note(module: str) -> str:
    """The note for a use of ``module``, a library this exercise's graded code may not use: the
    same words wherever and however it is used, so that it is said once per function."""
    return (
        f"uses {module} (imported, or reached through a tensor's .{module}() or np.asarray): this "
        f"exercise's graded functions may use only torch and math, so write it with torch tensors "
        f"(the check measures the memory of torch tensors only)"
    )


def dynamic_note(what: str) -> str:
    """The note for a construct that can hide what the code calls."""
    return f"uses {what}, which graded functions may not use (it can hide what the code calls)"


def check_path(path: str, written: str, rules: Rules, trusted: bool = False) -> str | None:
    """The note for a dotted path the code reaches, if it breaks a rule (``trusted``: the code
    is the reference's own, which may use the reference package)."""
    own = main_attribute(path)  # __main__.multi_head_attention is the graded name itself
    if own is not None and own in rules.graded:
        return graded_note(own)
    if path in rules.exact:
        return describe(path, written)
    module = under(path, rules.modules)
    if module is not None:
        return module_note(module)
    if path.split(".")[0] == REFERENCE_PACKAGE and not trusted:
        return describe(path, written)
    if under(path, DYNAMIC_PATHS) or torch_internal(path):
        return dynamic_note(path if path == written else f"{path} (written {written})")
    return None


def method_note(ref: Ref, rules: Rules, path: str | None, own: Callable[[], Owned] | None = None) -> str | None:
    """A forbidden tensor method, unless ``own`` proves it a method of the student's own object."""
    if len(ref.chain) > 1 and ref.chain[-1] in rules.methods:
        if path is None or path == f"torch.Tensor.{ref.chain[-1]}" or ref.chain[0] == "<expr>":
            if own is None or len(ref.chain) != 2 or id(ref.node) not in own().methods:
                return describe(f"the tensor method .{ref.chain[-1]}()", ref.written)
    return None


def builtin_note(head: str, ref: Ref, own: Callable[[], Owned]) -> str | None:
    """A dynamic builtin, unless it is ``setattr`` on the student's own object (:mod:`..ownership`)."""
    return None if head == "setattr" and id(ref.node) in own().setattrs else dynamic_note(f"{head}()")


def attr_note(ref: Ref) -> str | None:
    """The note for an attribute that reaches into functions, frames or namespaces."""
    for part in ref.chain[1:]:
        if part in DYNAMIC_ATTRS:
            return dynamic_note(f"the attribute {part}")
    return None
