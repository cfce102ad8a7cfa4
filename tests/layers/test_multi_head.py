"""MultiHeadAttention: parity with nn.MultiheadAttention (outputs, weights, gradients), GQA, errors."""

import pytest
import torch
from torch import nn

from attnkit import masks
from attnkit.layers.kv_cache import KVCache
from attnkit.layers.multi_head import MultiHeadAttention

D, H, B, TQ, TK = 16, 4, 3, 5, 6


def _param_grads(ours: MultiHeadAttention) -> list[torch.Tensor]:
    names = ["q_proj.weight", "k_proj.weight", "v_proj.weight", "q_proj.bias", "k_proj.bias", "v_proj.bias",
             "out_proj.weight"]
    params = dict(ours.named_parameters())
    return [params[n].grad for n in names]  # type: ignore[misc]


def _torch_grads(ref: nn.MultiheadAttention) -> list[torch.Tensor]:
    if ref.in_proj_weight is not None:
        weights = list(ref.in_proj_weight.grad.chunk(3))  # type: ignore[union-attr]
    else:
        weights = [ref.q_proj_weight.grad, ref.k_proj_weight.grad, ref.v_proj_weight.grad]
    return [*weights, *ref.in_proj_bias.grad.chunk(3), ref.out_proj.weight.grad]  # type: ignore[union-attr, list-item]


CASES = ["self", "cross", "key-padding", "causal", "kdim-vdim", "batch-second"]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_from_torch_parity(case: str, dtype: torch.dtype, tol: float) -> None:
    kdim = vdim = None
    if case == "kdim-vdim":
        kdim, vdim = 7, 9
    ref = nn.MultiheadAttention(D, H, kdim=kdim, vdim=vdim, batch_first=case != "batch-second").to(dtype)
    ours = MultiHeadAttention.from_torch(ref)
    q = torch.randn(B, TQ, D, dtype=dtype, requires_grad=True)
    self_attn = case in ("self", "causal", "batch-second")
    k = q if self_attn else torch.randn(B, TK, kdim or D, dtype=dtype, requires_grad=True)
    v = q if self_attn else torch.randn(B, TK, vdim or D, dtype=dtype, requires_grad=True)
    tk = k.shape[1]
    torch_kwargs: dict = {}
    our_mask = None
    if case == "key-padding":
        kpm = torch.zeros(B, tk, dtype=torch.bool)
        kpm[1, 3:] = True  # padding, True = ignore in PyTorch's convention
        torch_kwargs["key_padding_mask"] = kpm
        our_mask = masks.from_key_padding_mask(kpm)
    causal = case == "causal"
    if causal:
        torch_kwargs["attn_mask"] = ~masks.causal(TQ, tk)
    if case == "batch-second":
        ref_out, ref_w = ref(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), average_attn_weights=False,
                             **torch_kwargs)
        ref_out = ref_out.transpose(0, 1)
    else:
        ref_out, ref_w = ref(q, k, v, average_attn_weights=False, **torch_kwargs)
    if self_attn:
        out, w = ours(q, mask=our_mask, causal=causal, return_weights=True)
    else:
        out, w = ours(q, k, v, mask=our_mask, return_weights=True)
    assert (out - ref_out).abs().max() <= tol
    assert (w - ref_w).abs().max() <= tol
    probe = torch.randn_like(out)
    inputs = [q] if self_attn else [q, k, v]
    ours_in = torch.autograd.grad((out * probe).sum(), inputs, retain_graph=True)
    ref_in = torch.autograd.grad((ref_out * probe).sum(), inputs, retain_graph=True)
    for a, b in zip(ours_in, ref_in, strict=True):
        assert (a - b).abs().max() <= tol
    (out * probe).sum().backward()
    (ref_out * probe).sum().backward()
    for g, rg in zip(_param_grads(ours), _torch_grads(ref), strict=True):
        assert (g - rg).abs().max() <= tol * 10


