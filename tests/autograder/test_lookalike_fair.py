"""Fair look-alikes: a graded function is compared with the notebook's own helpers it reaches
(:mod:`course_lib.autograder.compared`), provided text never counts as shared, and tiny code is
no evidence (:mod:`course_lib.autograder.lookalike`).

The classes here are made of real notebooks of the course: the starter, the provided cells and
the solution of chapter 4 (``sinusoidal_positional_encoding``) and chapter 2.
"""

from __future__ import annotations

import re
import textwrap

import pytest
from conftest import HONEST_SOFTMAX, ROOT

from course_lib.autograder.compared import compared_sources, helper_marker
from course_lib.autograder.lookalike import EVIDENCE, REFERENCE, THRESHOLD, K, W, _every_hash, _grams, find_lookalikes
from course_lib.autograder.lookalike_regions import printed, provided_lines
from course_lib.autograder.notebook import MAX_SOURCE_CHARS, code_cells, function_sources
from course_lib.grading.forbidden.notebook import NotebookScan
from course_lib.grading.registry import ASSIGNMENTS

PE = "04_positional_encoding"
PE_FUNCTIONS = list(ASSIGNMENTS[PE])


def release(assignment: str) -> dict:
    """The look-alike search's view of the release, read as the class report reads it."""
    functions = list(ASSIGNMENTS[assignment])
    cells = code_cells((ROOT / "exercises" / f"{assignment}.ipynb").read_bytes())
    solution = code_cells((ROOT / "solutions" / f"{assignment}.ipynb").read_bytes())
    return {
        "starter": function_sources(cells, functions),
        "solution": compared_sources(NotebookScan(solution), functions),
        "provided": cells,
    }


def stub(assignment: str, function: str) -> str:
    """The starter's signature and docstring, kept by the student as provided."""
    return release(assignment)["starter"][function].split("    # YOUR CODE HERE")[0].rstrip("\n") + "\n"


def student(assignment: str, cells: list[str]) -> dict[str, str]:
    """What a record of this notebook (its code cells) stores as ``sources``."""
    return compared_sources(NotebookScan(["import math\nimport torch\n", *cells]), list(ASSIGNMENTS[assignment]))


def search(students: dict[str, dict[str, str]], assignment: str, **kw) -> list:
    return find_lookalikes(students, **release(assignment), **kw)


def student_pairs(pairs: list) -> list[tuple[str, str]]:
    return [(p.a, p.b) for p in pairs if p.b != REFERENCE]


LOOP_TABLE = """
class Table:
    def __init__(self, size):
        self.size = size

    def __call__(self, count):
        rows = []
        for p in range(count):
            row = []
            for i in range(self.size // 2):
                w = 1.0 / (10000 ** (2 * i / self.size))
                row.append(math.sin(p * w))
                row.append(math.cos(p * w))
            rows.append(row)
        return torch.tensor(rows, dtype=torch.float32)
"""

MODULE_TABLE = """
class Encoder(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width
        self.freq = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))

    def forward(self, n):
        where = torch.arange(n).unsqueeze(1).float()
        out = torch.empty(n, self.width)
        out[:, 0::2] = torch.sin(where * self.freq)
        out[:, 1::2] = torch.cos(where * self.freq)
        return out
"""


def wrapper(helper: str, body: str) -> list[str]:
    """Cells: the helper, then the graded function as a wrapper around it (docstring kept)."""
    return [textwrap.dedent(helper), stub(PE, "sinusoidal_positional_encoding") + body]


# -- what is compared: the function and the helpers it reaches ----------------------------------


def test_a_graded_function_is_followed_by_the_helpers_it_reaches_in_notebook_order():
    cells = [
        "def scale(t):\n    return t * 2\n",
        "class Table:\n    def __call__(self, n):\n        return scale(n) + offset(n)\n",
        "def unused():\n    return 0\n",
        "if True:\n    def offset(n):\n        return n + 1\n",
        "def sinusoidal_positional_encoding(num_positions, d_model):\n    return Table()(num_positions)\n",
        "def relative_position_matrix(n):\n    return sinusoidal_positional_encoding(n, 2) + scale(n)\n",
    ]
    got = compared_sources(NotebookScan(cells), PE_FUNCTIONS)
    pe = got["sinusoidal_positional_encoding"]
    c = [cell.rstrip("\n") for cell in cells]
    assert pe == (
        c[4]
        + f"\n\n{helper_marker('scale', 1)}\n{c[0]}"
        + f"\n\n{helper_marker('Table', 2)}\n{c[1]}"
        + f"\n\n{helper_marker('offset', 4)}\ndef offset(n):\n    return n + 1"
    )
    assert "unused" not in pe
    # another graded function is compared under its own name, not as a helper
    assert got["relative_position_matrix"] == c[5] + f"\n\n{helper_marker('scale', 1)}\n{c[0]}"


