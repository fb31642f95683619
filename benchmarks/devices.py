"""Do the graded reference functions give the same values on another device as on the CPU?

Run with ``python benchmarks/devices.py --device cuda`` (or ``mps``). For every case of every
graded function, the reference runs on the case's CPU inputs and on the same inputs moved to
the device; the script prints the largest absolute difference per call and the case's
tolerance. Where the grader's own comparison (:func:`course_lib.grading.compare.compare`,
``atol + rtol * |expected|`` elementwise) says they differ, it prints how far each side is
from a float64 run on the CPU (which one is nearer the exact answer). Exit status 1 if any
call differs by more than its case's tolerance.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

import torch

from course_lib.assignments import TABLE
from course_lib.grading.compare import compare
from course_lib.training import resolve_device


def _to(value: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    """``value`` with every tensor in it moved to ``device`` (and floats cast to ``dtype``); a
    ``meta`` tensor (a case that asks for that device itself) stays where it is: it has no data."""
    if isinstance(value, torch.Tensor) and value.device.type == "meta":
        return value
    if isinstance(value, torch.Tensor):
        if dtype is not None and value.is_floating_point():
            return value.to(device, dtype)
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device, dtype) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors in ``value``, in order."""
    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().double()] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _difference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Elementwise |x - y|: 0 where both are equal or both NaN, inf where only one is NaN."""
    same = (x == y) | (x.isnan() & y.isnan())
    return torch.where(same, 0.0, (x - y).abs().nan_to_num(nan=float("inf")))


def _largest_difference(a: Any, b: Any) -> float:
    pairs = zip(_tensors(a), _tensors(b), strict=True)
    return max((_difference(x, y).max().item() for x, y in pairs if x.numel()), default=0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="cuda, mps, cpu or auto (default: auto)")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    cpu = torch.device("cpu")
    print(f"reference on {device} against the CPU, every case of every graded function")
    print(f"{'function':<32}{'case':<36}{'largest difference':>20}{'atol/rtol':>14}")
    failures = 0
    for assignment in TABLE:
        module = importlib.import_module(f"course_lib.grading.rubrics.{assignment.module}")
        for exercise in module.EXERCISES:
            for case in exercise.make_cases():
                for call in case.calls:
                    on_cpu = exercise.reference(*call.args, **call.kwargs)
                    there = exercise.reference(*_to(call.args, device), **_to(call.kwargs, device))
                    diff = _largest_difference(on_cpu, there)
                    # the grader's own test of an output against the reference (atol + rtol * |expected|)
                    differs = compare(_to(there, cpu), on_cpu, case.atol, case.rtol)
                    mark = ""
                    if differs:
                        failures += 1
                        exact = exercise.reference(
                            *_to(call.args, cpu, torch.float64), **_to(call.kwargs, cpu, torch.float64)
                        )
                        mark = (
                            f"  <-- beyond tolerance (CPU is {_largest_difference(on_cpu, exact):.2e} from float64,"
                            f" {device.type} {_largest_difference(there, exact):.2e}): {differs}"
                        )
                    tolerance = f"{case.atol:.0e}/{case.rtol:.0e}"
                    print(f"{exercise.name:<32}{case.name[:34]:<36}{diff:>20.2e}{tolerance:>14}{mark}", flush=True)
    print(f"{failures} call(s) beyond their case's tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
