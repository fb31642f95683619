"""The operator lists are complete by construction.

For each exercise, every forbidden high-level call is run on small CPU inputs under a
``TorchDispatchMode`` that collects the aten operators it dispatches to: each one that does the
exercise's work must be watched by that exercise's runtime layer, and the exercise's own watch
must see the call. Every operator of this torch build named like a softmax, a normalisation or
fused attention is in its family, and an exercise that forbids one member of a family watches
all of it (``torch._masked_softmax`` where softmax is forbidden, ``F.instance_norm`` where
layer norm is).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from course_lib.grading.forbidden import OPS_OF_RULE, watch_spec
from course_lib.grading.oplists import ATTENTION_OPS, NORMALISATION_OPS, SOFTMAX_OPS
from course_lib.grading.opwatch import OpWatch
from course_lib.grading.registry import ASSIGNMENTS, exercises_of

EXERCISES = [ex for slug in ASSIGNMENTS for ex in exercises_of(slug)]

_x = torch.randn(2, 3, 4)
_q = torch.randn(1, 2, 3, 4)
_mask = torch.rand(2, 3, 4) > 0.5
_tokens = torch.randn(2, 3, 4)
_in_proj, _out_proj, _bias = torch.randn(12, 4), torch.randn(4, 4), torch.zeros(12)
_bilinear = torch.randn(5, 4, 4)

#: Each forbidden high-level call, run on small CPU inputs.
CALLS: dict[str, Callable[[], Any]] = {
    "torch.softmax": lambda: torch.softmax(_x, -1),
    "torch.nn.functional.softmax": lambda: F.softmax(_x, -1),
    "torch.special.softmax": lambda: torch.special.softmax(_x, -1),
    "torch.nn.Softmax": lambda: nn.Softmax(-1)(_x),
    "method:softmax": lambda: _x.softmax(-1),
    "torch.log_softmax": lambda: torch.log_softmax(_x, -1),
    "torch.nn.functional.log_softmax": lambda: F.log_softmax(_x, -1),
    "torch.special.log_softmax": lambda: torch.special.log_softmax(_x, -1),
    "torch.nn.LogSoftmax": lambda: nn.LogSoftmax(-1)(_x),
    "method:log_softmax": lambda: _x.log_softmax(-1),
    "torch._softmax": lambda: torch._softmax(_x, -1, False),
    "torch._log_softmax": lambda: torch._log_softmax(_x, -1, False),
    "torch._masked_softmax": lambda: torch._masked_softmax(_x, _mask),
    "torch._safe_softmax": lambda: torch._safe_softmax(_x, -1),
    "torch.nn.functional.softmin": lambda: F.softmin(_x, -1),
    "torch.nn.Softmin": lambda: nn.Softmin(-1)(_x),
    "torch.nn.Softmax2d": lambda: nn.Softmax2d()(_x),
    "torch.sparse.softmax": lambda: torch.sparse.softmax(_x.to_sparse(), -1),
    "torch.sparse.log_softmax": lambda: torch.sparse.log_softmax(_x.to_sparse(), -1),
    "torch.nn.functional.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(_q, _q, _q),
    "torch.nn.MultiheadAttention": lambda: nn.MultiheadAttention(4, 2, batch_first=True)(_tokens, _tokens, _tokens),
    "torch.nn.functional.multi_head_attention_forward": lambda: F.multi_head_attention_forward(
        _tokens,
        _tokens,
        _tokens,
        4,
        2,
        _in_proj,
        _bias,
        None,
        None,
        False,
        0.0,
        _out_proj,
        _bias[:4],
    ),
    "torch._native_multi_head_attention": lambda: torch._native_multi_head_attention(
        _tokens, _tokens, _tokens, 4, 2, _in_proj, _bias, _out_proj, _bias[:4]
    ),
    "torch._transformer_encoder_layer_fwd": lambda: nn.TransformerEncoderLayer(4, 2, 8, batch_first=True).eval()(
        _tokens
    ),
    "torch._scaled_dot_product_flash_attention_for_cpu": lambda: torch._scaled_dot_product_flash_attention_for_cpu(
        _q, _q, _q
    ),
    "torch._scaled_dot_product_attention_math": lambda: torch._scaled_dot_product_attention_math(_q, _q, _q),
    "torch.nn.functional.layer_norm": lambda: F.layer_norm(_x, (4,)),
    "torch.nn.LayerNorm": lambda: nn.LayerNorm(4)(_x),
    "torch.layer_norm": lambda: torch.layer_norm(_x, (4,)),
    "torch.native_layer_norm": lambda: torch.native_layer_norm(_x, (4,), None, None, 1e-5),
    "torch.nn.functional.group_norm": lambda: F.group_norm(_x, 1),
    "torch.group_norm": lambda: torch.group_norm(_x, 1),
    "torch.native_group_norm": lambda: torch.native_group_norm(_x, None, None, 2, 3, 4, 1, 1e-5),
    "torch.nn.GroupNorm": lambda: nn.GroupNorm(1, 3)(_x),
    "torch.nn.functional.instance_norm": lambda: F.instance_norm(_x.reshape(1, 6, 4)),
    "torch.instance_norm": lambda: torch.instance_norm(_x, None, None, None, None, True, 0.1, 1e-5, False),
    "torch.nn.InstanceNorm1d": lambda: nn.InstanceNorm1d(3)(_x),
    "torch.nn.InstanceNorm2d": lambda: nn.InstanceNorm2d(2)(_q),
    "torch.nn.InstanceNorm3d": lambda: nn.InstanceNorm3d(1)(_q.unsqueeze(0)),
    "torch.nn.LazyInstanceNorm1d": lambda: nn.LazyInstanceNorm1d()(_x),
    "torch.nn.LazyInstanceNorm2d": lambda: nn.LazyInstanceNorm2d()(_q),
    "torch.nn.LazyInstanceNorm3d": lambda: nn.LazyInstanceNorm3d()(_q.unsqueeze(0)),
    "torch.nn.functional.batch_norm": lambda: F.batch_norm(_x, None, None, training=True),
    "torch.batch_norm": lambda: torch.batch_norm(_x, None, None, None, None, True, 0.1, 1e-5, False),
    "torch.native_batch_norm": lambda: torch.native_batch_norm(_x, None, None, None, None, True, 0.1, 1e-5),
    "torch._native_batch_norm_legit": lambda: torch._native_batch_norm_legit(_x, None, None, True, 0.1, 1e-5),
    "torch._native_batch_norm_legit_no_training": lambda: torch._native_batch_norm_legit_no_training(
        _x, None, None, torch.zeros(3), torch.ones(3), 0.1, 1e-5
    ),
    "torch._batch_norm_impl_index": lambda: torch._batch_norm_impl_index(
        _x, None, None, None, None, True, 0.1, 1e-5, False
    ),
    "torch.batch_norm_update_stats": lambda: torch.batch_norm_update_stats(_x, torch.zeros(3), torch.ones(3), 0.1),
    "torch.nn.BatchNorm1d": lambda: nn.BatchNorm1d(3)(_x),
    "torch.nn.BatchNorm2d": lambda: nn.BatchNorm2d(2)(_q),
    "torch.nn.BatchNorm3d": lambda: nn.BatchNorm3d(1)(_q.unsqueeze(0)),
    "torch.nn.LazyBatchNorm1d": lambda: nn.LazyBatchNorm1d()(_x),
    "torch.nn.LazyBatchNorm2d": lambda: nn.LazyBatchNorm2d()(_q),
    "torch.nn.LazyBatchNorm3d": lambda: nn.LazyBatchNorm3d()(_q.unsqueeze(0)),
    "torch.nn.SyncBatchNorm": lambda: nn.SyncBatchNorm(3).eval()(_x),
    "torch.nn.functional.local_response_norm": lambda: F.local_response_norm(_x, 2),
    "torch.nn.LocalResponseNorm": lambda: nn.LocalResponseNorm(2)(_x),
    "torch.nn.CrossMapLRN2d": lambda: nn.CrossMapLRN2d(2)(_q),
    "torch.nn.functional.rms_norm": lambda: F.rms_norm(_x, (4,)),
    "torch.rms_norm": lambda: torch.rms_norm(_x, (4,)),
    "torch._fused_rms_norm": lambda: torch._fused_rms_norm(_x, [4], None, 1e-5),
    "torch.nn.RMSNorm": lambda: nn.RMSNorm(4)(_x),
    "torch.nn.functional.bilinear": lambda: F.bilinear(_x, _x, _bilinear),
    "torch.bilinear": lambda: torch.bilinear(_x, _x, _bilinear),
    "torch.nn.Bilinear": lambda: nn.Bilinear(4, 4, 5)(_x, _x),
    "torch.nn.functional.cross_entropy": lambda: F.cross_entropy(_x[0], torch.tensor([0, 1, 3])),
    "torch.nn.CrossEntropyLoss": lambda: nn.CrossEntropyLoss()(_x[0], torch.tensor([0, 1, 3])),
    "torch.nn.functional.nll_loss": lambda: F.nll_loss(_x[0], torch.tensor([0, 1, 3])),
    "torch.nn.NLLLoss": lambda: nn.NLLLoss()(_x[0], torch.tensor([0, 1, 3])),
    "torch.nn.functional.cosine_similarity": lambda: F.cosine_similarity(_x, _x, -1),
    "torch.cosine_similarity": lambda: torch.cosine_similarity(_x, _x, -1),
    "torch.nn.CosineSimilarity": lambda: nn.CosineSimilarity(-1)(_x, _x),
    "torch.nn.Transformer.generate_square_subsequent_mask": lambda: nn.Transformer.generate_square_subsequent_mask(3),
    "torch.nn.modules.transformer._generate_square_subsequent_mask": lambda: (
        nn.modules.transformer._generate_square_subsequent_mask(3)
    ),
    # chapter 7's "only torch and math": numpy runs no aten operator; the static scan refuses
    # the library, the runtime watch the tensor methods that hand a tensor to it
    "module:numpy": lambda: np.exp(_x.numpy()),
    "method:numpy": lambda: _x.numpy(),
    "method:__array__": lambda: np.asarray(_x),
}

#: Rules with no CPU kernel to run here (CUDA, ROCm, Triton backends): their operators are in
#: the families all the same, and the names are refused by the static scan.
NOT_ON_CPU = {
    "torch._scaled_dot_product_flash_attention",
    "torch._scaled_dot_product_efficient_attention",
    "torch._scaled_dot_product_cudnn_attention",
    "torch._triton_scaled_dot_attention",
    "torch._triton_multi_head_attention",
}

#: Operators that do none of an exercise's work: allocating, viewing, copying, filling and
#: initialising tensors (a module's construction), elementwise arithmetic, reductions and
#: products, the building blocks every honest solution is made of.
BUILDING_BLOCKS = {
    *("aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros", "aten::ones", "aten::full"),
    *("aten::scalar_tensor", "aten::lift_fresh", "aten::zero_", "aten::fill_", "aten::uniform_", "aten::normal_"),
    *("aten::view", "aten::_unsafe_view", "aten::reshape", "aten::alias", "aten::t", "aten::transpose"),
    *("aten::unsqueeze", "aten::squeeze", "aten::expand", "aten::split", "aten::unbind", "aten::select"),
    *("aten::slice", "aten::permute", "aten::detach", "aten::clone", "aten::copy_", "aten::_to_copy"),
    *("aten::add", "aten::add_", "aten::sub", "aten::mul", "aten::div", "aten::neg", "aten::pow", "aten::rsqrt"),
    *(
        "aten::sqrt",
        "aten::exp",
        "aten::log",
        "aten::where",
        "aten::clamp_min",
        "aten::clamp_min_",
        "aten::mul_",
        "aten::resize_as_",
        "aten::repeat",
        "aten::masked_fill_",
        "aten::relu",
    ),
    *("aten::mean", "aten::sum", "aten::var", "aten::linalg_vector_norm", "aten::mm", "aten::bmm", "aten::addmm"),
    *("aten::matmul", "aten::linear", "aten::constant_pad_nd", "aten::avg_pool2d", "aten::avg_pool3d", "aten::triu"),
    *("aten::_to_sparse", "aten::_nested_tensor_from_mask", "aten::cat", "aten::stack", "aten::gelu"),
}

#: Operators an exercise allows although a forbidden call also runs them: a label-smoothing
#: loss is built on the log-softmax that cross-entropy runs, and the exercises that forbid whole
#: attention but not softmax on the softmax that ``nn.MultiheadAttention`` and the math
#: backend of scaled dot-product attention run (those are seen as torch functions instead).
_SOFTMAX_ALLOWED = {"aten::_softmax", "aten::_safe_softmax"}
ALLOWED: dict[str, set[str]] = {
    "label_smoothing_loss": {"aten::_log_softmax"},
    "multi_head_attention": _SOFTMAX_ALLOWED,
    "multi_head_attention_sum_form": _SOFTMAX_ALLOWED,
    "cached_attention_step": _SOFTMAX_ALLOWED,
}

#: Forbidden calls that neither a torch function nor an operator of their own can reveal at
#: run time: ``nn.CrossMapLRN2d`` is a legacy autograd Function made of in-place elementwise
#: operators. The static scan refuses them by name.
STATIC_ONLY = {"torch.nn.CrossMapLRN2d"}


class _Collect(TorchDispatchMode):
    """Collects the aten operators (``aten::_softmax``) dispatched to inside the block."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func._schema.name)
        return func(*args, **(kwargs or {}))


