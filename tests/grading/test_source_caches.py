"""The grader's caches of cells are bounded by the source they hold (issue 26, item 10).

29 notebooks of 14 distinct 20,000-character cells took a grading process from 250 MB to
2.6 GB: every cache kept up to a thousand trees whatever their size. Each cache now holds at
most a fixed number of source characters, least recently used dropped first, and a cell the
class shares is still read once.
"""

from __future__ import annotations

import pytest

from course_lib.autograder import notebook, skip_demos
from course_lib.grading import parsing
from course_lib.grading.forbidden import cells
from course_lib.grading.parsing import SHARED_CHARS, parse_shared
from course_lib.grading.sourcecache import SourceCache

CACHES = {
    "parse_shared": (parsing._parse_cached, parse_shared),
    "cell readings": (cells.cell_reading, cells.cell_reading),
    "IPython transforms": (notebook._transform_shared, notebook._transform),
    "demo blocks": (skip_demos._cell, skip_demos._cell),
}


def _large_cell(i: int, chars: int = SHARED_CHARS) -> str:
    """A distinct cell of about ``chars`` characters (the size that filled the grader's memory)."""
    line = f"x{i} = torch.softmax(q{i} @ k{i}.T, dim=-1)  # padding padding padding\n"
    return f"import torch\n# cell {i}\n" + line * ((chars - 40) // len(line))


#: Each cache's bound, shrunk in the tests below to 10 cells so that filling it is quick.
SMALL = 10 * SHARED_CHARS + 1


def test_each_cache_holds_at_most_a_few_million_characters_of_source():
    assert parsing._parse_cached.max_chars == cells.cell_reading.max_chars == parsing.SHARED_TOTAL_CHARS
    assert parsing.SHARED_TOTAL_CHARS <= 1_000_000  # trees: about 30 to 130 MB
    assert notebook._transform_shared.max_chars <= 4_000_000 and skip_demos._cell.max_chars <= 4_000_000
    assert all(cache.max_item_chars == SHARED_CHARS for cache, _ in CACHES.values())


@pytest.mark.parametrize("name", list(CACHES))
def test_many_large_distinct_cells_keep_the_cache_under_its_bound(name, monkeypatch):
    cache, read = CACHES[name]
    cache.cache_clear()
    monkeypatch.setattr(cache, "max_chars", SMALL)
    cells = [_large_cell(i) for i in range(cache.max_chars // SHARED_CHARS + 20)]
    assert sum(map(len, cells)) > cache.max_chars  # more than the cache may hold
    for cell in cells:
        read(cell)
    info = cache.cache_info()
    assert 0 < info.held_chars <= cache.max_chars
    assert info.entries < len(cells)
    cache.cache_clear()


@pytest.mark.parametrize("name", list(CACHES))
def test_a_cell_every_notebook_shares_is_read_once(name, monkeypatch):
    cache, read = CACHES[name]
    cache.cache_clear()
    monkeypatch.setattr(cache, "max_chars", SMALL)
    shared = _large_cell(10**6)
    first = read(shared)
    for i in range(cache.max_chars // SHARED_CHARS + 20):  # it stays recently used
        read(_large_cell(i))
        assert read(shared) is first
    assert cache.cache_info().misses == cache.max_chars // SHARED_CHARS + 21
    cache.cache_clear()


def test_the_least_recently_used_source_is_dropped_first():
    reads: list[str] = []
    cache = SourceCache(lambda s: reads.append(s) or len(s), max_chars=10)
    for s in ("aaaa", "bbbb", "aaaa", "cccc"):  # b is the least recently used when c comes
        cache(s)
    assert reads == ["aaaa", "bbbb", "cccc"]
    cache("aaaa")
    cache("bbbb")
    assert reads == ["aaaa", "bbbb", "cccc", "bbbb"]
    assert cache.cache_info().held_chars <= 10


def test_a_source_over_the_item_bound_is_read_every_time_and_never_kept():
    cache = SourceCache(len, max_chars=100, max_item_chars=5)
    assert cache("abcdefgh") == 8 and cache("abcdefgh") == 8
    assert cache.cache_info().entries == 0 and cache.cache_info().misses == 2


def test_a_failure_is_not_kept():
    calls: list[str] = []

    def read(s: str) -> int:
        calls.append(s)
        raise SyntaxError(s)

    cache = SourceCache(read, max_chars=100)
    for _ in range(2):
        with pytest.raises(SyntaxError):
            cache("x = (")
    assert calls == ["x = (", "x = ("] and cache.cache_info().entries == 0
