"""An honest student is never punished (issue 26, round 2).

Each honest notebook below was reproduced by a reviewer: its own ``check()`` gave full marks and
the autograder did not. Each gets full marks from both now, and beside it a cheater that writes
the forbidden thing another way is still caught. The static cases run without a sandbox; one
test grades every honest variant end to end in the sandbox.
"""

from __future__ import annotations

import importlib.util
import sys
import uuid
from pathlib import Path

import pytest
from conftest import HONEST_SOFTMAX, assert_full_marks, notebook
from forbidden_cells import HONEST_SDPA, HONEST_SELF_ATTENTION

from course_lib.autograder.autograde import grade_submission
from course_lib.autograder.notebook import python_source
from course_lib.autograder.sandbox.runner import Limits, Runner
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading import check
from course_lib.grading.forbidden import NotebookScan
from course_lib.grading.registry import exercise
from course_lib.grading.standins import static_callees

A = "02_self_attention"
SETUP = "import math\nimport torch\nfrom course_lib.grading import check\n"
SOFTMAX = HONEST_SOFTMAX
ATTENTION = HONEST_SDPA + HONEST_SELF_ATTENTION
HELPER_CLASS = """
class Normaliser:
    def softmax(self, x, dim):
        m = x.amax(dim=dim, keepdim=True)
        e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
        total = e.sum(dim=dim, keepdim=True)
        return e / torch.where(total == 0, torch.ones_like(total), total)

    def __call__(self, x, dim=-1):
        return self.softmax(x, dim)

def softmax(x, dim=-1):
    return Normaliser()(x, dim)
"""
SETATTR_CLASS = """
class Options:
    def __init__(self, **options):
        for name, value in options.items():
            setattr(self, name, value)

def softmax(x, dim=-1):
    o = Options(dim=dim, keepdim=True)
    m = x.amax(dim=o.dim, keepdim=o.keepdim)
    e = torch.exp(x - torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
    total = e.sum(dim=o.dim, keepdim=o.keepdim)
    return e / torch.where(total == 0, torch.ones_like(total), total)
"""
VERSIONS = (
    "import importlib.metadata, sys\n"
    "print(importlib.metadata.version('torch'))\n"
    "IN_COLAB = 'google.colab' in sys.modules\n"
    "if sys.modules.get('google.colab') is not None:\n    print('on Colab')"
)
ABANDONED = "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n"
PADDING = """
def padding_mask(tokens, pad_id):
    return (tokens
            != pad_id)
"""

#: name -> (assignment, cells, the graded functions that must get full marks)
HONEST = {
    "pep8_break_before_operator": ("06_transformer", ["import torch", PADDING], ["padding_mask"]),
    "help_at_the_end_of_a_cell": (A, [SETUP, SOFTMAX + "\ntorch.amax?", ATTENTION], None),
    "helper_class_with_its_own_softmax": (A, [SETUP, HELPER_CLASS, ATTENTION], None),
    "setattr_in_a_helpers_init": (A, [SETUP, SETATTR_CLASS, ATTENTION], None),
    "version_query_and_colab_test": (A, [SETUP, VERSIONS, SOFTMAX, ATTENTION], None),
    "abandoned_first_attempt": (A, [SETUP, ABANDONED, "check(softmax)", SOFTMAX, ATTENTION], None),
    "syntax_error_in_a_callee": (
        A,
        [SETUP, SOFTMAX.replace("(x, dim=-1):", "(x, dim=-1)"), ATTENTION],
        ["scaled_dot_product_attention"],  # and self_attention, in the sandbox (below)
    ),
}

