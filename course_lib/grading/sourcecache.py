"""A least-recently-used cache keyed by source text, bounded by the characters it holds.

A class's notebooks share most cells, so the grader reads each shared cell once per process
(its tree, its references, IPython's transform of it). ``functools.lru_cache`` bounds the
*number* of entries, not their size: 1024 trees of 20,000-character cells are gigabytes
(issue 26, item 10: a grading process grew from 250 MB to 2.6 GB and never gave it back).
:class:`SourceCache` bounds the total length of the sources it holds and drops the least
recently used first; what that means in memory depends on what is kept for each character
(an AST costs about 30 bytes a character of ordinary code, up to 130 for dense expressions).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["CacheInfo", "SourceCache"]

T = TypeVar("T")


@dataclass(frozen=True)
class CacheInfo:
    """What a :class:`SourceCache` holds and how it was used.

    Attributes:
        hits: calls answered from the cache.
        misses: calls that computed their value (and kept it when it fits).
        entries: sources held.
        held_chars: their total length, at most ``max_chars``.
        max_chars: the bound.
    """

    hits: int
    misses: int
    entries: int
    held_chars: int
    max_chars: int


class SourceCache(Generic[T]):
    """``read(source)``, kept for the most recently used sources up to ``max_chars`` characters
    in all. Safe to call from several threads (two may compute the same value at once; one is
    kept). A failure is not kept, and a source longer than ``max_item_chars`` is never kept.

    Args:
        read: what to compute from a source; callers only read what it returns.
        max_chars: the most characters of source held at once.
        max_item_chars: the longest source kept (default: ``max_chars``).
    """

    def __init__(self, read: Callable[[str], T], max_chars: int, max_item_chars: int | None = None):
        self.read = read
        self.max_chars = max_chars
        self.max_item_chars = min(max_chars, max_item_chars if max_item_chars is not None else max_chars)
        self._held: OrderedDict[str, T] = OrderedDict()
        self._chars = 0
        self._hits = self._misses = 0
        self._lock = threading.Lock()

    def __call__(self, source: str) -> T:
        with self._lock:
            if source in self._held:
                self._held.move_to_end(source)
                self._hits += 1
                return self._held[source]
            self._misses += 1
        value = self.read(source)
        if len(source) <= self.max_item_chars:
            self._keep(source, value)
        return value

    def _keep(self, source: str, value: T) -> None:
        with self._lock:
            if source in self._held:
                return
            self._held[source] = value
            self._chars += len(source)
            while self._chars > self.max_chars:
                old, _ = self._held.popitem(last=False)
                self._chars -= len(old)

    def cache_info(self) -> CacheInfo:
        """The counts and sizes now."""
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._held), self._chars, self.max_chars)

    def cache_clear(self) -> None:
        """Drop everything held (the counts too)."""
        with self._lock:
            self._held.clear()
            self._chars = self._hits = self._misses = 0
