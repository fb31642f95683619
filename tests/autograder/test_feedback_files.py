"""The feedback files a student reads (``course-lib feedback``, issue 30, item 9).

Each function's report is shown as in the notebook (:mod:`course_lib.grading.rendering`): the
score, each error and each likely mistake once with its hint or fix (folded in HTML), the
failing tests, one sentence for the tests whose points wait for the value tests (withheld, not
failed), the passing tests folded. The HTML is one self-contained styled page; the Markdown is
CommonMark, checked with markdown-it-py: text from a submission is literal, code spans hold the
code verbatim (no backslash escape, which CommonMark would show). ``--assignment`` and
``--student`` choose the files; an unknown one is an error that names it and lists the known.
Records are built from reports with the gradebook's API: no sandbox starts.
"""

from __future__ import annotations

import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from course_lib.autograder.autograde import refused_record
from course_lib.autograder.exports import file_stem
from course_lib.autograder.feedback_files import FeedbackFilterError, write_feedback
from course_lib.autograder.gradebook import Gradebook
from course_lib.cli import main
from course_lib.grading.judging import PROPERTY_GATE
from course_lib.grading.rendering import WAITING
from course_lib.grading.report import Report
from course_lib.grading.report import TestResult as Result

A, B = "02_self_attention", "03_multi_head_attention"
ZOE = "zoë"  # stored as written on Linux (NFC); asked for below as macOS spells it (NFD)
HOSTILE = "<script>alert(1)</script> [x](http://evil) &amp; *b* _i_ \\"
MISTAKE = "filling masked scores with -1e9: use `scores.masked_fill(~mask, float('-inf'))` and `x_y * z`"
ERROR = (
    "raised RuntimeError: The size of tensor a (2) must match the size of tensor b (4), "
    "in your line `s = q @ kt`, where `kt` is (4, 5, 2) float32. Hint: use `k.transpose(-2, -1)`"
)


def _attention_report() -> Report:
    """A failing function: an error on two tests, a mistake on two, two withheld, two passing."""
    return Report(
        "scaled_dot_product_attention",
        [
            Result("fixed small case", "hand-made inputs", 1, 1, True),
            Result("extra batch dims", "(2, 3, L, D)", 0, 1, False, "raised RuntimeError", error=ERROR),
            Result("mask (L, S)", "a mask", 0, 1, False, "raised RuntimeError", error=ERROR),
            Result("fully masked row", "zero weights", 0, 2, False, "the weights differ", MISTAKE, diagnoses=[MISTAKE]),
            Result("far below", "scores of -1e10", 0, 1, False, "the weights differ", MISTAKE, diagnoses=[MISTAKE]),
            Result("weights sum to 1", "a property", 0, 1, False, PROPERTY_GATE, withheld=True),
            Result("permutation", "another property", 0, 1, False, PROPERTY_GATE, withheld=True),
            Result("random shapes", "random inputs", 2, 2, True),
        ],
        "failed",
    )


def _softmax_report() -> Report:
    """A function that passes: its tests are one folded line."""
    return Report("softmax", [Result(n, "values", 1, 1, True) for n in ("fixed", "random", "-inf entries")], "passed")


def class_gradebook(db: Path) -> Path:
    """ann (A and B), a hostile name with backticks, zoë (A only)."""
    functions = (_softmax_report().to_dict(), _attention_report().to_dict())
    rec = replace(refused_record(A, "x"), status="graded", raw_score=6.0, messages=(), functions=functions)
    hostile = _attention_report()
    hostile.function = "f`un`c"
    hostile.results[0].name = HOSTILE
    with Gradebook(db) as gb:
        gb.save("ann", rec, "c", 1.0)
        gb.save("ann", replace(rec, assignment=B, messages=(f"note {HOSTILE}",)), "c", 1.0)
        gb.save(HOSTILE, replace(rec, functions=(hostile.to_dict(),)), "c", 1.0)
        gb.save(ZOE, rec, "c", 1.0)
    return db


@pytest.fixture(scope="module")
def book(tmp_path_factory) -> Path:
    return class_gradebook(tmp_path_factory.mktemp("feedback") / "g.sqlite")


def _write(book: Path, out: Path, fmt: str, student: str = "ann", **filters) -> str:
    write_feedback(book, out, fmt, **filters)
    return (out / f"{file_stem(student)}.{fmt}").read_text(encoding="utf-8")


def _in_order(text: str, *pieces: str) -> list[int]:
    at, found = 0, []
    for piece in pieces:
        at = text.index(piece, at)
        found.append(at)
    return found