RULES = exercise("softmax").forbidden
#: name -> cells whose softmax must still be flagged by the static scan
CHEATERS = {
    "tensor_method_in_a_helper_class": [
        SETUP,
        HELPER_CLASS.replace("return self.softmax(x, dim)", "return x.softmax(dim)"),
    ],
    "self_is_a_tensor": [
        SETUP,
        "class T:\n    def go(self, dim):\n        return self.softmax(dim)\n\n"
        "def softmax(x, dim=-1):\n    return T.go(x, dim)",
    ],
    "setattr_on_torch": [
        SETUP,
        SETATTR_CLASS.replace("setattr(self, name, value)", "setattr(torch, 'exp', torch.softmax)"),
    ],
    "setattr_shadowing_the_own_method": [
        SETUP,
        HELPER_CLASS.replace(
            "class Normaliser:",
            "class Normaliser:\n    def __init__(self, f=torch.Tensor.softmax):\n        setattr(self, 'softmax', f)\n",
        ),
    ],
    "live_definition_cheats_after_an_honest_one": [SETUP, SOFTMAX, ABANDONED],
    "abandoned_definition_kept_and_called": [
        SETUP,
        ABANDONED,
        "_first = softmax",
        "def softmax(x, dim=-1):\n    return _first(x, dim)",
    ],
}
PATCH_CLASS = """
def fake(x, dim=-1):
    return x

class Patch:
    def __init__(self, name, value):
        setattr(self, name, value)

    def setter(self, name, value):
        setattr(self, name, value)
"""
FORGED_SELF = {  # a method called with any first argument: `self` is not the student's object
    "init_through_the_class_on_torch_tensor": "Patch.__init__(torch.Tensor, 'softmax', fake)",
    "setter_through_type_on_torch": "type(Patch(0, 0)).setter(torch, 'exp', fake)",
    "setter_taken_from_the_class": "f = Patch.setter\n    f(torch, 'exp', fake)",
    "setter_through_func_on_torch": "Patch(0, 0).setter.__func__(torch, 'exp', fake)",
}
for _name, _call in FORGED_SELF.items():
    CHEATERS[_name] = [SETUP, PATCH_CLASS, SOFTMAX.replace("):\n", "):\n    " + _call + "\n", 1)]
CHEATERS["forward_through_the_class_on_a_tensor"] = [
    SETUP,
    HELPER_CLASS.replace("return Normaliser()(x, dim)", "return Normaliser.__call__(x, dim)"),
]
CHEATERS["forward_through_the_class_held_in_a_local"] = [
    SETUP,
    HELPER_CLASS.replace("return Normaliser()(x, dim)", "n = Normaliser\n    return n.__call__(x, dim)"),
]
#: a line anywhere in the notebook (not in graded code) after which no `self` is proven
FORGING_ELSEWHERE = [
    "Normaliser.softmax(torch.zeros(3), -1)",
    "f = Normaliser.softmax",
    "fs = list(map(Normaliser.softmax, [torch.zeros(3)], [-1]))",
    "g = getattr(Normaliser, 'softmax')",
    "isinstance(1, Normaliser)",
    "k = type(Normaliser())",
    "k = Normaliser().__class__",
    "m = Normaliser().softmax.__func__",
    "d = Normaliser().__dict__",
    "class Sub(Normaliser):\n    def go(self, x):\n        return super(Normaliser, x).softmax(x, -1)",
    "class Sub(torch.Tensor, Normaliser):\n    pass",
    "@print\nclass Sub(Normaliser):\n    pass",
    "class Sub(Normaliser):\n    @classmethod\n    def make(cls):\n        return cls",
    "class D:\n    def __set_name__(self, owner, name):\n        owner.softmax(torch.zeros(3), -1)",
    "k = globals()['Normaliser']",
    "import inspect",
    "from __main__ import Normaliser as N",
]


#: cells that hold the notebook for review
REVIEWED = {
    "call_through_sys_modules": "import sys\ny = sys.modules['torch'].softmax(torch.zeros(3), -1)",
    "main_through_sys_modules": "import sys\nsys.modules['__main__'].softmax(torch.zeros(3))",
    "module_fetched_with_get": "import sys\nt = sys.modules.get('torch')",
    "write_to_sys_modules": "import sys\nsys.modules['torch'] = None",
    "importlib_import_module": "import importlib\nt = importlib.import_module('torch')",
}


