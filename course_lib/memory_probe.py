"""Peak memory of attention: the naive (L, S) weights vs :func:`course_lib.tiled_attention`.

Run with ``python -m course_lib.memory_probe [--size L]``. Each variant runs in a fresh
process (one CPU thread, ``torch.no_grad()``), which reports its peak resident set size
(``VmHWM``) and the wall time of the attention call. Every process first runs each
variant once at L = S = 16, so that loading the math libraries' code (about 40 MiB) is
paid before the measurement; the ``baseline`` process does only that and allocates q, k
and v. Subtracting its peak gives each variant's extra memory. The target is tiled peak
memory <= 1/8 of naive; the ratio is printed both on total peak RSS and on extra memory
over the baseline.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from .attention import scaled_dot_product_attention
from .efficient import tiled_attention

D = 64
TARGET = 1 / 8

VARIANTS = {
    "baseline": None,
    "naive": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],
    "tiled-128": lambda q, k, v: tiled_attention(q, k, v, block_size=128),
    "tiled-512": lambda q, k, v: tiled_attention(q, k, v, block_size=512),
}


def _peak_rss_mib() -> float:
    """This process's peak resident set size in MiB.

    On Linux this is ``VmHWM`` from ``/proc/self/status``: ``ru_maxrss`` would be wrong
    here, because a process started by fork + exec inherits its parent's peak (a large
    parent, such as a Jupyter kernel, would set every variant's number). Elsewhere it
    falls back to ``ru_maxrss`` (bytes on macOS).
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**10  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def run_variant(name: str, size: int) -> dict:
    """Run one variant in this process and return its peak RSS (MiB) and time (s)."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    with torch.no_grad():
        for warm_up in filter(None, VARIANTS.values()):
            warm_up(*(torch.randn(1, 1, 16, D) for _ in range(3)))
    q, k, v = (torch.randn(1, 1, size, D) for _ in range(3))  # (N, H, L, D), L = S = size
    seconds = 0.0
    variant = VARIANTS[name]
    if variant is not None:
        with torch.no_grad():
            t0 = time.perf_counter()
            out = variant(q, k, v)  # (N, H, L, D)
            seconds = time.perf_counter() - t0
        assert torch.isfinite(out).all()
    return {"variant": name, "peak_mib": _peak_rss_mib(), "seconds": seconds}


def _in_subprocess(name: str, size: int) -> dict:
    """Run one variant in a fresh Python process and return what it reports."""
    command = [sys.executable, "-m", "course_lib.memory_probe", "--variant", name, "--size", str(size)]
    result = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).parents[1])
    if result.returncode != 0:
        raise RuntimeError(f"variant {name} failed:\n{result.stderr}")
    return json.loads(result.stdout.splitlines()[-1])


def _verdict(part: float, whole: float) -> str:
    if whole <= 0:  # tiny sizes: naive used no memory over the baseline
        return "n/a"
    return f"{part / whole:.3f} ({'meets' if part / whole <= TARGET else 'misses'} 1/8)"


def main(argv: list[str] | None = None) -> int:
    summary = __doc__.splitlines()[0]
    parser = argparse.ArgumentParser(prog="python -m course_lib.memory_probe", description=summary)
    parser.add_argument("--size", type=int, default=8192, help="L = S (default 8192)")
    parser.add_argument("--variant", choices=VARIANTS, help="run one variant in this process, print JSON")
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.size)))
        return 0

    L = args.size
    print(
        f"attention forward, N=1, H=1, L=S={L}, D={D}, float32, CPU, 1 thread, torch.no_grad(), one process per variant"
    )
    print(f"naive materialises the (L, S) scores and weights, {L * L * 4 / 2**20:.0f} MiB each")
    rows = {name: _in_subprocess(name, L) for name in VARIANTS}
    base, naive = rows["baseline"]["peak_mib"], rows["naive"]["peak_mib"]
    print(f"{'variant':<12}{'peak RSS':>14}{'extra over baseline':>22}{'time':>12}")
    for name, row in rows.items():
        time_ms = "-" if name == "baseline" else f"{row['seconds'] * 1e3:.0f} ms"
        print(f"{name:<12}{row['peak_mib']:>10.1f} MiB{row['peak_mib'] - base:>18.1f} MiB{time_ms:>12}")
    print(f"ratio tiled / naive, target <= 1/8 = {TARGET:.3f}:")
    for name in [n for n in rows if n.startswith("tiled")]:
        peak = rows[name]["peak_mib"]
        print(
            f"  {name:<10} on total peak RSS {_verdict(peak, naive)}, "
            f"on extra over baseline {_verdict(peak - base, naive - base)}"
        )
    if base > TARGET * naive:
        print(
            f"the baseline alone ({base:.0f} MiB: Python, torch, q, k, v) exceeds 1/8 of naive's peak "
            f"({naive:.0f} MiB): no variant can meet 1/8 on total peak RSS at this size"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
