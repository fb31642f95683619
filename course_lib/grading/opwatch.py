"""Watch which torch functions and operators a graded function actually runs (the runtime layer).

The static scan (:mod:`course_lib.grading.forbidden`) reads code; this module watches it run.
While a :class:`OpWatch` is active, every torch function called through torch's Python API
(``torch.softmax``, ``F.scaled_dot_product_attention``, ``x.softmax()``, whatever name or
alias reached it) is seen by a ``TorchFunctionMode``, and every run of a watched aten operator
(``aten::_softmax``, ``aten::native_layer_norm``, also through ``torch.ops`` or from inside
another operator such as ``cross_entropy``) by the operator's own kernel: the watch wraps the
CPU kernels of the operators it names (:func:`torch.library.get_kernel`), once per process, so
an operator is seen however it was reached, under ``no_grad`` and ``inference_mode`` too, while
every other operator runs untouched. A forbidden one counts however it was reached.

Measuring temporaries (``largest``) needs to see every operator's result: only then does the
watch also push a ``TorchDispatchMode``, which costs about 20 microseconds an operator.

This file imports only the standard library and torch: the autograder's sandbox worker loads
it by path (it never imports ``course_lib``), and :func:`course_lib.grading.check` imports it
as a module. The same class serves both.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpWatch", "refuse_operators", "refusals", "resolve", "wrap_operators"]


_RESOLVED: dict = {}  # dotted path -> the object it named when first resolved in this process


def resolve(path):
    """The object at a dotted path (``torch.nn.functional.softmax``), or None; each path is
    resolved once per process (failed imports cost a search of the file system)."""
    if path in _RESOLVED:
        return _RESOLVED[path]
    obj = None
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            obj = module
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            obj = None
        break
    _RESOLVED[path] = obj
    return obj


def _tensors(tree):
    """The tensors in a nest of tuples, lists and dicts (an operator's arguments or results)."""
    stack = [tree]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (tuple, list)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())


class _Functions(TorchFunctionMode):
    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = self.watch.functions.get(id(func))
        if name is not None:
            self.watch._saw(name)
        return func(*args, **(kwargs or {}))


class _Operators(TorchDispatchMode):
    """Sees every operator (only to measure temporaries: see ``largest``)."""

    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    @classmethod
    def _should_skip_dynamo(cls):
        # torch would wrap __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # all of torch._dynamo (800 modules, seconds); nothing here is compiled
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.watch._measure(args, kwargs, out)
        return out


#: The backend keys whose kernels are wrapped: every way a CPU tensor (dense, quantized, sparse,
#: nested) reaches an operator's computation.
_KEYS = ("CPU", "QuantizedCPU", "SparseCPU", "SparseCsrCPU", "NestedTensorCPU")
#: Refused (see :func:`refuse_operators`) on these keys too: mkldnn tensors' kernels, which torch
#: cannot hand back to be wrapped.
_REFUSED_KEYS = (*_KEYS, "MkldnnCPU")
_WRAPPED: dict = {}  # operator name -> the library holding its wrapped kernels, for the process's life
_local = threading.local()  # .active: the watches whose ``with`` block this thread is in


def _active():
    try:
        return _local.active
    except AttributeError:
        _local.active = []
        return _local.active


def _seeing(name, kernel):
    """``kernel`` (a wrapped kernel of the operator ``name``), telling the active watches first."""

    def run(keyset, *args, **kwargs):
        for watch in _active():
            if name in watch.ops:
                watch._saw(f"the operator {name}")
        return kernel.call_boxed(keyset, *args, **kwargs)

    return run


def wrap_operators(names):
    """Wrap the CPU kernels of every overload of each aten operator in ``names``
    (``"aten::_softmax"``) so that watches see it run; each once per process. Names that are
    not operators here are ignored. An operator that is only a composition of others
    (``aten::softmax.int``, ``aten::layer_norm``) keeps its own dispatch: the operators it is
    made of are the ones seen (``aten::_softmax``, ``aten::native_layer_norm``). A wrapped kernel
    costs about 6 microseconds a run; results and gradients are unchanged."""
    for name in names:
        if name in _WRAPPED:
            continue
        _WRAPPED[name] = None
        lib = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": on purpose
            for namespace, _, qualified, key in _kernels([name], _KEYS):
                lib = lib or torch.library.Library(namespace, "IMPL")
                kernel = _seeing(name, torch.library.get_kernel(qualified, key))
                lib.impl(qualified.partition("::")[2], kernel, key, with_keyset=True)
        _WRAPPED[name] = lib


_REFUSALS = [0]  # how many times a refusing kernel ran in this process


def refusals():
    """How many times a refused operator was called in this process (see :func:`refuse_operators`)."""
    return _REFUSALS[0]


