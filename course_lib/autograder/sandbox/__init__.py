"""Running a student's notebook in isolation and calling its functions from the grader.

The sandbox knows no rubric and imports nothing of :mod:`course_lib.grading`: it takes calls
(plain arguments), the watch lists its warm worker prepares and a stand-in hook, and returns
replies (:class:`~.jobs.Reply`); the autograder's :mod:`course_lib.autograder.sandbox_adapter`
supplies the first three and turns replies into grading's outcomes.

* :mod:`.isolation`: which isolation works here, the allowlisted file system, the worker's
  command line (bubblewrap, namespaces, none).
* :mod:`.runner`: :class:`Runner`, one warm worker; :mod:`.conversation`, its exchange with
  each job; :mod:`.jobs`, what a job is (limits, calls, replies, the stand-in hook, the
  watch lists, phases, pipes).
* :mod:`.codec`: the grader's side of the value codec (arguments out, results back).
* :mod:`.cgroup`: the memory cgroup of a runner.
* :mod:`.worker`: the worker itself, a standalone package run inside the sandbox.
"""

from .isolation import detect_isolation
from .runner import Job, Limits, Reply, Runner, RunResult, SandboxUnavailable, WatchLists

__all__ = ["Limits", "Job", "Reply", "RunResult", "Runner", "SandboxUnavailable", "WatchLists", "detect_isolation"]
