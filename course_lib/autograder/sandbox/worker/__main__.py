"""The worker's entry point: ``python -S -s -B -P -c BOOTSTRAP <folder holding worker/> ARGS``.

:data:`.protocol.BOOTSTRAP` puts the folder on ``sys.path`` only long enough to import this package;
:func:`main` takes it off again (and the package's modules out of ``sys.modules``) before
any student code can run, so no notebook can ``import`` the worker's modules. Every module of
the package is imported here, up front: in namespaces mode the worker's own folder is gone
once the root file system is built.

Arguments: ``--isolation bubblewrap|namespaces|none``, ``--opwatch PATH`` and ``--operands PATH``
(the sources of the grader's modules the worker runs, :class:`.stubs.GraderModules`, read at
once; not given to a probe), ``--watch-functions A,B`` and ``--watch-ops A,B`` (the torch
functions it resolves and the aten operators whose kernels it wraps once, warm), ``--site DIR`` (repeatable: where numpy and torch live),
``--root JSON`` (namespaces mode: the allowlist to build the root from), ``--probe`` (run the
jail recipe and print ``probe-ok``, without torch).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from . import (  # noqa: F401 - all imported before the root is built
    audit,
    channels,
    jail,
    phases,
    protocol,
    rootfs,
    stubs,
    student,
    supervisor,
    syscalls,
    timers,
    values,
    zygote,
)


def main(argv: list[str], home: str | None = None) -> int:
    """Parse the arguments, build the root (namespaces mode), then probe, or warm up and serve
    as the zygote until the grader says ``exit`` or goes away. ``home`` is the folder that was
    put on ``sys.path`` to import this package."""
    args: dict = {
        "--isolation": "none",
        "--site": [],
        "--root": None,
        "--probe": False,
        "--opwatch": None,
        "--operands": None,
        "--watch-functions": "",
        "--watch-ops": "",
    }
    it = iter(argv)
    for a in it:
        if a == "--site":
            args["--site"].append(next(it))
        elif a in ("--isolation", "--root", "--opwatch", "--operands", "--watch-functions", "--watch-ops"):
            args[a] = next(it)
        elif a == "--probe":
            args["--probe"] = True
    isolation = args["--isolation"]
    sources = {"--opwatch": "", "--operands": ""}  # a probe needs none
    for a in sources:
        if args[a] is not None:
            with open(args[a]) as f:  # read now: in namespaces mode the folder is hidden next
                sources[a] = f.read()
    hide = {os.path.abspath(home or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    hide.add(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) not in hide]
    for name in [n for n in sys.modules if n == __package__ or n.startswith(f"{__package__}.")]:
        del sys.modules[name]  # the functions keep their modules' globals; no import finds them again
    for p in args["--site"]:
        if p not in sys.path:
            sys.path.append(p)
    parent = os.getppid()
    syscalls.prctl(syscalls.PR_SET_PDEATHSIG, signal.SIGKILL)  # the zygote never outlives the grader
    if os.getppid() != parent:
        return 1
    if isolation == "namespaces":
        rootfs.build_root(json.loads(args["--root"]))
    if args["--probe"]:
        return jail.probe(isolation)
    ctrl = socket.socket(fileno=os.dup(0))  # the control socket: stdin and stdout (see .zygote)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    modules = zygote.warm_up(
        sources["--opwatch"],
        sources["--operands"],
        [f for f in args["--watch-functions"].split(",") if f],
        [op for op in args["--watch-ops"].split(",") if op],
    )
    z = zygote.Zygote(isolation, ctrl, modules)
    z.send(zygote.ready_frame())
    z.serve()
    return 0
