"""A job in phases: forbidden operators refused where the graded code runs, out of its reach.

Each attack is one a determined student could write once they know how the grader works
(``course_lib/autograder/sandbox/worker/phases.py``); each honest notebook beside it writes
the same thing another way and must keep its marks. Every job runs through a warm runner at
each isolation level, then an honest job checks that nothing of the attack survived.
"""

from __future__ import annotations

import dataclasses
import signal

import pytest
import torch
from test_sandbox import LEVELS, LIMITS, check_honest, honest_job, uid_processes

from course_lib.autograder.sandbox.conversation import _Ending
from course_lib.autograder.sandbox.runner import Job, Reply, Runner, plan_phases
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading.forbidden import watch_spec
from course_lib.grading.model import Call

pytestmark = pytest.mark.sandbox

SLOTS = {"bubblewrap": 46, "namespaces": 47}
SOFTMAX = watch_spec(["torch.softmax", "torch.nn.functional.softmax", "method:softmax"])
X = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])
OWN_SOFTMAX = "def softmax(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n    return e / e.sum(-1, keepdim=True)"


@pytest.fixture(scope="module", params=LEVELS)
def runner(request):
    r = Runner(mode="auto", limits=LIMITS, slot=SLOTS[request.param], isolation=request.param, watch=watch_lists())
    yield r
    r.close()


def graded(runner: Runner, cells: list[str], calls: dict[str, list[Call]], watched=("softmax",)):
    """Run a job whose ``watched`` functions forbid torch's softmax."""
    job = Job(cells=cells, calls=calls, watch={n: SOFTMAX for n in watched})
    res = runner.run(job)
    assert uid_processes(runner.uid) == []
    return res


def earned(outcome: Reply) -> bool:
    """Whether a call came back with the forbidden function's answer."""
    return outcome.status == "ok" and torch.allclose(outcome.value, torch.softmax(X, -1))


def test_phases_group_functions_by_what_they_forbid_and_keep_stand_in_runs_last():
    other = watch_spec(["torch.nn.functional.scaled_dot_product_attention"])
    job = Job(
        cells=[],
        calls={"a": [], "free": [], "b": [], "c": [], "b+": []},
        watch={"a": SOFTMAX, "b": other, "c": SOFTMAX},
        standins={"b+": ("b", ["a"])},
    )
    phases = plan_phases(job)
    assert phases[0] == ([], ["free"])  # the cells as written, with what forbids nothing
    assert [keys for _, keys in phases[1:]] == [["a", "c"], ["b", "b+"]]
    assert phases[1][0] == SOFTMAX["ops"] and "aten::_softmax" in phases[1][0]
    del job.calls["free"]  # nothing forbids nothing: the first group's phase reports the cells
    assert [keys for _, keys in plan_phases(job)] == [["a", "c"], ["b", "b+"]]


def test_the_forbidden_operator_is_refused_in_the_call_and_named(runner):
    res = graded(runner, ["import torch\ndef softmax(x):\n    return torch.softmax(x, -1)"], {"softmax": [Call((X,))]})
    (out,) = res.outcomes["softmax"]
    assert res.status == "ok" and out.status == "error" and "refused while grading the functions" in out.message
    assert "torch.softmax" in out.seen  # the runtime layer's note still names it
    check_honest(runner.run(honest_job()[0]))


def test_work_left_for_the_encoding_of_the_result_is_refused_too(runner):
    # review item 1: the graded function returns a placeholder and leaves the forbidden work to
    # run when the harness encodes the result, through a replaced Tensor.detach or a mode left on
    cells = [
        "import torch\nfrom torch.overrides import TorchFunctionMode\n"
        "torch.Tensor.detach = lambda self: torch.softmax(self, -1)\n"
        "class Late(TorchFunctionMode):\n"
        "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
        "        out = func(*args, **(kwargs or {}))\n"
        "        return torch.softmax(out, -1) if 'detach' in str(func) else out\n"
        "def softmax(x):\n    Late().__enter__()\n    return x + 0"
    ]
    res = graded(runner, cells, {"softmax": [Call((X,)), Call((X,))]})
    assert not any(earned(o) for o in res.outcomes["softmax"]), res
    check_honest(runner.run(honest_job()[0]))


def test_a_table_filled_while_the_cells_ran_is_filled_again_without_the_operator(runner):
    # the inputs are the self-check's (no --seed): a table made with torch.softmax while the
    # cells ran would answer them; in the graded function's phase the cells run with it refused
    cells = [
        "import torch\nX = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]])\nTABLE = {X.sum().item(): torch.softmax(X, -1)}",
        "def softmax(x):\n    return TABLE[x.sum().item()]",
    ]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert not earned(res.outcomes["softmax"][0]), res
    assert res.cell_errors == [
        "cell 1: RuntimeError: aten::_softmax is refused while grading the functions that "
        "may not use it (the exercise asks you to write this yourself)"
    ]
    check_honest(runner.run(honest_job()[0]))