@pytest.mark.slow
def test_a_graded_record_stores_the_helpers_its_functions_reach():
    import json

    from course_lib.autograder.autograde import grade_submission
    from course_lib.autograder.sandbox import Runner
    from course_lib.autograder.sandbox_adapter import watch_lists

    nb = json.loads((ROOT / "solutions" / "02_self_attention.ipynb").read_text(encoding="utf-8"))
    wrapped = (
        HONEST_SOFTMAX.replace("def softmax(", "def _stable(")
        + "\n\ndef softmax(x, dim=-1):\n    return _stable(x, dim)\n"
    )
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": wrapped})
    data = json.dumps(nb).encode()
    with Runner(mode="off", slot=4712, watch=watch_lists()) as runner:
        record = grade_submission(data, "02_self_attention", runner)
    cells = code_cells(data)
    assert record.sources == compared_sources(NotebookScan(cells), list(ASSIGNMENTS["02_self_attention"]))
    assert record.sources["softmax"].startswith("def softmax(x, dim=-1):\n    return _stable(x, dim)\n\n")
    assert helper_marker("_stable", len(cells)) in record.sources["softmax"]


def test_a_function_without_helpers_is_stored_as_before():
    cells = ["def sinusoidal_positional_encoding(num_positions, d_model):\n    return torch.zeros(1)\n"]
    assert compared_sources(NotebookScan(cells), PE_FUNCTIONS) == function_sources(cells, PE_FUNCTIONS)


