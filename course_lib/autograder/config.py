"""How a class is graded: one frozen :class:`GradeConfig` (``course-lib grade``'s options)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .deadlines import LatePolicy
from .sandbox import Limits

__all__ = ["GradeConfig"]


@dataclass(frozen=True)
class GradeConfig:
    """What :func:`.batch.grade_all` does with a class.

    Args:
        jobs: grading processes, submissions graded at once (1: in this process).
        sandbox: ``auto``, ``required`` or ``off``, as ``course-lib grade --sandbox``.
        limits: each submission's resource limits.
        seed: draw every input anew from this seed; None: the self-check's inputs.
        late: the late penalty to store for every assignment of the run.
        no_deadline: remove the stored late penalty of every assignment of the run.
        timestamps: ``(student, assignment) -> ISO time`` (:func:`.deadlines.read_timestamps`).
        scheduler: a Dask scheduler (``tcp://HOST:8786``) to grade on; None: grade here.
        chunk: notebooks a Dask task (None: :func:`.cluster.chunk_size`).
        force: regrade notebooks already graded with the same content and checks.
        assignments: the assignments to grade (None: all).
        progress: show a progress bar.

    Raises:
        ValueError: ``jobs`` or ``chunk`` below 1.
        TypeError: a ``seed`` or ``chunk`` that is not an int.
    """

    jobs: int = 2
    sandbox: str = "auto"
    limits: Limits = field(default_factory=Limits)
    seed: int | None = None
    late: LatePolicy | None = None
    no_deadline: bool = False
    timestamps: dict[tuple[str, str], str] = field(default_factory=dict)
    scheduler: str | None = None
    chunk: int | None = None
    force: bool = False
    assignments: tuple[str, ...] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"grade: jobs must be >= 1, got {self.jobs}")
        if self.chunk is not None and (not isinstance(self.chunk, int) or self.chunk < 1):
            raise ValueError(f"grade: chunk must be an int >= 1, got {self.chunk!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise TypeError(f"grade: seed must be an int, got {type(self.seed).__name__}")
