"""The grader's side of the value codec: call arguments out, results back as plain tensors.

The tree format and its checks are shared with the worker (:mod:`.worker.protocol`); here is
only what needs numpy and torch: a tensor argument written as ``.npy`` bytes, and a result's
``.npy`` bytes read back, checked before anything is allocated and never unpickled, each
array at most once and all of a submission's arrays within a fixed budget.
"""

from __future__ import annotations

import functools
import io
import math
from typing import Any

import numpy as np
import torch

from ..._ast_lock import LOCK
from .jobs import Arguments
from .worker.protocol import (
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_NPY_HEADER,
    RESULT_TAGS,
    CodecError,
    Header,
    decode_tree,
    float_node,
    npy_preamble,
    tensor_node,
)

MAX_DECODED_BYTES = 64 << 20  # all arrays of one submission together, once decoded
_NPY_DTYPES = {
    np.dtype(t)
    for t in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
}


class BadResult(Exception):
    """A result that cannot be turned into plain data: the call counts as bad_type."""


def encode_arg(v: Any, blobs: list[bytes], depth: int = 0) -> Header:
    """A call argument's node; a tensor's raw bytes are appended to ``blobs``, its numpy
    dtype and shape go in its node (the grader's own data: the student's side reads them as
    they are, with no ``.npy`` header to parse)."""
    if depth > MAX_DEPTH:
        raise TypeError("call argument nested too deeply")
    if isinstance(v, torch.Tensor):
        x = v.detach().cpu()
        dtype = str(x.dtype)
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        arr = x.resolve_conj().resolve_neg().contiguous().numpy()
        blobs.append(arr.tobytes())
        return dict(tensor_node(len(blobs) - 1, dtype), descr=arr.dtype.str, shape=list(arr.shape))
    if v is None:
        return {"t": "none"}
    if type(v) is bool:
        return {"t": "bool", "v": v}
    if type(v) is int:
        return {"t": "int", "v": v}
    if type(v) is float:
        return float_node(v)
    if type(v) is str:
        return {"t": "str", "v": v}
    if type(v) in (tuple, list):
        return {"t": type(v).__name__, "items": [encode_arg(a, blobs, depth + 1) for a in v]}
    raise TypeError(
        f"call arguments must be tensors, numbers, strings, None or tuples of those, not {type(v).__name__}"
    )


#: id(call) -> (the call, its args' nodes, its kwargs' nodes, its blobs): every student of a
#: class gets the same calls, so each is encoded once (the call is kept: its id stays its own)
_ENCODED: dict[int, tuple[Arguments, list[Header], list[list[Any]], tuple[bytes, ...]]] = {}
_ENCODED_MAX = 4096


def encode_call(i: int, name: str, call: Arguments) -> tuple[Header, list[bytes]]:
    """The request frame of call number ``i`` (of function ``name``); the call's arguments
    are encoded once per grading process (cases are made once per seed and never changed)."""
    hit = _ENCODED.get(id(call))
    if hit is None or hit[0] is not call:
        blobs: list[bytes] = []
        args = [encode_arg(a, blobs) for a in call.args]
        kwargs = [[str(k), encode_arg(v, blobs)] for k, v in call.kwargs.items()]
        if len(_ENCODED) >= _ENCODED_MAX:
            _ENCODED.clear()
        hit = _ENCODED[id(call)] = (call, args, kwargs, tuple(blobs))
    return {"t": "call", "id": i, "fn": name, "args": hit[1], "kwargs": hit[2]}, list(hit[3])