def test_the_compared_text_stays_within_the_bound_and_says_what_was_left_out():
    big = "def big(n):\n" + "    n = n + 1\n" * (MAX_SOURCE_CHARS // 14) + "    return n\n"
    cells = [
        "def small(n):\n    return n\n",
        big,
        "def sinusoidal_positional_encoding(p, d):\n    return big(small(p))\n",
    ]
    got = compared_sources(NotebookScan(cells), PE_FUNCTIONS)["sinusoidal_positional_encoding"]
    assert len(got) <= MAX_SOURCE_CHARS
    assert helper_marker("small", 1) in got and helper_marker("big", 2) not in got
    assert got.endswith(f"# --- 1 helper(s) left out: over {MAX_SOURCE_CHARS:,} characters ---")


def test_wrappers_around_different_helper_classes_are_not_look_alikes():
    students = {
        "ana": student(PE, wrapper(LOOP_TABLE, "    return Table(d_model)(num_positions)\n")),
        "ben": student(PE, wrapper(MODULE_TABLE, "    return Encoder(d_model)(num_positions)\n")),
    }
    # the graded functions alone are the same one line, renamed
    alone = [
        re.sub(r"Table|Encoder", "H", s["sinusoidal_positional_encoding"].split("\n\n# ---")[0])
        for s in students.values()
    ]
    assert alone[0] == alone[1]
    assert student_pairs(search(students, PE)) == []
    assert all(p.similarity < 0.25 for p in search(students, PE, threshold=0.0))


def test_a_helper_copied_verbatim_under_a_renamed_wrapper_pairs():
    copied = MODULE_TABLE.replace("Encoder", "PE")
    students = {
        "ben": student(PE, wrapper(MODULE_TABLE, "    return Encoder(d_model)(num_positions)\n")),
        "cat": student(PE, wrapper(copied, "    table = PE(d_model)\n    pe = table(num_positions)\n    return pe\n")),
        "ana": student(PE, wrapper(LOOP_TABLE, "    return Table(d_model)(num_positions)\n")),
    }
    pairs = [p for p in search(students, PE) if p.b != REFERENCE]
    assert [(p.a, p.b) for p in pairs] == [("ben", "cat")]
    assert pairs[0].similarity >= 0.9
    assert {r.function for r in pairs[0].regions} == {"sinusoidal_positional_encoding"}


# -- provided text never counts ----------------------------------------------------------------

OUTER_BODY = """\
    angles = torch.outer(torch.arange(num_positions).float(), 10000.0 ** (-torch.arange(0, d_model, 2).float() / d_model))
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)
"""
LOOP_BODY = """\
    table = torch.zeros(num_positions, d_model)
    for p in range(num_positions):
        for i in range(0, d_model, 2):
            table[p, i] = math.sin(p / 10000 ** (i / d_model))
            table[p, i + 1] = math.cos(p / 10000 ** (i / d_model))
    return table
"""


def test_students_who_keep_the_provided_docstring_and_write_different_bodies_are_not_a_pair():
    head = stub(PE, "sinusoidal_positional_encoding")
    students = {"ana": student(PE, [head + OUTER_BODY]), "ben": student(PE, [head + LOOP_BODY])}
    assert student_pairs(search(students, PE)) == []
    provided = set(range(1, head.count("\n") + 1))  # the signature and the provided docstring
    for p in search(students, PE, threshold=0.0):  # what they share, with each other or the solution
        assert not any(set(range(r.a_lines[0], r.a_lines[1] + 1)) & provided for r in p.regions), p


def test_the_provided_docstring_of_a_real_copy_is_not_marked_shared():
    head = stub(PE, "sinusoidal_positional_encoding")
    copy = LOOP_BODY.replace("table", "pe").replace("p,", "pos,").replace("(p ", "(pos ").replace("for p ", "for pos ")
    students = {"ana": student(PE, [head + LOOP_BODY]), "ben": student(PE, [head + copy])}
    (pair,) = [p for p in search(students, PE) if p.b != REFERENCE]
    assert pair.similarity == 1.0
    provided = range(1, head.count("\n") + 1)  # the signature and the provided docstring
    for r in pair.regions:
        for first, last in (r.a_lines, r.b_lines):
            assert not set(range(first, last + 1)) & set(provided), (r, head)
    assert min(r.a_lines[0] for r in pair.regions) == head.count("\n") + 1  # the first line of the body


def test_a_provided_helper_that_every_student_reaches_is_not_shared():
    """Chapter 3's exercise notebook provides ``scaled_dot_product_attention``: students who call
    it from different ``multi_head_attention`` bodies are no pair, and do not match the solution
    (which calls it too) through it."""
    a = "03_multi_head_attention"
    provided = next(c for c in release(a)["provided"] if c.startswith("def scaled_dot_product_attention"))
    head = stub(a, "multi_head_attention")
    one = """\
    n, t, e = query.shape
    d = e // num_heads
    q = (query @ W_q).view(n, t, num_heads, d).transpose(1, 2)
    k = (key @ W_k).view(n, key.shape[1], num_heads, d).transpose(1, 2)
    v = (value @ W_v).view(n, value.shape[1], num_heads, d).transpose(1, 2)
    out, w = scaled_dot_product_attention(q, k, v, mask)
    return out.transpose(1, 2).reshape(n, t, e) @ W_o, w
"""
    two = """\
    heads = []
    for h in range(num_heads):
        cols = slice(h * (W_q.shape[1] // num_heads), (h + 1) * (W_q.shape[1] // num_heads))
        heads.append(scaled_dot_product_attention(query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols], mask))
    outs = torch.cat([o for o, _ in heads], dim=-1)
    return outs @ W_o, torch.stack([w for _, w in heads], dim=1)
"""
    students = {"ana": student(a, [provided, head + one]), "ben": student(a, [provided, head + two])}
    marker = helper_marker("scaled_dot_product_attention", 2)
    assert marker in students["ana"]["multi_head_attention"]
    assert student_pairs(search(students, a)) == []
    for p in search(
        students, a, threshold=0.0
    ):  # what the solution shares is the student's own body, not the provided helper
        helper_starts = students[p.a]["multi_head_attention"].split("\n").index(marker) + 1
        assert all(r.a_lines[1] < helper_starts for r in p.regions)


# -- tiny code is no evidence ------------------------------------------------------------------


def test_identical_tiny_code_is_never_shown_at_high_similarity():
    one_liner = "    return x.double().log_softmax(dim).exp().to(x.dtype)\n"
    students = {s: {"softmax": stub("02_self_attention", "softmax") + one_liner} for s in ("ana", "ben")}
    pairs = search(students, "02_self_attention", threshold=0.0)
    assert [(p.a, p.b) for p in pairs] == [("ana", "ben")]
    assert pairs[0].similarity <= 7 / EVIDENCE < THRESHOLD


def test_a_real_copy_stays_at_full_similarity():
    head = stub(PE, "sinusoidal_positional_encoding")
    students = {
        "ana": student(PE, [head + LOOP_BODY, textwrap.dedent(MODULE_TABLE)]),
        "ben": student(PE, [head + LOOP_BODY.replace("table", "t")]),
    }
    (pair,) = [p for p in search(students, PE) if p.b != REFERENCE]
    assert pair.similarity == 1.0


@pytest.mark.parametrize("assignment", list(ASSIGNMENTS))
def test_every_course_solution_is_large_enough_to_be_evidence(assignment):
    """The module docstring's measure: a whole assignment's solution keeps at least
    ``EVIDENCE`` fingerprints once the provided text is left out, so a copy is never scaled down."""
    r = release(assignment)
    lines = frozenset(line.strip() for src in r["starter"].values() for line in src.split("\n"))
    base = _every_hash([*r["starter"].values(), *r["provided"]])
    kept = {
        (f, g[0])
        for f, src in r["solution"].items()
        for g in printed(_grams(src, K, W), provided_lines(src, lines)).grams
        if g[0] not in base
    }
    assert len(kept) >= EVIDENCE


def test_records_graded_before_helpers_were_compared_are_still_searched():
    cells = wrapper(MODULE_TABLE, "    return Encoder(d_model)(num_positions)\n")
    old = function_sources(["import math\nimport torch\n", *cells], PE_FUNCTIONS)  # the def alone
    copied = wrapper(MODULE_TABLE.replace("Encoder", "PE"), "    return PE(d_model)(num_positions)\n")
    students = {"ana": old, "ben": student(PE, cells), "cat": student(PE, copied)}
    pairs = search(students, PE)
    assert student_pairs(pairs) == [("ben", "cat")]
