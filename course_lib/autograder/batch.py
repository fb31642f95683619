"""Grade a class: every ``SUBMISSIONS/<student>/<NN_slug>.ipynb`` into the gradebook.

Submissions are graded in parallel, one sandbox runner per job; each result is committed
on its own, so a grader stopped at any point resumes where it was: a rerun skips notebooks
already graded with the same content and the same checks, and regrades changed ones.

Deadlines: a late penalty is stored per assignment in the gradebook (set by a run with a
deadline, kept by later runs) and applied to the stored raw score whenever a run saves or
skips a submission, so a rerun with another deadline or rate updates every penalty without
running a notebook again (:mod:`course_lib.autograder.deadlines`).
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from ..grading.registry import ASSIGNMENTS, exercises_of
from .autograde import checker_version, failed_record, grade_submission, refused_record, sha256
from .deadlines import LatePolicy, apply_late
from .gradebook import Gradebook
from .identity import identity, unmatched_timestamps
from .notebook import MAX_NOTEBOOK_BYTES, NotebookError
from .pool import grade_in_processes
from .text import student_message

__all__ = [
    "Submission",
    "discover",
    "grade_all",
    "grade_or_fail",
    "read_submission",
    "student_id",
    "Summary",
]


@dataclass(frozen=True)
class Submission:
    student: str
    assignment: str
    path: Path


def student_id(name: str) -> str:
    """A student's id from their folder's name: the name in NFC without surrounding whitespace
    (:func:`.identity.identity`, as the roster and ``timestamps.csv`` are read), or where it is
    not valid text (bytes that are not UTF-8 in the file name) a backslash-escaped form that
    stays unique."""
    return identity(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def discover(root: str | Path, assignments: tuple[str, ...] | None = None) -> tuple[list[Submission], list[str]]:
    """The submissions under ``root``, and a note for each file that is not one."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"grade: submissions folder {root} does not exist")
    wanted = assignments or tuple(ASSIGNMENTS)
    subs: list[Submission] = []
    notes: list[str] = []
    folders: dict[str, str] = {}  # student id -> the folder name it came from
    for student_dir in sorted(p for p in root.iterdir()):
        student = student_id(student_dir.name)
        if not student_dir.is_dir() or student_dir.is_symlink():
            notes.append(f"{student}: not a student folder, ignored")
            continue
        if student in folders:
            notes.append(
                f"{student_dir.name!r}: the same student as the folder {folders[student]!r} "
                "(the names differ only in Unicode form or surrounding spaces), ignored"
            )
            continue
        folders[student] = student_dir.name
        for path in sorted(student_dir.iterdir()):
            slug = path.name[: -len(".ipynb")] if path.name.endswith(".ipynb") else None
            if slug in wanted:
                subs.append(Submission(student, slug, path))
            elif slug not in ASSIGNMENTS:
                notes.append(
                    f"{student}/{student_id(path.name)}: not an assignment notebook "
                    f"({', '.join(n + '.ipynb' for n in ASSIGNMENTS)}), ignored"
                )
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
    """What a grading run did: counts, statuses, and the submissions it could not grade."""

    graded: int = 0
    skipped: int = 0
    seconds: float = 0.0
    isolation: str = "none"
    memory: str = ""
    seed: int | None = None
    statuses: Counter = field(default_factory=Counter)
    by_assignment: dict = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # "student/assignment: reason" (status error)
    peak_mb: float = 0.0
    deadlines: dict = field(default_factory=dict)  # assignment -> LatePolicy, where one applies
    late: int = 0  # submissions with a penalty
    no_time: int = 0  # submissions under a deadline without a submission time (counted on time)

    @property
    def failed(self) -> int:
        """Submissions the grader could not grade (its own fault; regraded on the next run)."""
        return len(self.failures)

    def table(self) -> str:
        lines = [f"{'assignment':26} {'graded':>6} {'mean score':>12} {'full marks':>10}"]
        for slug in sorted(self.by_assignment):
            scores = self.by_assignment[slug]
            mean = sum(s for s, _ in scores) / len(scores)
            full = sum(1 for s, m in scores if s == m)
            lines.append(f"{slug:26} {len(scores):6d} {mean:8.1f}/{scores[0][1]:<3g} {full:10d}")
        status = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())) or "none"
        rate = self.graded / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"graded {self.graded} submission(s) in {self.seconds:.1f} s ({rate:.1f}/s); "
            f"skipped {self.skipped} unchanged; statuses: {status}"
        )
        lines.append(
            f"isolation: {self.isolation}; memory: {self.memory}; inputs: "
            + ("the self-check's" if self.seed is None else f"drawn from seed {self.seed}")
        )
        if self.failures:
            lines.append(f"FAILED to grade {self.failed} submission(s) (they will be graded again on the next run):")
            lines += [f"  {f}" for f in self.failures[:20]]
            if self.failed > 20:
                lines.append(f"  ... and {self.failed - 20} more")
        for slug, policy in sorted(self.deadlines.items()):
            if slug in self.by_assignment:
                lines.append(f"{slug}: {policy.describe()}")
        if self.deadlines:
            lines.append(
                f"late: {self.late} submission(s) with a penalty; {self.no_time} without a submission "
                "time, counted as on time"
            )
        lines.append(f"grader peak memory: {self.peak_mb:.0f} MB")
        return "\n".join(lines)


