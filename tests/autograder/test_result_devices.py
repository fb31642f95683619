"""A result made on another device crosses the sandbox with its device (issue 29, item 3).

The student's side sends each result tensor's device type beside its values; a tensor on the
``meta`` device (a shape and a dtype, no values) travels as its ``.npy`` preamble alone and comes
back on ``meta``, so the judges see what ``check`` sees in the notebook. Nothing else about a
reply is trusted: a meta tensor that carries data, or a device that is not a name, is refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_lib.autograder.sandbox import codec
from course_lib.autograder.sandbox.worker.protocol import tensor_node


def _preamble(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` preamble of an array of this dtype and shape, without its data."""
    zeros = np.zeros(shape, dtype=dtype)
    full = codec.npy_bytes(zeros)
    return full[: len(full) - zeros.nbytes]


def test_a_meta_result_comes_back_on_meta_with_its_shape_and_dtype():
    blobs = [_preamble("|b1", (3, 3)), _preamble("<f4", (2, 5))]
    tree = {"t": "tuple", "items": [tensor_node(0, "torch.bool", "meta"), tensor_node(1, "torch.bfloat16", "meta")]}
    mask, values = codec.decode_value(tree, blobs)
    assert (mask.device.type, mask.shape, mask.dtype) == ("meta", (3, 3), torch.bool)
    assert (values.device.type, values.shape, values.dtype) == ("meta", (2, 5), torch.bfloat16)


def test_a_cpu_result_has_no_device_field_and_comes_back_with_its_values():
    assert "device" not in tensor_node(0, "torch.float32")
    out = codec.decode_value(tensor_node(0, "torch.float32", "cuda"), [codec.npy_bytes(np.arange(3, dtype="<f4"))])
    assert out.device.type == "cpu" and out.tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(
    "node, blob",
    [
        (tensor_node(0, "torch.float32", "meta"), codec.npy_bytes(np.zeros(3, dtype="<f4"))),  # data on meta
        (dict(tensor_node(0, "torch.float32"), device=["meta"]), codec.npy_bytes(np.zeros(3, dtype="<f4"))),
        (tensor_node(0, "torch.float32", "meta"), b"not an array"),
    ],
)
def test_a_meta_result_that_lies_is_a_bad_result(node, blob):
    with pytest.raises(codec.BadResult):
        codec.decode_value(node, [blob])