def test_padded_rows_give_zeros_where_torch_gives_nan() -> None:
    ref = nn.MultiheadAttention(D, H, batch_first=True)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(2, 4, D, requires_grad=True)
    kpm = torch.tensor([[False] * 4, [True] * 4])  # the second example is all padding
    ref_out, _ = ref(x, x, x, key_padding_mask=kpm)
    assert torch.isnan(ref_out[1]).all()
    out, w = ours(x, mask=masks.from_key_padding_mask(kpm), return_weights=True)
    out.sum().backward()
    assert torch.isfinite(out).all() and (w[1] == 0).all()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    # a query with no key gives zeros, after the output projection too (not its bias)
    assert torch.equal(out[1], torch.zeros(4, D))


def test_grouped_query_attention_equals_repeated_heads() -> None:
    gqa = MultiHeadAttention(D, H, kv_heads=2)
    full = MultiHeadAttention(D, H)
    dh = D // H
    with torch.no_grad():
        for name in ("q_proj", "out_proj"):
            getattr(full, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k_proj", "v_proj"):
            src = getattr(gqa, name)
            dst = getattr(full, name)
            # each kv head serves H / kv_heads query heads
            dst.weight.copy_(src.weight.view(2, dh, D).repeat_interleave(2, dim=0).reshape(D, D))
            dst.bias.copy_(src.bias.view(2, dh).repeat_interleave(2, dim=0).reshape(D))
    x = torch.randn(B, TQ, D)
    assert gqa.k_proj.weight.shape == (2 * dh, D)
    assert torch.allclose(gqa(x, causal=True), full(x, causal=True), atol=1e-6)


def test_return_weights_leaves_output_unchanged_and_stores_nothing() -> None:
    m = MultiHeadAttention(D, H).eval()
    x = torch.randn(B, TQ, D)
    before = set(vars(m))
    plain = m(x)
    out, w = m(x, return_weights=True)
    assert torch.equal(plain, out) and w.shape == (B, H, TQ, TQ)
    assert set(vars(m)) == before


def test_static_cache_reads_memory_once() -> None:
    m = MultiHeadAttention(D, H, kdim=5, vdim=5)
    mem = torch.randn(B, TK, 5)
    x = torch.randn(B, 1, D)
    cache = KVCache(static=True)
    first = m(x, mem, mem, cache=cache)
    again = m(x, cache=cache)
    assert torch.allclose(first, again) and len(cache) == TK


def test_dropout_only_in_training() -> None:
    m = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(B, TQ, D)
    m.eval()
    assert torch.equal(m(x), m(x))
    m.train()
    assert not torch.equal(m(x), m(x))


@pytest.mark.parametrize(
    "make, error, pattern",
    [
        (lambda: MultiHeadAttention(10, 3), ValueError, r"d_model=10 must be divisible by num_heads=3"),
        (lambda: MultiHeadAttention(16, 4, kv_heads=3), ValueError, r"kv_heads=3 must divide num_heads=4"),
        (lambda: MultiHeadAttention(16, 4, dropout=-0.5), ValueError, r"dropout must be .*-0\.5"),
        (lambda: MultiHeadAttention(16, 0), ValueError, "num_heads must be a positive int"),
        (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 16)), ValueError,
         r"query must be \(B, T, 16\), got shape \(2, 16\)"),
        (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 3, 8)), ValueError, r"query must be \(B, T, 16\)"),
        (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 3, 16), mask=torch.zeros(2, 1, 1, 3)), TypeError,
         "mask must be a boolean"),
        (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 3, 16), mask=torch.ones(5, 3, dtype=torch.bool)), ValueError,
         r"mask of shape \(5, 3\) is neither a \(B, Tk\) key-padding mask nor a \(Tq, Tk\) mask of pairs "
         r"for \(B, H, Tq, Tk\) = \(2, 4, 3, 3\)"),
        (lambda: MultiHeadAttention(16, 4)(torch.randn(2, 3, 16), torch.randn(2, 3, 16)), ValueError,
         "pass both key and value"),
        (lambda: MultiHeadAttention.from_torch(nn.Linear(2, 2)), TypeError, "nn.MultiheadAttention"),
        (lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, add_bias_kv=True)), ValueError,
         "add_bias_kv"),
    ],
)
def test_bad_input(make, error, pattern) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=pattern):
        make()
