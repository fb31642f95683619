"""The sandbox that runs student notebooks for the autograder.

Every attack runs through a warm runner that is then used again: the attack is reported
(a cell error, a failed call, a timeout, a crash), the next job runs normally, and nothing
of the attack survives into it. Attacks run under each isolation level available here
(bubblewrap and namespaces); "off" only runs honest code.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.autograder.sandbox import codec, isolation
from course_lib.autograder.sandbox.runner import Job, Limits, Reply, Runner, SandboxUnavailable
from course_lib.autograder.sandbox.worker.protocol import SCRATCH
from course_lib.autograder.sandbox_adapter import watch_lists
from course_lib.grading.model import Call

COURSE_SOURCE = ROOT / "course_lib" / "attention.py"
# Generous limits so that a busy machine cannot make an honest job time out; the tests of
# the submission limit itself lower it for one job.
LIMITS = Limits(
    call_seconds=0.5,
    submission_seconds=12.0,
    cell_seconds=3.0,
    memory_mb=256,
    processes=16,
    output_bytes=50_000,
    scratch_mb=4,
)
SLOTS = {"bubblewrap": 41, "namespaces": 42, "none": 43}  # uids 60041.. (not those of other test files)
# Both levels are required: `make test` installs bubblewrap, and CI runs as root (namespaces).
# A level that does not work here makes its tests fail (Runner raises), never skip.
LEVELS = ["bubblewrap", "namespaces"]

pytestmark = pytest.mark.sandbox

HONEST = """
import torch

def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def stats(x):
    return x.mean(), (x.shape[0], float(x.max())), [x > 0, int(x.numel())], True

def noisy(n):
    return torch.randn(n)
"""


def honest_job() -> tuple[Job, torch.Tensor]:
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 5.0]])
    job = Job(
        cells=[HONEST],
        calls={
            "softmax": [Call((x,)), Call((x,), {"dim": 0})],
            "stats": [Call((x,))],
            "noisy": [Call((4,))],
        },
    )
    return job, x


def check_honest(res) -> None:
    _job, x = honest_job()
    assert res.status == "ok", res
    assert res.cell_errors == [] and res.missing == [] and res.reference_access == []
    assert [o.status for o in res.outcomes["softmax"]] == ["ok", "ok"]
    assert torch.allclose(res.outcomes["softmax"][0].value, torch.softmax(x, -1))
    assert torch.allclose(res.outcomes["softmax"][1].value, torch.softmax(x, 0))
    mean, pair, items, flag = res.outcomes["stats"][0].value
    assert type(mean) is torch.Tensor and torch.allclose(mean, x.mean())
    assert pair == (2, 5.0) and type(pair[0]) is int and type(pair[1]) is float
    assert torch.equal(items[0], x > 0) and items[0].dtype == torch.bool and items[1] == 6
    assert flag is True
    assert res.outcomes["noisy"][0].value.shape == (4,)


def uid_processes(uid: int) -> list[int]:
    """Processes running as the sandbox uid (anywhere on the machine)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(int(d))
            except FileNotFoundError:
                pass
    return pids


def run(runner: Runner, cells, calls=None):
    res = runner.run(Job(cells=list(cells), calls=calls or {}))
    # after every job: no process of the job is left, and the runner still works
    if runner.isolation != "none":
        assert uid_processes(runner.uid) == []
    return res


@pytest.fixture(scope="module")
def secret_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("other_students")
    (d / "alice.ipynb").write_text('{"secret": "alice solution"}')
    return d


@pytest.fixture(scope="module", params=LEVELS)
def runner(request, secret_dir):
    r = Runner(
        mode="auto",
        limits=LIMITS,
        slot=SLOTS[request.param],
        hide=[str(secret_dir)],
        isolation=request.param,
        watch=watch_lists(),
    )
    yield r
    r.close()


def test_isolation_is_detected_once():
    level = isolation.detect_isolation()
    assert level in ("bubblewrap", "namespaces", "none")
    assert isolation.detect_isolation() == level
    assert level == LEVELS[0]


def test_required_mode_refuses_to_run_without_isolation(monkeypatch):
    monkeypatch.setattr(isolation, "detect_isolation", lambda: "none")
    with pytest.raises(SandboxUnavailable):
        Runner(mode="required", watch=watch_lists())
    with pytest.raises(ValueError):
        Runner(mode="sometimes", watch=watch_lists())


def test_off_mode_runs_a_normal_job():
    with Runner(mode="off", limits=LIMITS, slot=SLOTS["none"], watch=watch_lists()) as r:
        assert r.isolation == "none"
        job, _ = honest_job()
        check_honest(r.run(job))


def test_values_keep_their_shape_and_dtype_through_the_sandbox(runner):
    res = run(
        runner,
        [
            "import torch\ndef shapes():\n    return (torch.tensor(1.5), torch.zeros(0, 3), "
            "torch.ones(2, 1, dtype=torch.bool), torch.arange(3), torch.ones(2, 3, dtype=torch.float64).T)"
        ],
        {"shapes": [Call()]},
    )
    scalar, empty, mask, ints, transposed = res.outcomes["shapes"][0].value
    assert scalar.shape == () and float(scalar) == 1.5 and scalar.dtype == torch.float32
    assert empty.shape == (0, 3) and mask.dtype == torch.bool and ints.dtype == torch.int64
    assert transposed.shape == (3, 2) and transposed.dtype == torch.float64


