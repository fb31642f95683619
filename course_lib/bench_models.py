"""Benchmarks of the models: training to accuracy targets, reproducibility, KV-cache decoding.

Run with ``make bench`` (all benchmarks) or ``python -m course_lib.bench_models``. Prints
numbers; asserts nothing. Targets (on the 2-core CPU machine):

- transformer on ``reverse`` (lengths 1-16, 10 tokens): >= 99.5% exact on 1,000 fresh
  test sequences after <= 60 s of training;
- Bahdanau seq2seq on ``dates``: >= 99% exact on 1,000 fresh dates after <= 120 s;
- the same seed gives the same final metrics;
- KV-cache decoding of 256 tokens >= 3x faster than recomputing the prefix.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from .models import TransformerSeq2Seq
from .tasks import BOS
from .training import default_config, evaluate, train


@torch.no_grad()
def _decode_steps(model, src, steps: int, use_cache: bool) -> torch.Tensor:
    """Greedy decoding of exactly ``steps`` tokens (no stopping at <eos>)."""
    state = model.start(src, use_cache=use_cache)
    y = torch.full((src.shape[0],), BOS, dtype=torch.long)
    out = []
    for _ in range(steps):
        log_probs, state, _ = model.next_log_probs(state, y)
        y = log_probs.argmax(-1)
        out.append(y)
    return torch.stack(out, 1)


def bench_training(repro: bool = True) -> None:
    print("Training (fixed number of steps; accuracy = exact-sequence match, greedy decoding)")
    print(f"{'run':<34}{'steps':>7}{'train s':>10}{'test exact':>12}{'fresh seed 1':>14}")
    for task, model in (("reverse", "transformer"), ("dates", "bahdanau")):
        config = default_config(task, model, seed=0)
        trained, task_obj, metrics = train(config, progress=False)
        fresh = evaluate(trained, task_obj, n=1000, seed=1)
        print(f"{model + ' on ' + task:<34}{config.steps:>7}{metrics['train_seconds']:>10.1f}"
              f"{metrics['test_exact_accuracy']:>12.1%}{fresh:>14.1%}", flush=True)
        if repro and task == "reverse":
            _, _, again = train(config, progress=False)
            same = again["test_exact_accuracy"] == metrics["test_exact_accuracy"] and \
                again["final_loss"] == metrics["final_loss"]
            print(f"{'  same seed again':<34}{config.steps:>7}{again['train_seconds']:>10.1f}"
                  f"{again['test_exact_accuracy']:>12.1%}   final loss {again['final_loss']:.6f} vs "
                  f"{metrics['final_loss']:.6f}: {'identical' if same else 'DIFFERENT'}", flush=True)


def bench_kv_cache(steps: int = 256, batch: int = 8, repeats: int = 3) -> None:
    torch.manual_seed(0)
    model = TransformerSeq2Seq(13, 13, d_model=256, nhead=8, num_encoder_layers=2, num_decoder_layers=2,
                               dim_feedforward=1024, dropout=0.0, max_len=steps + 1).eval()
    src = torch.randint(3, 13, (batch, 16))
    cached = _decode_steps(model, src, steps, use_cache=True)
    full = _decode_steps(model, src, steps, use_cache=False)
    times = {}
    for use_cache in (True, False):
        runs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _decode_steps(model, src, steps, use_cache)
            runs.append(time.perf_counter() - t0)
        times[use_cache] = statistics.median(runs)
    print(f"KV cache: greedy decoding of {steps} tokens, d_model=256, 8 heads, 2+2 layers, batch {batch}, "
          f"median of {repeats}")
    print(f"  recompute the prefix: {times[False]:.2f} s   KV cache: {times[True]:.2f} s   "
          f"speed-up {times[False] / times[True]:.1f}x   same tokens: {torch.equal(cached, full)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.bench_models", description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["training", "kv-cache"], default=None)
    parser.add_argument("--no-repro", action="store_true", help="skip the second training run")
    args = parser.parse_args(argv)
    if args.only in (None, "training"):
        bench_training(repro=not args.no_repro)
    if args.only in (None, "kv-cache"):
        for batch in (1, 8):
            bench_kv_cache(batch=batch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