@functools.lru_cache(maxsize=512)
def _npy_prefix(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    fp = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        fp, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    return fp.getvalue()


def npy_bytes(arr: np.ndarray) -> bytes:
    """``arr`` (C-contiguous, not an object array) as ``.npy`` bytes, the same bytes as
    ``np.save(..., allow_pickle=False)`` writes; the preamble is made once per dtype and shape."""
    return _npy_prefix(arr.dtype, arr.shape) + arr.tobytes()


@functools.lru_cache(maxsize=512)
def _read_preamble(preamble: bytes) -> tuple[Any, bool, np.dtype]:
    """(shape, fortran order, dtype) of a ``.npy`` preamble, read by numpy (cached: the grader
    reads the same few preambles thousands of times; the key is the exact bytes)."""
    fp = io.BytesIO(preamble)
    version = np.lib.format.read_magic(fp)
    with LOCK:  # numpy reads the header with ast.literal_eval (see course_lib._ast_lock)
        if version == (1, 0):
            header = np.lib.format.read_array_header_1_0(fp, max_header_size=MAX_NPY_HEADER)
        elif version in ((2, 0), (3, 0)):
            header = np.lib.format.read_array_header_2_0(fp, max_header_size=MAX_NPY_HEADER)
        else:
            raise ValueError("unknown .npy version")
    if fp.tell() != len(preamble):
        raise ValueError("a .npy header of a bad size")
    return header


def _checked_preamble(data: bytes) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, preamble length) of ``.npy`` bytes, checked."""
    try:
        preamble = npy_preamble(data)
        shape, fortran, dtype = _read_preamble(preamble)
    except (ValueError, OSError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise BadResult(f"returned data that is not a readable array ({e})") from None
    if dtype.newbyteorder("=") not in _NPY_DTYPES or dtype.hasobject or dtype.fields:
        raise BadResult(f"returned a tensor of dtype {dtype}, expected real numbers or booleans")
    if not isinstance(shape, tuple) or len(shape) > 32 or not all(type(s) is int and s >= 0 for s in shape):
        raise BadResult("returned a tensor of an invalid shape")
    return shape, fortran, dtype, len(preamble)


def load_meta(data: bytes) -> torch.Tensor:
    """A tensor on the ``meta`` device (a shape and a dtype, no values) from the ``.npy``
    preamble that stands for it (:func:`~.worker.protocol.tensor_node`): nothing is allocated."""
    shape, _fortran, dtype, offset = _checked_preamble(data)
    if offset != len(data):
        raise BadResult("returned a meta tensor with data")
    return torch.empty(shape, dtype=torch.from_numpy(np.empty(0, dtype.newbyteorder("="))).dtype, device="meta")


def load_npy(data: bytes) -> np.ndarray:
    """An array from ``.npy`` bytes, checked before anything is allocated; never unpickles."""
    shape, fortran, dtype, offset = _checked_preamble(data)
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - offset:
        raise BadResult("returned a tensor whose data does not match its shape")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    arr = arr.reshape(shape[::-1]).transpose() if fortran else arr.reshape(shape)
    return arr.astype(dtype.newbyteorder("="), order="C", copy=True)  # (np.ascontiguousarray makes 0-d 1-d)


class Budget:
    """Decoded bytes left for one submission."""

    def __init__(self, total: int = MAX_DECODED_BYTES):
        self.left = total

    def take(self, n: int) -> None:
        if n > self.left:
            raise BadResult(f"returned more than {MAX_DECODED_BYTES >> 20} MB of arrays in all")
        self.left -= n


def decode_value(
    node: Any, blobs: list[bytes], budget: Budget | None = None, tags: frozenset[str] = RESULT_TAGS
) -> Any:
    """Plain data from a reply's value tree. Each blob may be used once (an honest reply never
    refers to one array twice), and the decoded bytes come out of ``budget``. ``tags`` are the
    node kinds allowed (a stand-in's arguments may hold ``None`` and strings too). A tensor made
    on the ``meta`` device comes back on ``meta`` (the grader's judges compare that device);
    one made on another device comes back with its values, on the CPU (as
    :func:`~course_lib.grading.compare.compare` compares values)."""
    budget = budget if budget is not None else Budget()
    used: set[int] = set()

    def tensor(n: Header, blob: bytes) -> torch.Tensor:
        b = n["b"]
        if b in used:
            raise BadResult("returned a value that refers to the same array twice")
        used.add(b)
        budget.take(len(blob))
        device = n.get("device", "cpu")
        if type(device) is not str:
            raise BadResult("returned a value of an unexpected form")
        x = load_meta(blob) if device == "meta" else torch.from_numpy(load_npy(blob))
        if n.get("dtype") == "torch.bfloat16" and x.dtype == torch.float32:
            x = x.to(torch.bfloat16)
        return x

    try:
        return decode_tree(node, blobs, tensor, tags, max_items=MAX_ITEMS)
    except CodecError:
        raise BadResult("returned a value of an unexpected form") from None
