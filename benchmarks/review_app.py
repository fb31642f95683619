"""Benchmark: the review app (``course-lib review``) on one question answered by 1,000 students.

Run with ``nice python benchmarks/review_app.py``. Prints numbers; nothing here is a timed test.
Goals on the 2-core machine: opening the question's page (grouping the answers, rendering each
group) at most 1 s, saving one group's grade at most 100 ms.

The gradebook holds one record per student, each with a few kilobytes of function source (as
graded records carry) and its answer from ``benchmarks/answer_corpus.realistic_answers``. The
question gets points and a three-item rubric. Timed twice: with Flask's test client (the app
alone) and through the real threaded server on 127.0.0.1 (HTTP included):

- open: the question's page, the answer groups not cached (each open groups the answers anew),
  median and 95th percentile of 10, then once more with the groups cached (a page opened again
  after a save);
- save: one group's grade (the largest group's; rubric items, an adjustment, a comment), as the
  page's script sends it (a JSON answer), median and 95th percentile of 50.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import json
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from answer_corpus import realistic_answers  # noqa: E402

from course_lib.autograder import answer_text, mathml  # noqa: E402
from course_lib.autograder.autograde import refused_record  # noqa: E402
from course_lib.autograder.gradebook import Gradebook  # noqa: E402
from course_lib.autograder.review_app import create_app, serve  # noqa: E402
from course_lib.autograder.review_app import question_view as view_module  # noqa: E402
from course_lib.autograder.review_app.security import csrf_token  # noqa: E402

ASSIGNMENT = "02_self_attention"
QUESTION = "ch02-nb-mean-shift"
TOKEN = "benchmark-token-" + "x" * 40
PAGE = f"/a/{ASSIGNMENT}/q/{QUESTION}"


def build(db: Path, n: int, seed: int) -> None:
    """A gradebook of ``n`` students' answers to QUESTION, and its rubric."""
    answers = realistic_answers(n, seed)
    source = "def scaled_dot_product_attention(q, k, v, mask=None):\n" + "    x = q @ k.transpose(-2, -1)\n" * 120
    base = replace(refused_record(ASSIGNMENT, "x"), status="graded", raw_score=30.0, messages=())
    with Gradebook(db) as book:
        for student, text in answers.items():
            record = replace(
                base,
                answers=({"id": QUESTION, "answer": text},),
                sources={"scaled_dot_product_attention": source},
                absent=frozenset(),
            )
            book.save(student, record, "bench", 1.0, by="bench")
        book.manual.set_question(
            ASSIGNMENT, QUESTION, max_points=3,
            rubric=[(None, "names the shift", 2), (None, "explains the overflow", 1), (None, "wrong claim", -1)],
            by="bench", expected=0,
        )  # fmt: skip


def stats(name: str, seconds: list[float], goal: float) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    verdict = "meets" if p95 <= goal * 1000 else "MISSES"
    print(f"  {name:<34} median {statistics.median(ms):7.1f} ms   p95 {p95:7.1f} ms   ({verdict} {goal * 1000:g} ms)")


def timed(fn: Callable[[], object], times: int, before: Callable[[], object] = lambda: None) -> list[float]:
    out = []
    for _ in range(times):
        before()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def largest_group(html: str) -> tuple[str, dict[str, int], list[str]]:
    """The first (largest) group's key, expected versions and rubric item ids, read from the page."""
    section = html.split('<section class="group"', 2)[1]
    key = re.search(r'name="group" value="([^"]+)"', section)[1]
    expected = json.loads(re.search(r'name="expected" value="([^"]+)"', section)[1].replace("&#34;", '"'))
    items = re.findall(r'name="item" value="(\d+)"', section)
    return key, expected, items


def cold() -> None:
    """Empty every cache the page uses: the groups, the rendered answers and their formulas (as
    on the first open after the server starts)."""
    view_module._CACHE.clear()
    answer_text._render_text.cache_clear()
    answer_text._render_with_images.cache_clear()
    mathml.formula_html.cache_clear()


#: Debian's chromium (installed by `make sysdeps`), as the browser tests use it.
CHROMIUM = "/usr/bin/chromium"