def cells_as_python(cells: list[str]) -> list[str]:
    return [python_source(c) for c in cells]


def live_notebook(tmp_path: Path, cells: list[str], history: bool = True):
    """The notebook run as a kernel runs it: each cell transformed by IPython; a cell that does
    not compile is skipped (its error shown, the rest runs), and every cell is in the input
    history (``In``) unless ``history`` is False. Written to a module so that ``check()`` can
    read the functions' source."""
    kept = []
    for src in cells_as_python(cells):
        try:
            compile(src, "<cell>", "exec")
        except SyntaxError:
            continue
        kept.append(src.replace("get_ipython()", "_shell()"))
    name = f"nb_{uuid.uuid4().hex}"
    path = tmp_path / f"{name}.py"
    shell = "class _Shell:\n    def __getattr__(self, n):\n        return lambda *a, **k: None\n\ndef _shell():\n    return _Shell()\n"
    path.write_text(shell + "\n".join(kept), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if history:  # IPython's input history: every cell run, as it transformed it
        module.In = module._ih = ["", *cells_as_python(cells)]  # type: ignore[attr-defined]
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("variant", sorted(HONEST))
def test_an_honest_notebook_gets_full_marks_from_its_own_check_and_the_static_scan(tmp_path, variant):
    _assignment, cells, graded = HONEST[variant]
    module = live_notebook(tmp_path, cells)
    scan = NotebookScan(cells_as_python(cells))
    assert scan.review_flags() == []
    for name in graded or ["softmax", "scaled_dot_product_attention", "self_attention"]:
        assert_full_marks(check(getattr(module, name), name=name))
        assert scan.violations(name, exercise(name).forbidden) == []


def test_pep8_break_before_operator_keeps_the_cell():
    source = python_source(PADDING + "x = (3\n     % 2)\n")
    assert "pass" not in source and "!= pad_id" in source and NotebookScan([source]).problems == []


def test_help_at_the_end_of_a_cell_is_transformed_as_ipython_does_and_keeps_the_cell():
    source = python_source("\n" + SOFTMAX + "torch.amax?")
    assert source.startswith("\n\ndef softmax") and "get_ipython().run_line_magic('pinfo', 'torch.amax')" in source
    assert NotebookScan(["import torch", source]).problems == []


def test_a_python_cell_magics_body_is_scanned_and_any_other_cell_magic_is_not_run():
    timed = python_source("%%time\n" + ABANDONED)
    assert timed.startswith("\ndef softmax") and NotebookScan([SETUP, timed]).violations("softmax", RULES)
    assert python_source("%%bash\necho hi") == ""


@pytest.mark.parametrize("cheater", sorted(CHEATERS))
def test_a_cheater_writing_the_forbidden_call_another_way_is_still_caught(cheater):
    assert NotebookScan(cells_as_python(CHEATERS[cheater])).violations("softmax", RULES)


def test_a_method_called_on_the_students_own_instance_may_use_setattr():
    honest = SOFTMAX.replace("):\n", "):\n    Patch('kept', fake).setter('more', fake)\n", 1)
    assert NotebookScan(cells_as_python([SETUP, PATCH_CLASS, honest])).violations("softmax", RULES) == []


@pytest.mark.parametrize("line", FORGING_ELSEWHERE)
def test_a_class_reached_other_than_by_its_constructor_proves_nothing(line):
    honest = cells_as_python([SETUP, HELPER_CLASS, ATTENTION])
    assert NotebookScan(honest).violations("softmax", RULES) == []
    assert NotebookScan([*honest, line]).violations("softmax", RULES), line


@pytest.mark.parametrize("cheater", sorted(REVIEWED))
def test_fetching_writing_or_calling_through_sys_modules_is_still_held_for_review(cheater):
    assert NotebookScan([SETUP, REVIEWED[cheater], SOFTMAX]).review_flags()


def test_a_missing_callee_is_stood_in_for_in_check_too(tmp_path):
    module = live_notebook(tmp_path, HONEST["syntax_error_in_a_callee"][1])
    assert not hasattr(module, "softmax")
    report = check(module.scaled_dot_product_attention)
    assert_full_marks(report)
    assert report.composition is not None and report.composition.callees == ["softmax"]


@pytest.mark.sandbox
def test_the_sandboxed_grader_gives_every_honest_variant_full_marks_and_still_catches_cheaters():
    with Runner(
        mode="required", limits=Limits(call_seconds=5.0, submission_seconds=60.0), watch=watch_lists()
    ) as runner:
        for variant, (assignment, cells, graded) in sorted(HONEST.items()):
            rec = grade_submission(notebook(*cells), assignment, runner)
            assert rec.status == "graded" and rec.flags == (), (variant, rec.messages, rec.flags)
            fns = {f["function"]: f for f in rec.functions}
            for name in graded or list(fns):
                assert fns[name]["score"] == fns[name]["max_score"] > 0, (variant, name, fns[name])
        rec = grade_submission(notebook(*HONEST["syntax_error_in_a_callee"][1]), A, runner)
        assert [f["score"] == f["max_score"] for f in rec.functions] == [False, True, True], rec.functions
        for cheater in ("tensor_method_in_a_helper_class", "live_definition_cheats_after_an_honest_one"):
            rec = grade_submission(notebook(*CHEATERS[cheater], ATTENTION), A, runner)
            softmax = next(f for f in rec.functions if f["function"] == "softmax")
            assert softmax["status"] == "forbidden" and softmax["score"] == 0, cheater
        rec = grade_submission(notebook(SETUP, REVIEWED["call_through_sys_modules"], SOFTMAX, ATTENTION), A, runner)
        assert rec.status == "review" and rec.score == 0


#: softmax is never written: only its call (and a comment naming its def) is in the notebook
NEVER_WRITTEN = [SETUP, "# def softmax(x, dim=-1): later\n" + ATTENTION.replace("def self_attention", "def _unused")]
GRADED = ["softmax", "scaled_dot_product_attention", "self_attention"]


def _callees(cells: list[str], name: str) -> list[str]:
    scan = NotebookScan(cells_as_python(cells))
    unreadable = [c.source for c in scan.cells if c.tree is None]
    return static_callees(scan.env, name, [n for n in GRADED if n != name], unreadable)


def test_only_a_callee_the_student_wrote_is_stood_in_for_in_the_static_scan():
    assert _callees(NEVER_WRITTEN, "scaled_dot_product_attention") == []
    assert _callees([SETUP, ATTENTION], "self_attention") == ["scaled_dot_product_attention"]
    syntax_error = HONEST["syntax_error_in_a_callee"][1]
    assert _callees(syntax_error, "scaled_dot_product_attention") == ["softmax"]
    # a def in a string of a cell that fails to parse counts only at the start of a line
    assert _callees([SETUP, "x = 'def softmax(x):'\n(", ATTENTION], "scaled_dot_product_attention") == []


@pytest.mark.parametrize("history", [True, False])
def test_a_callee_never_written_gets_no_stand_in_in_check(tmp_path, history):
    module = live_notebook(tmp_path, NEVER_WRITTEN, history=history)
    report = check(module.scaled_dot_product_attention)
    assert report.composition is None and report.score == 0 and not report.passed


def test_without_history_a_missing_callee_is_not_stood_in_for_in_check(tmp_path):
    module = live_notebook(tmp_path, HONEST["syntax_error_in_a_callee"][1], history=False)
    report = check(module.scaled_dot_product_attention)
    assert report.composition is None and not report.passed


@pytest.mark.parametrize("history", [True, False])
@pytest.mark.parametrize(
    "cheater", ["forward_through_the_class_on_a_tensor", "forward_through_the_class_held_in_a_local"]
)
def test_check_flags_a_method_called_through_its_class_on_a_tensor(tmp_path, history, cheater):
    module = live_notebook(tmp_path, CHEATERS[cheater], history=history)
    report = check(module.softmax)
    assert report.status == "forbidden" and report.score == 0
