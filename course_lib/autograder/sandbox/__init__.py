"""Running a student's notebook in isolation and calling its functions from the grader."""

from .runner import Job, Limits, Runner, RunResult, SandboxUnavailable, detect_isolation

__all__ = ["Limits", "Job", "RunResult", "Runner", "SandboxUnavailable", "detect_isolation"]
