"""Specification of course_lib.multihead: split/merge heads, multi-head attention, the module."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    multi_head_attention,
    multi_head_attention_sum_form,
    split_heads,
)

# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def randomize_(m: nn.MultiheadAttention) -> nn.MultiheadAttention:
    """Give every parameter (biases included, which PyTorch initialises to 0) random values."""
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) / math.sqrt(m.embed_dim))
    return m


def torch_weights(m: nn.MultiheadAttention):
    """(W_q, W_k, W_v, W_o) for ``x @ W`` from a PyTorch module (which computes x @ W.T)."""
    E = m.embed_dim
    W = m.in_proj_weight.detach()
    return W[:E].T, W[E : 2 * E].T, W[2 * E :].T, m.out_proj.weight.detach().T


def naive_mha(query, key, value, W_q, W_k, W_v, W_o, H, mask=None):
    """Per-head projections with column slices, softmax per head, concatenate, project."""
    N, L, E = query.shape
    S = key.shape[1]
    D = E // H
    full = torch.ones(N, H, L, S, dtype=torch.bool)
    mask = full if mask is None else mask.expand(N, H, L, S)
    heads, weights = [], []
    for h in range(H):
        cols = slice(h * D, (h + 1) * D)
        q, k, v = query @ W_q[:, cols], key @ W_k[:, cols], value @ W_v[:, cols]
        scores = (q @ k.transpose(1, 2) / math.sqrt(D)).masked_fill(~mask[:, h], float("-inf"))
        w = torch.softmax(scores, dim=-1)
        heads.append(w @ v)
        weights.append(w)
    return torch.cat(heads, dim=-1) @ W_o, torch.stack(weights, dim=1)


def random_keep(N, S, g=None):
    """A key padding mask, True at real tokens, with at least the first token kept."""
    lengths = torch.randint(1, S + 1, (N,), generator=g)
    return torch.arange(S)[None, :] < lengths[:, None]


# ---------------------------------------------------------------------------------------
# split_heads / merge_heads
# ---------------------------------------------------------------------------------------


def test_split_heads_head_h_owns_columns_h_times_d_to_h_plus_one_times_d():
    N, L, H, D = 2, 3, 4, 5
    x = torch.arange(N * L * H * D, dtype=torch.float32).reshape(N, L, H * D)
    out = split_heads(x, H)
    assert out.shape == (N, H, L, D)
    for n in range(N):
        for h in range(H):
            for l in range(L):
                for d in range(D):
                    assert out[n, h, l, d] == x[n, l, h * D + d]


def test_split_heads_does_not_mix_tokens_between_heads():
    # The classic bug, a bare view(N, H, L, D), hands each head a slice of tokens.
    x = torch.arange(1 * 4 * 6).reshape(1, 4, 6)  # 4 tokens, E = 6
    out = split_heads(x, 2)
    for l in range(4):
        torch.testing.assert_close(out[0, :, l].reshape(-1), x[0, l])


@settings(max_examples=40)
@given(
    n=st.integers(1, 3), l=st.integers(1, 5), h=st.integers(1, 4), d=st.integers(1, 4), seed=st.integers(0, 2**31 - 1)
)
def test_merge_heads_inverts_split_heads_and_vice_versa(n, l, h, d, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, l, h * d, generator=g)
    assert torch.equal(merge_heads(split_heads(x, h)), x)
    y = torch.randn(n, h, l, d, generator=g)
    assert torch.equal(split_heads(merge_heads(y), h), y)


def test_merge_heads_concatenates_heads_in_order():
    y = torch.randn(2, 3, 4, 5)  # (N, H, L, D)
    torch.testing.assert_close(merge_heads(y), torch.cat([y[:, h] for h in range(3)], dim=-1))


def test_split_heads_with_one_head_is_a_reshape():
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(split_heads(x, 1), x.unsqueeze(1))


def test_split_heads_works_on_non_contiguous_input():
    x = torch.randn(3, 2, 6).transpose(0, 1)  # (2, 3, 6), not contiguous
    out = split_heads(x, 3)
    torch.testing.assert_close(out, split_heads(x.contiguous(), 3))


# ---------------------------------------------------------------------------------------
# multi_head_attention (functional)
# ---------------------------------------------------------------------------------------


def test_multi_head_attention_matches_naive_per_head_loop():
    N, L, S, E, H = 2, 3, 5, 8, 2
    q, kv = torch.randn(N, L, E), torch.randn(N, S, E)
    Ws = [torch.randn(E, E) / math.sqrt(E) for _ in range(4)]
    out, weights = multi_head_attention(q, kv, kv, *Ws, H)
    ref_out, ref_weights = naive_mha(q, kv, kv, *Ws, H)
    assert out.shape == (N, L, E) and weights.shape == (N, H, L, S)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


@pytest.mark.parametrize("masking", ["none", "padding", "causal"])
def test_multi_head_attention_matches_torch_functional_with_bias_free_weights(masking):
    N, L, E, H = 3, 5, 8, 4
    m = randomize_(nn.MultiheadAttention(E, H, bias=False, batch_first=True)).eval()
    x = torch.randn(N, L, E)
    W_q, W_k, W_v, W_o = torch_weights(m)
    keep = random_keep(N, L)
    ours_mask, torch_kw = {
        "none": (None, {}),
        "padding": (keep[:, None, None, :], {"key_padding_mask": ~keep}),
        "causal": (causal_mask(L), {"attn_mask": ~causal_mask(L)}),
    }[masking]
    out, weights = multi_head_attention(x, x, x, W_q, W_k, W_v, W_o, H, ours_mask)
    with torch.no_grad():
        ref_out, ref_weights = m(x, x, x, need_weights=True, average_attn_weights=False, **torch_kw)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_multi_head_attention_biases_are_added_after_each_projection():
    N, L, E, H = 2, 4, 6, 3
    x = torch.randn(N, L, E)
    Ws = [torch.randn(E, E) for _ in range(4)]
    b_q, b_k, b_v, b_o = (torch.randn(E) for _ in range(4))
    out, weights = multi_head_attention(x, x, x, *Ws, H, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    W_q, W_k, W_v, W_o = Ws
    # Fold the input biases into an extra constant input feature, the output bias after.
    ones = torch.ones(N, L, 1)
    xa = torch.cat([x, ones], -1)
    aug = [torch.cat([W, b[None, :]], 0) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v))]
    heads, ref_weights = [], []
    D = E // H
    for h in range(H):
        c = slice(h * D, (h + 1) * D)
        qh, kh, vh = xa @ aug[0][:, c], xa @ aug[1][:, c], xa @ aug[2][:, c]
        w = torch.softmax(qh @ kh.transpose(1, 2) / math.sqrt(D), -1)
        heads.append(w @ vh)
        ref_weights.append(w)
    torch.testing.assert_close(out, torch.cat(heads, -1) @ W_o + b_o)
    torch.testing.assert_close(weights, torch.stack(ref_weights, 1))


BIAS_NAMES = ("b_q", "b_k", "b_v", "b_o")


@pytest.mark.parametrize(
    "given_biases",
    [(), BIAS_NAMES, ("b_k", "b_v"), ("b_q",), ("b_o",), ("b_q", "b_v", "b_o")],
    ids=lambda names: "+".join(names) or "none",
)
@pytest.mark.parametrize("same_tensor", [True, False], ids=["self-attention-one-tensor", "equal-copies"])
def test_multi_head_attention_with_any_subset_of_biases_matches_naive_computation(given_biases, same_tensor):
    # Each optional bias is added after its own projection, whichever others are given,
    # and whether query, key and value are one tensor (self-attention) or equal copies.
    N, L, E, H = 2, 4, 8, 2
    x = torch.randn(N, L, E)
    Ws = [torch.randn(E, E) / math.sqrt(E) for _ in range(4)]
    biases = {name: torch.randn(E) for name in given_biases}
    query, key, value = (x, x, x) if same_tensor else (x, x.clone(), x.clone())
    out, weights = multi_head_attention(query, key, value, *Ws, H, **biases)
    zero = torch.zeros(E)
    W_q, W_k, W_v, W_o = Ws
    q = x @ W_q + biases.get("b_q", zero)
    k = x @ W_k + biases.get("b_k", zero)
    v = x @ W_v + biases.get("b_v", zero)
    eye = torch.eye(E)
    ref_out, ref_weights = naive_mha(q, k, v, eye, eye, eye, W_o, H)
    torch.testing.assert_close(out, ref_out + biases.get("b_o", zero))
    torch.testing.assert_close(weights, ref_weights)


def test_multi_head_attention_fully_masked_query_gives_zero_weights_and_finite_output():
    N, L, E, H = 1, 3, 4, 2
    x = torch.randn(N, L, E, requires_grad=True)
    Ws = [torch.randn(E, E, requires_grad=True) for _ in range(4)]
    mask = torch.ones(N, 1, L, L, dtype=torch.bool)
    mask[0, 0, 1] = False  # query 1 may attend to nothing
    out, weights = multi_head_attention(x, x, x, *Ws, H, mask)
    assert (weights[0, :, 1] == 0).all()
    assert (out[0, 1] == 0).all()  # zero concatenation times W_o, no bias
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and all(torch.isfinite(W.grad).all() for W in Ws)


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    l=st.integers(1, 5),
    s=st.integers(1, 5),
    h=st.sampled_from([1, 2, 4]),
    d=st.integers(1, 3),
    use_mask=st.booleans(),
)
def test_sum_form_equals_concatenation_form(seed, n, l, s, h, d, use_mask):
    g = torch.Generator().manual_seed(seed)
    E = h * d
    q, k, v = torch.randn(n, l, E, generator=g), torch.randn(n, s, E, generator=g), torch.randn(n, s, E, generator=g)
    Ws = [torch.randn(E, E, generator=g) / math.sqrt(E) for _ in range(4)]
    mask = (torch.rand(n, h, l, s, generator=g) < 0.6) if use_mask else None
    out, _ = multi_head_attention(q, k, v, *Ws, h, mask)
    torch.testing.assert_close(multi_head_attention_sum_form(q, k, v, *Ws, h, mask), out)


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    l=st.integers(1, 5),
    s=st.integers(1, 6),
    h=st.sampled_from([1, 2, 3]),
)
def test_multi_head_attention_weight_rows_sum_to_one_wherever_any_key_is_allowed(seed, n, l, s, h):
    g = torch.Generator().manual_seed(seed)
    E = 2 * h
    q, kv = torch.randn(n, l, E, generator=g), torch.randn(n, s, E, generator=g)
    Ws = [torch.randn(E, E, generator=g) for _ in range(4)]
    mask = torch.rand(n, h, l, s, generator=g) < 0.5
    _, weights = multi_head_attention(q, kv, kv, *Ws, h, mask)
    live = mask.any(-1)
    torch.testing.assert_close(weights.sum(-1)[live], torch.ones(int(live.sum())))
    assert (weights.sum(-1)[~live] == 0).all()


@settings(max_examples=30)
@given(
    seed=st.integers(0, 2**31 - 1), n=st.integers(1, 3), T=st.integers(2, 6), h=st.sampled_from([1, 2]), data=st.data()
)
def test_multi_head_attention_causal_output_at_t_ignores_later_tokens(seed, n, T, h, data):
    t = data.draw(st.integers(0, T - 2))
    g = torch.Generator().manual_seed(seed)
    E = 4
    x = torch.randn(n, T, E, generator=g)
    Ws = [torch.randn(E, E, generator=g) for _ in range(4)]
    x2 = x.clone()
    x2[:, t + 1 :] = 10 * torch.randn(n, T - t - 1, E, generator=g)
    out, _ = multi_head_attention(x, x, x, *Ws, h, causal_mask(T))
    out2, _ = multi_head_attention(x2, x2, x2, *Ws, h, causal_mask(T))
    torch.testing.assert_close(out2[:, : t + 1], out[:, : t + 1])


@settings(max_examples=30)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 3), T=st.integers(1, 6), h=st.sampled_from([1, 2, 3]))
def test_multi_head_self_attention_without_positions_is_permutation_equivariant(seed, n, T, h):
    g = torch.Generator().manual_seed(seed)
    E = 2 * h
    x = torch.randn(n, T, E, generator=g)
    Ws = [torch.randn(E, E, generator=g) for _ in range(4)]
    perm = torch.randperm(T, generator=g)
    out, weights = multi_head_attention(x, x, x, *Ws, h)
    out_p, weights_p = multi_head_attention(x[:, perm], x[:, perm], x[:, perm], *Ws, h)
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(weights_p, weights[:, :, perm][:, :, :, perm])


# ---------------------------------------------------------------------------------------
# MultiHeadAttention module vs nn.MultiheadAttention
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("masking", ["none", "padding", "causal", "padding+causal"])
def test_module_from_torch_matches_nn_multihead_attention(batch_first, bias, masking):
    N, L, E, H = 3, 6, 8, 2
    m = randomize_(nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first)).eval()
    ours = MultiHeadAttention.from_torch(m)
    assert not ours.training
    x = torch.randn(N, L, E)
    keep = random_keep(N, L)
    ours_mask, kw = None, {}
    if "padding" in masking:
        ours_mask, kw["key_padding_mask"] = keep[:, None, None, :], ~keep
    if "causal" in masking:
        ours_mask = causal_mask(L) if ours_mask is None else ours_mask & causal_mask(L)
        kw["attn_mask"] = ~causal_mask(L)  # PyTorch: True = blocked
    out, weights = ours(x, x, x, ours_mask)
    xt = x if batch_first else x.transpose(0, 1)
    with torch.no_grad():
        ref_out, ref_weights = m(xt, xt, xt, need_weights=True, average_attn_weights=False, **kw)
    if not batch_first:
        ref_out = ref_out.transpose(0, 1)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])
def test_module_from_torch_matches_cross_attention_with_l_not_equal_s(batch_first):
    N, L, S, E, H = 2, 3, 7, 12, 3
    m = randomize_(nn.MultiheadAttention(E, H, batch_first=batch_first)).eval()
    ours = MultiHeadAttention.from_torch(m)
    q, k, v = torch.randn(N, L, E), torch.randn(N, S, E), torch.randn(N, S, E)
    keep = random_keep(N, S)
    out, weights = ours(q, k, v, keep[:, None, None, :])
    tq, tk, tv = (t if batch_first else t.transpose(0, 1) for t in (q, k, v))
    with torch.no_grad():
        ref_out, ref_weights = m(tq, tk, tv, key_padding_mask=~keep, average_attn_weights=False)
    if not batch_first:
        ref_out = ref_out.transpose(0, 1)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_module_from_torch_in_float64_matches_torch():
    E, H = 6, 3
    m = randomize_(nn.MultiheadAttention(E, H, batch_first=True)).double().eval()
    ours = MultiHeadAttention.from_torch(m)
    assert ours.W_q.dtype == torch.float64
    x = torch.randn(2, 4, E, dtype=torch.float64)
    out, weights = ours(x, x, x)
    with torch.no_grad():
        ref_out, ref_weights = m(x, x, x, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_module_from_torch_gradients_match_torch():
    N, L, E, H = 2, 4, 8, 2
    m = randomize_(nn.MultiheadAttention(E, H, batch_first=True)).eval()
    ours = MultiHeadAttention.from_torch(m)
    x = torch.randn(N, L, E)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    w = torch.randn(N, L, E)
    (ours(x1, x1, x1)[0] * w).sum().backward()
    (m(x2, x2, x2, need_weights=False)[0] * w).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(ours.W_o.grad, m.out_proj.weight.grad.T)
    torch.testing.assert_close(torch.cat([ours.W_q.grad, ours.W_k.grad, ours.W_v.grad], 1), m.in_proj_weight.grad.T)
    torch.testing.assert_close(torch.cat([ours.b_q.grad, ours.b_k.grad, ours.b_v.grad]), m.in_proj_bias.grad)


def test_module_from_torch_keeps_the_training_flag():
    m = nn.MultiheadAttention(4, 2, dropout=0.25)
    assert MultiHeadAttention.from_torch(m.train()).training
    ours = MultiHeadAttention.from_torch(m.eval())
    assert not ours.training and ours.dropout == 0.25


def test_module_without_bias_has_no_bias_parameters():
    ours = MultiHeadAttention(8, 2, bias=False)
    names = {n for n, _ in ours.named_parameters()}
    assert names == {"W_q", "W_k", "W_v", "W_o"}


def test_module_in_eval_mode_ignores_dropout():
    ours = MultiHeadAttention(8, 2, dropout=0.9).eval()
    x = torch.randn(2, 3, 8)
    out1, _ = ours(x, x, x)
    out2, _ = ours(x, x, x)
    torch.testing.assert_close(out1, out2)
    ref, _ = multi_head_attention(
        x, x, x, ours.W_q, ours.W_k, ours.W_v, ours.W_o, 2, b_q=ours.b_q, b_k=ours.b_k, b_v=ours.b_v, b_o=ours.b_o
    )
    torch.testing.assert_close(out1, ref)


def test_module_from_torch_rejects_other_modules_and_unsupported_options():
    with pytest.raises(TypeError, match="MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, kdim=3, vdim=3))
    with pytest.raises(ValueError):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(4, 2, add_bias_kv=True))


def test_module_rejects_embed_dim_not_divisible_by_num_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------------------------------
# need_weights=False: the fused path
# ---------------------------------------------------------------------------------------


def _masks(N, L, S, g):
    """Every kind of mask the layers pass: none, padding, causal, both, and rows with no key."""
    keep = random_keep(N, S, g)
    no_key = torch.ones(N, 1, L, S, dtype=torch.bool)
    no_key[0, 0, L - 1] = False  # the last query of the first example may attend to nothing
    tri = torch.ones(L, S, dtype=torch.bool).tril()
    return {
        "none": None,
        "padding": keep[:, None, None, :],
        "causal": tri,
        "padding+causal": keep[:, None, None, :] & tri,
        "fully masked row": no_key,
        "all masked": torch.zeros(N, 1, L, S, dtype=torch.bool),
    }


@pytest.mark.parametrize("masking", ["none", "padding", "causal", "padding+causal", "fully masked row", "all masked"])
def test_the_fused_path_gives_the_readable_paths_output_and_gradients(masking):
    g = torch.Generator().manual_seed(3)
    N, L, S, E, H = 3, 5, 6, 8, 2
    m = MultiHeadAttention(E, H)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(E))
    q = torch.randn(N, L, E, generator=g, requires_grad=True)
    kv = torch.randn(N, S, E, generator=g, requires_grad=True)
    mask = _masks(N, L, S, g)[masking]
    grads = {}
    for need in (True, False):
        m.zero_grad()
        q.grad = kv.grad = None
        out, weights = m(q, kv, kv, mask, need_weights=need)
        assert (weights is None) == (not need)
        (out * torch.arange(E)).sum().backward()
        grads[need] = (out.detach(), q.grad, kv.grad, *(p.grad for p in m.parameters()))
    for fast, slow in zip(grads[False], grads[True], strict=True):
        assert torch.isfinite(fast).all()
        torch.testing.assert_close(fast, slow)


def test_fused_attention_gives_a_fully_masked_row_a_zero_output_never_nan():
    from course_lib.multihead import fused_attention

    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    mask[..., 1, :] = False
    out = fused_attention(q, k, v, mask)
    assert (out[:, :, 1] == 0).all() and torch.isfinite(out).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kv_cache_step_without_weights_equals_the_step_with_them(dtype):
    torch.manual_seed(0)
    E, H, S = 8, 2, 4
    m = MultiHeadAttention(E, H).to(dtype)
    query, memory = torch.randn(2, 1, E, dtype=dtype), torch.randn(2, S, E, dtype=dtype)
    k, v = m.project_kv(memory, memory)
    keep = torch.tensor([[True] * S, [True, True, False, False]])[:, None, None, :]
    slow, weights = m.attend(query, k, v, keep)
    fast, none = m.attend(query, k, v, keep, need_weights=False)
    assert weights is not None and none is None
    torch.testing.assert_close(fast, slow)