def _refusing(name, why):
    """A kernel for the operator ``name`` that tells the active watches, then refuses to run."""

    def run(keyset, *args, **kwargs):
        try:
            _REFUSALS[0] += 1
            for watch in _active():
                watch._saw(f"the operator {name}")
        except Exception:  # noqa: BLE001 - whatever the watches' state, the refusal stands
            pass
        raise RuntimeError(f"{name} is refused while grading the functions that may not use it ({why})")

    return run


def _kernels(names, keys):
    """(namespace, operator, qualified overload name, dispatch key) of every kernel, on one of
    ``keys``, of the operators in ``names``. An overload that is only a composition of others
    (``CompositeImplicitAutograd``) is left out: its parts are the ones named, and a kernel of
    its own would leave it without a backward."""
    for name in sorted(set(names)):
        namespace, _, op = name.partition("::")
        packet = getattr(getattr(torch.ops, namespace, None), op, None) if op else None
        if packet is None:
            continue
        for overload in packet.overloads():
            qualified = name if overload == "default" else f"{name}.{overload}"
            if torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeImplicitAutograd"):
                continue
            for key in keys:
                if torch._C._dispatch_has_computed_kernel_for_dispatch_key(qualified, key):
                    yield namespace, name, qualified, key


def refuse_operators(names, why):
    """Make every CPU-side kernel of the operators in ``names`` raise, however it is reached
    (``torch.softmax``, a method, ``torch.ops``, from inside another operator, under
    ``no_grad``). Returns the dispatcher libraries that hold the refusing kernels: they refuse
    for as long as those objects live, so the caller keeps them where no other code can reach
    them (the sandbox hands them to an audit hook, see
    :mod:`course_lib.autograder.sandbox.worker.audit`). Meant for a process that runs nothing
    but graded code from then on: nothing turns the refusal off."""
    libraries = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": on purpose
        for namespace, name, qualified, key in _kernels(names, _REFUSED_KEYS):
            if namespace not in libraries:
                libraries[namespace] = torch._C._dispatch_library("IMPL", namespace, "", "<refused>", 0)
            impl: Any = libraries[namespace].impl  # (name, key, kernel, with_keyset): torch.library's call
            impl(qualified.partition("::")[2], key, _refusing(name, why), True)
    return list(libraries.values())


class OpWatch:
    """Record forbidden torch functions and operators run inside ``with`` blocks.

    Args:
        functions: dotted paths of torch functions (``"torch.softmax"``); classes and paths
            that do not resolve are ignored (their operators are watched through ``ops``).
        methods: tensor method names (``"softmax"`` for ``x.softmax()``).
        ops: aten operator names as in their schema (``"aten::_softmax"``).
        largest: also record in ``largest`` the size, in elements, of the largest new
            floating-point storage an operator created (a temporary such as a score matrix);
            views, in-place results and integer or bool tensors are not counted.

    ``seen`` lists what ran, in the order first seen. Resolve the watch *before* untrusted code
    runs: the objects are compared by identity, so replacing ``torch.softmax`` later changes
    nothing.
    """

    def __init__(self, functions=(), methods=(), ops=(), largest=False):
        self.functions = {}
        for path in functions:
            obj = resolve(path)
            if obj is not None and callable(obj) and not isinstance(obj, type):
                self.functions[id(obj)] = path
        for m in methods:
            obj = getattr(torch.Tensor, m, None)
            if obj is not None:
                self.functions[id(obj)] = f"the tensor method .{m}()"
        self._keep = [resolve(p) for p in functions]  # keep the objects alive: ids stay theirs
        self.ops = frozenset(ops)
        wrap_operators(sorted(self.ops))  # now, before the watched code runs
        self.track_largest = bool(largest)
        self.seen = []
        self.largest = 0
        self._modes = []

    def _saw(self, what):
        if what not in self.seen and len(self.seen) < 20:
            self.seen.append(what)

    def _measure(self, args, kwargs, out):
        inputs = set()
        for t in _tensors((args, kwargs)):
            inputs.add(t.untyped_storage().data_ptr())
        for t in _tensors(out):
            if t.is_floating_point() or t.is_complex():
                storage = t.untyped_storage()
                if storage.data_ptr() not in inputs:
                    self.largest = max(self.largest, storage.nbytes() // max(1, t.element_size()))

    @property
    def empty(self):
        return not self.functions and not self.ops and not self.track_largest

    def __enter__(self):
        if not self.empty:
            self._modes = [_Functions(self)] + ([_Operators(self)] if self.track_largest else [])
            for mode in self._modes:
                mode.__enter__()
            _active().append(self)
        return self

    def __exit__(self, *exc):
        if self._modes:
            _active().remove(self)
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []
        return False