def peak_memory_mb() -> float:
    """This process's peak resident memory (VmHWM), in MB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reason(e: BaseException) -> str:
    return student_message(f"{type(e).__name__}: {e}", 200)


def grade_or_fail(runner: Any, data: bytes, assignment: str, seed: int | None, digest: str) -> dict:
    """The record of one notebook (:func:`.autograde.grade_submission`) or, should the grader
    itself fail on it, a failed record with the reason (regraded on the next run)."""
    try:
        return grade_submission(data, assignment, runner, seed=seed)
    except Exception as e:  # noqa: BLE001 - a fault on the grader's side: recorded, regraded next run
        return failed_record(assignment, _reason(e), digest, runner.isolation, seed)


def grade_all(
    submissions: str | Path,
    db: str | Path,
    jobs: int = 2,
    sandbox: str = "auto",
    force: bool = False,
    assignments: tuple[str, ...] | None = None,
    progress: bool = True,
    out: TextIO | None = None,
    limits: Any = None,
    seed: int | None = None,
    late: LatePolicy | None = None,
    no_deadline: bool = False,
    timestamps: dict[tuple[str, str], str] | None = None,
    scheduler: str | None = None,
    chunk: int | None = None,
) -> Summary:
    """Grade every submission under ``submissions`` into the gradebook ``db``.

    ``late`` becomes the stored late penalty of every assignment in ``assignments`` (default:
    all), ``no_deadline`` removes theirs; otherwise the stored ones apply. ``timestamps``
    (``(student, assignment) -> ISO time``, :func:`.deadlines.read_timestamps`) are the submission times;
    a skipped submission missing from them keeps its stored time, any other one has none and
    is on time. Every saved or skipped record gets its penalty anew from its raw score.

    With ``scheduler`` (``tcp://HOST:8786``) the notebooks are graded on that Dask cluster's
    workers (:mod:`course_lib.autograder.cluster`), ``chunk`` notebooks a task (default: a
    few, :func:`.cluster.chunk_size`); this process still writes every record.

    Nothing one submission does stops the batch: every failure on a submission's path (reading,
    parsing, the sandbox, judging, saving) becomes a recorded outcome with its reason, and the
    summary counts the submissions the grader could not grade (:attr:`Summary.failed`).
    """
    from .sandbox import Limits, Runner

    out = out or sys.stdout  # looked up at call time (a redirected or captured stdout)
    if jobs < 1:
        raise ValueError(f"grade: jobs must be >= 1, got {jobs}")
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"grade: chunk must be an int >= 1, got {chunk!r}")
    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"grade: seed must be an int, got {type(seed).__name__}")
    subs, notes = discover(submissions, assignments)
    checker = checker_version()
    summary = Summary(notes=notes, seed=seed)
    book = Gradebook(db)
    for slug in assignments or tuple(ASSIGNMENTS):
        if late is not None or no_deadline:
            book.set_deadline(slug, None if late is None else late.to_json())
    summary.deadlines = {a: LatePolicy.from_json(p) for a, p in book.deadlines().items()}
    times = {(identity(s), identity(a)): t for (s, a), t in (timestamps or {}).items()}
    summary.notes += unmatched_timestamps(
        times, [(sub.student, sub.assignment) for sub in subs], assignments or tuple(ASSIGNMENTS)
    )

    def stamp(sub: Submission, record: dict, previous: str | None = None) -> dict:
        """The record with its submission time and late penalty (counted in the summary)."""
        record = {**record, "submitted_at": times.get((sub.student, sub.assignment), previous)}
        record = apply_late(record, summary.deadlines.get(sub.assignment))
        if sub.assignment in summary.deadlines:
            summary.late += record["late"] is not None
            summary.no_time += not record["submitted_at"]
        return record

    work: list[tuple[Submission, bytes, str]] = []

    def save(sub: Submission, record: dict, seconds: float) -> None:
        """Store a record; if that fails, store the failure; count either way."""
        record = stamp(sub, record)
        try:
            book.save(sub.student, record, checker, seconds)
        except Exception as e:  # noqa: BLE001 - a record the gradebook refuses must not stop the batch
            record = failed_record(
                sub.assignment, f"the record could not be saved: {_reason(e)}", record.get("sha256", "")
            )
            try:
                book.save(sub.student, record, checker, seconds)
            except Exception as e2:  # noqa: BLE001
                summary.failures.append(f"{sub.student}/{sub.assignment}: not saved ({_reason(e2)})")
                return
        summary.graded += 1
        summary.statuses[record["status"]] += 1
        if record["status"] == "error":
            summary.failures.append(
                f"{sub.student}/{sub.assignment}: {record['messages'][0] if record['messages'] else ''}"
            )

    for sub in subs:
        try:
            data = read_submission(sub.path)
        except (NotebookError, OSError) as e:  # a folder, a link, unreadable: graded as refused
            reason = str(e) if isinstance(e, NotebookError) else f"{sub.path.name} could not be read"
            save(sub, refused_record(sub.assignment, reason, seed=seed), 0.0)
            continue
        digest = sha256(data)
        if not force and book.is_current(sub.student, sub.assignment, digest, checker):
            summary.skipped += 1
            old = book.record(sub.student, sub.assignment) or {}
            new = stamp(sub, old, old.get("submitted_at"))
            if new != old:  # another deadline, rate or time: the penalty changes, the grading does not
                book.update_record(sub.student, new)
        else:
            work.append((sub, data, digest))
    total = len(work)
    if seed is not None and total:
        print(f"drawing fresh inputs from seed {seed} ...", file=sys.stderr)
    for slug in {sub.assignment for sub, _, _ in work}:
        for ex in exercises_of(slug):  # computed once, before the grading processes fork
            ex.expected(seed)  # the cases and the reference's outputs
            if scheduler is None:  # a Dask worker's grading process computes its own
                ex.mistake_runs(seed)  # the named mistakes' outputs
                ex.gated()
    hide = [str(Path(submissions).resolve()), str(Path(db).resolve().parent)]
    bar = None
    if progress and total:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="grading", unit="nb", file=sys.stderr, ascii=True)
    start_time = time.perf_counter()
    if scheduler is not None and total:
        try:
            from .cluster import GraderPlugin, grade_on_cluster
        except ImportError:
            raise ValueError("--scheduler needs Dask's distributed: pip install 'course-lib[cluster]'") from None

        def on_cluster_saved(sub: Submission, record: dict, seconds: float) -> None:
            save(sub, record, seconds)
            if bar is not None:
                bar.update(1)

        def cluster_failed(sub: Submission, reason: str, digest: str) -> dict:
            return failed_record(sub.assignment, reason, digest, summary.isolation, seed)

        try:
            summary.isolation, summary.memory = grade_on_cluster(
                scheduler,
                work,
                seed,
                GraderPlugin(sandbox, limits, hide),
                on_cluster_saved,
                cluster_failed,
                chunk=chunk,
            )
        finally:
            if bar is not None:
                bar.close()
        return _finish(summary, book, start_time, notes, out)
    n = min(jobs, max(total, 1))

    def start(slot: int) -> Runner:
        return Runner(mode=sandbox, limits=limits or Limits(), slot=slot, hide=hide)

    def grade(runner: Runner, job: tuple[Submission, bytes, str]) -> dict:
        sub, data, digest = job
        return grade_or_fail(runner, data, sub.assignment, seed, digest)

    def done(job: tuple[Submission, bytes, str], record: dict, seconds: float) -> None:
        save(job[0], record, seconds)
        if bar is not None:
            bar.update(1)

    # The grading process's torch work (judging, references standing in) is on tiny tensors
    # while the sandboxes keep every core busy: with several intra-op threads an op waits for a
    # thread the scheduler put aside (a 7 x 7 triu took 2 ms, not 15 us). One thread, put back after.
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if n == 1:  # in this process
            runner = start(0)
            summary.isolation, summary.memory = runner.isolation, runner.memory_limit
            try:
                for job in work:
                    t0 = time.perf_counter()
                    done(job, grade(runner, job), time.perf_counter() - t0)
            finally:
                runner.close()
        else:  # one interpreter each (pool.py says why)

            def lost(job: tuple[Submission, bytes, str], reason: str, isolation: str) -> dict:
                return failed_record(job[0].assignment, reason, job[2], isolation, seed)

            summary.isolation, summary.memory = grade_in_processes(work, n, start, grade, done, lost)
    finally:
        torch.set_num_threads(torch_threads)
        if bar is not None:
            bar.close()
    return _finish(summary, book, start_time, notes, out)


def _finish(summary: Summary, book: Gradebook, start: float, notes: list[str], out: TextIO) -> Summary:
    """Count the gradebook's records, close it, print the summary."""
    summary.seconds = time.perf_counter() - start
    for _student, record in book.rows():
        summary.by_assignment[record["assignment"]].append((record["score"], record["max_score"]))
    book.close()
    summary.peak_mb = peak_memory_mb()
    for n in notes:
        print(f"note: {n}", file=out)
    print(summary.table(), file=out)
    return summary
