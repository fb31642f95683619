"""The student process's two ways out: the printed output (capped) and the signed frames to the grader."""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Iterable
from typing import Any

from .protocol import Header, encode_signed_frame, write_all
from .timers import _TIMER_SIGNALS


class _Out(io.TextIOBase):
    """sys.stdout / sys.stderr of the student: writes to fd 1 until the shared cap, then drops."""

    def __init__(self, fd: int, counter: list[int], cap: int, name: str):
        self._fd, self._counter, self._cap, self._name = fd, counter, cap, name
        self.buffer = _OutBytes(self)

    def _write_bytes(self, data: bytes) -> None:
        room = self._cap - self._counter[0]
        self._counter[0] += len(data)
        if room <= 0:
            return
        try:
            write_all(self._fd, data[:room])
        except OSError:
            pass

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self._write_bytes(s.encode("utf-8", "replace"))
        return len(s)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def name(self) -> str:
        return self._name

    def flush(self) -> None:
        pass


class _OutBytes(io.RawIOBase):
    """``sys.stdout.buffer``: bytes, to the same capped output."""

    def __init__(self, text: _Out):
        self._text = text

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        data = bytes(b)
        self._text._write_bytes(data)
        return len(data)


class _Sender:
    """The student process's frames to the grader over fd 3, each with a sequence number and an HMAC under the
    job's key, so that bytes written to the pipe by student code are told apart."""

    def __init__(self, fd: int, key: bytes):
        self.fd = fd
        self._key = key
        self.seq = 0
        self.pid = os.getpid()
        self.broken = False

    def key_hex(self) -> str:
        return self._key.hex()

    def rekey(self, key: bytes, restart: bool) -> None:
        """Sign from now on with ``key`` (``restart``: number frames from 0 again)."""
        self._key = key
        if restart:
            self.seq = 0

    def send(self, header: Header, blobs: Iterable[bytes] = ()) -> None:
        """Send one frame (never interrupted by a time-limit signal halfway); after a failed
        write, nothing more."""
        if self.broken:
            return
        data = encode_signed_frame(header, blobs, self.seq, self._key)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _TIMER_SIGNALS)
        try:
            write_all(self.fd, data)
            self.seq += 1
        except OSError:
            self.broken = True
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _display(*objs: Any, **kwargs: Any) -> None:
    for o in objs:
        print(repr(o))
