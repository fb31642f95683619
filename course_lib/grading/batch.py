"""Grade a class: every ``SUBMISSIONS/<student>/<NN_slug>.ipynb`` into the gradebook.

Submissions are graded in parallel, one sandbox runner per job; each result is committed
on its own, so a grader stopped at any point resumes where it was: a rerun skips notebooks
already graded with the same content and the same checks, and regrades changed ones.
"""

from __future__ import annotations

import os
import queue
import stat
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from .autograde import checker_version, grade_submission, refused, sha256
from .gradebook import Gradebook
from .notebook import MAX_NOTEBOOK_BYTES, NotebookError
from .registry import ASSIGNMENTS

__all__ = ["Submission", "discover", "grade_all", "read_submission", "Summary"]


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    path: Path


def discover(root: str | Path, assignments: tuple[str, ...] | None = None) -> tuple[list[Submission], list[str]]:
    """The submissions under ``root``, and a note for each file that is not one."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"grade: submissions folder {root} does not exist")
    wanted = assignments or tuple(ASSIGNMENTS)
    subs: list[Submission] = []
    notes: list[str] = []
    for student_dir in sorted(p for p in root.iterdir()):
        if not student_dir.is_dir() or student_dir.is_symlink():
            notes.append(f"{student_dir.name}: not a student folder, ignored")
            continue
        for path in sorted(student_dir.iterdir()):
            slug = path.name[:-len(".ipynb")] if path.name.endswith(".ipynb") else None
            if slug in wanted:
                subs.append(Submission(student_dir.name, slug, path))
            elif slug not in ASSIGNMENTS:
                notes.append(f"{student_dir.name}/{path.name}: not an assignment notebook "
                             f"({', '.join(n + '.ipynb' for n in ASSIGNMENTS)}), ignored")
    return subs, notes


def read_submission(path: Path) -> bytes:
    """The file's bytes (at most one byte over the size limit, so that it is refused unread).

    Raises:
        NotebookError: the path is a link, a folder or anything but a regular file.
    """
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        kind = "a link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "not a file"
        raise NotebookError(f"{path.name} is {kind}, not a notebook file")
    with open(path, "rb") as f:
        return f.read(MAX_NOTEBOOK_BYTES + 1)


@dataclass
class Summary:
    graded: int = 0
    skipped: int = 0
    seconds: float = 0.0
    isolation: str = "none"
    statuses: Counter = field(default_factory=Counter)
    by_assignment: dict = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"{'assignment':26} {'graded':>6} {'mean score':>12} {'full marks':>10}"]
        for slug in sorted(self.by_assignment):
            scores = self.by_assignment[slug]
            mean = sum(s for s, _ in scores) / len(scores)
            full = sum(1 for s, m in scores if s == m)
            lines.append(f"{slug:26} {len(scores):6d} {mean:8.1f}/{scores[0][1]:<3g} {full:10d}")
        status = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())) or "none"
        rate = self.graded / self.seconds if self.seconds > 0 else 0.0
        lines.append(f"graded {self.graded} submission(s) in {self.seconds:.1f} s ({rate:.1f}/s); "
                     f"skipped {self.skipped} unchanged; statuses: {status}")
        lines.append(f"isolation: {self.isolation}")
        return "\n".join(lines)


def grade_all(submissions: str | Path, db: str | Path, jobs: int = 2, sandbox: str = "auto", force: bool = False,
              assignments: tuple[str, ...] | None = None, progress: bool = True, out: TextIO = sys.stdout,
              limits: Any = None) -> Summary:
    """Grade every submission under ``submissions`` into the gradebook ``db``."""
    from .sandbox import Limits, Runner

    if jobs < 1:
        raise ValueError(f"grade: jobs must be >= 1, got {jobs}")
    subs, notes = discover(submissions, assignments)
    checker = checker_version()
    summary = Summary(notes=notes)
    book = Gradebook(db)
    lock = threading.Lock()
    todo: "queue.Queue[tuple[Submission, bytes, str]]" = queue.Queue()
    for sub in subs:
        try:
            data = read_submission(sub.path)
        except (NotebookError, OSError) as e:  # a folder, a link, unreadable: graded as refused
            reason = str(e) if isinstance(e, NotebookError) else f"{sub.path.name} could not be read"
            book.save(sub.student, refused(sub.assignment, reason), checker, 0.0)
            summary.graded += 1
            summary.statuses["invalid"] += 1
            continue
        digest = sha256(data)
        if not force and book.is_current(sub.student, sub.assignment, digest, checker):
            summary.skipped += 1
        else:
            todo.put((sub, data, digest))
    total = todo.qsize()
    from .registry import exercises_of

    for slug in {sub.assignment for sub, _, _ in list(todo.queue)}:
        for ex in exercises_of(slug):
            ex.expected()  # reference outputs, computed once before the threads start
    hide = [str(Path(submissions).resolve()), str(Path(db).resolve().parent)]
    bar = None
    if progress and total:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="grading", unit="nb", file=sys.stderr, ascii=True)
    start = time.perf_counter()
    runners = [Runner(mode=sandbox, limits=limits or Limits(), slot=i, hide=hide) for i in range(min(jobs, max(total, 1)))]
    summary.isolation = runners[0].isolation
    errors: list[BaseException] = []

    def work(runner) -> None:
        while True:
            try:
                sub, data, digest = todo.get_nowait()
            except queue.Empty:
                return
            t0 = time.perf_counter()
            try:
                record = grade_submission(data, sub.assignment, runner)
            except BaseException as e:  # noqa: BLE001 - a grader bug must not lose the batch
                errors.append(e)
                return
            with lock:
                book.save(sub.student, record, checker, time.perf_counter() - t0)
                summary.graded += 1
                summary.statuses[record["status"]] += 1
                if bar is not None:
                    bar.update(1)

    threads = [threading.Thread(target=work, args=(r,), daemon=True) for r in runners]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for r in runners:
            r.close()
        if bar is not None:
            bar.close()
    summary.seconds = time.perf_counter() - start
    for student, record in book.rows():
        summary.by_assignment[record["assignment"]].append((record["score"], record["max_score"]))
    book.close()
    if errors:
        raise errors[0]
    for n in notes:
        print(f"note: {n}", file=out)
    print(summary.table(), file=out)
    return summary
