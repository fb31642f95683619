"""The static scan resolves chains of aliases in work linear in the notebook (issue 26, item 9).

A cell of names bound to names (``a1 = a2``, ..., ``a9 = torch``, each bound several times)
made the scan expand every way through the chain: ``k**8`` expansions, hours for 1 KB. The
work is counted (:attr:`~course_lib.grading.aliases.Aliases.expansions`, the (path, binding)
pairs expanded), never timed.
"""

from __future__ import annotations

import pytest

from course_lib.grading.aliases import MAX_PATHS
from course_lib.grading.forbidden import NotebookScan

RULES = ["torch.softmax", "torch.nn.functional.softmax", "method:softmax"]


def _chain(k: int, fan: int = 1) -> str:
    """``a1 = a2`` (``fan`` times), ..., ``a{k} = torch``, and a graded softmax reading ``a1``."""
    lines = ["import torch"]
    for i in range(1, k):
        lines += [f"a{i} = a{i + 1}"] * fan
    lines.append(f"a{k} = torch")
    return "\n".join(lines) + "\ndef softmax(x):\n    return a1.nn.functional.softmax(x, dim=-1)\n"


def _wide(k: int, width: int) -> str:
    """Levels of ``width`` names, each bound to every name of the next level, the last to torch."""
    lines = ["import torch"]
    for i in range(1, k):
        lines += [f"a{i}_{j} = a{i + 1}_{m}" for j in range(width) for m in range(width)]
    lines += [f"a{k}_{j} = torch" for j in range(width)]
    return "\n".join(lines) + "\ndef softmax(x):\n    return a1_0.softmax(x, dim=-1)\n"


def _bindings(scan: NotebookScan) -> int:
    return sum(len(v) for v in scan.env.bindings.values())


@pytest.mark.parametrize("k", [20, 50, 200])
@pytest.mark.parametrize("fan", [1, 4])
def test_a_long_chain_of_aliases_costs_one_expansion_a_binding(k, fan):
    scan = NotebookScan([_chain(k, fan)])
    assert scan.env.aliases.expansions <= _bindings(scan)
    assert any("torch.nn.functional.softmax" in v for v in scan.violations("softmax", RULES))
    assert scan.review_flags() == []


@pytest.mark.parametrize("k", [20, 100, 200])
def test_a_wide_fan_out_of_aliases_costs_one_expansion_a_binding(k):
    scan = NotebookScan([_wide(k, width=3)])
    assert scan.env.aliases.expansions <= _bindings(scan)
    assert any("torch.softmax" in v for v in scan.violations("softmax", RULES))


def test_the_work_grows_linearly_with_the_chain():
    small, large = NotebookScan([_chain(20, fan=4)]), NotebookScan([_chain(200, fan=4)])
    assert large.env.aliases.expansions <= 11 * small.env.aliases.expansions


def test_the_honest_student_with_a_short_alias_is_judged_as_before():
    honest = "import torch\nF = torch.nn.functional\ndef softmax(x):\n    e = torch.exp(x)\n    return e / e.sum(-1)\n"
    cheat = "import torch\nF = torch.nn.functional\ndef softmax(x):\n    return F.softmax(x, dim=-1)\n"
    assert NotebookScan([honest]).violations("softmax", RULES) == []
    assert NotebookScan([cheat]).violations("softmax", RULES) != []


def test_a_loop_that_rebinds_a_name_to_its_own_attribute_is_followed_and_ends():
    src = (
        "import torch\nx = torch\nfor part in ['nn', 'functional']:\n    x = x.nn\n"
        "def softmax(v):\n    return x.functional.softmax(v)\n"
    )
    scan = NotebookScan([src])
    assert any("torch.nn.functional.softmax" in v for v in scan.violations("softmax", RULES))
    assert scan.review_flags() == []


def test_names_that_stand_for_too_many_paths_hold_the_notebook_for_review():
    # every a{i} is a{i+1}.x or a{i+1}.y: 2**19 paths, expanded only up to the bound
    lines = ["import torch"] + [f"a{i} = a{i + 1}.x\na{i} = a{i + 1}.y" for i in range(1, 20)] + ["a20 = torch"]
    scan = NotebookScan(["\n".join(lines) + "\ndef softmax(x):\n    return a1.softmax(x)\n"])
    assert scan.env.aliases.expansions <= MAX_PATHS * _bindings(scan)
    flags = scan.review_flags()
    assert flags and flags[0].startswith("cell 1, line 2: a1 may stand for more than")
    assert any(v.startswith("could not be checked: a1") for v in scan.violations("softmax", RULES))
