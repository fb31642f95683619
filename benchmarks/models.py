"""Benchmarks of the models: training to accuracy targets, reproducibility, KV-cache decoding.

Run with ``make bench`` (all benchmarks) or ``python benchmarks/models.py``. Prints
numbers; asserts nothing. Targets (on the 2-core CPU machine, every thread, nothing else
running):

- transformer on ``reverse`` (lengths 1-16, 10 tokens) and Bahdanau seq2seq on ``dates``:
  >= 99.5% exact on 1,000 fresh test sequences on every seed, with a median of <= 10 s of
  training (20 seeds by default, from 3000: the recipes were tuned on seeds 0-19, and seeds
  1000-1019 and 2000-2019 showed where earlier recipes failed);
- Luong seq2seq on ``dates``: >= 99.5% exact on every seed (its time is printed);
- the same seed gives the same final metrics;
- KV-cache decoding of 256 tokens >= 3x faster than recomputing the prefix.

Each training row is :func:`course_lib.training.benchmark`, which a student can call in a
notebook to get the same numbers. Wall-clock times depend on the machine's load: the
process time (summed over threads) and the 1-minute load average are printed beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from course_lib.decoding import greedy_decode
from course_lib.models import TransformerSeq2Seq
from course_lib.training import benchmark, default_config, train

RUNS = (("reverse", "transformer"), ("dates", "bahdanau"), ("dates", "luong"))
TARGET = 0.995
# The recipes were tuned on seeds 0-19, and seeds 1000-1019 and 2000-2019 showed where earlier
# recipes failed; the benchmark reports seeds from 3000 on, which no run had looked at when the
# recipes were fixed. Fresh test sequences are drawn with seed FRESH + the training seed.
REPORT_SEEDS = 3000
FRESH = 10_000


def bench_training(
    seeds: int = 20,
    first_seed: int = REPORT_SEEDS,
    repro: bool = True,
    threads: int | None = None,
    runs=RUNS,
    device: str = "cpu",
) -> list[dict]:
    """Train each default recipe from scratch on ``seeds`` seeds, one row per run, then the
    spread: the minimum, median and maximum of the fresh accuracy and of the training time."""
    print(f"Training the default recipes from scratch on seeds {first_seed}..{first_seed + seeds - 1}")
    print("(accuracy = exact-sequence match, greedy decoding, 1,000 test-split sequences drawn with a seed")
    print(f"other than the training seed; target >= {TARGET:.1%} on every seed, median training time <= 10 s)")
    print(f"{'run':<24}{'seed':>6}{'steps':>6}{'threads':>8}{'train s':>9}{'cpu s':>8}{'fresh exact':>13}{'load':>12}")
    results = []
    for task, model in runs:
        rows = []
        for seed in range(first_seed, first_seed + seeds):
            r = benchmark(task, model, seed=seed, fresh_seed=FRESH + seed, threads=threads, device=device)
            rows.append(r)
            load = "{:.1f}->{:.1f}".format(*r["load_average"])
            print(
                f"{model + ' on ' + task:<24}{seed:>6}{r['steps']:>6}{r['threads']:>8}{r['train_seconds']:>9.1f}"
                f"{r['train_cpu_seconds']:>8.1f}{r['fresh_exact_accuracy']:>13.1%}{load:>12}",
                flush=True,
            )
        print(spread(f"{model} on {task}", rows), flush=True)
        results += rows
    if repro:
        config = default_config("reverse", "transformer", seed=first_seed)
        first = next(r for r in results if r["model"] == "transformer")
        _, _, again = train(config, progress=False, threads=threads, device=device)
        same = (
            again["test_exact_accuracy"] == first["test_exact_accuracy"] and again["final_loss"] == first["final_loss"]
        )
        print(
            f"same seed ({first_seed}) again: final loss {again['final_loss']:.6f} vs {first['final_loss']:.6f}, "
            f"{'identical' if same else 'DIFFERENT'}",
            flush=True,
        )
    return results


def spread(name: str, rows: list[dict]) -> str:
    """One line: the minimum, median and maximum fresh accuracy and training time over seeds."""
    acc = [r["fresh_exact_accuracy"] for r in rows]
    secs = [r["train_seconds"] for r in rows]
    steps = [r["steps"] for r in rows]
    below = sum(a < TARGET for a in acc)
    return (
        f"  {name}, {len(rows)} seeds: fresh exact min {min(acc):.1%}, median {statistics.median(acc):.1%}, "
        f"max {max(acc):.1%} ({below} below {TARGET:.1%}); training s min {min(secs):.1f}, "
        f"median {statistics.median(secs):.1f}, max {max(secs):.1f}; steps min {min(steps)}, "
        f"median {statistics.median(steps):g}, max {max(steps)}"
    )


def bench_kv_cache(steps: int = 256, batch: int = 8, repeats: int = 3) -> None:
    torch.manual_seed(0)
    model = TransformerSeq2Seq(
        13,
        13,
        d_model=256,
        nhead=8,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dim_feedforward=1024,
        dropout=0.0,
        max_len=steps + 1,
    ).eval()
    src = torch.randint(3, 13, (batch, 16))
    cached = greedy_decode(model, src, steps, use_cache=True, stop_at_eos=False)  # exactly `steps` tokens
    full = greedy_decode(model, src, steps, use_cache=False, stop_at_eos=False)
    times = {}
    for use_cache in (True, False):
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            greedy_decode(model, src, steps, use_cache=use_cache, stop_at_eos=False)
            runs.append(time.perf_counter() - t0)
        times[use_cache] = statistics.median(runs)
    print(
        f"KV cache: greedy decoding of {steps} tokens, d_model=256, 8 heads, 2+2 layers, batch {batch}, "
        f"median of {repeats}"
    )
    print(
        f"  recompute the prefix: {times[False]:.2f} s   KV cache: {times[True]:.2f} s   "
        f"speed-up {times[False] / times[True]:.1f}x   same tokens: {torch.equal(cached, full)}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/models.py", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["training", "kv-cache"], default=None)
    parser.add_argument("--no-repro", action="store_true", help="skip the second training run")
    parser.add_argument("--seeds", type=int, default=20, help="training seeds per recipe (default 20)")
    parser.add_argument(
        "--first-seed", type=int, default=REPORT_SEEDS, help=f"the first of them (default {REPORT_SEEDS}: untuned)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: every core)")
    parser.add_argument(
        "--models", nargs="+", choices=[m for _, m in RUNS], default=None, help="recipes to train (default: all)"
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda, mps or auto for the training runs (default: cpu)")
    args = parser.parse_args(argv)
    print(
        f"{os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads by default, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    if args.only in (None, "training"):
        runs = [r for r in RUNS if args.models is None or r[1] in args.models]
        bench_training(args.seeds, args.first_seed, not args.no_repro, args.threads, runs, args.device)
    if args.only in (None, "kv-cache"):
        for batch in (1, 8):
            bench_kv_cache(batch=batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