def bench_client(app) -> None:  # type: ignore[no-untyped-def]
    client = app.test_client()
    assert client.get(f"/?token={TOKEN}").status_code == 303
    with app.test_request_context():
        csrf = csrf_token()
    print("Flask test client:")
    stats("open the page (nothing cached)", timed(lambda: client.get(PAGE), 10, cold), 1.0)
    stats("open the page (all cached)", timed(lambda: client.get(PAGE), 10), 1.0)
    key, expected, items = largest_group(client.get(PAGE).get_data(as_text=True))
    state = {"expected": expected, "n": 0}

    def save() -> None:
        state["n"] += 1
        form = {"group": key, "expected": json.dumps(state["expected"]), "item": items[: 1 + state["n"] % 2]}
        form |= {"adjust": "0.5", "comment": f"save {state['n']}"}
        response = client.post(f"{PAGE}/grade", data=form, headers={"Accept": "application/json", "X-CSRF-Token": csrf})
        state["expected"] = response.get_json()["expected"]

    stats(f"save a group's grade ({len(expected)} answers)", timed(save, 50), 0.1)


def bench_server(app) -> None:  # type: ignore[no-untyped-def]
    server = serve(app)
    try:
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        browser.open(server.url).read()
        base = f"http://127.0.0.1:{server.port}"
        with app.test_request_context():
            csrf = csrf_token()
        print("Real server (werkzeug, threaded, HTTP on 127.0.0.1):")
        stats("open the page (nothing cached)", timed(lambda: browser.open(base + PAGE).read(), 10, cold), 1.0)  # fmt: skip
        stats("open the page (all cached)", timed(lambda: browser.open(base + PAGE).read(), 10), 1.0)
        key, expected, items = largest_group(browser.open(base + PAGE).read().decode())
        state = {"expected": expected, "n": 0}

        def save() -> None:
            state["n"] += 1
            form = {"group": key, "expected": json.dumps(state["expected"]), "item": items[: 1 + state["n"] % 2]}
            form |= {"adjust": "0.5", "comment": f"save {state['n']}"}
            request = urllib.request.Request(
                base + PAGE + "/grade",
                data=urllib.parse.urlencode(form, doseq=True).encode(),
                headers={"Accept": "application/json", "X-CSRF-Token": csrf},
            )
            state["expected"] = json.loads(browser.open(request).read())["expected"]

        stats(f"save a group's grade ({len(expected)} answers)", timed(save, 50), 0.1)
        bench_browser(server.url, base)
    finally:
        server.shutdown()


def bench_browser(url: str, base: str) -> None:
    """The page as a grader waits for it: headless Debian chromium, from the request to the
    ``load`` event (the HTML parsed, MathML laid out, images decoded). Skipped, and said so,
    where chromium or Playwright is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("In chromium: skipped (Playwright is not installed)")
        return
    if not Path(CHROMIUM).exists():
        print(f"In chromium: skipped (no {CHROMIUM})")
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url)

        def load() -> None:
            page.goto(base + PAGE, wait_until="load")

        print("In chromium (headless, Playwright; the request to the load event):")
        stats("open the page (nothing cached)", timed(load, 5, cold), 1.0)
        stats("open the page (all cached)", timed(load, 5), 1.0)
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "gradebook.sqlite"
        start = time.perf_counter()
        build(db, args.students, args.seed)
        print(f"gradebook of {args.students} answers built in {time.perf_counter() - start:.1f} s")
        app = create_app(db, exercises=ROOT / "exercises", solutions=ROOT / "solutions", token=TOKEN, grader="bench")
        with Gradebook(db) as book:
            view = view_module.question_view(book, str(ROOT / "exercises"), ASSIGNMENT, QUESTION)
        assert view is not None
        sizes = sorted((len(g.members) for g in view.groups), reverse=True)
        print(
            f"{view.answered} answers, {len(view.unanswered)} blank: {len(sizes)} groups "
            f"(largest {sizes[:5]}, {sum(1 for s in sizes if s == 1)} alone)"
        )
        bench_client(app)
        bench_server(app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
