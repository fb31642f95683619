"""Graded-name rules follow the object, not the spelling (issue 26, items 4 and 5).

``multi_head_attention_sum_form`` may not call the student's own ``multi_head_attention``:
calling it through ``__main__`` (the module a notebook runs in), ``sys.modules``,
``globals()``, ``vars()`` or any alias is the same call. A stand-in replaces only a callee the
student defined: an alias bound from ``__main__`` is not a definition. The honest student who
adds the heads' contributions gets full marks.
"""

from __future__ import annotations

import importlib.util
import uuid

import pytest

from course_lib.grading import check
from course_lib.grading.forbidden import NotebookScan, violations_in_source
from course_lib.grading.registry import exercise
from course_lib.grading.standins import static_callees

SUM = "multi_head_attention_sum_form"
RULES = exercise(SUM).forbidden

SETUP = "import math\nimport sys\nimport torch\nimport __main__\n"
ATTEND = """
def attend(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights
"""
MHA = """
def multi_head_attention(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    m = None if mask is None else mask.expand(N, num_heads, L, S)
    heads, weights = [], []
    for h in range(num_heads):
        cols = slice(h * D, (h + 1) * D)
        head, w = attend(query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols], None if m is None else m[:, h])
        heads.append(head)
        weights.append(w)
    return torch.cat(heads, dim=-1) @ W_o, torch.stack(weights, dim=1)
"""
HONEST_SUM = """
def multi_head_attention_sum_form(query, key, value, W_q, W_k, W_v, W_o, num_heads, mask=None):
    N, L, E = query.shape
    S, D = key.shape[1], E // num_heads
    m = None if mask is None else mask.expand(N, num_heads, L, S)
    output = torch.zeros_like(query)
    for h in range(num_heads):
        block = slice(h * D, (h + 1) * D)
        head, _ = attend(query @ W_q[:, block], key @ W_k[:, block], value @ W_v[:, block], None if m is None else m[:, h])
        output = output + head @ W_o[block]
    return output
"""
ARGS = "query, key, value, W_q, W_k, W_v, W_o, num_heads, mask"

#: Every spelling of "call my own multi_head_attention" a cheater may try.
SPELLINGS = {
    "__main__": f"return __main__.multi_head_attention({ARGS})[0]",
    "sys.modules": f"return sys.modules['__main__'].multi_head_attention({ARGS})[0]",
    "globals()[]": f"return globals()['multi_head_attention']({ARGS})[0]",
    "globals().get": f"return globals().get('multi_head_attention')({ARGS})[0]",
    "vars()[]": f"return vars()['multi_head_attention']({ARGS})[0]",
    "getattr(__main__)": f"return getattr(__main__, 'multi_head_attention')({ARGS})[0]",
    "local alias": f"f = multi_head_attention\n    return f({ARGS})[0]",
    "local alias of __main__": f"f = __main__.multi_head_attention\n    return f({ARGS})[0]",
    "local of the same name": f"multi_head_attention = __main__.multi_head_attention\n    return multi_head_attention({ARGS})[0]",
    "import __main__ as": f"import __main__ as nb\n    return nb.multi_head_attention({ARGS})[0]",
}


def cheater(spelling: str) -> str:
    return f"\ndef multi_head_attention_sum_form({ARGS}=None):\n    {SPELLINGS[spelling]}\n"


def main_module(monkeypatch, tmp_path, source: str):
    """The notebook ``source`` run as the module ``__main__``, as a kernel runs its cells."""
    path = tmp_path / f"nb_{uuid.uuid4().hex}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "__main__", module)
    monkeypatch.setitem(__import__("sys").modules, path.stem, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_of_the_own_graded_call_is_refused_by_the_static_scan(spelling):
    found = violations_in_source(SETUP + ATTEND + MHA + cheater(spelling), SUM, RULES)
    assert found, spelling


def test_an_import_from_main_at_module_level_is_the_graded_call():
    cells = [
        SETUP,
        ATTEND,
        MHA,
        f"from __main__ import multi_head_attention as mha\n\ndef {SUM}({ARGS}=None):\n    return mha({ARGS})[0]\n",
    ]
    assert any("calls your own multi_head_attention" in f for f in NotebookScan(cells).violations(SUM, RULES))


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_of_the_own_graded_call_is_refused_by_check(monkeypatch, tmp_path, spelling):
    module = main_module(monkeypatch, tmp_path, SETUP + ATTEND + MHA + cheater(spelling))
    report = check(module.multi_head_attention_sum_form, name=SUM)
    assert report.status == "forbidden" and report.score == 0, (spelling, report.notes)


def test_the_honest_sum_form_gets_full_marks_in_the_scan_and_in_check(monkeypatch, tmp_path):
    source = SETUP + ATTEND + MHA + HONEST_SUM
    assert violations_in_source(source, SUM, RULES) == []
    report = check(main_module(monkeypatch, tmp_path, source).multi_head_attention_sum_form, name=SUM)
    assert report.status == "passed" and report.score == report.max_score, report.notes


def test_an_alias_bound_from_main_is_no_callee_to_stand_in_for():
    uses = f"\ndef {SUM}({ARGS}=None):\n    return multi_head_attention({ARGS})[0]\n"
    for alias in (
        "multi_head_attention = __main__.multi_head_attention\n",
        "multi_head_attention = getattr(__main__, 'multi_head_attention')\n",
        "multi_head_attention = globals()['multi_head_attention']\n",
        "multi_head_attention = globals().get('multi_head_attention')\n",
        "multi_head_attention = sys.modules['__main__'].multi_head_attention\n",
        "from __main__ import multi_head_attention\n",
    ):
        env = NotebookScan([SETUP, ATTEND, alias, uses]).env
        assert static_callees(env, SUM, ["multi_head_attention"]) == [], alias


def test_a_callee_the_student_defined_is_stood_in_for_however_it_was_bound():
    uses = "\ndef self_attention(x):\n    return scaled_dot_product_attention(x, x, x)\n"
    for definition in (
        "def scaled_dot_product_attention(q, k, v, mask=None):\n    return q, q\n",
        "scaled_dot_product_attention = lambda q, k, v, mask=None: (q, q)\n",
        "def mine(q, k, v, mask=None):\n    return q, q\nscaled_dot_product_attention = mine\n",
    ):
        env = NotebookScan([SETUP, definition, uses]).env
        assert static_callees(env, "self_attention", ["scaled_dot_product_attention"]) == [
            "scaled_dot_product_attention"
        ], definition