CHANGES_ITS_INPUTS = """
import torch

def centre(x, dim=-1):
    x.sub_(x.mean(dim=dim, keepdim=True))
    return x

def centre_a_copy(x, dim=-1):
    out = x.clone()
    out.sub_(out.mean(dim=dim, keepdim=True))
    return out

def identity(x, dim=-1):
    return x

def fill_cache(q, cache=None):
    cache[1][..., 0] = 0.0
    y = torch.empty(q.shape)
    y[...] = q
    return y
"""


def test_a_call_that_changes_its_arguments_in_place_is_reported_by_position_or_keyword(runner):
    x = torch.tensor([[1.0, float("nan"), 3.0], [-0.0, 2.0, float("-inf")]])
    cache = (torch.ones(2, 3), torch.ones(2, 3), torch.ones(1))
    res = run(
        runner,
        [CHANGES_ITS_INPUTS],
        {
            "centre": [Call((torch.randn(2, 3),)), Call((), {"x": torch.randn(2, 3, dtype=torch.bfloat16)})],
            "centre_a_copy": [Call((torch.randn(2, 3),))],
            "identity": [Call((x,), {"dim": 0}), Call((x.T,))],  # NaN, -inf and -0.0, not contiguous
            "fill_cache": [Call((torch.ones(2, 3), cache)), Call((torch.ones(2, 3),), {"cache": list(cache)})],
        },
    )
    assert res.status == "ok", res
    assert [o.changed for o in res.outcomes["centre"]] == [[(0,)], [("x",)]]
    assert [o.changed for o in res.outcomes["centre_a_copy"]] == [[]]
    assert [o.changed for o in res.outcomes["identity"]] == [[], []]
    assert [o.changed for o in res.outcomes["fill_cache"]] == [[(1, 1)], [("cache", 1)]]


def test_a_forged_list_of_changed_arguments_keeps_only_what_has_their_form():
    from course_lib.autograder.sandbox.conversation import _paths

    forged = [[0], ["mask"], [3, 1], [], ["not a name"], [-1], [10**6], [0, "x"], "0", [True], [2.0]]
    assert _paths(forged) == [(0,), ("mask",), (3, 1)]
    assert _paths({"0": 1}) == [] and _paths(None) == [] and len(_paths([[0]] * 1000)) == 20


def test_off_mode_still_never_runs_student_code_as_root():
    with Runner(mode="off", limits=LIMITS, slot=SLOTS["none"], watch=watch_lists()) as r:
        res = r.run(
            Job(cells=["import os\ndef who():\n    return (os.getuid(), os.geteuid())"], calls={"who": [Call()]})
        )
    uid, euid = res.outcomes["who"][0].value
    assert uid == euid == r.uid != 0  # so kill(-1) cannot reach the grader or anything else of root's


def test_threads_left_by_the_cells_do_not_run_while_the_calls_are_answered(runner):
    spinner = """
import os, threading, time
import torch
state = {"ticks": 0}
def spin():
    while True:
        state["ticks"] += 1
        time.sleep(0.001)
%s
def ticks_while_called():
    before = state["ticks"]
    time.sleep(0.2)
    return (state["ticks"] - before, os.getpid())
"""
    alone = run(runner, [spinner % ""], {"ticks_while_called": [Call()]})
    left = run(
        runner, [spinner % "threading.Thread(target=spin, daemon=True).start()"], {"ticks_while_called": [Call()]}
    )
    assert alone.status == left.status == "ok"
    # no other thread: the calls run in the process that ran the cells (PID 2: PID 1 is the
    # keeper, which runs no student code)
    assert alone.outcomes["ticks_while_called"][0].value == (0, 2)
    ticks, pid = left.outcomes["ticks_while_called"][0].value
    assert ticks == 0 and pid not in (1, 2)  # the thread kept running in PID 2; the calls ran in a fork without it


def test_a_normal_job_returns_correct_values_identically_each_time(runner):
    job, _ = honest_job()
    first, second = runner.run(job), runner.run(job)
    check_honest(first)
    check_honest(second)
    for name in job.calls:
        for a, b in zip(first.outcomes[name], second.outcomes[name], strict=False):
            assert a.status == b.status
            va, vb = a.value, b.value
            flat_a = va if isinstance(va, tuple) else (va,)
            flat_b = vb if isinstance(vb, tuple) else (vb,)
            assert repr(flat_a) == repr(flat_b)
    assert torch.equal(first.outcomes["noisy"][0].value, second.outcomes["noisy"][0].value)  # seeded


def test_the_sandbox_s_call_limit_and_reply_statuses_are_those_of_the_grading_checks():
    # the sandbox imports nothing of course_lib.grading (tests/test_architecture.py): its own
    # copies of these two must not drift from the checks'
    from course_lib.autograder.sandbox import jobs
    from course_lib.grading.model import OUTCOME_STATUSES
    from course_lib.grading.run import CALL_TIME_LIMIT

    assert jobs.CALL_SECONDS == CALL_TIME_LIMIT == Limits().call_seconds
    assert jobs.REPLY_STATUSES == OUTCOME_STATUSES


def test_huge_pages_reports_only_memory_it_backed_with_huge_pages():
    from course_lib.autograder.sandbox.worker.zygote import huge_pages

    def anon_huge() -> int:
        for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
            if line.startswith("AnonHugePages:"):
                return int(line.split()[1]) << 10
        return 0

    keep = [bytearray(8 << 20)]  # at least one whole huge page of anonymous memory to collapse
    done = huge_pages()
    assert done % (2 << 20) == 0 and anon_huge() >= done
    if "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text():
        assert done >= 2 << 20  # this kernel has huge pages: the warm worker's forks use them
    del keep