def dispatched(call: Callable[[], Any]) -> set[str]:
    """The aten operators that ``call()`` dispatches to on CPU."""
    with torch.no_grad(), _Collect() as collect:
        call()
    return collect.ops


def _rules(ex: Any) -> list[str]:
    return [r for r in ex.forbidden if not r.startswith("graded:")]


def test_every_forbidden_call_has_a_cpu_run_or_a_reason():
    rules = {r for ex in EXERCISES for r in _rules(ex)} | set(OPS_OF_RULE)
    assert sorted(rules - set(CALLS) - NOT_ON_CPU) == []


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_every_operator_a_forbidden_call_runs_is_watched(ex):
    watched = set(watch_spec(ex.forbidden)["ops"])
    for rule in _rules(ex):
        if rule in NOT_ON_CPU:
            continue
        work = dispatched(CALLS[rule]) - BUILDING_BLOCKS - ALLOWED.get(ex.name, set())
        assert sorted(work - watched) == [], f"{ex.name}: {rule} runs operators it does not watch"


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda ex: ex.name)
def test_the_exercises_own_watch_sees_every_forbidden_call(ex):
    for rule in _rules(ex):
        if rule in NOT_ON_CPU or rule in STATIC_ONLY or rule not in OPS_OF_RULE:
            continue
        watch = OpWatch(**watch_spec(ex.forbidden))
        with watch:
            CALLS[rule]()
        assert watch.seen, f"{ex.name}: {rule} ran unseen"


#: What an operator's name says it computes, for every operator of this torch build.
_FAMILY_NAMES = {
    "softmax": (re.compile(r"softmax"), SOFTMAX_OPS),
    "normalisation": (re.compile(r"(batch|group|layer|instance|rms)_norm"), NORMALISATION_OPS),
    "attention": (re.compile(r"scaled_dot|attention_forward|multi_head_attention|transformer_encoder"), ATTENTION_OPS),
}


@pytest.mark.parametrize("family", sorted(_FAMILY_NAMES))
def test_every_operator_of_this_torch_named_like_a_family_is_in_it(family):
    pattern, ops = _FAMILY_NAMES[family]
    names = {n.split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    named = {n for n in names if pattern.search(n) and "backward" not in n and not n.endswith("_out")}
    assert sorted(named - set(ops)) == []
