"""What crosses the channel from the student's side: arguments rebuilt from the grader's bytes,
results encoded as plain arrays, and the words for a call that failed."""

from __future__ import annotations

import io
import linecache
from collections.abc import Callable
from typing import Any

from .protocol import (
    ARG_TAGS,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_RESULT_BYTES,
    Header,
    decode_tree,
    float_node,
    tensor_node,
)


class _Values:
    """The harness's encoding and decoding (mixed into
    :class:`~.student.StudentHarness`, which sets the captured functions they use)."""

    np: Any
    torch: Any
    _Tensor: Any
    _t: Any
    _from_numpy: Any
    _frombuffer: Any
    _dtypes: dict[str, Any]
    _preambles: dict[tuple[Any, tuple[int, ...]], bytes]
    _write_header: Any
    _descr: Any
    result_bytes: int

    def _tensor_arg(self, node: Header, blob: bytes) -> Any:
        """A tensor argument from the grader's raw bytes, numpy dtype and shape (its node's)."""
        descr = node["descr"]
        if descr not in self._dtypes:
            self._dtypes[descr] = self.np.dtype(descr)
        flat = self._frombuffer(blob, dtype=self._dtypes[descr])
        x = self._from_numpy(flat.reshape(node["shape"]).copy())
        if node.get("dtype") == "torch.bfloat16":
            x = x.to(self.torch.bfloat16)
        return x

    def _decode_arg(self, node: Any, blobs: list[bytes]) -> Any:
        return decode_tree(node, blobs, self._tensor_arg, ARG_TAGS)

    def _changed_args(self, header: Header, blobs: list[bytes], args: tuple, kwargs: dict[str, Any]) -> list[list]:
        """The arguments whose tensors a call changed in place, compared bit for bit with the
        bytes the grader sent (a fact: whether that matters is the grader's to say). Each is a
        path: its position or keyword, then indices into tuples and lists; at most 20."""
        found: list[list] = []
        for i, (node, value) in enumerate(zip(header["args"], args, strict=False)):
            self._changed(node, value, blobs, [i], found)
        for k, node in header["kwargs"]:
            self._changed(node, kwargs.get(k), blobs, [k], found)
        return found[:20]

    def _changed(self, node: Any, value: Any, blobs: list[bytes], path: list, found: list[list]) -> None:
        t = node.get("t")
        if t == "tensor":
            if not self._same_bytes(node, value, blobs[node["b"]]):
                found.append(path)
        elif t in ("tuple", "list"):
            items = node["items"]
            if type(value) is not (list if t == "list" else tuple) or len(value) != len(items):
                found.append(path)  # a list the call emptied or grew
                return
            for j, (n, v) in enumerate(zip(items, value, strict=True)):
                self._changed(n, v, blobs, [*path, j], found)

    def _same_bytes(self, node: Header, value: Any, blob: bytes) -> bool:
        """Whether the tensor ``value`` still holds exactly the bytes it was made from."""
        if type(value) is not self._Tensor:
            return False
        try:
            arr, _, device = self._array(value)
            if device == "meta":
                return False  # an argument moved to meta (x.data = ...) no longer holds its bytes
            return arr.dtype.str == node["descr"] and list(arr.shape) == node["shape"] and arr.tobytes() == blob
        except Exception:  # noqa: BLE001 - a tensor that cannot even be read back is not as it was
            return False

    def _encode(self, value: Any, blobs: list[bytes], depth: int = 0) -> Header:
        """Mirror of grading.run.to_plain: exact torch.Tensor, python numbers, tuples/lists of those."""
        if depth > MAX_DEPTH:
            raise _BadType("returned a value nested too deeply")
        t = type(value)
        if t is self._Tensor:
            arr, dtype, device = self._array(value)
            meta = device == "meta"  # a shape and a dtype, no values: the preamble alone
            self.result_bytes += 0 if meta else arr.nbytes
            if self.result_bytes > MAX_RESULT_BYTES // 2:
                raise _BadType(f"returned more than {MAX_RESULT_BYTES // 2 >> 20} MB of tensors")
            key = (arr.dtype, arr.shape)
            if key not in self._preambles:  # as numpy.save writes it, made once per dtype and shape
                buf = io.BytesIO()
                self._write_header(buf, {"descr": self._descr(arr.dtype), "fortran_order": False, "shape": arr.shape})
                self._preambles[key] = buf.getvalue()
            blobs.append(self._preambles[key] + (b"" if meta else arr.tobytes()))
            return tensor_node(len(blobs) - 1, dtype, device)
        if t is tuple or t is list:
            if len(value) > MAX_ITEMS:
                raise _BadType(f"returned a {t.__name__} of {len(value)} items")
            return {"t": "tuple", "items": [self._encode(v, blobs, depth + 1) for v in value]}
        if t is bool:
            return {"t": "bool", "v": value}
        if t is int:
            if abs(value) >= 1 << 63:
                return {"t": "float", "v": float(value)}
            return {"t": "int", "v": value}
        if t is float:
            return float_node(value)
        if isinstance(value, self._Tensor):
            raise _BadType(f"returned a {t.__name__} (a subclass of torch.Tensor), expected a plain torch.Tensor")
        raise _BadType(f"returned a {_type_name(t)}, expected a torch.Tensor")

    def _array(self, value: Any) -> tuple[Any, str, str]:
        """A result tensor as a numpy array, its torch dtype's name and its device's type (only
        the functions captured in ``__init__`` run). A tensor on another device is copied to the
        CPU; one on ``meta`` has no values to copy: its array is a zero broadcast to its shape
        (its values are never sent, :meth:`_encode`)."""
        t = self._t
        no_function, no_dispatch = t.no_modes
        with no_function(), no_dispatch():
            x = t.detach(value)
            if t.layout(x) != t.strided:
                raise _BadType(f"returned a {t.layout(x)} tensor, expected an ordinary (dense) torch.Tensor")
            device = str(t.device(x).type)
            shape = None
            if device == "meta":
                shape = tuple(int(n) for n in t.shape(x))
                x = t.new_zeros(x, (), device="cpu")
            elif device != "cpu":
                x = t.cpu(x)
            dtype = str(t.dtype(x))
            if t.dtype(x) == t.bfloat16:
                x = t.to(x, t.float32)
            if t.is_complex(x) or t.is_quantized(x):
                raise _BadType(f"returned a tensor of dtype {dtype}, expected real numbers or booleans")
            arr = t.numpy(t.contiguous(t.resolve_neg(t.resolve_conj(x))))
        if arr.dtype.kind not in "biuf":
            raise _BadType(f"returned a tensor of dtype {dtype}, expected real numbers or booleans")
        if shape is not None:
            arr = self.np.broadcast_to(arr, shape)
        return arr, dtype, device

    def _tensor_words(self, value: Any) -> str | None:
        """``(2, 4, 8) float32`` for a tensor, the class's name for a subclass of it, None for
        anything else: read with the getters captured in ``__init__``, with torch's modes off
        (a subclass's own ``shape`` is never asked). The same words as ``check``'s
        (:func:`course_lib.grading.feedback.tensor_words`)."""
        t = self._t
        k = type(value)
        if k is self._Tensor or k is t.Parameter:
            no_function, no_dispatch = t.no_modes
            with no_function(), no_dispatch():
                shape, dtype = tuple(t.shape(value)), t.dtype(value)
            return "(" + ", ".join(str(int(s)) for s in shape) + ") " + str(dtype).removeprefix("torch.")
        if issubclass(k, self._Tensor):
            return f"a {type.__dict__['__name__'].__get__(k)} (a subclass of torch.Tensor)"
        return None

    def _encode_arg(self, value: Any, blobs: list[bytes], depth: int = 0) -> Header:
        """A stand-in's arguments: as results (tensors, numbers, tuples), plus None and strings."""
        if depth > MAX_DEPTH:
            raise _BadType("returned a value nested too deeply")
        if value is None:
            return {"t": "none"}
        if type(value) is str:
            return {"t": "str", "v": value[:1000]}
        if type(value) is tuple or type(value) is list:
            if len(value) > MAX_ITEMS:
                raise _BadType(f"returned a {type(value).__name__} of {len(value)} items")
            return {"t": "tuple", "items": [self._encode_arg(v, blobs, depth + 1) for v in value]}
        return self._encode(value, blobs, depth)