def test_the_sandbox_is_an_unprivileged_pid_namespace_without_a_view_of_the_machine(runner):
    res = run(
        runner,
        [
            """
import os, socket
def who():
    pids = [p for p in os.listdir('/proc') if p.isdigit()]
    status = dict(line.split(':', 1) for line in open('/proc/self/status').read().splitlines())
    caps = sum(int(status[k], 16) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapAmb'))
    return (os.getuid(), os.getgid(), os.getpid(), os.getppid(), len(pids), int(socket.gethostname() == 'sandbox'),
            int(os.path.exists('/home')), int(os.path.exists(%r)), int(os.access('/', os.W_OK)),
            caps, int(status['NoNewPrivs']))
"""
            % str(ROOT / "course_lib")
        ],
        {"who": [Call()]},
    )
    uid, gid, pid, ppid, n_pids, hostname, home, course, root_writable, caps, nnp = res.outcomes["who"][0].value
    assert caps == 0 and nnp == 1  # no capabilities, and no way to gain any
    assert uid == gid == runner.uid and uid != 0
    # the job's keeper is PID 1 of a fresh PID namespace; the student's code runs in its child
    assert pid == 2 and ppid == 1
    assert n_pids == 2  # only the job's own processes: no host process is visible
    assert hostname == 1 and home == 0 and course == 0 and root_writable == 0


def test_an_infinite_loop_in_a_cell_stops_that_cell_only(runner):
    res = run(runner, ["while True:\n    pass", "def f(x):\n    return x * 2"], {"f": [Call((torch.ones(2),))]})
    assert res.status == "ok"
    assert len(res.cell_errors) == 1 and res.cell_errors[0].startswith("cell 1: stopped after")
    assert torch.equal(res.outcomes["f"][0].value, torch.full((2,), 2.0))


def test_an_infinite_loop_in_a_call_is_a_timeout_and_the_other_calls_still_run(runner):
    cells = ["def f(x):\n    while x.item() > 0:\n        pass\n    return x - 1"]
    res = run(runner, cells, {"f": [Call((torch.tensor(1),)), Call((torch.tensor(0),))]})
    assert res.status == "ok"
    assert res.outcomes["f"][0] == Reply("timeout", message="took longer than 0.5 s")
    assert res.outcomes["f"][1].status == "ok" and res.outcomes["f"][1].value.item() == -1


def test_input_exit_and_sys_exit_are_cell_errors(runner):
    cells = [
        "name = input('who are you? ')",
        "exit()",
        "import sys\nsys.exit(3)",
        "quit()",
        "raise KeyboardInterrupt",
        "def f():\n    return 1",
    ]
    res = run(runner, cells, {"f": [Call()]})
    assert res.status == "ok"
    assert [e.split(":")[0] for e in res.cell_errors] == ["cell 1", "cell 2", "cell 3", "cell 4", "cell 5"]
    assert "EOFError" in res.cell_errors[0] and "SystemExit" in res.cell_errors[2]
    assert res.outcomes["f"][0].value == 1


def test_os_exit_midway_keeps_the_earlier_results(runner):
    cells = ["import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x * 10"]
    res = run(runner, cells, {"f": [Call((1,)), Call((2,)), Call((3,))]})
    assert res.status == "crashed" and "exit code 0" in res.message
    assert res.outcomes["f"][0] == Reply("ok", 10)
    assert [o.status for o in res.outcomes["f"][1:]] == ["error", "error"]
    assert all(o.message.startswith("not run:") for o in res.outcomes["f"][1:])
    check_honest(runner.run(honest_job()[0]))


def test_killing_its_parent_or_everything_only_hurts_the_student(runner):
    zygote = runner._proc.pid
    cells = [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "os.kill(-1, signal.SIGKILL)",
        "os.kill(0, signal.SIGKILL)",
        "os.kill(os.getpid(), signal.SIGKILL)",
        "def f():\n    return 7",
    ]
    res = run(runner, cells, {"f": [Call()]})
    assert res.status in ("ok", "crashed")
    assert runner._proc.pid == zygote and runner._proc.poll() is None  # the warm worker survived
    check_honest(runner.run(honest_job()[0]))