FIND_WATCH = "import torch\nwatch = [c for c in object.__subclasses__() if c.__name__ == 'OpWatch'][0]\n"


def test_switching_the_watch_off_earns_nothing(runner):
    # review item 2: the watch's class, found through object.__subclasses__(), made a no-op; the
    # refusal does not rest on it
    cells = [FIND_WATCH + "watch.__enter__ = lambda self: self", "def softmax(x):\n    return torch.softmax(x, -1)"]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert not earned(res.outcomes["softmax"][0]), res
    check_honest(runner.run(honest_job()[0]))


def test_rewriting_the_graders_code_is_refused_and_held_for_review(runner):
    cells = [FIND_WATCH + "watch.__enter__.__code__ = (lambda self: self).__code__", OWN_SOFTMAX]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert res.status == "review" and any("OpWatch.__enter__" in v for v in res.violations), res
    check_honest(runner.run(honest_job()[0]))


SIGNAL_GRAB = """
import os, signal
found = {}
def grab(signum, frame):
    while frame is not None:
        h = frame.f_locals.get('h') or frame.f_locals.get('self')
        if h is not None and hasattr(h, 'psender'):
            found['h'] = h
            return
        frame = frame.f_back
signal.signal(signal.SIGUSR1, grab)
os.kill(os.getpid(), signal.SIGUSR1)
h = found['h']
"""


def test_a_harness_reached_from_a_frame_cannot_forge_the_end_of_a_phase(runner):
    # frames are everyday Python (a signal handler gets one): the harness below the cells can be
    # reached, its key used. What it signs is still the phase's process's, never the keeper's.
    cells = [SIGNAL_GRAB + "h.sender.send({'t': 'phase_end', 'i': 0, 'code': 0})", OWN_SOFTMAX]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert res.status == "review" and not earned(res.outcomes["softmax"][0]), res
    assert any("from the wrong process" in v for v in res.violations)
    check_honest(runner.run(honest_job()[0]))


def test_a_harness_reached_from_a_frame_cannot_bring_the_operator_back(runner):
    cells = [
        SIGNAL_GRAB + "import gc\ntry:\n    gc.collect(); h.refuse = lambda ops, why: []\nexcept Exception:\n    pass",
        "import torch\ndef softmax(x):\n    return torch.softmax(x, -1)",
    ]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert not earned(res.outcomes["softmax"][0]), res
    check_honest(runner.run(honest_job()[0]))


def test_an_honest_comparison_with_torch_after_the_definition_keeps_full_marks(runner):
    cells = [
        "import torch\n"
        + OWN_SOFTMAX
        + "\nx = torch.randn(4, 5)\nassert torch.allclose(softmax(x), torch.softmax(x, -1))",
        "def attention_weights(s):\n    return torch.softmax(s, -1)",  # forbids nothing: torch's softmax is fine here
    ]
    calls = {"softmax": [Call((X,))], "attention_weights": [Call((X,))]}
    res = graded(runner, cells, calls)
    assert res.status == "ok" and res.cell_errors == [], res
    assert earned(res.outcomes["softmax"][0]) and earned(res.outcomes["attention_weights"][0])
    assert res.outcomes["softmax"][0].seen == []


def test_an_honest_comparison_before_the_definition_is_reviewed_not_scored_zero(runner):
    # the cell calls torch.softmax first: with it refused, the re-run never reaches the def
    cells = ["import torch\nprint(torch.softmax(torch.ones(3), -1))\n" + OWN_SOFTMAX]
    for free in ([], ["attention_weights"]):  # the cells reported as written, or with softmax refused
        calls = {"softmax": [Call((X,))], **{f: [Call((X,))] for f in free}}
        res = graded(runner, [*cells, "def attention_weights(s):\n    return s"], calls)
        assert res.status == "review" and ("refused" in str(res.cell_errors)) == (not free), res
        assert any("a cell called one of them" in v for v in res.violations)
        assert "held for review" in res.outcomes["softmax"][0].message
        assert res.missing == []


def test_mkldnn_and_torch_ops_reach_the_same_refusal(runner):
    cells = [
        "import torch\ndef softmax(x):\n    return torch.ops.aten._softmax(x.to_mkldnn(), -1, False).to_dense()",
        "def softmax_ops(x):\n    return torch.ops.aten._softmax.default(x, 1, False)",
    ]
    res = graded(runner, cells, {"softmax": [Call((X,))], "softmax_ops": [Call((X,))]}, ("softmax", "softmax_ops"))
    assert not earned(res.outcomes["softmax"][0]) and not earned(res.outcomes["softmax_ops"][0]), res


