"""The layer normalisation chapter's batch-norm bookkeeping (book/ch05_batchnorm.py)."""

from __future__ import annotations

import ch05_batchnorm
import pytest
import torch
import torch.nn as nn

from course_lib import LayerNorm


def _batches(E=4):
    torch.manual_seed(0)
    x = 2 * torch.randn(3, 5, E) + 1
    x_other = x.clone()
    x_other[1:] = 2 * torch.randn(2, 5, E) + 1
    x_pad = torch.cat([x, torch.zeros(3, 2, E)], 1)
    return x, x_other, x_pad


def test_layer_norm_is_unmoved_and_batch_norm_moves():
    x, x_other, x_pad = _batches()
    ln = LayerNorm(4)
    bn = nn.BatchNorm1d(4)
    flat = lambda z: bn(z.reshape(-1, 4)).reshape(z.shape)  # noqa: E731
    with torch.no_grad():
        assert ch05_batchnorm.sensitivity(ln, ln, x, x_other, x_pad) == [0.0, 0.0, 0.0]
        moved = ch05_batchnorm.sensitivity(bn, flat, x, x_other, x_pad)
    assert len(moved) == 3 and all(v > 1e-3 for v in moved)
    assert bn.training  # left in training mode


def test_mean_deviation_draws_companions_and_averages():
    torch.manual_seed(1)
    x0 = torch.randn(1, 5, 4)
    sizes = []

    def companions(B):
        sizes.append(B)
        return torch.randn(B - 1, 5, 4)

    ln = LayerNorm(4)
    with torch.no_grad():
        out = ch05_batchnorm.mean_deviation(ln, x0, ln(x0)[0], [1, 3], companions, draws=2)
    assert out == [0.0, 0.0]
    assert sizes == [1, 1, 3, 3]
    shifted = ch05_batchnorm.mean_deviation(lambda z: z + 1.0, x0, x0[0], [2], companions, draws=3)
    assert shifted == [pytest.approx(1.0)]


def test_markdown_table_rows_and_refusal():
    table = ch05_batchnorm.markdown_table(["", "a", "b"], [("one", [0.5, 1.0]), ("two", [0.0, 0.0])])
    assert table.splitlines() == [
        "|  | a | b |",
        "| --- | --- | --- |",
        "| one | 0.500 | 1.000 |",
        "| two | 0.000 | 0.000 |",
    ]
    with pytest.raises(ValueError, match="columns"):
        ch05_batchnorm.markdown_table(["", "a"], [("one", [1.0, 2.0])])
