"""The sandbox worker: runs untrusted notebook code for the autograder.

A package of the standard library only (numpy, torch and matplotlib only where the jailed
student side needs them), started as its own Python process (:mod:`.__main__`), usually
inside bubblewrap, with this folder bound read-only into the jail; it must never import
``course_lib`` (it runs where the course's source is not readable). The grader imports only
:mod:`.protocol` from it. This file imports nothing.

* :mod:`.protocol`: the wire protocol used by both sides (framing, signed frames, control
  packets, size limits, value trees).
* :mod:`.syscalls`: C library wrappers and the seccomp filters.
* :mod:`.jail`: the per-job jail (used by every job and by the probe).
* :mod:`.zygote`: the warm zygote, which forks each job's student process, and
  :mod:`.supervisor`, its watch over that process (limits, ``abort``) and the end packet.
* :mod:`.student`: the jailed student process (cells, then calls), with :mod:`.phases` (the
  keeper and one process per group of functions), :mod:`.audit` (the audit hook),
  :mod:`.values` (arguments and results), :mod:`.channels` (output and signed frames),
  :mod:`.stubs` (the fake ``course_lib``) and :mod:`.timers` (time limits).
* :mod:`.shell`: the `get_ipython()` that cells transformed by IPython call (it does nothing).
* :mod:`.rootfs`: namespaces mode's root file system.

Modes (``--isolation``): ``bubblewrap`` (already inside bwrap; per-job namespaces),
``namespaces`` (the zygote first builds its own allowlisted root with ``pivot_root`` and a
new network namespace, then the same per-job namespaces), ``none`` (a forked process per
job with rlimits and seccomp only).
"""