def _short(msg: object, limit: int = 300) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _safe_str(e: BaseException) -> str:
    try:
        return _short(str(e))
    except BaseException:  # noqa: BLE001 - a student exception whose __str__ fails
        return "(message could not be shown)"


def _student_frame(e: BaseException) -> Any:
    """The traceback entry of the innermost frame of the notebook's cells, or None."""
    where = None
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith("<cell "):
            where = tb
        tb = tb.tb_next
    return where


def _line_of(tb: Any) -> str:
    return linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()


def _student_line(e: BaseException) -> str:
    """``, in your line `...``` for the innermost frame of the notebook's cells, or ``""``."""
    where = _student_frame(e)
    line = _line_of(where) if where is not None else ""
    return f", in your line `{_short(line, 160)}`" if line else ""


def _student_operands(
    e: BaseException, tensor_words: Callable[[Any], str | None], operand_words: Callable[..., str]
) -> str:
    """``, where `q` is (2, 4, 8) float32 ...``: the shapes and dtypes of the tensors that the
    student's failing line names, read from its frame by ``operand_words``
    (``course_lib/grading/operands.py``'s, run from its source: never values, no method of the
    student's objects called), or ``""``. Sent apart from the message (the reply's
    ``operands``): the grader keeps the numbers of its shapes."""
    where = _student_frame(e)
    line = _line_of(where) if where is not None else ""
    if not line:
        return ""
    frame = where.tb_frame
    return operand_words(line, (frame.f_locals, frame.f_globals), tensor_words)


def _seen(watch: Any) -> list[str]:
    try:
        return [str(s) for s in watch.seen][:20] if watch is not None else []
    except BaseException:  # noqa: BLE001
        return []


class _BadType(Exception):
    """A result that cannot be sent as plain data: the call counts as bad_type."""


def _type_name(t: type) -> str:
    try:
        mod, qual = type.__getattribute__(t, "__module__"), type.__getattribute__(t, "__qualname__")
        if not isinstance(mod, str) or not isinstance(qual, str):
            raise TypeError
        return f"{mod}.{qual}"
    except BaseException:  # noqa: BLE001
        return "object of an unknown type"
