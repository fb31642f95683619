"""Answers and questions as safe HTML (``answer_text.render_markdown``), and the questions' text.

Every answer is hostile: the HTML never holds a script element, an event-handler attribute, a
``style`` attribute, or a URL other than ``data:image/...``, http(s), mailto or relative, whatever
the Markdown or the LaTeX in it says. Math becomes MathML, written when the HTML is made.
"""

from __future__ import annotations

import base64
import re
import time
from html.parser import HTMLParser

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.autograder.answer_text import (
    MAX_FORMULA_CHARS,
    MAX_TEXT_CHARS,
    QuestionsError,
    questions,
    render_markdown,
)
from course_lib.autograder.notebook import think_answers

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
PNG64 = base64.b64encode(PNG).decode()
SVG64 = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>').decode()


class Tags(HTMLParser):
    """Every start tag of some HTML with its attributes."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def names(self) -> list[str]:
        return [t for t, _ in self.tags]


SAFE_URL = re.compile(r"^(https?:|mailto:|data:image/(png|jpeg|gif|webp);base64,|[^:]*$)", re.IGNORECASE)


def assert_safe(html: str) -> None:
    """No script, no event handler, no style attribute, no URL but data images, http(s), mailto, relative."""
    tags = Tags(html).tags
    for tag, attrs in tags:
        assert tag not in ("script", "iframe", "object", "embed", "style", "svg", "foreignobject", "form"), html
        for name, value in attrs.items():
            assert not name.startswith("on"), f"event handler {name} in {html}"
            assert name not in ("style", "srcdoc", "xlink:href", "formaction"), html
            if name in ("href", "src"):
                assert value is not None and SAFE_URL.match(value.strip()), f"unsafe {name}={value!r} in {html}"
                assert not value.lower().startswith("data:") or tag == "img", html


def test_inline_and_display_math_become_mathml():
    html = render_markdown("Dividing by $\\sqrt{D}$ keeps\n\n$$\\frac{q^\\top k}{\\sqrt{D}}$$\n\nsmall.")
    maths = [attrs for tag, attrs in Tags(html).tags if tag == "math"]
    assert [m["display"] for m in maths] == ["inline", "block"]
    assert "<msqrt>" in html and "<mfrac>" in html and "$" not in html


def test_bracket_delimiters_are_math_too():
    html = render_markdown("inline \\(a+b\\) here\n\n\\[\n\\sum_i x_i\n\\]\n\nand \\[c^2\\] in text")
    assert [a["display"] for t, a in Tags(html).tags if t == "math"] == ["inline", "block", "block"]
    assert "\\(" not in html and "\\[" not in html and "<msup><mi>c</mi>" in html


def test_a_huge_text_is_cut_and_says_so():
    html = render_markdown("word " * (MAX_TEXT_CHARS // 5 + 1000))
    assert html.count("word") == MAX_TEXT_CHARS // 5 and "(cut at 50,000 characters)" in html


def test_a_dollar_amount_is_not_math():
    assert "<math" not in render_markdown("it costs $5 and $10")


@pytest.mark.parametrize("latex", ["\\begin{foo}x", "x^", "\\sqrt", "\\left( x"])
def test_a_formula_latex2mathml_cannot_convert_is_shown_as_escaped_code(latex):
    html = render_markdown(f"see ${latex}$ here")
    assert "<math" not in html
    assert f'<code class="math-source">${latex}$</code>' in html


def test_markdown_is_commonmark():
    html = render_markdown("# Title\n\n*one* **two** `x < y`\n\n- a\n- b\n\n```\ncode <b>\n```\n")
    assert "<h1>Title</h1>" in html and "<em>one</em>" in html and "<strong>two</strong>" in html
    assert "<code>x &lt; y</code>" in html and "<li>a</li>" in html and "code &lt;b&gt;" in html


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<div onclick='alert(1)'>hi</div>",
        "<a href='javascript:alert(1)'>x</a>",
        "<svg onload=alert(1)>",
        "<style>body{display:none}</style>",
    ],
)
def test_raw_html_is_escaped_never_passed_through(text):
    html = render_markdown(text)
    assert Tags(html).names() == ["p"] or Tags(html).names() == []
    assert "&lt;" in html
    assert_safe(html)


@pytest.mark.parametrize(
    "link",
    [
        "[x](javascript:alert(1))",
        "[x](JaVaScRiPt:alert(1))",
        "[x](java\tscript:alert(1))",
        "[x](  javascript:alert(1))",
        "[x](<javascript:alert(1)>)",
        "<javascript:alert(1)>",
        "[x](vbscript:msgbox)",
        "[x](data:text/html;base64,PHNjcmlwdD4=)",
        "[x](file:///etc/passwd)",
        "[x](attachment:image.png)",
        "[x]: javascript:alert(1)\n\n[x]",
    ],
)
def test_links_with_another_scheme_than_http_or_mailto_lead_nowhere(link):
    html = render_markdown(link, {"image.png": {"image/png": PNG64}})
    assert all("href" not in attrs for _, attrs in Tags(html).tags), html
    assert_safe(html)


def test_http_mailto_and_relative_links_are_kept_with_a_safe_rel():
    html = render_markdown("[a](https://pytorch.org/docs) [b](mailto:me@example.org) [c](notes.md#x) <http://x.org>")
    links = [attrs for tag, attrs in Tags(html).tags if tag == "a"]
    assert [a["href"] for a in links] == [
        "https://pytorch.org/docs",
        "mailto:me@example.org",
        "notes.md#x",
        "http://x.org",
    ]
    assert all(a["rel"] == "noopener noreferrer nofollow" and "target" not in a for a in links)


def test_html_in_math_is_escaped():
    html = render_markdown("$<script>alert(1)</script>$ and $$<img src=x onerror=alert(1)>$$")
    assert "<script" not in html and "<img" not in html
    assert_safe(html)


def test_html_in_a_latex_text_command_never_becomes_markup():
    for latex in ("\\text{<script>alert(1)</script>}", "\\text{<b onclick=x>a</b>}", "\\mbox{<i>a</i>}"):
        html = render_markdown(f"${latex}$")
        assert "<script" not in html and "<b" not in html and "<i>" not in html, html
        assert_safe(html)


def test_href_and_style_in_latex_are_dropped():
    html = render_markdown("$\\href{javascript:alert(1)}{x}$ $\\style{background:url(http://x)}{y}$")
    assert "<math" in html and "href" not in html and "style" not in html and "javascript" not in html


def test_a_huge_formula_is_shown_as_code_without_converting_it():
    latex = "x+" * MAX_FORMULA_CHARS
    start = time.perf_counter()
    html = render_markdown(f"${latex}$")
    elapsed = time.perf_counter() - start
    assert "<math" not in html and '<code class="math-source">' in html
    assert elapsed < 5, elapsed  # generous: a converted formula this long would take far longer on any machine


def test_deeply_nested_brackets_are_shown_as_code():
    html = render_markdown("$" + "{" * 500 + "x" + "}" * 500 + "$")
    assert "<math" not in html and "math-source" in html


def test_a_pasted_image_from_the_answers_attachments_is_shown_as_a_data_uri():
    html = render_markdown("look: ![image.png](attachment:image.png)", {"image.png": {"image/png": PNG64}})
    (img,) = [attrs for tag, attrs in Tags(html).tags if tag == "img"]
    assert img == {"src": f"data:image/png;base64,{PNG64}", "alt": "image.png"}


@pytest.mark.parametrize(
    ("markdown", "attachments"),
    [
        ("![plot](https://evil.example/x.png)", {}),
        ("![plot](/etc/passwd)", {}),
        ("![plot](plot.png)", {}),
        ("![plot](attachment:other.png)", {"image.png": {"image/png": PNG64}}),
        ("![plot](attachment:s.svg)", {"s.svg": {"image/svg+xml": SVG64}}),
        ("![plot](attachment:s.png)", {"s.png": {"image/png": SVG64}}),  # an SVG that says it is a PNG
        ("![plot](attachment:b.png)", {"b.png": {"image/png": "not base64!"}}),
        ("![plot](data:image/png;base64," + PNG64 + ")", {}),
    ],
)
def test_any_other_image_is_shown_as_its_alt_text(markdown, attachments):
    html = render_markdown(markdown, attachments)
    assert "<img" not in html
    assert '<span class="image-not-loaded">[image not loaded: plot]</span>' in html


def test_the_same_answer_is_rendered_once():
    text = "cached: $\\alpha$ " + str(time.time_ns())
    assert render_markdown(text) is render_markdown(text)
    att = {"image.png": {"image/png": PNG64}}
    assert render_markdown(text, att) is render_markdown(text, dict(att))


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="text: expected a str, got bytes"):
        render_markdown(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="attachments: expected a mapping"):
        render_markdown("x", [("a", "b")])  # type: ignore[arg-type]


HOSTILE_PIECES = [
    "<script>",
    "</script>",
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "[a](",
    "](",
    ")",
    "![b](",
    "attachment:image.png",
    "$",
    "$$",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
    "\\text{",
    "\\href{",
    "\\style{",
    "}",
    "{",
    "<",
    ">",
    "\n",
    "\n\n",
    " ",
    "`",
    "x",
    "\\frac",
    '"',
    "'",
    "onload=",
    "<svg",
    "data:text/html,",
    "&#106;avascript:",
    "\t",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(HOSTILE_PIECES) | st.text(max_size=5), max_size=40))
def test_no_text_makes_unsafe_html(pieces):
    assert_safe(render_markdown("".join(pieces), {"image.png": {"image/png": PNG64}}))


# -- the questions -----------------------------------------------------------------------------


def test_the_questions_come_from_the_exercise_notebook_in_order():
    got = questions(ROOT / "exercises", "02_self_attention")
    data = (ROOT / "exercises" / "02_self_attention.ipynb").read_bytes()
    assert list(got) == [a["id"] for a in think_answers(data)]
    assert [q.number for q in got.values()] == list(range(1, len(got) + 1))
    q = got["ch02-nb-saturation"]
    assert q.assignment == "02_self_attention" and q.id == "ch02-nb-saturation"
    assert q.text.startswith("**Think about it.** Without scaling") and q.text.endswith("not fix?")
    assert "Your answer here" not in q.text and "book's answer" not in q.text
    assert "<math" in render_markdown(q.text)


def test_every_question_of_every_exercise_notebook_is_read_with_its_text():
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        got = questions(ROOT / "exercises", path.stem)
        links = re.findall(r"\[the book's answer\]\([^)]*#(ch\d+-nb-[\w-]+)\)", path.read_text(encoding="utf-8"))
        assert list(got) == links, path  # both forms: "**Think about it.**" and "### Think about it" + a list
        for q in got.values():
            assert len(q.text) > 40 and "Your answer here" not in q.text and "book's answer" not in q.text, q


def test_numbered_questions_under_a_think_about_it_heading_are_read():
    got = questions(ROOT / "exercises", "03_multi_head_attention")
    assert got["ch03-nb-scale"].text.startswith("2. Why are the scores divided by $\\sqrt{D}$")
    assert got["ch03-nb-scale"].number == 2


def test_a_missing_exercise_notebook_is_an_error_naming_its_path(tmp_path):
    with pytest.raises(QuestionsError, match=re.escape(str(tmp_path / "02_self_attention.ipynb"))):
        questions(tmp_path, "02_self_attention")


def test_an_assignment_that_is_not_a_plain_name_is_refused(tmp_path):
    with pytest.raises(QuestionsError, match=r"assignment: expected a notebook's name .* got '../x'"):
        questions(tmp_path, "../x")
