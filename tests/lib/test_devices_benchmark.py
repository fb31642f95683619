"""benchmarks/devices.py: the comparison of the graded references on two devices.

Only the CPU is available in the tests, so a device that computes differently is simulated by
perturbing the inputs on their way to "the device".
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "devices.py"


@pytest.fixture(scope="module")
def devices():
    spec = importlib.util.spec_from_file_location("devices_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_equal_values_and_equal_nans_and_infinities_differ_by_zero(devices):
    x = torch.tensor([1.0, float("nan"), float("inf"), -float("inf")])
    assert devices._difference(x, x.clone()).max().item() == 0.0


def test_a_nan_on_one_side_only_is_an_infinite_difference(devices):
    d = devices._difference(torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 2.0]))
    assert d.tolist() == [0.0, float("inf")]


def test_the_cpu_against_itself_passes_every_case(devices, capsys):
    assert devices.main(["--device", "cpu"]) == 0
    assert "0 call(s) beyond" in capsys.readouterr().out


def test_a_device_that_computes_differently_is_reported(devices, capsys, monkeypatch):
    moved = devices._to

    def off_by_a_little(value, device, dtype=None):
        out = moved(value, device, dtype)
        if dtype is None and isinstance(out, tuple):  # the call's arguments on "the device"
            return tuple(t + 1e-2 if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in out)
        return out

    monkeypatch.setattr(devices, "_to", off_by_a_little)
    assert devices.main(["--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "beyond tolerance (CPU is" in out and "from float64" in out
