"""The wire protocol between the grader and the worker, used by both sides (standard library only).

Frames: ``u32 little-endian header length | JSON header | blobs``, where the header's
``"blobs"`` lists the byte sizes of the raw blobs that follow (``.npy`` arrays written with
``allow_pickle=False``). A frame of the student's process also carries ``"seq"`` (its place
in the job's sequence) and, as its last blob, an HMAC-SHA256 of the header and the other
blobs under the job's key (:func:`frame_mac`).

Values (call arguments, results) travel as a tree of nodes (:func:`decode_tree`): ``{"t":
"tensor", "b": blob index, "dtype": "torch.float32"}`` (and ``"device": "meta"`` for a result
made on a device other than the CPU: :func:`tensor_node`), ``{"t": "tuple"|"list", "items":
[...]}``, ``{"t": "none"}``, and ``{"t": "bool"|"int"|"float"|"str", "v": ...}`` (a float that
is not finite as its ``repr``). A tensor from the student's process is ``.npy`` bytes, parsed
and checked by the grader; a tensor from the grader (its own data) is raw bytes, its node
carrying the numpy dtype string and the shape (``"descr": "<f4", "shape": [2, 3]``). Each side
encodes and decodes its tensors itself (it needs numpy and torch for that); the tree's shape
and checks are here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import socket
import struct
from collections.abc import Callable, Iterable
from typing import Any

LEN = struct.Struct("<I")
MAX_JOB_BYTES = 512 << 20  # one frame from the grader (the cells, or one call's arguments)
MAX_FRAME_HEADER = 1 << 20  # one frame's JSON header from the student's process
MAX_RESULT_BYTES = 64 << 20  # everything the student's process sends in one job
MAC_BYTES = 32
TAIL_BYTES = 2048
SCRATCH = "/sandbox/tmp"  # the job's only writable folder (not /tmp: the venv may live under /tmp)
CALL_WALL_FACTOR = 5.0  # a call's wall-clock backstop: max(5 x call_seconds, call_seconds + 5)
#: The ``-c`` program that starts the worker package (see :mod:`.__main__`): its first argument
#: is the folder that holds ``worker/``.
BOOTSTRAP = (
    "import sys; sys.path.insert(0, sys.argv[1]); from worker.__main__ import main; "
    "sys.exit(main(sys.argv[2:], sys.argv[1]))"
)
# the student's process's file descriptors: its frames, the grader's requests, the setup report
RESULTS_FD, REQUESTS_FD, SETUP_FD = 3, 4, 5

MAX_DEPTH = 16  # nesting of a value tree
MAX_ITEMS = 1024  # items of one tuple in a result

Header = dict[str, Any]
Frame = tuple[Header, list[bytes]]


class ProtocolError(Exception):
    """The byte stream broke the framing (sizes, JSON); nothing after it can be trusted."""


class CodecError(ValueError):
    """A value tree of an unexpected form."""


# --------------------------------------------------------------------------- framing


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to a blocking file descriptor."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def encode_frame(header: Header, blobs: Iterable[bytes] = ()) -> bytes:
    """One frame, ready to write (the header gets the blobs' sizes)."""
    data = [bytes(b) for b in blobs]
    header = dict(header)
    header["blobs"] = [len(b) for b in data]
    h = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([LEN.pack(len(h)), h, *data])


def frame_mac(key: bytes, raw_header: bytes, blobs: Iterable[bytes]) -> bytes:
    """The HMAC of a signed frame: over its raw JSON header and its blobs (the MAC excluded)."""
    return hmac.new(key, raw_header + b"".join(blobs), hashlib.sha256).digest()


def encode_signed_frame(header: Header, blobs: Iterable[bytes], seq: int, key: bytes) -> bytes:
    """A frame of the student's process: numbered ``seq``, the HMAC as its last blob."""
    data = [bytes(b) for b in blobs]
    header = dict(header, seq=seq)
    header["blobs"] = [len(b) for b in data] + [MAC_BYTES]
    raw = json.dumps(header, separators=(",", ":")).encode()
    return b"".join([LEN.pack(len(raw)), raw, *data, frame_mac(key, raw, data)])


def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        data = os.read(fd, min(n - got, 1 << 20))
        if not data:
            raise EOFError
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def read_frame_blocking(fd: int, max_bytes: int = MAX_JOB_BYTES) -> Frame:
    """One frame from a trusted peer (the grader): (header, blobs); EOFError at the end."""
    (n,) = LEN.unpack(_read_exact(fd, 4))
    if n > max_bytes:
        raise ValueError("frame header too large")
    header = json.loads(_read_exact(fd, n))
    sizes = header.get("blobs", [])
    if sum(sizes) > max_bytes:
        raise ValueError("frame too large")
    return header, [_read_exact(fd, s) for s in sizes]


class FrameReader:
    """Incremental frame parser for an untrusted byte stream, with size caps."""

    def __init__(self, max_header: int = MAX_FRAME_HEADER, max_total: int = MAX_RESULT_BYTES):
        self.buf = bytearray()
        self.max_header = max_header
        self.max_total = max_total
        self.total = 0
        self.error: str | None = None

    def feed(self, data: bytes) -> None:
        self.buf += data
        self.total += len(data)
        if self.total > self.max_total + 64 * self.max_header:
            raise ProtocolError("sent more result data than allowed")

    def frames(self) -> list[tuple[Header, list[bytes], bytes]]:
        """The complete frames received so far, as (header, blobs, raw header bytes);
        ProtocolError once the stream is broken (the good frames before the break are
        returned first)."""
        if self.error is not None:
            raise ProtocolError(self.error)
        out = []
        try:
            while len(self.buf) >= 4:
                frame = self._next()
                if frame is None:
                    break
                out.append(frame)
        except ProtocolError as e:
            self.error = str(e)
            if not out:
                raise
        return out

    def _next(self) -> tuple[Header, list[bytes], bytes] | None:
        (n,) = LEN.unpack_from(self.buf, 0)
        if n > self.max_header:
            raise ProtocolError("a result header is too large")
        if len(self.buf) < 4 + n:
            return None
        try:
            header = json.loads(bytes(self.buf[4 : 4 + n]))
        except (ValueError, RecursionError):
            raise ProtocolError("a result header is not valid JSON") from None
        if not isinstance(header, dict):
            raise ProtocolError("a result header is not an object")
        sizes = header.get("blobs", [])
        if (
            not isinstance(sizes, list)
            or len(sizes) > 4096
            or not all(type(s) is int and 0 <= s <= self.max_total for s in sizes)
            or sum(sizes) > self.max_total
        ):
            raise ProtocolError("bad blob sizes in a result header")
        end = 4 + n + sum(sizes)
        if len(self.buf) < end:
            return None
        blobs, pos = [], 4 + n
        for s in sizes:
            blobs.append(bytes(self.buf[pos : pos + s]))
            pos += s
        raw = bytes(self.buf[4 : 4 + n])
        del self.buf[:end]
        return header, blobs, raw


# --------------------------------------------------------------------------- control packets

# The control socket between the grader and the zygote (``AF_UNIX``, ``SOCK_SEQPACKET``; see
# :mod:`.zygote`): one JSON object per packet, the job's pipes attached to a ``fork`` request.
PACKET_BYTES = 1 << 16  # the largest control packet
JOB_FDS = 3  # the student's ends of the requests, results and output pipes


def send_packet(sock: socket.socket, message: Header, fds: list[int] | tuple[int, ...] = ()) -> None:
    """One control message (JSON), with file descriptors attached."""
    data = json.dumps(message, separators=(",", ":")).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv_packet(sock: socket.socket) -> tuple[Header, list[int]] | None:
    """One control message and the descriptors that came with it; None at the end of the stream.
    A packet that is not a JSON object reads as ``{}``."""
    try:
        data, fds, _flags, _addr = socket.recv_fds(sock, PACKET_BYTES, JOB_FDS + 1)
    except ConnectionError:
        return None
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    try:
        message = json.loads(data)
    except ValueError:
        message = None
    return (message if isinstance(message, dict) else {}), list(fds)


# --------------------------------------------------------------------------- .npy preambles

NPY_MAGIC = b"\x93NUMPY"
MAX_NPY_HEADER = 10_000  # characters of a .npy header's text (numpy's own default limit)


def npy_preamble(data: bytes) -> bytes:
    """The preamble of ``.npy`` bytes (magic, version, header length and header text), found
    from its length fields alone; each side parses a preamble once and reuses it for every
    array of the same dtype and shape (numpy reads the header text with ``ast.literal_eval``).

    Raises:
        ValueError: ``data`` does not start with a ``.npy`` preamble of a sane size.
    """
    if len(data) < 12 or data[:6] != NPY_MAGIC:
        raise ValueError("not .npy bytes")
    major = data[6]
    if major == 1:
        size, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        size, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise ValueError("an unknown .npy version")
    if size > MAX_NPY_HEADER or start + size > len(data):
        raise ValueError("a .npy header of a bad size")
    return bytes(data[: start + size])


# --------------------------------------------------------------------------- value trees

ARG_TAGS = frozenset(("tensor", "tuple", "list", "none", "bool", "int", "float", "str"))  # grader -> student
RESULT_TAGS = frozenset(("tensor", "tuple", "bool", "int", "float"))  # student -> grader
_NON_FINITE = ("nan", "inf", "-inf")


def tensor_node(blob: int, dtype: str, device: str = "cpu") -> Header:
    """The node of a tensor whose ``.npy`` bytes are blob number ``blob``; ``dtype`` is the
    torch dtype's name (a bfloat16 tensor travels as float32 and is converted back). A tensor
    the student's function made on another device carries that device's type (``"device":
    "meta"``); its values travel as the CPU's, and a ``meta`` tensor, which has none, as its
    ``.npy`` preamble alone (its shape and dtype)."""
    node: Header = {"t": "tensor", "b": blob, "dtype": dtype}
    if device != "cpu":
        node["device"] = device
    return node


def float_node(v: float) -> Header:
    """A float's node (JSON has no nan or inf: those travel as their repr)."""
    return {"t": "float", "v": v if math.isfinite(v) else repr(v)}


def decode_tree(
    node: Any,
    blobs: list[bytes],
    tensor: Callable[[Header, bytes], Any],
    tags: frozenset[str],
    max_items: int | None = None,
    depth: int = 0,
) -> Any:
    """The value of a node tree: ``tensor(node, blob)`` rebuilds each tensor, the rest is plain
    Python. Only the node kinds in ``tags`` are accepted, every field is checked; CodecError
    for anything else."""
    if depth > MAX_DEPTH or not isinstance(node, dict):
        raise CodecError("a value of an unexpected form")
    t = node.get("t")
    if t not in tags:
        raise CodecError("a value of an unexpected form")
    if t == "tensor":
        b = node.get("b")
        if type(b) is not int or not 0 <= b < len(blobs):
            raise CodecError("a value of an unexpected form")
        return tensor(node, blobs[b])
    if t in ("tuple", "list"):
        items = node.get("items")
        if not isinstance(items, list) or (max_items is not None and len(items) > max_items):
            raise CodecError("a value of an unexpected form")
        values = [decode_tree(v, blobs, tensor, tags, max_items, depth + 1) for v in items]
        return values if t == "list" else tuple(values)
    if t == "none":
        return None
    v = node.get("v")
    if t == "bool" and type(v) is bool:
        return v
    if t == "int" and type(v) is int:
        return v
    if t == "str" and type(v) is str:
        return v
    if t == "float":
        if type(v) in (int, float) or v in _NON_FINITE:
            return float(v)  # type: ignore[arg-type]
    raise CodecError("a value of an unexpected form")