def test_a_fork_bomb_is_contained_and_leaves_no_process(runner):
    cells = [
        """
import os, time
children = 0
try:
    for _ in range(1000):
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        children += 1
except OSError as e:
    stopped = type(e).__name__
""",
        "def count():\n    return children",
        "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    ]
    res = run(runner, cells, {"count": [Call()]})
    assert res.status == "ok", res
    assert 0 < res.outcomes["count"][0].value < LIMITS.processes
    assert res.cell_errors and res.cell_errors[-1].startswith("cell 3: stopped after")
    assert uid_processes(runner.uid) == []
    check_honest(runner.run(honest_job()[0]))


def test_a_daemon_started_with_a_double_fork_is_gone_after_the_job(runner, tmp_path):
    cells = [
        """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.01)
    os._exit(0)
os.wait()
time.sleep(0.1)
"""
    ]
    res = run(runner, cells)
    assert res.status == "ok" and res.cell_errors == []
    assert uid_processes(runner.uid) == []


def test_a_memory_bomb_is_stopped_and_reported(runner):
    cells = [
        "hog = []\nwhile True:\n    hog.append(bytearray(20_000_000))",
        "del hog\nimport torch\ndef f():\n    return torch.ones(10 ** 10)\n\ndef g():\n    return 1",
    ]
    res = run(runner, cells, {"f": [Call()], "g": [Call()]})
    assert res.status == "ok"
    assert res.cell_errors[0].startswith("cell 1: MemoryError")
    assert res.outcomes["f"][0].status == "error"
    assert "alloc" in res.outcomes["f"][0].message.lower() or "memory" in res.outcomes["f"][0].message.lower()
    assert res.outcomes["g"][0].value == 1


def test_filling_the_disk_is_capped_and_nothing_is_written_outside_the_scratch_dir(runner, tmp_path):
    name = f"sandbox-test-{uuid.uuid4().hex}"
    targets = [
        f"{SCRATCH}/{name}",
        str(ROOT / name),
        str(tmp_path / name),
        f"/dev/shm/{name}",
        f"/{name}",
        f"/tmp/{name}",
    ]
    cells = [
        """
import os
def fill(path):
    written = 0
    try:
        with open(path, 'wb') as f:
            while written < 100_000_000:
                f.write(b'x' * 4096)
                f.flush()
                written += 4096
    except OSError:
        pass
    return written

def fill_many():
    total = 0
    try:
        for i in range(100_000):
            with open(f'part{i}', 'wb') as f:
                f.write(b'x' * 40_000)
            total += 40_000
    except OSError:
        pass
    return total

def attempt():
    return tuple(fill(p) for p in %r) + (fill_many(),)
"""
        % targets
    ]
    res = run(runner, cells, {"attempt": [Call()]})
    assert res.status == "ok", res
    written = res.outcomes["attempt"][0].value
    assert 0 < written[0] <= LIMITS.output_bytes  # the scratch dir: writable, capped
    assert written[1] == written[2] == written[4] == written[5] == 0  # the repo, the host's tmp, /, /tmp
    assert 0 < written[6] <= LIMITS.scratch_mb << 20  # many files: the scratch tmpfs is full
    for t in targets:
        assert not os.path.exists(t)
    assert not (ROOT / "part0").exists()


def test_deleting_the_repository_fails(runner):
    # the sandbox uid must not own the repository, or deleting it would be allowed by design
    assert ROOT.stat().st_uid != runner.uid
    before = sorted(p.name for p in (ROOT / "course_lib").iterdir())
    cells = [
        """
import os, shutil
assert os.getuid() >= 60000, 'not sandboxed: refusing to try'
errors = []
shutil.rmtree(%r, onerror=lambda *a: errors.append(a[0].__name__))
"""
        % str(ROOT),
        "def n_errors():\n    return len(errors)",
    ]
    res = run(runner, cells, {"n_errors": [Call()]})
    assert sorted(p.name for p in (ROOT / "course_lib").iterdir()) == before
    assert COURSE_SOURCE.is_file()
    assert res.cell_errors == [] and res.outcomes["n_errors"][0].value > 0


def test_ignoring_the_time_limit_signals_ends_in_a_submission_timeout(runner):
    cells = [
        "import signal\nfor s in (signal.SIGALRM, signal.SIGPROF, signal.SIGTERM, signal.SIGINT):\n"
        "    signal.signal(s, signal.SIG_IGN)",
        "def first():\n    return 1\n\ndef hang():\n    for s in (signal.SIGALRM, signal.SIGPROF):\n"
        "        signal.signal(s, signal.SIG_IGN)\n    while True:\n        pass",
    ]
    t0 = time.monotonic()
    runner.limits = dataclasses.replace(LIMITS, submission_seconds=2.0)
    try:
        res = run(runner, cells, {"first": [Call()], "hang": [Call(), Call()]})
    finally:
        runner.limits = LIMITS
    assert time.monotonic() - t0 < 2.0 + 10
    assert res.status == "timeout" and "stopped after 2 s" in res.message
    assert res.outcomes["first"][0].value == 1
    assert [o.status for o in res.outcomes["hang"]] == ["error", "error"]
    assert "timed out" in res.outcomes["hang"][0].message
    check_honest(runner.run(honest_job()[0]))


def test_the_network_is_unreachable(runner):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                accepted.append(conn)
            except OSError:
                pass

    thread = threading.Thread(target=serve)
    thread.start()
    cells = [
        """
import socket
def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return 1
    except OSError:
        return 0
"""
    ]
    try:
        res = run(
            runner, cells, {"connect": [Call(("127.0.0.1", port)), Call(("8.8.8.8", 53)), Call(("localhost", port))]}
        )
    finally:
        time.sleep(0.3)
        stop.set()
        thread.join()
        server.close()
    assert [o.value for o in res.outcomes["connect"]] == [0, 0, 0]
    assert accepted == []


def test_other_students_files_and_the_course_source_cannot_be_read(runner, secret_dir):
    paths = [
        str(secret_dir / "alice.ipynb"),
        str(COURSE_SOURCE),
        str(ROOT / "course_lib" / "grading" / "judging.py"),
        str(ROOT / "solutions"),
        "/root/.bash_history",
        "/etc/shadow",
    ]
    cells = [
        """
import os
def read(path):
    try:
        if os.path.isdir(path):
            return len(os.listdir(path))
        with open(path, 'rb') as f:
            return len(f.read())
    except OSError:
        return -1
"""
    ]
    res = run(runner, cells, {"read": [Call((p,)) for p in paths]})
    assert [o.value for o in res.outcomes["read"]] == [-1] * len(paths)


def test_patching_torch_in_one_job_does_not_affect_the_next(runner):
    res = run(
        runner,
        [
            "import torch\ntorch.matmul = lambda *a: 0\ntorch.Tensor.__add__ = lambda *a: 0\n"
            "import numpy\nnumpy.load = None"
        ],
    )
    assert res.status == "ok" and res.cell_errors == []
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    res = run(runner, ["import torch\ndef f(a, b):\n    return torch.matmul(a, b) + 1"], {"f": [Call((a, b))]})
    assert torch.allclose(res.outcomes["f"][0].value, a @ b + 1)


def test_nothing_of_a_job_is_left_for_the_next(runner):
    run(
        runner,
        [
            "import os, builtins, sys\nfor p in ('/tmp/left', '/dev/shm/left', 'left'):\n    try:\n"
            "        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
            "os.environ['LEFT'] = '1'\nbuiltins.left = 1\nsys.modules['left'] = sys"
        ],
    )
    res = run(
        runner,
        [
            "import os, sys\ndef left():\n    return (os.path.exists('/tmp/left'), "
            "os.path.exists('/dev/shm/left'), os.path.exists('left'), 'LEFT' in os.environ, "
            "'left' in dir(__builtins__), 'left' in sys.modules)"
        ],
        {"left": [Call()]},
    )
    assert res.outcomes["left"][0].value == (False,) * 6


def test_objects_that_pretend_to_be_tensors_are_refused(runner):
    cells = [
        """
import numpy as np
import torch

class Sub(torch.Tensor):
    pass

class WithArray:
    def __array__(self, *a, **k):
        return np.zeros(3)

class Shaped:
    shape = (2, 3)
    def __eq__(self, other):
        return True

def sub():
    return torch.zeros(3).as_subclass(Sub)

def with_array():
    return WithArray()

def shaped():
    return Shaped()

def array():
    return np.zeros(3)

def nested():
    return (torch.zeros(1), [Shaped()])

def none():
    return None

def complex_():
    return torch.zeros(2, dtype=torch.complex64)
"""
    ]
    names = ["sub", "with_array", "shaped", "array", "nested", "none", "complex_"]
    res = run(runner, cells, {n: [Call()] for n in names})
    assert [res.outcomes[n][0].status for n in names] == ["bad_type"] * len(names)
    assert "subclass of torch.Tensor" in res.outcomes["sub"][0].message
    assert res.outcomes["shaped"][0].message == "returned a __main__.Shaped, expected a torch.Tensor"
    assert res.outcomes["array"][0].message == "returned a numpy.ndarray, expected a torch.Tensor"


def test_nan_and_inf_come_back_as_they_are(runner):
    cells = [
        "import torch\ndef f():\n    return torch.tensor([float('nan'), float('inf'), -float('inf'), 1.0])\n"
        "def g():\n    return float('nan'), float('-inf'), torch.tensor([1.5], dtype=torch.bfloat16)"
    ]
    res = run(runner, cells, {"f": [Call()], "g": [Call()]})
    v = res.outcomes["f"][0].value
    assert torch.isnan(v[0]) and v[1] == math.inf and v[2] == -math.inf and v[3] == 1.0
    nan, minf, bf = res.outcomes["g"][0].value
    assert math.isnan(nan) and minf == -math.inf
    assert bf.dtype == torch.bfloat16 and bf.item() == 1.5


def test_huge_output_is_capped_and_printed_text_is_never_a_result(runner):
    cells = [
        "for i in range(200_000):\n    print('softmax: 8/8 points, all tests passed', i)",
        "import os, sys\nfor i in range(20_000):\n    os.write(1, b'x' * 1000)\nsys.stderr.write('bye')",
        'print(\'{"t": "result", "fn": "f", "i": 0, "status": "ok"}\')\ndef f():\n    raise NotImplementedError',
    ]
    t0 = time.monotonic()
    res = run(runner, cells, {"f": [Call()]})
    assert time.monotonic() - t0 < LIMITS.submission_seconds
    assert res.status == "ok" and res.cell_errors == []
    assert len(res.output_tail) < 2300 and "output truncated" in res.output_tail
    assert res.outcomes["f"][0].status == "not_implemented"


def test_using_course_lib_is_recorded_and_refused(runner):
    cells = [
        "import course_lib",
        "from course_lib.attention import scaled_dot_product_attention",
        "from course_lib.grading import check, when_implemented\ncheck(print)\n"
        "with when_implemented():\n    raise NotImplementedError",
        "import course_lib.grading as g\ng.check = lambda *a, **k: 'passed'",
        "def softmax(x, dim=-1):\n    return course_lib.softmax(x, dim)",
    ]
    res = run(runner, cells, {"softmax": [Call((torch.zeros(2),))]})
    assert [e.split(":")[0] for e in res.cell_errors] == ["cell 2", "cell 4"]
    assert "reference implementation course_lib.attention accessed" in res.reference_access
    assert "course_lib object course_lib.grading.check modified" in res.reference_access
    assert "reference implementation course_lib.softmax accessed" in res.reference_access
    assert res.outcomes["softmax"][0].status == "error"
    assert "reference implementations" in res.outcomes["softmax"][0].message
    assert "Not implemented yet" in res.output_tail


def test_syntax_errors_and_magics_do_not_stop_the_notebook(runner):
    cells = [
        "%matplotlib inline\nimport torch\nimport matplotlib.pyplot as plt",
        "def broken(:\n    pass",
        "!pip install something\nx = 3",
        "if x:\n    %time y = 1\n    y = 2",
        "plt.plot([1, 2], [3, 4])\nplt.show()\nplt.savefig('plot.png')",
        "def f():\n    return x + y",
    ]
    res = run(runner, cells, {"f": [Call()], "missing_fn": [Call(), Call()]})
    assert res.cell_errors == ["cell 2: SyntaxError: invalid syntax (line 1)"]
    assert res.outcomes["f"][0].value == 5
    assert res.missing == ["missing_fn"]
    assert [o.status for o in res.outcomes["missing_fn"]] == ["error", "error"]


def test_the_worker_dying_is_a_crash_and_the_runner_restarts_it(runner):
    check_honest(runner.run(honest_job()[0]))  # warm
    timer = threading.Timer(0.5, lambda: os.killpg(runner._proc.pid, signal.SIGKILL))
    timer.start()
    res = runner.run(Job(cells=["import time\ntime.sleep(2)"], calls={"f": [Call()]}))
    timer.join()
    assert res.status == "crashed" and res.outcomes["f"][0].message.startswith("not run")
    check_honest(runner.run(honest_job()[0]))
    os.killpg(runner._proc.pid, signal.SIGKILL)  # dead between jobs: restarted transparently
    runner._proc.wait()
    check_honest(runner.run(honest_job()[0]))
    os.killpg(runner._proc.pid, signal.SIGKILL)  # even before the runner has noticed
    time.sleep(0.2)
    check_honest(runner.run(honest_job()[0]))
    assert uid_processes(runner.uid) == []


FORGE = """
import io, json, os, struct
import numpy as np

def forge(header, blobs=()):
    header = dict(header, blobs=[len(b) for b in blobs])
    h = json.dumps(header).encode()
    os.write(3, struct.pack('<I', len(h)) + h + b''.join(blobs))

def npy(arr, **kw):
    buf = io.BytesIO()
    np.save(buf, arr, **kw)
    return buf.getvalue()

def tensor(i, blob, **extra):
    forge(dict({"t": "result", "fn": "f", "i": i, "status": "ok", "value": {"t": "tensor", "b": 0}}, **extra), [blob])

pickled = npy(np.array([print], dtype=object), allow_pickle=True)
small = npy(np.zeros(3))
end = small.index(b"\\n")
header = small[:end].replace(b"(3,)", b"(999999999999,)").rstrip(b" ")
huge_shape = header + b" " * (end - len(header)) + small[end:]
"""


def test_forged_frames_hold_the_submission_for_review_and_earn_nothing(runner):
    # frames written to the harness's own pipe by student code: unsigned, so forged
    cells = [
        FORGE,
        "tensor(0, pickled)\ntensor(1, huge_shape)\n"
        "forge({'t': 'cells_done', 'missing': [], 'not_own': {}, 'seq': 0})\n"
        "forge({'t': 'reply', 'id': 0, 'status': 'ok', 'value': {'t': 'int', 'v': 4}, 'seq': 1})\n"
        "forge({'t': 'bye', 'seq': 2})\nos._exit(0)",
        "def f():\n    return 4",
    ]
    res = run(runner, cells, {"f": [Call()] * 3})
    assert res.status == "review" and res.violations, res
    assert "signature" in res.message or "did not write" in res.message
    assert [o.status for o in res.outcomes["f"]] == ["error"] * 3  # nothing forged became a result
    check_honest(runner.run(honest_job()[0]))


def test_no_call_input_reaches_the_student_process_before_its_cells_have_all_run(runner):
    # the last cell reads what the requests pipe (fd 4) holds: nothing, the calls come later
    cells = [
        "def f(x):\n    return x + 1",
        "import os\nos.set_blocking(4, False)\ntry:\n    early = os.read(4, 1 << 20)\n"
        "except BlockingIOError:\n    early = b''\nos.set_blocking(4, True)\n"
        "def early_bytes():\n    return len(early)",
    ]
    res = run(runner, cells, {"f": [Call((torch.tensor(1.0),))] * 3, "early_bytes": [Call()]})
    assert res.status == "ok" and res.cell_errors == [], res
    assert res.outcomes["early_bytes"][0].value == 0
    assert [o.value.item() for o in res.outcomes["f"]] == [2.0, 2.0, 2.0]


def test_a_call_that_takes_its_functions_later_calls_from_the_pipe_only_loses_them(runner):
    # one function's calls are sent together: a call that reads the others' frames leaves the
    # harness without them; they are never answered, and the job ends at the submission limit.
    # The grader may still be writing the last call when the read runs (a race the student's
    # code, not the grader, decides): that call then reaches the harness alone, is answered out
    # of turn, and the unexpected reply sends the job to review. Neither way earns the lost calls.
    cells = ["import os\ndef f(x):\n    if x == 1:\n        os.read(4, 1 << 20)\n    return x * 10"]
    t0 = time.monotonic()
    runner.limits = dataclasses.replace(LIMITS, submission_seconds=2.0)
    try:
        res = run(runner, cells, {"f": [Call((1,)), Call((2,)), Call((3,))]})
    finally:
        runner.limits = LIMITS
    assert time.monotonic() - t0 < 2.0 + 10
    lost = res.status == "timeout" and res.violations == []
    out_of_turn = res.status == "review" and res.violations == [
        "an unexpected 'reply' frame while waiting for the harness"
    ]
    assert lost or out_of_turn, res
    assert res.outcomes["f"][0] == Reply("ok", 10)
    assert [o.status for o in res.outcomes["f"][1:]] == ["error", "error"]
    check_honest(runner.run(honest_job()[0]))


def test_a_process_that_dies_while_its_functions_calls_are_still_being_sent_keeps_its_answers(runner):
    # three calls of 2 MB each cannot all wait in the pipe: the grader is still sending when the
    # second call ends the process; the first answer counts, and nothing is taken for tampering
    cells = ["import os\ndef f(x):\n    if x[0] == 2:\n        os._exit(0)\n    return x[:3] * 10"]
    big = [torch.full((500_000,), float(i)) for i in (1, 2, 3)]
    res = run(runner, cells, {"f": [Call((x,)) for x in big]})
    assert res.status == "crashed" and res.violations == [], res
    assert torch.equal(res.outcomes["f"][0].value, torch.full((3,), 10.0))
    assert [o.status for o in res.outcomes["f"][1:]] == ["error", "error"]
    assert all(o.message.startswith("not run:") for o in res.outcomes["f"][1:])
    check_honest(runner.run(honest_job()[0]))


def test_a_malformed_stream_is_a_review_not_a_crash_of_the_grader(runner):
    cells = [
        "import os\nos.write(3, b'\\xff\\xff\\xff\\x7f' + b'x' * 100)\nimport time\ntime.sleep(1)",
        "def f():\n    return 1",
    ]
    res = run(runner, cells, {"f": [Call()]})
    assert res.status == "review" and "malformed" in res.message
    assert res.outcomes["f"][0].status == "error"
    check_honest(runner.run(honest_job()[0]))


def test_npy_parsing_refuses_pickles_and_lies_before_allocating():
    import io

    import numpy as np

    def npy(arr, **kw):
        buf = io.BytesIO()
        np.save(buf, arr, **kw)
        return buf.getvalue()

    assert codec.load_npy(npy(np.arange(6).reshape(2, 3))).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert codec.load_npy(npy(np.asfortranarray(np.arange(6).reshape(2, 3)))).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert codec.load_npy(npy(np.arange(3, dtype=">f4"))).dtype == np.float32
    bad = [
        npy(np.array([None], dtype=object), allow_pickle=True),
        npy(np.zeros(2, dtype="complex64")),
        npy(np.zeros(2, dtype=[("a", "f4")])),
        npy(np.zeros(3))[:-1],
        b"not an array",
        b"",
    ]
    small = npy(np.zeros(3))
    end = small.index(b"\n")
    header = small[:end].replace(b"(3,)", b"(999999999999,)").rstrip(b" ")
    bad.append(header + b" " * (end - len(header)) + small[end:])
    bad.append(small[:8] + (60000).to_bytes(2, "little") + small[10:])  # the header runs past the data
    bad.append(small[:6] + b"\x09\x00" + small[8:])  # an unknown version
    bad.append(b"\x93NUMPY\x02\x00" + (20000).to_bytes(4, "little") + b" " * 20000)  # a header too long
    bad.append(small[:12])  # the preamble cut short
    for data in bad:
        with pytest.raises(codec.BadResult):
            codec.load_npy(data)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64"]),
    st.lists(st.integers(0, 4), max_size=4),
)
def test_npy_bytes_are_what_numpy_save_writes_and_read_back_unchanged(dtype, shape):
    """The codec writes each dtype and shape's preamble once and reads each once (numpy parses
    headers with ast.literal_eval): the bytes and values stay numpy's own."""
    import io

    import numpy as np

    arr = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    assert codec.npy_bytes(arr) == buf.getvalue()
    back = codec.load_npy(codec.npy_bytes(arr))
    assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr)
    assert back.flags.writeable and back.flags.c_contiguous


