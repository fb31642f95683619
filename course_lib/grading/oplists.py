"""The aten operators behind each forbidden call, grouped in families (the runtime layer's lists).

A forbidden torch function is watched twice at run time (:mod:`course_lib.grading.opwatch`): as
a torch function, and through the aten operators that do its work, whose kernels see every run
however it was reached (``torch.ops``, another operator, a private twin such as
``torch._masked_softmax``). An exercise that forbids one member of a family watches the whole
family's operators: every softmax-like kernel where a softmax is forbidden, every normalisation
kernel where a layer norm is, every fused attention kernel where attention is.

The families are complete by construction: ``tests/grading/test_oplists.py`` runs every forbidden
function and collects the operators it dispatches to, and lists every operator of this torch
build whose name says softmax, normalisation or attention; each must be in its family here.
"""

from __future__ import annotations

__all__ = ["SOFTMAX_OPS", "NORMALISATION_OPS", "ATTENTION_OPS", "OPS_OF_RULE", "family_rules"]

#: Every kernel that computes a softmax or a log-softmax (masked, "safe", sparse, nested).
SOFTMAX_OPS: tuple[str, ...] = (
    "aten::_softmax",
    "aten::softmax",
    "aten::_log_softmax",
    "aten::log_softmax",
    "aten::_masked_softmax",
    "aten::_safe_softmax",
    "aten::_sparse_softmax",
    "aten::_sparse_log_softmax",
    "aten::_nested_tensor_softmax_with_shape",
    "aten::special_softmax",
    "aten::special_log_softmax",
)

#: Every kernel that standardises a tensor along some axes: layer, group, instance, batch and
#: RMS normalisation (each reshapes into any other: rows as channels make an instance norm a
#: layer norm).
NORMALISATION_OPS: tuple[str, ...] = (
    "aten::native_layer_norm",
    "aten::layer_norm",
    "aten::native_group_norm",
    "aten::group_norm",
    "aten::instance_norm",
    "aten::batch_norm",
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_native_batch_norm_legit_functional",
    "aten::_batch_norm_impl_index",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_with_update_functional",
    "aten::_batch_norm_no_update",
    "aten::cudnn_batch_norm",
    "aten::miopen_batch_norm",
    "aten::quantized_batch_norm",
    "aten::batch_norm_stats",
    "aten::batch_norm_elemt",
    "aten::batch_norm_gather_stats",
    "aten::batch_norm_gather_stats_with_counts",
    "aten::batch_norm_update_stats",
    "aten::rms_norm",
    "aten::_fused_rms_norm",
)

#: Every fused attention kernel: scaled dot-product attention's backends, and the whole
#: multi-head attention and transformer layers.
ATTENTION_OPS: tuple[str, ...] = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_attention_math",
    "aten::_scaled_dot_product_attention_math_for_mps",
    "aten::_flash_attention_forward",
    "aten::_flash_attention_forward_no_dropout_inplace",
    "aten::_efficient_attention_forward",
    "aten::_cudnn_attention_forward",
    "aten::_triton_scaled_dot_attention",
    "aten::_triton_multi_head_attention",
    "aten::_native_multi_head_attention",
    "aten::_transformer_encoder_layer_fwd",
)

_CROSS_ENTROPY = ("aten::nll_loss_forward", "aten::nll_loss2d_forward", "aten::cross_entropy_loss")
_NLL = ("aten::nll_loss_forward", "aten::nll_loss2d_forward", "aten::nll_loss_nd")


def _rules(family: tuple[str, ...], *rules: str) -> dict[str, tuple[str, ...]]:
    return dict.fromkeys(rules, family)


#: The aten operators behind a forbidden call: the runtime layer counts these however they
#: were reached. (A composite function such as ``local_response_norm`` has no operator of its
#: own; it is caught where it is called, as a torch function.)
OPS_OF_RULE: dict[str, tuple[str, ...]] = {
    **_rules(
        SOFTMAX_OPS,
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.special.softmax",
        "torch.nn.Softmax",
        "method:softmax",
        "torch.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.special.log_softmax",
        "torch.nn.LogSoftmax",
        "method:log_softmax",
        "torch._softmax",
        "torch._log_softmax",
        "torch._masked_softmax",
        "torch._safe_softmax",
        "torch.nn.functional.softmin",
        "torch.nn.Softmin",
        "torch.nn.Softmax2d",
        "torch.sparse.softmax",
        "torch.sparse.log_softmax",
    ),
    **_rules(
        ATTENTION_OPS,
        "torch.nn.functional.scaled_dot_product_attention",
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch._native_multi_head_attention",
        "torch._transformer_encoder_layer_fwd",
        "torch._scaled_dot_product_flash_attention_for_cpu",
        "torch._scaled_dot_product_flash_attention",
        "torch._scaled_dot_product_efficient_attention",
        "torch._scaled_dot_product_cudnn_attention",
        "torch._scaled_dot_product_attention_math",
        "torch._triton_scaled_dot_attention",
        "torch._triton_multi_head_attention",
    ),
    **_rules(
        NORMALISATION_OPS,
        "torch.nn.functional.layer_norm",
        "torch.nn.LayerNorm",
        "torch.layer_norm",
        "torch.native_layer_norm",
        "torch.nn.functional.group_norm",
        "torch.group_norm",
        "torch.native_group_norm",
        "torch.nn.GroupNorm",
        "torch.nn.functional.instance_norm",
        "torch.instance_norm",
        "torch.nn.InstanceNorm1d",
        "torch.nn.InstanceNorm2d",
        "torch.nn.InstanceNorm3d",
        "torch.nn.LazyInstanceNorm1d",
        "torch.nn.LazyInstanceNorm2d",
        "torch.nn.LazyInstanceNorm3d",
        "torch.nn.functional.batch_norm",
        "torch.batch_norm",
        "torch.native_batch_norm",
        "torch._native_batch_norm_legit",
        "torch._native_batch_norm_legit_no_training",
        "torch._batch_norm_impl_index",
        "torch.batch_norm_update_stats",
        "torch.nn.BatchNorm1d",
        "torch.nn.BatchNorm2d",
        "torch.nn.BatchNorm3d",
        "torch.nn.LazyBatchNorm1d",
        "torch.nn.LazyBatchNorm2d",
        "torch.nn.LazyBatchNorm3d",
        "torch.nn.SyncBatchNorm",
        "torch.nn.functional.local_response_norm",
        "torch.nn.LocalResponseNorm",
        "torch.nn.CrossMapLRN2d",
        "torch.nn.functional.rms_norm",
        "torch.rms_norm",
        "torch._fused_rms_norm",
        "torch.nn.RMSNorm",
    ),
    **_rules(
        ("aten::_trilinear", "aten::bilinear"), "torch.nn.functional.bilinear", "torch.bilinear", "torch.nn.Bilinear"
    ),
    **_rules(_CROSS_ENTROPY, "torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss"),
    **_rules(_NLL, "torch.nn.functional.nll_loss", "torch.nn.NLLLoss"),
    **_rules(("aten::cosine_similarity",), "torch.nn.functional.cosine_similarity", "torch.cosine_similarity"),
}


def family_rules(family: tuple[str, ...]) -> tuple[str, ...]:
    """The forbidden-call rules whose operators are ``family``, in the order listed above."""
    return tuple(rule for rule, ops in OPS_OF_RULE.items() if ops is family)
