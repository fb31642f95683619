"""Benchmark: course_lib vs PyTorch, forward + backward, on the CPU.

Run with ``make bench``, ``python benchmarks/attention_vs_torch.py [--repeats N] [--threads T]``
or ``course-lib bench`` (from a checkout). Prints, for each case, the median
wall time of one forward + backward pass and the ratio course_lib / PyTorch.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn as nn

from course_lib.multihead import MultiHeadAttention
from course_lib.transformer import EncoderLayer

N, L, E, H, FF = 32, 128, 256, 8, 1024


def _time_pair(step_a, step_b, repeats: int) -> tuple[float, float]:
    """Median seconds of ``step_a()`` and ``step_b()``, run alternately so that drift in the
    machine's speed affects both alike; 3 warm-up runs each."""
    for _ in range(3):
        step_a()
        step_b()
    times_a, times_b = [], []
    for _ in range(repeats):
        for step, times in ((step_a, times_a), (step_b, times_b)):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    return statistics.median(times_a), statistics.median(times_b)


def _fwd_bwd(module, call):
    def step():
        module.zero_grad(set_to_none=True)
        call().sum().backward()

    return step


def main(repeats: int = 20, threads: int | None = None) -> int:
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.randn(N, L, E, requires_grad=True)
    print(
        f"forward + backward, N={N}, L=S={L}, E={E}, H={H}, float32, CPU, "
        f"{torch.get_num_threads()} threads, median of {repeats}"
    )
    print(f"{'case':<68}{'course_lib':>12}{'PyTorch':>12}{'ratio':>8}")

    theirs = nn.MultiheadAttention(E, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    rows = [
        (
            "MultiHeadAttention vs nn.MultiheadAttention (weights)",
            ours,
            lambda: ours(x, x, x)[0],
            theirs,
            lambda: theirs(x, x, x)[0],
        ),
        (
            "MultiHeadAttention vs nn.MultiheadAttention (need_weights=False)",
            ours,
            lambda: ours(x, x, x)[0],
            theirs,
            lambda: theirs(x, x, x, need_weights=False)[0],
        ),
    ]
    torch_layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True)
    our_layer = EncoderLayer(E, H, FF, dropout=0.0).load_torch_(torch_layer)
    rows.append(
        (
            "EncoderLayer vs nn.TransformerEncoderLayer (post-LN, FF=1024)",
            our_layer,
            lambda: our_layer(x),
            torch_layer,
            lambda: torch_layer(x),
        )
    )
    for name, m_ours, f_ours, m_theirs, f_theirs in rows:
        t_ours, t_theirs = _time_pair(_fwd_bwd(m_ours, f_ours), _fwd_bwd(m_theirs, f_theirs), repeats)
        print(f"{name:<68}{t_ours * 1e3:>10.1f}ms{t_theirs * 1e3:>10.1f}ms{t_ours / t_theirs:>7.2f}x")
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed iterations per case (default: 20)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    raise SystemExit(main(repeats=args.repeats, threads=args.threads))
