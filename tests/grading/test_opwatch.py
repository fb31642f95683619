"""The runtime layer's operator watch: wrapped kernels see an operator however it is reached."""

from __future__ import annotations

import threading
import warnings

import torch
import torch.nn.functional as F

from course_lib.grading.opwatch import OpWatch, wrap_operators

SOFTMAX_OPS = ["aten::_softmax", "aten::_log_softmax"]


def test_an_operator_inside_another_operator_is_seen():
    watch = OpWatch(ops=SOFTMAX_OPS)
    with watch:
        F.cross_entropy(torch.randn(4, 5), torch.tensor([0, 1, 2, 3]))  # log_softmax runs inside
    assert watch.seen == ["the operator aten::_log_softmax"]


def test_an_operator_is_seen_under_inference_mode_and_no_grad():
    for guard in (torch.inference_mode, torch.no_grad):
        watch = OpWatch(ops=SOFTMAX_OPS)
        with watch, guard():
            torch.softmax(torch.randn(3, 4), -1)
        assert watch.seen == ["the operator aten::_softmax"], guard


def test_an_out_overload_is_seen_too():
    watch = OpWatch(ops=SOFTMAX_OPS)
    x, out = torch.randn(3, 4), torch.empty(3, 4)
    with watch:
        torch.log_softmax(x, -1, out=out)
    assert watch.seen == ["the operator aten::_log_softmax"]
    torch.testing.assert_close(out, torch.log_softmax(x, -1), rtol=0, atol=0)


def test_nothing_is_seen_outside_the_block_or_for_operators_not_watched():
    watch = OpWatch(ops=["aten::_log_softmax"])
    torch.log_softmax(torch.randn(3), 0)  # before
    with watch:
        torch.softmax(torch.randn(3), 0)  # not watched by this one
    torch.log_softmax(torch.randn(3), 0)  # after
    assert watch.seen == []


def test_another_threads_operators_are_not_the_watched_codes():
    watch = OpWatch(ops=SOFTMAX_OPS)
    with watch:
        t = threading.Thread(target=lambda: torch.softmax(torch.randn(3), 0))
        t.start()
        t.join()
    assert watch.seen == []


def test_wrapped_kernels_compute_exactly_what_the_originals_did():
    torch.manual_seed(0)
    x, q = torch.randn(2, 5, 7), torch.randn(1, 2, 4, 8)
    mask = torch.rand(4, 4) > 0.3
    before = (torch.softmax(x, -1), torch.log_softmax(x, 1), F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    sdpa = ["aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"]
    wrap_operators([*SOFTMAX_OPS, *sdpa, "aten::no_such_operator", "not an operator"])  # unknown names: ignored
    watch = OpWatch(ops=[*SOFTMAX_OPS, *sdpa])
    with watch:
        after = (torch.softmax(x, -1), torch.log_softmax(x, 1), F.scaled_dot_product_attention(q, q, q, attn_mask=mask))
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert "the operator aten::_softmax" in watch.seen and "the operator aten::_log_softmax" in watch.seen
    assert any("scaled_dot_product" in s for s in watch.seen)


def test_nested_watches_each_see_their_own_operators():
    outer, inner = OpWatch(ops=["aten::_softmax"]), OpWatch(ops=["aten::_log_softmax"])
    with outer:
        torch.log_softmax(torch.randn(3), 0)
        with inner:
            torch.softmax(torch.randn(3), 0)
            torch.log_softmax(torch.randn(3), 0)
    assert outer.seen == ["the operator aten::_softmax"]
    assert inner.seen == ["the operator aten::_log_softmax"]


def test_largest_still_measures_every_new_temporary():
    watch = OpWatch(ops=SOFTMAX_OPS, largest=True)
    q = torch.randn(8, 4)
    with watch:
        scores = q @ q.T  # 8 x 8: the largest new floating-point storage
        torch.softmax(scores, -1)
    assert watch.largest == 64
    assert watch.seen == ["the operator aten::_softmax"]


def test_gradients_through_every_watched_operator_are_unchanged():
    from course_lib.autograder.sandbox_adapter import watch_lists

    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 6), torch.randn(6)
    target = torch.tensor([0, 2, 1])
    a, b, weight = torch.randn(3, 5), torch.randn(3, 2), torch.randn(4, 5, 2)
    losses = {
        "softmax": lambda x: (torch.softmax(x, -1) * w).sum(),
        "log_softmax": lambda x: (F.log_softmax(x, 1) * w).sum(),
        "layer_norm": lambda x: (F.layer_norm(x, (6,)) * w).sum(),
        "group_norm": lambda x: (F.group_norm(x, 2) * w).sum(),
        "cross_entropy": lambda x: F.cross_entropy(x[:, 0, :], target),
        "bilinear": lambda x: F.bilinear(a * x.sum(), b, weight).sum(),
        "sdpa": lambda x: F.scaled_dot_product_attention(x, x, x).sum(),
    }

    def grads():
        out = {}
        for name, loss in losses.items():
            leaf = x.clone().requires_grad_(True)
            loss(leaf).backward()
            out[name] = leaf.grad
        return out

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "an autograd kernel was not registered" is a failure here
        before = grads()
        wrap_operators(watch_lists().ops)  # every operator a rule can forbid
        after = grads()
    for name in losses:
        torch.testing.assert_close(after[name], before[name], rtol=0, atol=0, msg=name)
