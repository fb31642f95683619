"""``course_lib.grading.parsing.parse``: ``ast.parse`` that threads may call at once.

The batch grader reads notebooks in threads. On CPython 3.11, two threads parsing at once end
one parse with ``SystemError: AST constructor recursion depth mismatch`` when a garbage
collection during one parse runs a ``__del__`` that lets the other thread in (cpython
gh-106905); a CI run lost a submission's grade to it. The test makes that happen often: cyclic
garbage whose ``__del__`` yields the GIL, and a very short switch interval.
"""

from __future__ import annotations

import ast
import sys
import threading
import time

import pytest

from course_lib.grading.parsing import parse

SOURCE = "\n".join(f"def f{i}(x):\n    return [((x + {i}) * 2 - y) for y in range({i}) if y % 3]" for i in range(200))


class _Yields:
    """Garbage in a cycle, so that only the collector frees it; its ``__del__`` lets other threads run."""

    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


def _parse_in_threads(threads: int = 4, rounds: int = 30) -> list[BaseException]:
    errors: list[BaseException] = []

    def work():
        for _ in range(rounds):
            for _ in range(50):
                _Yields()
            try:
                tree = parse(SOURCE)
                assert len(tree.body) == 200
            except BaseException as e:  # noqa: BLE001 - every failure is what the test reports
                errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    return errors


def test_parsing_in_many_threads_at_once_never_fails():
    assert _parse_in_threads() == []


def test_parse_gives_what_ast_parse_gives():
    assert ast.dump(parse(SOURCE)) == ast.dump(ast.parse(SOURCE))


def test_a_syntax_error_names_the_file():
    with pytest.raises(SyntaxError) as caught:
        parse("def f(:\n", filename="<cell 3>")
    assert caught.value.filename == "<cell 3>"


def test_parse_shared_gives_one_tree_per_source_up_to_the_size_bound():
    from course_lib.grading.parsing import SHARED_CHARS, parse_shared

    small = "def f(x):\n    return x + 1\n"
    assert parse_shared(small) is parse_shared(small)
    assert ast.dump(parse_shared(small)) == ast.dump(ast.parse(small))
    large = "x = 1\n" * (SHARED_CHARS // 6 + 1)  # a hostile notebook's huge cell is not kept
    assert parse_shared(large) is not parse_shared(large)
    with pytest.raises(SyntaxError):
        parse_shared("def f(:\n")
