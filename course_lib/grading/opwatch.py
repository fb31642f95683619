"""Watch which torch functions and operators a graded function actually runs (the runtime layer).

The static scan (:mod:`course_lib.grading.forbidden`) reads code; this module watches it run.
While a :class:`OpWatch` is active, every torch function called through torch's Python API
(``torch.softmax``, ``F.scaled_dot_product_attention``, ``x.softmax()``, whatever name or
alias reached it) is seen by a ``TorchFunctionMode``, and every aten operator that reaches the
dispatcher (``aten::_softmax``, ``aten::native_layer_norm``, also through ``torch.ops``) by a
``TorchDispatchMode``. A forbidden one counts however it was reached.

This file imports only the standard library and torch: the autograder's sandbox worker loads
it by path (it never imports ``course_lib``), and :func:`course_lib.grading.check` imports it
as a module. The same class serves both.
"""

from __future__ import annotations

import importlib

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OpWatch", "resolve"]


def resolve(path):
    """The object at a dotted path (``torch.nn.functional.softmax``), or None."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except AttributeError:
            return None
        return obj
    return None


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
    def __init__(self, watch):
        super().__init__()
        self.watch = watch

    @classmethod
    def _should_skip_dynamo(cls):
        # torch would wrap __torch_dispatch__ in torch._disable_dynamo, whose first call imports
        # all of torch._dynamo (800 modules, seconds); nothing here is compiled
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        try:
            name = func._schema.name
        except AttributeError:
            name = ""
        if name in self.watch.ops:
            self.watch._saw(f"the operator {name}")
        out = func(*args, **(kwargs or {}))
        if self.watch.track_largest:
            self.watch._measure(args, kwargs, out)
        return out


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
            self._modes = [_Functions(self), _Operators(self)]
            for mode in self._modes:
                mode.__enter__()
        return self

    def __exit__(self, *exc):
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []
        return False