def test_a_calls_encoding_is_made_once_and_is_each_calls_own():
    first = Call((torch.arange(6.0).reshape(2, 3), (1, None)), {"dim": -1, "mask": torch.tensor([True, False])})
    second = Call((torch.ones(2, 3), (1, None)), {"dim": -1, "mask": torch.tensor([True, False])})
    h1, b1 = codec.encode_call(0, "f", first)
    h2, b2 = codec.encode_call(7, "g", first)  # the same call again: the cached encoding, new id and name
    assert (h2["id"], h2["fn"]) == (7, "g") and h2["args"] is h1["args"] and b2 == b1
    fresh: list[bytes] = []
    assert h1["args"] == [codec.encode_arg(a, fresh) for a in first.args] and b1[: len(fresh)] == fresh
    h3, b3 = codec.encode_call(1, "f", second)  # another call with equal shapes: its own bytes
    assert b3[0] != b1[0] and b3[1:] == b1[1:] and h3["kwargs"] == h1["kwargs"]


def test_the_allowlist_never_exposes_the_course_source():
    package = str(ROOT / "course_lib")
    spec = isolation.allowlist([sys.prefix + "/lib"])
    ro = [item[2] for item in spec if item[0] == "ro"]
    hidden = [item[1] for item in spec if item[0] == "tmpfs"]
    for path in ro:
        assert not isolation.under(package, path) or package in hidden
        assert not isolation.under(str(ROOT), path) or (str(ROOT) == path and package in hidden)
    assert sys.prefix + "/lib" in hidden and sys.prefix in ro


