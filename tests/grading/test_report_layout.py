"""The report a student reads first (issue 29, item 5).

In the order a student reads it, in HTML (JupyterLab, a browser) and as text (a terminal, the
notebook's text/plain): the score, then the likely mistake with its fix (folded in HTML, one
click away), then the failing tests; a passing property test whose points wait for the value
tests is said once, in those words; the passing tests are folded (one line in text). Every
cell is left-aligned by its own inline style (JupyterLab's CSS right-aligns table cells),
text in backticks is code, and everything the student wrote is escaped. ``course-lib check``
tells of a composition only where the student's own callees changed the score.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
import torch
from conftest import notebook

from course_lib.grading import check
from course_lib.grading.forbidden import NotebookScan
from course_lib.grading.judging import PROPERTY_GATE
from course_lib.grading.rendering import inline_code, split_fix
from course_lib.grading.report import Report
from course_lib.grading.report import TestResult as Result
from course_lib.grading.standins import composed, static_callees

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>"
MISTAKE = "ignoring the mask: masked keys must get weight 0; use `scores.masked_fill(~mask, -inf)`"


class Elements(HTMLParser):
    """The elements of an HTML fragment in document order: (tag, attributes, text inside)."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, dict[str, str], list[str]]] = []
        self.own: list[list[str]] = []  # the text directly inside each element
        self.open: list[int] = []
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {k: v or "" for k, v in attrs}, []))
        self.own.append([])
        self.open.append(len(self.found) - 1)

    def handle_endtag(self, tag):
        while self.open:
            if self.found[self.open.pop()][0] == tag:
                break

    def handle_data(self, data):
        for i in self.open:
            self.found[i][2].append(data)
        if self.open:
            self.own[self.open[-1]].append(data)

    def text(self, i: int) -> str:
        return "".join(self.found[i][2])

    def tags(self, tag: str) -> list[int]:
        return [i for i, (t, _, _) in enumerate(self.found) if t == tag]

    def first(self, words: str) -> int:
        """The first element whose own text (not its children's) contains ``words``."""
        return next(i for i, own in enumerate(self.own) if words in "".join(own))


def _report(mistake: str = MISTAKE, feedback: str = "the weights differ in 3 of 12 entries") -> Report:
    results = [
        Result("fixed small case", "hand-made scores", 1, 1, True),
        Result("padding mask", "masked keys get weight 0", 0, 2, False, feedback, mistake, diagnoses=[mistake]),
        Result("broadcast mask", "a (1, S) mask", 0, 1, False, feedback, mistake, diagnoses=[mistake]),
        Result("weights sum to one", "a property", 0, 1, False, PROPERTY_GATE, withheld=True),
        Result("permutation", "another property", 0, 1, False, PROPERTY_GATE, withheld=True),
        Result("random shapes", "random scores", 2, 2, True),
    ]
    return Report("attention_pool", results, "failed")


def test_the_html_reads_score_then_mistake_then_its_folded_fix_then_failing_then_folded_passing():
    page = Elements(_report()._repr_html_())
    headline = page.first("3/8 points")
    mistake = page.first("ignoring the mask")  # the paragraph that starts "Likely mistake"
    fix, passing = (i for i in page.tags("details"))
    failing_table, passing_table = page.tags("table")
    waiting = page.first("once the value tests pass")
    assert headline < mistake < fix < failing_table < waiting < passing < passing_table
    assert page.text(mistake).startswith("Likely mistake") and "masked keys must get weight 0" not in page.text(mistake)
    assert "masked keys must get weight 0" in page.text(fix) and "open" not in page.found[fix][1]
    assert "open" not in page.found[passing][1] and "Passing: 2 of 6 tests" in page.text(passing)
    assert "fixed small case" in page.text(passing_table) and "padding mask" not in page.text(passing_table)
    assert "padding mask" in page.text(failing_table) and "weights sum to one" not in page.text(failing_table)


def test_every_table_cell_is_left_aligned_by_its_own_style():
    page = Elements(_report()._repr_html_())
    cells = page.tags("td") + page.tags("th")
    assert len(cells) > 10
    for i in cells:
        assert "text-align:left" in page.found[i][1].get("style", "").replace(" ", ""), page.found[i]
    assert "text-align:left" in page.found[page.tags("div")[0]][1]["style"]


def test_text_in_backticks_is_code_and_escaped():
    assert inline_code("use `x < y` then `a`") == "use <code>x &lt; y</code> then <code>a</code>"
    assert inline_code("a lone ` backtick <b>") == "a lone ` backtick &lt;b&gt;"
    page = Elements(_report()._repr_html_())
    (code,) = (i for i in page.tags("code") if "masked_fill" in page.text(i))
    assert page.text(code) == "scores.masked_fill(~mask, -inf)"
    assert code > page.tags("details")[0]  # inside the folded fix


def test_a_hostile_student_string_is_escaped_everywhere():
    report = _report(mistake=f"a mistake {HOSTILE}: fix `{HOSTILE}`", feedback=f"raised in your line `{HOSTILE}`")
    report.notes = [f"uses {HOSTILE}"]
    report.results[0].name = HOSTILE
    report.function = HOSTILE
    markup = report._repr_html_()
    page = Elements(markup)
    assert not page.tags("script") and not page.tags("img") and "<script" not in markup and "<img" not in markup
    assert sum(HOSTILE in page.text(i) for i in page.tags("code")) == 3  # the fix's, two failing tests' feedback
    assert all("onerror" not in attrs for _, attrs, _ in page.found)


