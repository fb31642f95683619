"""No one waits on one notebook: how a run's notebooks are spread, and what it is waiting on.

A notebook in an infinite loop runs until its limits stop it (each code cell ``cell_seconds``,
the whole notebook ``submission_seconds``; a notebook graded in several phases runs its cells
once per phase). Nothing else should wait behind it:

- Locally, each grading process takes one notebook at a time and asks for the next as soon as
  it is done (:func:`.pool.grade_in_processes`): a slow notebook holds only its own process.
- On Dask a task carries a few notebooks (:func:`.cluster.chunk_size`). :func:`spread` puts
  no two notebooks of one student in a task (a student who wrote one infinite loop often wrote
  two), and a task whose notebook has run longer than :func:`split_after` is split: its
  notebooks not yet started are sent again as tasks of their own, graded by whichever worker
  is free, and the task stops after the slow one (:mod:`.cluster`).
- The progress line names the notebook that has run longest (:class:`Progress`), e.g.
  ``waiting on alice/02_self_attention (41 s)``.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, TextIO

from .sandbox import Limits

__all__ = [
    "SPLIT_SECONDS",
    "SHOW_AFTER",
    "ANNOUNCE_SECONDS",
    "split_after",
    "announce_after",
    "spread",
    "label",
    "Watch",
    "NO_WATCH",
    "Running",
    "Progress",
]

#: A Dask task is split once its notebook has run this long (or a quarter of the submission
#: limit, if less): an honest notebook takes well under a second once a worker is warm.
SPLIT_SECONDS = 5.0
#: The progress line names a notebook once it has run this long.
SHOW_AFTER = 2.0
#: A Dask task tells the client of a notebook once it has run this long (or half of
#: :func:`split_after`, if less), and again when it ends.
ANNOUNCE_SECONDS = 1.0


def split_after(limits: Limits) -> float:
    """Seconds a notebook may run before the rest of its Dask task is sent elsewhere."""
    return min(SPLIT_SECONDS, limits.submission_seconds / 4)


def announce_after(limits: Limits) -> float:
    """Seconds a notebook runs on a Dask worker before the client hears of it."""
    return min(ANNOUNCE_SECONDS, split_after(limits) / 2)


def spread(jobs: Sequence[Any], size: int, student: Callable[[Any], Hashable]) -> list[list[int]]:
    """The jobs' indices in tasks of at most ``size``, no two of one student in a task.

    Each task takes one notebook from each of the ``size`` students with the most notebooks
    left (a student's in their order), so a student's notebooks are as far apart as they can
    be; a task is smaller than ``size`` only when fewer students are left.

    Args:
        jobs: what to grade.
        size: notebooks a task, at least 1.
        student: the student of a job.

    Raises:
        ValueError: ``size`` below 1.
    """
    if size < 1:
        raise ValueError(f"spread: size must be >= 1, got {size}")
    queues: dict[Hashable, list[int]] = {}
    for i, job in enumerate(jobs):
        queues.setdefault(student(job), []).append(i)
    # (-notebooks left, first seen, the student's remaining indices, reversed)
    heap = [(-len(q), n, q[::-1]) for n, q in enumerate(queues.values())]
    heapq.heapify(heap)
    tasks: list[list[int]] = []
    while heap:
        taken = [heapq.heappop(heap) for _ in range(min(size, len(heap)))]
        tasks.append([left.pop() for _, _, left in taken])
        for _, n, left in taken:
            if left:
                heapq.heappush(heap, (-len(left), n, left))
    return tasks


def label(job: Any) -> str:
    """``student/assignment`` for the progress line: printable, at most 60 characters (a
    folder's name is the student's choice on some LMSs)."""
    text = f"{job.submission.student}/{job.assignment}"
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return text if len(text) <= 60 else text[:57] + "..."


class Watch(Protocol):
    """Told when a job starts and stops running (a backend calls it; :class:`Progress` is one)."""

    def began(self, job: Any) -> None: ...

    def finished(self, job: Any) -> None: ...


class _NoWatch:
    def began(self, job: Any) -> None:
        pass

    def finished(self, job: Any) -> None:
        pass


#: A :class:`Watch` that is told and does nothing.
NO_WATCH: Watch = _NoWatch()


class Running:
    """The jobs running now and since when (any thread)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._since: dict[int, tuple[str, float]] = {}  # id(job) -> (its label, when it began)
        self._lock = threading.Lock()

    def began(self, job: Any) -> None:
        with self._lock:
            self._since[id(job)] = (label(job), self.clock())

    def finished(self, job: Any) -> None:
        with self._lock:
            self._since.pop(id(job), None)

    def longest(self) -> tuple[str, float] | None:
        """The label of the job that has run longest and its seconds; None if none runs."""
        with self._lock:
            if not self._since:
                return None
            name, t0 = min(self._since.values(), key=lambda v: v[1])
        return name, self.clock() - t0

    def waiting_on(self, after: float | None = None) -> str:
        """``waiting on alice/02_self_attention (41 s)`` once the longest has run ``after``
        seconds (default :data:`SHOW_AFTER`); else empty."""
        longest = self.longest()
        if longest is None or longest[1] < (SHOW_AFTER if after is None else after):
            return ""
        return f"waiting on {longest[0]} ({longest[1]:.0f} s)"


class Progress(Running):
    """A progress bar (tqdm) whose postfix names the notebook that has run longest, updated
    every ``tick`` seconds by a thread of its own (a slow notebook may be all there is).

    Args:
        total: the notebooks to grade.
        file: where the bar is drawn.
        tick: seconds between updates of the postfix.
    """

    def __init__(self, total: int, file: TextIO, tick: float = 1.0):
        super().__init__()
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="grading", unit="nb", file=file, ascii=True)
        self._shown = ""
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, args=(tick,), name="grading-progress", daemon=True)
        self._ticker.start()

    def done(self, job: Any) -> None:
        """A job's record is saved: count it."""
        self.finished(job)
        self._show(refresh=False)
        self.bar.update(1)

    def _show(self, refresh: bool = True) -> None:
        text = self.waiting_on()
        if text != self._shown or text:
            self._shown = text
            self.bar.set_postfix_str(text, refresh=refresh)

    def _tick(self, every: float) -> None:
        while not self._stop.wait(every):
            self._show()

    def close(self) -> None:
        self._stop.set()
        self._ticker.join()
        self.bar.close()