def test_a_function_never_written_is_missing_not_reviewed(runner):
    # with no refused operator called while the cells ran, the run is the notebook as written
    res = graded(runner, ["import torch\nx = torch.ones(3)"], {"softmax": [Call((X,))]})
    assert res.status == "ok" and res.missing == ["softmax"] and res.violations == [], res


DAEMON = """
import os, time
if os.fork() == 0:  # a process that outlives the cells, reading the grader's requests
    try:
        os.setsid()
        end = time.monotonic() + 8
        while time.monotonic() < end:
            data = os.read(4, 1 << 16)
            if b'"ops"' in data or b'softmax' in data:
                os.write(1, b'LEAKED ' + data[:40] + b'\\n')
    finally:
        os._exit(0)
"""


def test_nothing_started_in_one_phase_outlives_it_to_read_the_next(runner):
    # phase 0 answers a function that forbids nothing; a process its cells started would read
    # the next phase's requests (softmax's inputs) if it were still alive when they are sent
    cells = [DAEMON, OWN_SOFTMAX, "def attention_weights(s):\n    return s"]
    res = graded(runner, cells, {"attention_weights": [Call((X,))], "softmax": [Call((X,))]})
    assert "LEAKED" not in res.output_tail
    assert earned(res.outcomes["softmax"][0]), res  # its requests reached its own phase's process
    check_honest(runner.run(honest_job()[0]))


def test_the_audit_hook_cannot_be_fooled_by_rebinding_builtins_or_its_modules_names(runner):
    # the hook binds what it uses when it is installed: rebinding id (so that every code
    # object looks like the worker's own system calls) or the audit module's globals (reached
    # from a class's method) changes nothing
    cells = [
        "import builtins, ctypes\n"
        "audit = [c for c in object.__subclasses__() if c.__name__ == 'Policy'][0].arm.__globals__\n"
        "audit['_REFUSED'] = frozenset()\n"
        "native = audit['install'].__code__  # any code object's id would do\n"
        "builtins.id = lambda o, real=id: real(native)\n"
        "ctypes.addressof(ctypes.c_int(1))",
        OWN_SOFTMAX,
    ]
    res = graded(runner, cells, {"softmax": [Call((X,))]})
    assert res.status == "review" and any("ctypes.addressof" in v for v in res.violations), res
    check_honest(runner.run(honest_job()[0]))


HANG = (
    "import signal\ndef first():\n    return 1\n\ndef hang():\n    for s in (signal.SIGALRM, signal.SIGPROF):\n"
    "        signal.signal(s, signal.SIG_IGN)\n    while True:\n        pass\n\ndef later():\n    return 2"
)


def test_a_phase_that_runs_out_of_cpu_time_is_a_timeout_not_a_crash(runner):
    # a phase's process has the submission's CPU time (+ 2 s) of its own; three phases give the
    # job three times the wall clock, so a loop that ignores the per-call limit meets the CPU
    # limit first. That is the submission's time limit, not a crash or a memory kill.
    sdpa = watch_spec(["torch.nn.functional.scaled_dot_product_attention"])
    job = Job(
        cells=[HANG],
        calls={"first": [Call()], "hang": [Call()], "later": [Call()]},
        watch={"hang": SOFTMAX, "later": sdpa},
    )
    assert len(plan_phases(job)) == 3
    runner.limits = dataclasses.replace(LIMITS, submission_seconds=2.0)
    try:
        res = runner.run(job)
    finally:
        runner.limits = LIMITS
    assert res.status == "timeout" and "stopped after 2 s of CPU time" in res.message, res
    assert "memory" not in res.message and res.outcomes["first"][0].value == 1
    assert res.outcomes["hang"][0].status != "ok" and "timed out" in res.outcomes["later"][0].message
    assert uid_processes(runner.uid) == []
    check_honest(runner.run(honest_job()[0]))


def test_a_phase_killed_before_its_cpu_limit_is_a_crash():
    # the keeper says whether the kernel's CPU count reached the limit; a SIGKILL without that
    # (memory, the machine) stays a crash, and a phase that exited stays what it was
    assert _Ending.of_phase({"code": -signal.SIGKILL, "cpu_out": True}) == ("timeout", _Ending("cpu"))
    assert _Ending.of_phase({"code": -signal.SIGKILL, "cpu_out": False}) == ("crashed", _Ending("signal", "SIGKILL"))
    assert _Ending.of_phase({"code": 3}) == ("crashed", _Ending("exit", "3"))
    assert _Ending.of_phase({"code": -signal.SIGKILL, "cpu_out": "yes"})[0] == "crashed"
