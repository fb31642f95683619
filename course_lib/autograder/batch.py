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
from typing import TextIO

from ..grading.registry import ASSIGNMENTS
from .autograde import checker_version, failed_record, failure_reason, refused_record, sha256
from .backends import Job, backend_for
from .collect import MANIFEST, Manifest
from .config import GradeConfig
from .deadlines import LatePolicy
from .gradebook import Gradebook
from .identity import identity, unmatched_timestamps
from .notebook import MAX_NOTEBOOK_BYTES, NotebookError
from .pacing import Progress
from .record import Record
from .ungraded import UngradedFile, from_manifest, save_ungraded

__all__ = [
    "Submission",
    "discover",
    "grade_all",
    "Recorder",
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


def discover(
    root: str | Path, assignments: tuple[str, ...] | None = None
) -> tuple[list[Submission], list[UngradedFile], list[str]]:
    """The submissions under ``root``; every other file there, as an :class:`.ungraded.UngradedFile`
    (``unmatched``, with the reason), and a note for each hidden file passed over (``.DS_Store``,
    ``.ipynb_checkpoints``). The collect manifest (:data:`.collect.MANIFEST`) is not a file to grade."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"grade: submissions folder {root} does not exist")
    wanted = assignments or tuple(ASSIGNMENTS)
    subs: list[Submission] = []
    strays: list[UngradedFile] = []
    notes: list[str] = []
    folders: dict[str, str] = {}  # student id -> the folder name it came from
    expected = ", ".join(n + ".ipynb" for n in ASSIGNMENTS)
    for student_dir in sorted(p for p in root.iterdir()):
        student = student_id(student_dir.name)
        if student_dir.name == MANIFEST and student_dir.is_file():
            continue
        if student_dir.name.startswith("."):
            notes.append(f"{student}: a hidden file, passed over")
            continue
        if not student_dir.is_dir() or student_dir.is_symlink():
            strays.append(UngradedFile(student, "unmatched", "not in a student's folder (SUBMISSIONS/<student>/)"))
            continue
        if student in folders:
            reason = (
                f"the same student as the folder {folders[student]!r} (the names differ only in Unicode form or "
                "surrounding spaces): merge the two folders"
            )
            strays.append(UngradedFile(student_dir.name, "unmatched", reason, student))
            continue
        folders[student] = student_dir.name
        for path in sorted(student_dir.iterdir()):
            slug = path.name[: -len(".ipynb")] if path.name.endswith(".ipynb") else None
            if slug in wanted:
                subs.append(Submission(student, slug, path))
            elif path.name.startswith("."):
                notes.append(f"{student}/{student_id(path.name)}: a hidden file, passed over")
            elif slug not in ASSIGNMENTS:
                reason = f"not an assignment notebook ({expected})"
                strays.append(UngradedFile(f"{student}/{student_id(path.name)}", "unmatched", reason, student))
    return subs, strays, notes


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


@dataclass(frozen=True)
class Held:
    """A submission this run did not grade in full: invalid, timed out, crashed, or held for review.

    Args:
        student: the student's id.
        assignment: the assignment's name.
        status: the record's status.
        reason: the first words of its message ("" when none).
    """

    student: str
    assignment: str
    status: str
    reason: str

    def line(self) -> str:
        """``student/assignment: status: reason``, as the summary lists it."""
        return f"{self.student}/{self.assignment}: {self.status}: {self.reason}"


@dataclass
class Summary:
    """What a grading run did: counts, statuses, and the submissions it could not grade."""

    graded: int = 0
    skipped: int = 0
    seconds: float = 0.0
    isolation: str = "none"
    memory: str = ""
    seed: int | None = None
    statuses: Counter[str] = field(default_factory=Counter)
    by_assignment: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # "student/assignment: reason" (status error)
    ungraded: list[UngradedFile] = field(default_factory=list)  # files no graded record was made of
    attention: list[Held] = field(default_factory=list)  # submissions not graded in full
    peak_mb: float = 0.0
    deadlines: dict[str, LatePolicy] = field(default_factory=dict)  # where a late penalty applies
    late: int = 0  # submissions with a penalty
    no_time: int = 0  # submissions under a deadline without a submission time (counted on time)

    @property
    def failed(self) -> int:
        """Submissions the grader could not grade (its own fault; regraded on the next run)."""
        return len(self.failures)

    @property
    def needs_attention(self) -> bool:
        """Whether any submission is not graded in full (invalid, timed out, crashed, held for
        review, or the grader's failure) or any file is unmatched or invalid: the exit status 1."""
        return bool(self.failures or self.attention or self.ungraded)

    def attention_lines(self) -> list[str]:
        """The summary's list of every submission and file that needs the instructor."""
        lines = []
        if self.attention:
            counts = Counter(a.status for a in self.attention)
            said = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            lines.append(f"NOT GRADED IN FULL: {len(self.attention)} submission(s) ({said}):")
            lines += [f"  {a.line()}" for a in self.attention]
        if self.ungraded:
            counts = Counter(f.status for f in self.ungraded)
            said = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
            lines.append(f"NOT GRADED: {len(self.ungraded)} file(s) are no submission ({said}):")
            lines += [f"  {f.line()}" for f in self.ungraded]
        return lines

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
        lines += self.attention_lines()
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


class Recorder:
    """Stamps each record with its submission time and late penalty, saves it in the gradebook
    (or, should that fail, a failed record in its place) and counts it in the summary.

    Args:
        book: the gradebook.
        checker: the checks' version (:func:`.autograde.checker_version`).
        summary: the run's summary; its ``deadlines`` are the late penalties that apply.
        times: ``(student, assignment) -> ISO time``, the submission times.
    """

    def __init__(self, book: Gradebook, checker: str, summary: Summary, times: dict[tuple[str, str], str]):
        self.book, self.checker, self.summary, self.times = book, checker, summary, times
        self.bar: Progress | None = None  # the progress line, updated for every graded job

    def stamp(self, sub: Submission, record: Record, previous: str | None = None) -> Record:
        """The record with its submission time (``previous`` where ``times`` has none) and its
        late penalty (counted in the summary)."""
        submitted = self.times.get((sub.student, sub.assignment), previous)
        policy = self.summary.deadlines.get(sub.assignment)
        late = None if policy is None else policy.penalty(record.raw_score, submitted)
        if policy is not None:
            self.summary.late += late is not None
            self.summary.no_time += not submitted
        return record.stamp(submitted, late)

    def save(self, job: Job, record: Record, seconds: float) -> None:
        """Store a graded job's record (:meth:`store`) and show the progress."""
        self.store(job.submission, record, seconds)
        if self.bar is not None:
            self.bar.done(job)

    def store(self, sub: Submission, record: Record, seconds: float) -> None:
        """Store a record; if that fails, store the failure; count either way."""
        record = self.stamp(sub, record)
        try:
            dropped = self.book.save(sub.student, record, self.checker, seconds)
            if dropped is not None:
                self.summary.notes.append(
                    f"{sub.student}/{sub.assignment}: a new notebook; the {dropped.flag()} made to the "
                    "previous one no longer counts (course-lib history)"
                )
        except Exception as e:  # noqa: BLE001 - a record the gradebook refuses must not stop the batch
            record = failed_record(sub.assignment, f"the record could not be saved: {failure_reason(e)}", record.sha256)
            try:
                self.book.save(sub.student, record, self.checker, seconds)
            except Exception as e2:  # noqa: BLE001
                self.summary.failures.append(f"{sub.student}/{sub.assignment}: not saved ({failure_reason(e2)})")
                return
        self.summary.graded += 1
        self.summary.statuses[record.status] += 1
        if record.status == "error":
            self.summary.failures.append(
                f"{sub.student}/{sub.assignment}: {record.messages[0] if record.messages else ''}"
            )

    def skip(self, sub: Submission) -> None:
        """Count an unchanged submission and restamp its stored record: another deadline, rate or
        time changes its penalty, not its grading."""
        self.summary.skipped += 1
        old = self.book.record(sub.student, sub.assignment)
        if old is None:
            return
        new = self.stamp(sub, old, old.submitted_at)
        if new != old:
            self.book.update_record(sub.student, new)


def grade_all(submissions: str | Path, db: str | Path, config: GradeConfig, out: TextIO | None = None) -> Summary:
    """Grade every submission under ``submissions`` into the gradebook ``db``.

    ``config.late`` becomes the stored late penalty of every assignment in
    ``config.assignments`` (default: all), ``config.no_deadline`` removes theirs; otherwise the
    stored ones apply. ``config.timestamps`` are the submission times; a skipped submission
    missing from them keeps its stored time, any other one has none and is on time. Every
    saved or skipped record gets its penalty anew from its raw score.

    The steps: discover the submissions; read each, refusing what is not a notebook file and
    skipping what is graded already (same notebook, same checks); grade the rest on a
    :class:`.backends.Backend` (this process, forked grading processes, or the Dask cluster at
    ``config.scheduler``; this process writes every record either way); record each (the
    :class:`Recorder`); print the summary to ``out`` (default: stdout).

    Nothing one submission does stops the batch: every failure on a submission's path (reading,
    parsing, the sandbox, judging, saving) becomes a recorded outcome with its reason, and the
    summary counts the submissions the grader could not grade (:attr:`Summary.failed`).
    """
    out = out or sys.stdout  # looked up at call time (a redirected or captured stdout)
    subs, strays, notes = discover(submissions, config.assignments)
    summary = Summary(notes=notes, seed=config.seed, ungraded=strays + _from_manifest(submissions, notes))
    book = Gradebook(db)
    save_ungraded(book, summary.ungraded)
    summary.deadlines = _deadlines(book, config)
    times = {(identity(s), identity(a)): t for (s, a), t in config.timestamps.items()}
    summary.notes += unmatched_timestamps(
        times, [(sub.student, sub.assignment) for sub in subs], config.assignments or tuple(ASSIGNMENTS)
    )
    recorder = Recorder(book, checker_version(), summary, times)
    work = _to_grade(subs, recorder, config)
    if config.seed is not None and work:
        print(f"drawing fresh inputs from seed {config.seed} ...", file=sys.stderr)
    hide = [Path(submissions).resolve(), Path(db).resolve().parent]
    backend = backend_for(
        work,
        sandbox=config.sandbox,
        limits=config.limits,
        seed=config.seed,
        hide=hide,
        processes=config.jobs,
        scheduler=config.scheduler,
        chunk=config.chunk,
    )
    if config.progress and work:
        recorder.bar = Progress(len(work), sys.stderr)
    start = time.perf_counter()
    try:
        summary.isolation, summary.memory = backend.run(work, recorder.save, recorder.bar)
    finally:
        if recorder.bar is not None:
            recorder.bar.close()
    return _finish(summary, book, start, out, {(sub.student, sub.assignment) for sub in subs})


def _from_manifest(submissions: str | Path, notes: list[str]) -> list[UngradedFile]:
    """The collect manifest's unmatched and invalid files; its superseded and ignored ones are
    counted in a note."""
    manifest = Manifest.load(submissions)
    if manifest is None:
        return []
    superseded, ignored = manifest.count("superseded"), manifest.count("ignored")
    if superseded or ignored:
        notes.append(
            f"{MANIFEST}: {superseded} file(s) superseded by a newer one of the same student and assignment, "
            f"{ignored} archiver file(s) ignored (each listed there)"
        )
    notes += [f"{MANIFEST}: {w}" for w in manifest.warnings]
    return from_manifest(manifest)


def _deadlines(book: Gradebook, config: GradeConfig) -> dict[str, LatePolicy]:
    """Store (or remove) this run's late penalty; every assignment's that applies."""
    if config.late is not None or config.no_deadline:
        for slug in config.assignments or tuple(ASSIGNMENTS):
            book.set_deadline(slug, None if config.late is None else config.late.to_json())
    return {a: LatePolicy.from_json(p) for a, p in book.deadlines().items()}


def _to_grade(subs: list[Submission], recorder: Recorder, config: GradeConfig) -> list[Job]:
    """The submissions to grade: a file that cannot be read as a notebook is recorded as
    refused, an unchanged one skipped (unless ``config.force``)."""
    work: list[Job] = []
    for sub in subs:
        try:
            data = read_submission(sub.path)
        except (NotebookError, OSError) as e:  # a folder, a link, unreadable: graded as refused
            reason = str(e) if isinstance(e, NotebookError) else f"{sub.path.name} could not be read"
            recorder.store(sub, refused_record(sub.assignment, reason, seed=config.seed), 0.0)
            continue
        digest = sha256(data)
        if not config.force and recorder.book.is_current(sub.student, sub.assignment, digest, recorder.checker):
            recorder.skip(sub)
        else:
            work.append(Job(sub, data, digest))
    return work


def _finish(summary: Summary, book: Gradebook, start: float, out: TextIO, subs: set[tuple[str, str]]) -> Summary:
    """Count the gradebook's records, list this run's submissions not graded in full (graded
    now or before), close the gradebook, print the summary."""
    summary.seconds = time.perf_counter() - start
    for student, record in book.rows():
        summary.by_assignment[record.assignment].append((record.score, record.points_possible))
        if (student, record.assignment) in subs and record.status not in ("graded", "error"):
            reason = " ".join(record.messages[0].split())[:200] if record.messages else ""
            summary.attention.append(Held(student, record.assignment, record.status, reason))
    book.close()
    summary.peak_mb = peak_memory_mb()
    for n in summary.notes:
        print(f"note: {n}", file=out)
    print(summary.table(), file=out)
    return summary
