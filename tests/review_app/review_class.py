"""A small class for the review app's held-record and look-alike tests (no sandbox: the records
are made directly, as grading would store them).

- ``hana``: held (the static scan: code cell 3, line 2 uses ``ctypes.pythonapi``), nothing graded (0).
- ``hugo``: held by the sandbox (a forged frame: no cell named), 6 of 10 points before it was held.
- :data:`HOSTILE`: held; the id and the code try to break out of the page.
- ``cara`` and ``dave``: the same loop-based ``softmax`` under other names (a student pair).
- ``erin``: the solution's ``softmax`` retyped (a pair with the reference solution).
- ``fred``, ``gina``: code of their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import ROOT
from pagecheck import axe_violations
from review_fixtures import make_app

from course_lib.autograder.gradebook import Gradebook
from course_lib.autograder.record import Record
from course_lib.autograder.review_app import ReviewServer, serve

A = "02_self_attention"
SHOTS = ROOT / "artifacts" / "screenshots"
#: What chromium logs for a page answered 409 (the refused save).
CONFLICT_LOGGED = "Failed to load resource: the server responded with a status of 409 (CONFLICT)"
MAX = 10.0
HOSTILE = '<script>alert("id")</script>'
HOSTILE_CODE = 'def softmax(x, dim=-1):\n    s = "</pre><script>alert(1)</script>"\n    return frame.f_back'
#: Texts that are only in the solution notebook: no response may carry them.
SOLUTION_ONLY = ("BEGIN SOLUTION", "all -inf slice: subtract 0, not -inf", "every exponent <= 0: no overflow")

CTYPES = "def softmax(x, dim=-1):\n    api = ctypes.pythonapi\n    return x.exp() / x.exp().sum(dim, keepdim=True)"
LOOP = """def softmax(x, dim=-1):
    out = []
    for row in x.unbind(dim):
        top = row.max()
        shifted = [float(v) - float(top) for v in row.tolist()]
        exps = [math.exp(v) for v in shifted]
        total = sum(exps)
        out.append(torch.tensor([v / total for v in exps]))
    return torch.stack(out, dim)"""
RENAMED = LOOP.replace("out", "res").replace("row", "r").replace("top", "hi").replace("exps", "ee")
RETYPED = """def softmax(x, dim=-1):
    big = x.amax(dim=dim, keepdim=True)
    big = torch.where(torch.isfinite(big), big, torch.zeros_like(big))
    ex = torch.exp(x - big)
    tot = ex.sum(dim=dim, keepdim=True)
    return ex / torch.where(tot > 0, tot, torch.ones_like(tot))"""
OWN_1 = """def softmax(x, dim=-1):
    x = x.transpose(dim, -1)
    y = torch.nn.functional.pad(x, (0, 1))
    return (y.exp() / y.exp().sum(-1, keepdim=True))[..., :-1].transpose(dim, -1) * 2"""
OWN_2 = """def softmax(x, dim=-1):
    logs = x - torch.logsumexp(x, dim=dim, keepdim=True)
    if logs.isnan().any():
        raise ValueError("nan")
    return logs.exp()"""


def _record(status: str, sources: dict[str, str], *, raw: float = 0.0, flags: tuple[str, ...] = ()) -> Record:
    messages = ("Nothing in it is graded: the submission is held for an instructor to review.",)
    return Record(
        assignment=A,
        sha256="0" * 64,
        status=status,  # type: ignore[arg-type]
        raw_score=raw,
        max_score=MAX,
        messages=messages if status == "review" else (),
        flags=flags,
        sources=sources,
        absent=frozenset(),
    )


def make_class(db: Path) -> Path:
    """Write the class into a new gradebook at ``db``; returns ``db``."""
    records = {
        "hana": _record("review", {"softmax": CTYPES}, flags=("review: cell 3, line 2: uses ctypes.pythonapi",)),
        "hugo": _record(
            "review", {"softmax": OWN_2}, raw=6.0, flags=("review: a frame out of sequence (replayed or forged)",)
        ),
        HOSTILE: _record(
            "review", {"softmax": HOSTILE_CODE}, flags=("review: cell 1, line 3: uses the attribute f_back",)
        ),
        "cara": _record("graded", {"softmax": LOOP}, raw=7.0),
        "dave": _record("graded", {"softmax": RENAMED}, raw=7.0),
        "erin": _record("graded", {"softmax": RETYPED}, raw=10.0),
        "fred": _record("graded", {"softmax": OWN_1}, raw=4.0),
        "gina": _record("graded", {"softmax": OWN_2.replace("nan", "no")}, raw=9.0),
    }
    with Gradebook(db) as book:
        for student, record in records.items():
            book.save(student, record, checker="test", seconds=0.1, by="grader-bot")
    return db


# -- the browser tests' helpers ------------------------------------------------------------


@contextmanager
def running(db: Path) -> Iterator[ReviewServer]:
    """The review app of ``db`` served on 127.0.0.1 for the length of the block."""
    server = serve(make_app(db, grader="prof"))
    try:
        yield server
    finally:
        server.shutdown()


class Grader:
    """One grader's browser: its own context (cookies), the colour scheme, and every console
    error, page error and failed request of its pages in ``problems``."""

    def __init__(self, browser, server: ReviewServer, name: str, mode: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=mode, bypass_csp=True)
        # the browser asks for /favicon.ico on its own; the app has none (its pages link no icon)
        self.context.route("**/favicon.ico", lambda route: route.fulfill(status=204))
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.base = f"http://127.0.0.1:{server.port}"
        self.page.on("console", lambda m: self.problems.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.problems.append(str(e)))
        self.page.on("requestfailed", lambda r: self.problems.append(f"request failed: {r.url}"))
        self.page.goto(server.url)  # the token: a cookie, then the address without it
        self.page.fill("#grader-name", name)
        self.page.click("text=Set name")
        assert self.page.input_value("#grader-name") == name

    def open(self, path: str) -> None:
        # the page shown may still load its style sheets (a form's answer whose text was already
        # read): leaving it now would abort them, a "request failed" that is no fault of the app
        self.page.wait_for_load_state("load")
        response = self.page.goto(self.base + path)
        assert response is not None and response.status == 200, (path, response and response.status)

    def axe(self) -> list[dict]:
        """axe-core's WCAG 2 A/AA violations of any impact on the page shown."""
        return axe_violations(self.page, impacts=("minor", "moderate", "serious", "critical"))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ReviewServer, Path]]:
    """The small class's app served on 127.0.0.1 for one test, and its gradebook."""
    db = make_class(tmp_path / "g.sqlite")
    with running(db) as server:
        yield server, db
