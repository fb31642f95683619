"""Benchmark: course_lib vs PyTorch, forward + backward, on the CPU or a GPU.

Run with ``make bench``, ``python benchmarks/attention_vs_torch.py [--device D] [--dtype T]
[--lengths L ...] [--repeats N] [--threads T]`` or ``course-lib bench`` (from a checkout).
Prints, for each case, the median wall time of one forward + backward pass, the ratio
course_lib / PyTorch, and on CUDA the peak memory of each side.

Targets (issue 27): on the CPU, ``MultiHeadAttention`` with ``need_weights=False`` (the
fused path) takes at most 1.0x the time of ``nn.MultiheadAttention``; on a GPU, at most 1.2x
its time and memory in bfloat16 at L = 2048 and L = 8192
(``--device cuda --dtype bfloat16 --lengths 2048 8192 --batch 1``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn as nn

from course_lib.multihead import MultiHeadAttention
from course_lib.training import resolve_device
from course_lib.transformer import EncoderLayer

E, H, FF = 256, 8, 1024


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_pair(step_a, step_b, repeats: int, device: torch.device) -> tuple[float, float]:
    """Median seconds of ``step_a()`` and ``step_b()``, run alternately so that drift in the
    machine's speed affects both alike; 3 warm-up runs each."""
    for _ in range(3):
        step_a()
        step_b()
    times_a: list[float] = []
    times_b: list[float] = []
    for _ in range(repeats):
        for step, times in ((step_a, times_a), (step_b, times_b)):
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            times.append(time.perf_counter() - t0)
    return statistics.median(times_a), statistics.median(times_b)


def _peak_bytes(step: Callable[[], None], device: torch.device) -> int | None:
    """The peak GPU memory one call of ``step`` allocates (None off CUDA)."""
    if device.type != "cuda":
        return None
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    step()
    _sync(device)
    return torch.cuda.max_memory_allocated(device) - base


def _fwd_bwd(module: nn.Module, call: Callable[[], torch.Tensor]) -> Callable[[], None]:
    def step() -> None:
        module.zero_grad(set_to_none=True)
        call().float().sum().backward()

    return step


def _rows(x: torch.Tensor, device: torch.device, dtype: torch.dtype) -> list[tuple]:
    """(name, our module, our call, their module, their call) for one input."""
    theirs = nn.MultiheadAttention(E, H, batch_first=True).to(device, dtype)
    ours = MultiHeadAttention.from_torch(theirs)
    torch_layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True).to(device, dtype)
    our_layer = EncoderLayer(E, H, FF, dropout=0.0).to(device, dtype).load_torch_(torch_layer)
    return [
        (
            "MHA, weights",
            ours,
            lambda: ours(x, x, x)[0],
            theirs,
            lambda: theirs(x, x, x, average_attn_weights=False)[0],
        ),
        (
            "MHA, need_weights=False",
            ours,
            lambda: ours(x, x, x, need_weights=False)[0],
            theirs,
            lambda: theirs(x, x, x, need_weights=False)[0],
        ),
        ("EncoderLayer (post-LN)", our_layer, lambda: our_layer(x), torch_layer, lambda: torch_layer(x)),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto (default: cpu)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128], help="sequence lengths L = S (default 128)")
    parser.add_argument("--batch", type=int, default=32, help="batch size N (default 32)")
    parser.add_argument("--repeats", type=int, default=20, help="timed iterations per case (default: 20)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args(argv)
    device, dtype = resolve_device(args.device), getattr(torch, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"forward + backward, N={args.batch}, E={E}, H={H}, {args.dtype}, {name}, median of {args.repeats}")
    print(f"{'case':<30}{'L':>6}{'course_lib':>12}{'PyTorch':>12}{'ratio':>8}{'memory (ours / theirs)':>26}")
    for length in args.lengths:
        torch.manual_seed(0)
        x = torch.randn(args.batch, length, E, device=device, dtype=dtype, requires_grad=True)
        for case, m_ours, f_ours, m_theirs, f_theirs in _rows(x, device, dtype):
            step_ours, step_theirs = _fwd_bwd(m_ours, f_ours), _fwd_bwd(m_theirs, f_theirs)
            t_ours, t_theirs = _time_pair(step_ours, step_theirs, args.repeats, device)
            mem_ours, mem_theirs = _peak_bytes(step_ours, device), _peak_bytes(step_theirs, device)
            memory = (
                ""
                if mem_ours is None or mem_theirs is None
                else f"{mem_ours / 2**20:.0f} / {mem_theirs / 2**20:.0f} MB"
            )
            print(
                f"{case:<30}{length:>6}{t_ours * 1e3:>10.1f}ms{t_theirs * 1e3:>10.1f}ms{t_ours / t_theirs:>7.2f}x"
                f"{memory:>26}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