def test_the_html_reads_score_errors_mistakes_failing_waiting_then_folded_passing(book, tmp_path):
    page = _write(book, tmp_path, "html")
    section = page.split("multi")[0]  # assignment A
    _in_order(
        section,
        "scaled_dot_product_attention: 3/10 points, some tests failed",
        "<strong>Error</strong> (tests &#x27;extra batch dims&#x27;, &#x27;mask (L, S)&#x27;)",
        "<summary",
        "Hint</summary>",
        "<strong>Likely mistake</strong> (tests &#x27;fully masked row&#x27;, &#x27;far below&#x27;)",
        "Why, and how to fix it</summary>",
        'aria-label="failing tests"',
        WAITING,
        '<details class="course-lib-passing"',
        "Passing: 2 of 8 tests",
        'aria-label="passing tests"',
    )
    assert "<details open" not in page and " open>" not in page
    failing = section.split('aria-label="failing tests"')[1].split("</table>")[0]
    assert "fully masked row" in failing and "weights sum to 1" not in failing and "random shapes" not in failing


def test_each_rule_sentence_and_each_mistake_is_said_once_per_function(book, tmp_path):
    for fmt in ("md", "html"):
        page = _write(book, tmp_path / fmt, fmt)
        section = page.split("multi")[0]  # assignment A
        assert "earns its points only once" not in page, fmt  # the per-test gate sentence, never repeated
        assert section.count(WAITING) == 1, fmt
        assert section.count("filling masked scores with -1e9") == 1, fmt
        assert section.count("must match the size of tensor b") == 1, fmt


def test_withheld_tests_are_shown_as_waiting_never_as_failed(book, tmp_path):
    md = _write(book, tmp_path, "md")
    assert "'weights sum to 1' and 'permutation' pass and earn their 2 points once the value tests pass" in md
    fails = [line for line in md.splitlines() if line.startswith("- **FAIL")]
    assert len(fails) == 2 * 4 and not any("weights sum to 1" in f or "permutation" in f for f in fails)


def test_a_function_that_passes_is_one_folded_line(book, tmp_path):
    page = _write(book, tmp_path, "html")
    softmax = page.split("softmax: 3/3 points")[1].split("scaled_dot_product_attention")[0]
    assert "Passing: all 3 tests (3 points)" in softmax and "Failing" not in softmax and "Likely" not in softmax
    assert softmax.index("<details") < softmax.index("<table")


def _tokens(markdown: str):
    tokens = []
    for block in MarkdownIt("commonmark").parse(markdown):
        tokens += [block, *(block.children or [])]
    return tokens


def test_the_markdown_is_commonmark_with_code_spans_verbatim_and_student_text_literal(book, tmp_path):
    tokens = _tokens(_write(book, tmp_path, "md"))
    codes = [t.content for t in tokens if t.type == "code_inline"]
    assert "scores.masked_fill(~mask, float('-inf'))" in codes and "x_y * z" in codes and "s = q @ kt" in codes
    assert not any("\\" in c for c in codes), codes  # CommonMark shows a backslash in code as it is
    headings = [t.content for t in tokens if t.type == "inline" and "points" in t.content]
    rendered = MarkdownIt("commonmark").render(_write(book, tmp_path, "md"))
    assert "<h3>scaled_dot_product_attention: 3/10 points, some tests failed</h3>" in rendered, headings
    assert f"<h2>{A}: 6 / 34 points</h2>" in rendered and "<li><strong>FAIL 0/2</strong> fully masked row" in rendered

    hostile = _write(book, tmp_path, "md", student=HOSTILE)
    tokens = _tokens(hostile)
    assert not [t for t in tokens if t.type in ("html_inline", "html_block", "link_open", "image")]
    rendered = MarkdownIt("commonmark").render(hostile)
    assert (
        "<script>" not in rendered
        and "&lt;script&gt;alert(1)&lt;/script&gt; [x](http://evil) &amp;amp; *b* _i_ \\" in (rendered)
    )
    assert "<code>un</code>" in rendered  # the function name's backticks are code, as in the notebook
    assert "<h1>Feedback for &lt;script&gt;" in rendered


def test_the_html_page_is_self_contained_styled_for_light_and_dark_and_phones(book, tmp_path):
    page = _write(book, tmp_path, "html")
    assert page.startswith("<!DOCTYPE html>") and '<html lang="en">' in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert "@media (prefers-color-scheme: dark)" in page and "color-scheme: light dark" in page
    assert "<script" not in page and "src=" not in page and "href=" not in page and "@import" not in page
    hostile = _write(book, tmp_path, "html", student=HOSTILE)
    assert "<script>alert" not in hostile and "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile


