"""Running a student's notebook in isolation and calling its functions from the grader.

* :mod:`.isolation`: which isolation works here, the allowlisted file system, the worker's
  command line (bubblewrap, namespaces, none).
* :mod:`.runner`: :class:`Runner`, one warm worker; :mod:`.conversation`, its exchange with
  each job; :mod:`.jobs`, what a job is (limits, calls, results, phases, pipes).
* :mod:`.codec`: the grader's side of the value codec (arguments out, results back).
* :mod:`.cgroup`: the memory cgroup of a runner.
* :mod:`.worker`: the worker itself, a standalone package run inside the sandbox.
"""

from .isolation import detect_isolation
from .runner import Job, Limits, Runner, RunResult, SandboxUnavailable

__all__ = ["Limits", "Job", "RunResult", "Runner", "SandboxUnavailable", "detect_isolation"]