def test_a_passing_property_test_waits_for_the_value_tests_said_once():
    report = _report()
    text, markup = str(report), report._repr_html_()
    for shown in (text, markup):
        assert shown.count("once the value tests pass") == 1, shown
        assert "this test passes" not in shown and PROPERTY_GATE not in shown
    assert "'weights sum to one' and 'permutation' pass and earn their 2 points once the value tests pass" in text
    assert not any("FAIL" in line and "weights sum to one" in line for line in text.splitlines())


def test_the_text_keeps_the_same_order_and_says_the_passing_tests_in_one_line():
    lines = str(_report()).splitlines()
    starts = [
        "attention_pool: 3/8 points",
        "  Likely mistake (tests 'padding mask', 'broadcast mask'): ignoring the mask",
        "    Why, and how to fix it: masked keys must get weight 0",
        "  Failing tests:",
        "    FAIL 0/2  padding mask",
        "  Waiting: ",
        "  Passing: 2 of 6 tests (3 points): fixed small case, random shapes",
    ]
    at = [next(i for i, line in enumerate(lines) if line.startswith(s)) for s in starts]
    assert at == sorted(at) and len(lines) == 10, lines  # the two failing tests have one feedback line each


def test_a_mistake_splits_at_its_first_colon_or_else_semicolon_outside_brackets_and_code():
    assert split_fix("ignoring W: this is the dot score") == ("ignoring W", "this is the dot score")
    assert split_fix("using `x[:, 0]: y` (a: b) wrongly: do z") == ("using `x[:, 0]: y` (a: b) wrongly", "do z")
    assert split_fix("multiplying the weights by the keys") == ("multiplying the weights by the keys", "")
    assert split_fix("x @ W.T (nn.Linear's; not ours); here x @ W") == ("x @ W.T (nn.Linear's; not ours)", "here x @ W")


def test_a_refused_function_says_why_once_and_its_tests_in_one_line():
    results = [Result(n, "c", 0, 1, False) for n in ("a", "b", "c")]
    report = Report("softmax", results, "forbidden", ["uses torch.softmax, which this exercise asks you to write"])
    for shown in (str(report), report._repr_html_()):
        assert (
            shown.count("uses torch.softmax") == 1 and "Failing: all 3 tests (3 points), for the reason above" in shown
        )
    assert "<table" not in report._repr_html_()


def test_a_real_report_from_check_is_laid_out_the_same_way():
    def attention_pool(scores, values, mask=None):  # ignores the mask
        w = torch.softmax(scores, dim=-1)
        return (w.unsqueeze(1) @ values).squeeze(1), w

    report = check(attention_pool)
    page = Elements(report._repr_html_())
    assert page.first("Likely mistake") < page.tags("table")[0]
    assert str(report).count("once the value tests pass") == 1


# -- composition lines only where the callees changed something ----------------------------


POOL_CELLS = [
    "import torch\n",
    "def scaled_dot_score(query, keys):\n    return (keys @ query.unsqueeze(-1)).squeeze(-1)\n",
    "def attention_pool(scores, values, mask=None):\n    weights = torch.softmax(scores, -1)\n"
    "    return (weights.unsqueeze(1) @ values).squeeze(1), weights\n",
    "q, k = torch.randn(1, 4), torch.randn(1, 3, 4)\ncontext, weights = attention_pool(scaled_dot_score(q, k), k)\n",
]


def test_a_functions_own_locals_are_not_followed_to_the_notebooks_variables_of_the_same_name():
    env = NotebookScan(POOL_CELLS).env
    assert static_callees(env, "attention_pool", ["scaled_dot_score", "dot_score"]) == []
    calls = [
        *POOL_CELLS[:2],
        "def attention_pool(scores, values, mask=None):\n    return scaled_dot_score(scores, values)\n",
    ]
    assert static_callees(NotebookScan(calls).env, "attention_pool", ["scaled_dot_score"]) == ["scaled_dot_score"]


def test_no_composition_is_told_when_the_references_changed_nothing():
    own, stand_in = _report(), _report()
    assert composed(own, stand_in, ["scaled_dot_score"]) is own and own.composition is None
    assert "With your own" not in str(own)
    better = _report()
    better.results[1].points, better.results[1].passed = 2, True
    assert composed(_report(), better, ["scaled_dot_score"]).composition is not None


@pytest.mark.slow  # the autograder's worker process imports torch: about 7 s
@pytest.mark.serial  # a grading runner: uid 60000 and a memory cgroup, as tests/autograder's
def test_course_lib_check_tells_no_composition_for_a_callee_never_called(tmp_path, capsys):
    from course_lib.cli import main

    path = tmp_path / "01_seq2seq_attention.ipynb"
    path.write_bytes(notebook(*POOL_CELLS))
    assert main(["check", str(path), "--sandbox", "off"]) == 0
    out = capsys.readouterr().out
    assert "attention_pool: " in out and "With your own" not in out, out


def test_an_error_is_said_once_before_the_mistakes_with_its_hint_folded():
    error = "raised RuntimeError: shapes differ, in your line `w = s @ v.T`. Hint: use `v.transpose(-2, -1)`"
    report = _report()
    for r in report.results[1:3]:
        r.error = error
    page = Elements(report._repr_html_())
    said = page.first("shapes differ")
    hint, fix, _ = (i for i in page.tags("details"))
    assert said < hint < page.first("ignoring the mask") < fix
    assert page.text(said).startswith("Error (tests 'padding mask', 'broadcast mask')")
    assert "transpose" not in page.text(said)
    assert "v.transpose(-2, -1)" in page.text(hint) and "open" not in page.found[hint][1]
    text = str(report)
    assert text.count("shapes differ") == 1 and text.index("shapes differ") < text.index("Likely mistake")