def test_assignment_and_student_filters_choose_the_files(book, tmp_path, capsys):
    out = tmp_path / "one"
    args = ["feedback", "--db", str(book), "--out", str(out), "--format", "md"]
    nfd = unicodedata.normalize("NFD", ZOE)
    assert main([*args, "--assignment", B, "--student", "ann", "--student", nfd]) == 0
    assert sorted(p.name for p in out.iterdir()) == [f"{file_stem('ann')}.md"]
    md = (out / f"{file_stem('ann')}.md").read_text(encoding="utf-8")
    assert "03\\_multi\\_head\\_attention" in md and "02\\_self\\_attention" not in md
    captured = capsys.readouterr()
    assert "wrote 1 feedback report(s)" in captured.out and f"{ZOE!r} has no record of the assignments" in captured.err
    assert main([*args, "--assignment", A, "--student", nfd]) == 0
    assert (out / f"{file_stem(ZOE)}.md").exists()


@pytest.mark.parametrize(
    ("flag", "value", "listed"),
    [("--assignment", "05_layer_norm", f"its assignments: {A}, {B})"), ("--student", "bob", "ann, zoë")],
)
def test_an_unknown_filter_is_an_error_naming_it_and_the_known_ones_and_writes_nothing(
    book, tmp_path, capsys, flag, value, listed
):
    out = tmp_path / "none"
    assert main(["feedback", "--db", str(book), "--out", str(out), flag, value]) == 2
    err = capsys.readouterr().err
    assert f"{flag} '{value}': not in the gradebook" in err and listed in err, err
    assert not out.exists()
    with pytest.raises(FeedbackFilterError, match=value):
        write_feedback(book, out, "html", **{flag.removeprefix("--") + "s": [value]})


Q = "ch02-nb-mean-shift"
COMMENT = "**good**, see `softmax`\n\n<script>alert(1)</script> [x](javascript:alert(1)) ![i](http://evil/i.png)"


@pytest.fixture
def by_hand(tmp_path: Path) -> Path:
    """ann's A (6 points by the checks): Q graded 3 / 4 with a rubric item and a hostile comment,
    q2 answered and pending, q3 blank."""
    db = tmp_path / "h.sqlite"
    answers = ({"id": Q, "answer": "x"}, {"id": "q2", "answer": "y"}, {"id": "q3", "answer": ""})
    rec = replace(refused_record(A, "x"), status="graded", raw_score=6.0, messages=(), answers=answers)
    with Gradebook(db) as gb:
        gb.save("ann", rec, "c", 1.0)
        setup = gb.manual.set_question(
            A, Q, max_points=4, rubric=[(None, "uses `masked_fill`", 3)], by="lee", expected=0
        )
        for question in ("q2", "q3"):
            gb.manual.set_question(A, question, max_points=2, rubric=[], by="lee", expected=0)
        item = setup.rubric[0].id
        gb.manual.grade(A, Q, ["ann"], items=[item], adjust=0, comment=COMMENT, by="lee", expected={"ann": 0})
    return db


def test_the_html_shows_each_question_graded_by_hand_with_items_and_the_comment_as_safe_markdown(by_hand, tmp_path):
    page = _write(by_hand, tmp_path, "html")
    assert f"{A}: 9 / 42 points" in page  # 6 + 3 of 34 + 4 + 2 + 2
    _in_order(
        page, "Questions graded by hand", Q, "3 / 4", "<li>uses <code>masked_fill</code></li>", "<strong>good</strong>"
    )
    assert "<code>softmax</code>" in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page and "[x](javascript:alert(1))" in page  # the link shown as text
    assert "href=" not in page and "src=" not in page and "[x](javascript:alert(1)) i</p>" in page  # the image: its alt
    assert (
        "<strong>q2</strong>: being graded by hand (of 2)" in page
        and "<strong>q3</strong>: 0 / 2 (not answered)" in page
    )


def test_the_html_comment_is_escaped_text_with_code_spans_without_markdown_it(by_hand, tmp_path, monkeypatch):
    from course_lib.autograder import manual_feedback

    monkeypatch.setattr(manual_feedback, "_renderer", lambda: None)
    page = _write(by_hand, tmp_path, "html")
    assert "<p>**good**, see <code>softmax</code></p>" in page and "&lt;script&gt;" in page and "<script" not in page


def test_the_markdown_lists_questions_graded_by_hand_with_raw_html_as_text(by_hand, tmp_path):
    text = _write(by_hand, tmp_path, "md")
    manual = text.split("### Questions graded by hand", 1)[1]
    tokens = _tokens(manual)
    assert not [t for t in tokens if t.type in ("html_inline", "html_block")]
    rendered = MarkdownIt("commonmark").render(manual)
    assert f"<strong>{Q}</strong>: 3 / 4" in rendered and "<li>uses <code>masked_fill</code></li>" in rendered
    assert "<blockquote>\n<p><strong>good</strong>, see <code>softmax</code></p>" in rendered
    assert "being graded by hand (of 2)" in rendered and "0 / 2 (not answered)" in rendered