def test_the_worker_is_a_standalone_package():
    """It runs where course_lib is not readable: standard library, numpy, torch, matplotlib and
    its own modules only (relative imports); the protocol, which the grader imports too, and
    the package's __init__ only the standard library."""
    import ast

    files = sorted(isolation.WORKER.glob("*.py"))
    assert {f.name for f in files} >= {"__init__.py", "__main__.py", "protocol.py", "jail.py", "student.py"}
    for f in files:
        tree = ast.parse(f.read_text())
        modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        modules |= {
            (n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
        }
        allowed = (
            set()
            if f.name in ("protocol.py", "__init__.py", "syscalls.py", "jail.py")
            else {"numpy", "torch", "matplotlib"}
        )
        assert modules - set(sys.stdlib_module_names) <= allowed, f.name


PLANT = """
import ctypes, os, errno
SECRET = 'canary-' + %r
kept = [SECRET * 50, SECRET.encode() * 50]
written = 0
for folder in ('.', os.environ.get('HOME', '.'), '/dev/shm', '/tmp', '/sandbox/tmp'):
    try:
        with open(os.path.join(folder, 'canary.txt'), 'w') as f:
            f.write(SECRET)
        written += 1
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(248 if os.uname().machine == 'x86_64' else 217, b'user', SECRET.encode(), b'x', 1, -3)  # add_key
key_errno = ctypes.get_errno()

def planted():
    return (written, int(key), int(key_errno))
"""

SCAN = """
import ctypes, os, re, torch
MINE = 'mine-' + '%s'
found, own, regions = set(), 0, 0
for line in open('/proc/self/maps'):
    parts = line.split()
    start, end = (int(x, 16) for x in parts[0].split('-'))
    path = parts[5] if len(parts) > 5 else ''
    if 'r' not in parts[1] or (path and path not in ('[heap]', '[stack]') and not path.startswith('[anon')):
        continue  # anonymous memory only: where another job's cells, strings and arrays would be
    regions += 1
    step = 1 << 24
    for lo in range(start, end, step):
        chunk = ctypes.string_at(lo, min(step + 64, end - lo))
        found.update(m.group(1) for m in re.finditer(rb'canary-([0-9a-f]{32})', chunk))
        own += chunk.count(('mine-' + '%s').encode())
keys = open('/proc/keys').read() if os.path.exists('/proc/keys') else ''
files = 0
for folder in ('.', os.environ.get('HOME', '.'), '/dev/shm', '/tmp', '/sandbox/tmp'):
    try:
        files += sum('canary' in name for name in os.listdir(folder))
    except OSError:
        pass

def scanned():
    blob = b''.join(sorted(found)) or b'-'
    return (torch.tensor(list(blob), dtype=torch.uint8), own, regions, int('canary' in keys), files)
"""


def test_ctypes_and_object_walks_are_refused_and_held_for_review(runner):
    # the audit hook, armed before the first student line: raw memory, foreign calls and walks
    # to every object are refused, and the grader holds the notebook for review, naming them
    for line in ("import ctypes\nctypes.string_at(id(1), 8)", "import gc\ngc.get_objects()"):
        res = run(runner, [line, "def f():\n    return 1"], {"f": [Call()]})
        assert res.status == "review" and len(res.violations) == 1, res
        assert "refused" in res.violations[0] and ("ctypes" in line) == ("ctypes" in res.violations[0])
    check_honest(runner.run(honest_job()[0]))


def test_nothing_of_one_submission_reaches_the_next_in_memory_keyrings_or_files(runner):
    """A canary planted by one job is looked for in the next job's own memory (every anonymous
    region: where the warm worker's copy of a previous job would be), its keyrings and its files.
    A marker of the scanning job itself is found (so the scan works); the canary never is.
    The audit hook, which refuses ctypes, is off here: this is a test of the walls beneath it."""
    runner.audit_hook = False
    try:
        _nothing_of_one_submission_reaches_the_next(runner)
    finally:
        runner.audit_hook = True


def _nothing_of_one_submission_reaches_the_next(runner):
    secret, mine = uuid.uuid4().hex, uuid.uuid4().hex
    # the canary also sits in many small cells, as a student's solution lines would
    cells = [PLANT % secret] + [f"# solution line {i}: canary-{secret}\nx{i} = {i}" for i in range(200)]
    res = run(runner, cells, {"planted": [Call()]})
    written, key, key_errno = res.outcomes["planted"][0].value
    assert written >= 1  # the job could write its scratch folder
    assert key == -1 and key_errno == 1  # add_key: EPERM from the seccomp filter; no key can outlive the job
    limits = runner.limits
    runner.limits = dataclasses.replace(LIMITS, cell_seconds=60.0, submission_seconds=90.0, memory_mb=512)
    try:
        res = run(runner, [SCAN % (mine, mine)], {"scanned": [Call()]})
    finally:
        runner.limits = limits
    assert res.status == "ok" and res.cell_errors == [], res
    blob, own, regions, key_seen, files = res.outcomes["scanned"][0].value
    assert regions > 0 and own >= 1  # the scan reads memory and finds what is there
    found = bytes(blob.tolist()).decode()
    assert secret not in found and key_seen == 0 and files == 0


def test_figures_are_built_but_never_laid_out_drawn_or_saved_and_definitions_in_plotting_cells_count(runner):
    cell = (
        "import os\n"
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots()\n"
        "ax.plot([0, 1], [1, 0])\n"
        "ax.set_title('$x^2$')\n"
        "fig.tight_layout()\n"
        "fig.canvas.draw()\n"
        f"path = os.path.join({SCRATCH!r}, 'figure.png')\n"
        "fig.savefig(path)\n"
        "plt.show()\n"
        "def what_happened():\n"
        "    return (len(ax.lines), os.path.exists(path))\n"
    )
    res = run(runner, [cell], {"what_happened": [Call()]})
    assert res.cell_errors == [] and res.status == "ok", (res.cell_errors, res.message)
    (out,) = res.outcomes["what_happened"]
    assert out.status == "ok" and out.value == (1, False)  # the line was drawn on the axes; no file was written
