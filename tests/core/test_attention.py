"""The attention function: parity with a readable formula, safe masking, backends, errors."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnkit
from attnkit import masks
from attnkit.core.functional import attention


def reference(q, k, v, mask=None, bias=None, scale=None):  # type: ignore[no-untyped-def]
    """The formula, written plainly: loops over nothing, hides nothing."""
    h, hkv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(h // hkv, dim=1)
    v = v.repeat_interleave(h // hkv, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    mask = mask.expand_as(scores)
    scores = scores.masked_fill(~mask, -math.inf)
    has_key = mask.any(-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~has_key, 0.0), dim=-1) * has_key
    return weights @ v, weights


B, H, TQ, TK, DH = 2, 4, 5, 7, 8


def mask_cases() -> dict[str, torch.Tensor | None]:
    g = torch.Generator().manual_seed(1)
    return {
        "none": None,
        "padding": masks.from_lengths(torch.tensor([7, 3]), TK),
        "left-padding": masks.from_lengths(torch.tensor([7, 4]), TK).flip(-1),
        "all-masked-batch": masks.from_lengths(torch.tensor([7, 0]), TK),
        "causal-top-left": masks.causal(TQ, TK, align="top_left"),
        "sliding": masks.sliding_window(TQ, TK, 1),
        "per-head-random": torch.rand(B, H, TQ, TK, generator=g) > 0.5,
    }


def inputs(dtype=torch.float64, hkv=H, tq=TQ, tk=TK, dv=DH):  # type: ignore[no-untyped-def]
    q = torch.randn(B, H, tq, DH, dtype=dtype, requires_grad=True)
    k = torch.randn(B, hkv, tk, DH, dtype=dtype, requires_grad=True)
    v = torch.randn(B, hkv, tk, dv, dtype=dtype, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("name", list(mask_cases()))
@pytest.mark.parametrize("backend", ["fused", "math"])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_parity_with_reference(name: str, backend: str, dtype: torch.dtype, tol: float) -> None:
    mask = mask_cases()[name]
    q, k, v = inputs(dtype)
    out, w = attention(q, k, v, mask=mask, return_weights=True, backend=backend)  # type: ignore[arg-type]
    grads = torch.autograd.grad((out * torch.linspace(-1, 1, DH, dtype=dtype)).sum(), (q, k, v))
    ref_out, ref_w = reference(q, k, v, mask)
    ref_grads = torch.autograd.grad((ref_out * torch.linspace(-1, 1, DH, dtype=dtype)).sum(), (q, k, v))
    assert (out - ref_out).abs().max() <= tol
    assert (w - ref_w).abs().max() <= tol
    for g, rg in zip(grads, ref_grads, strict=True):
        assert (g - rg).abs().max() <= tol


@pytest.mark.parametrize("backend", ["fused", "math"])
def test_bias_causal_gqa_and_value_width(backend: str) -> None:
    q, k, v = inputs(torch.float64, hkv=2, dv=3)
    bias = torch.randn(1, H, TQ, TK, dtype=torch.float64, requires_grad=True)
    out, w = attention(q, k, v, bias=bias, causal=True, return_weights=True, backend=backend)  # type: ignore[arg-type]
    ref_out, ref_w = reference(q, k, v, masks.causal(TQ, TK), bias)
    assert out.shape == (B, H, TQ, 3) and w.shape == (B, H, TQ, TK)
    assert torch.allclose(out, ref_out, atol=1e-10) and torch.allclose(w, ref_w, atol=1e-10)
    (gb,) = torch.autograd.grad(out.sum(), bias)
    (rgb,) = torch.autograd.grad(ref_out.sum(), bias)
    assert torch.allclose(gb, rgb, atol=1e-10)


def test_causal_square_uses_is_causal_and_matches_mask() -> None:
    q, k, v = inputs(torch.float64, tk=TQ)
    a = attention(q, k, v, causal=True)
    b = attention(q, k, v, mask=masks.causal(TQ, TQ))
    assert torch.allclose(a, b, atol=1e-12)


def test_weights_do_not_change_output() -> None:
    q, k, v = inputs(torch.float32)
    mask = masks.from_lengths(torch.tensor([7, 2]), TK)
    plain = attention(q, k, v, mask=mask)
    out, _ = attention(q, k, v, mask=mask, return_weights=True)
    assert torch.equal(plain, out)


# The masking matrix: no NaN or inf anywhere, in every dtype, in every path.
MATRIX = {
    "right-padding": (TQ, TK, lambda: masks.from_lengths(torch.tensor([7, 2]), TK), False),
    "left-padding": (TQ, TK, lambda: masks.from_lengths(torch.tensor([7, 2]), TK).flip(-1), False),
    "every-key-masked": (TQ, TK, lambda: masks.from_lengths(torch.tensor([7, 0]), TK), False),
    "causal-tq>tk-top-left": (9, 4, lambda: masks.causal(9, 4, align="top_left"), False),
    "causal-tq>tk-bottom-right": (9, 4, lambda: None, True),
}


@pytest.mark.parametrize("case", list(MATRIX))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", ["fused", "math"])
def test_masking_matrix_is_finite(case: str, dtype: torch.dtype, backend: str) -> None:
    tq, tk, make_mask, causal = MATRIX[case]
    mask = make_mask()
    q, k, v = inputs(dtype, tq=tq, tk=tk)
    out, w = attention(q, k, v, mask=mask, causal=causal, return_weights=True, backend=backend)  # type: ignore[arg-type]
    (out.float().sum() + w.float().sum()).backward()
    for t in (out, w, q.grad, k.grad, v.grad):
        assert t is not None and torch.isfinite(t.float()).all()
    full = masks.combine(mask, masks.causal(tq, tk) if causal else None)
    assert full is not None
    full = full.expand(B, H, tq, tk)
    no_key = ~full.any(-1)  # (B, H, Tq)
    assert (w.float()[~full] == 0).all(), "masked keys must get exactly zero weight"
    sums = w.float().sum(-1)
    assert torch.allclose(sums[~no_key], torch.ones_like(sums[~no_key]), atol=2e-2)
    if no_key.any():
        assert (out[no_key] == 0).all() and (sums[no_key] == 0).all()
        assert q.grad is not None and (q.grad[no_key] == 0).all()


def test_half_precision_softmax_does_not_overflow() -> None:
    q = torch.full((1, 1, 2, 4), 200.0, dtype=torch.float16)
    k = torch.full((1, 1, 3, 4), 200.0, dtype=torch.float16)
    v = torch.randn(1, 1, 3, 4).half()
    for backend in ("fused", "math"):
        out, w = attention(q, k, v, return_weights=True, backend=backend)  # type: ignore[call-overload]
        assert torch.isfinite(out).all() and torch.allclose(w.float().sum(-1), torch.ones(1, 1, 2), atol=1e-3)


def test_backend_is_reported() -> None:
    q, k, v = inputs(torch.float32)
    attention(q, k, v)
    choice = attnkit.last_backend()
    assert choice is not None and choice.name == "fused"
    attention(q, k, v, backend="math")
    choice = attnkit.last_backend()
    assert choice is not None and choice.name == "math" and "backend='math'" in choice.reason
    probed = attnkit.choose_backend(q, k, v)
    assert probed.name == "fused" and probed.kernel  # torch names the kernel it picks


def test_weights_in_graph_computes_the_output_from_the_weights_in_this_context_only() -> None:
    from attnkit.core.dispatch import weights_in_graph

    q, k, v = inputs(torch.float32)
    out, w = attention(q, k, v, return_weights=True)
    assert not w.requires_grad or torch.autograd.grad(out.sum(), [w], allow_unused=True)[0] is None
    with weights_in_graph():
        attention(q, k, v)  # weights not asked for: the fused path as before
        assert attnkit.last_backend().name == "fused"  # type: ignore[union-attr]
        out, w = attention(q, k, v, return_weights=True)
        assert attnkit.last_backend().reason.startswith("weights kept for gradients")  # type: ignore[union-attr]
        (g,) = torch.autograd.grad(out.sum(), [w])  # the output depends on the weights
        assert torch.allclose(g, v.sum(-1)[:, :, None, :].expand_as(g), atol=1e-5)
    attention(q, k, v, return_weights=True)
    assert attnkit.last_backend().name == "fused"  # type: ignore[union-attr]


def test_short_bfloat16_training_on_the_cpu_takes_the_readable_path_up_to_its_limit() -> None:
    from attnkit.core.dispatch import CPU_BF16_MATH_KEYS

    def case(tk: int, dtype: torch.dtype = torch.bfloat16, grad: bool = True, backend: str = "auto"
             ) -> tuple[str, list[torch.Tensor]]:
        g = torch.Generator().manual_seed(tk)
        q, k, v = (torch.randn(2, 2, n, 8, generator=g).to(dtype).requires_grad_(grad) for n in (3, tk, tk))
        mask = masks.from_lengths(torch.tensor([tk, tk - 1]), tk)
        out = attention(q, k, v, mask=mask, backend=backend)  # type: ignore[arg-type]
        choice = attnkit.last_backend()
        assert choice is not None
        grads = list(torch.autograd.grad(out.float().sum(), [q, k, v])) if out.requires_grad else []
        return choice.name, [out, *grads]

    name, math_run = case(CPU_BF16_MATH_KEYS)
    assert name == "math" and "bfloat16 with gradients" in attnkit.last_backend().reason  # type: ignore[union-attr]
    assert case(CPU_BF16_MATH_KEYS + 1)[0] == "fused"  # one key past the limit: flash is faster there
    assert case(CPU_BF16_MATH_KEYS, grad=False)[0] == "fused"  # inference: the fused forward is as fast
    with torch.no_grad():
        assert case(CPU_BF16_MATH_KEYS)[0] == "fused"  # tensors that track gradients, none recorded
    assert case(CPU_BF16_MATH_KEYS, dtype=torch.float32)[0] == "fused"  # float32: flash wins at every length
    fused_name, fused_run = case(CPU_BF16_MATH_KEYS, backend="fused")  # the same numbers as the fused path
    assert fused_name == "fused"
    for got, want in zip(math_run, fused_run, strict=True):
        assert torch.allclose(got.float(), want.float(), atol=3e-2, rtol=3e-2)


def test_dropout_only_when_asked() -> None:
    q, k, v = inputs(torch.float32)
    a = attention(q, k, v, dropout=0.0)
    torch.manual_seed(3)
    b = attention(q, k, v, dropout=0.5)
    assert not torch.allclose(a, b)


@settings(max_examples=25, deadline=None)
@given(
    tq=st.integers(1, 6), tk=st.integers(1, 6), seed=st.integers(0, 10_000),
    masked_fraction=st.floats(0.0, 1.0),
)
def test_property_rows_sum_to_one_or_zero(tq: int, tk: int, seed: int, masked_fraction: float) -> None:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, tq, 4, generator=g)
    k = torch.randn(1, 2, tk, 4, generator=g)
    v = torch.randn(1, 2, tk, 4, generator=g)
    mask = torch.rand(1, 2, tq, tk, generator=g) >= masked_fraction
    _, w = attention(q, k, v, mask=mask, return_weights=True)
    sums = w.sum(-1)
    has = mask.any(-1)
    assert torch.allclose(sums[has], torch.ones_like(sums[has]), atol=1e-5)
    assert (sums[~has] == 0).all() and (w[~mask] == 0).all()


def test_causal_output_never_depends_on_later_positions() -> None:
    q, k, v = inputs(torch.float64, tk=TQ)
    out = attention(q, k, v, causal=True)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, :, -1] += 5.0
    v2[:, :, -1] -= 3.0
    out2 = attention(q, k2, v2, causal=True)
    assert torch.allclose(out[:, :, :-1], out2[:, :, :-1], atol=1e-12)
    assert not torch.allclose(out[:, :, -1], out2[:, :, -1])


def test_permutation_equivariance_without_positions() -> None:
    q, k, v = inputs(torch.float64, tk=TQ)
    perm = torch.randperm(TQ)
    out = attention(q, k, v)
    out_p = attention(q[:, :, perm], k[:, :, perm], v[:, :, perm])
    assert torch.allclose(out[:, :, perm], out_p, atol=1e-12)


def _bad_inputs():  # type: ignore[no-untyped-def]
    q = torch.randn(2, 4, 5, 8)
    k = torch.randn(2, 4, 6, 8)
    v = torch.randn(2, 4, 6, 8)
    return [
        ("3-D q", (q[0], k, v), {}, ValueError, r"q must be 4-D .*\(4, 5, 8\)"),
        ("head widths", (q, torch.randn(2, 4, 6, 7), v), {}, ValueError, r"head widths differ.*Dh=8.*Dh=7"),
        ("kv heads", (q, torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)), {}, ValueError, r"Hkv=3 must divide .*H=4"),
        ("float mask", (q, k, v), {"mask": torch.zeros(2, 1, 1, 6)}, TypeError, r"mask must be a boolean.*bias="),
        ("mask shape", (q, k, v), {"mask": torch.ones(2, 1, 1, 5, dtype=torch.bool)}, ValueError,
         r"mask of shape \(2, 1, 1, 5\) does not broadcast to .*\(2, 4, 5, 6\)"),
        ("negative dropout", (q, k, v), {"dropout": -0.1}, ValueError, r"dropout must be .*-0\.1"),
        ("int bias", (q, k, v), {"bias": torch.zeros(1, dtype=torch.long)}, TypeError, "bias must be a floating"),
        ("dtype mix", (q, k.double(), v), {}, TypeError, "share a dtype"),
        ("not a tensor", (q, k, [1.0]), {}, TypeError, "v must be a torch.Tensor"),
        ("backend", (q, k, v), {"backend": "flash"}, ValueError, "backend must be one of"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda c: c[0])
def test_bad_input_names_the_problem(case) -> None:  # type: ignore[no-untyped-def]
    _, args, kwargs, error, pattern = case
    with pytest.raises(error, match=pattern):
        attention(*args, **kwargs)


@pytest.mark.parametrize("masked", [False, True])
def test_weights_without_a_graph_are_bit_for_bit_those_with_one(masked: bool) -> None:
    """Under no_grad the weights are computed in place (one buffer): same bits, inputs untouched."""
    from attnkit.core.functional import attention_weights

    g = torch.Generator().manual_seed(0)
    both = torch.randn(2, 7, 3, 4, 8, generator=g)  # (B, T, q/k, H, Dh): q and k as head-transposed views
    q, k = both[:, :, 0].transpose(1, 2), both[:, :, 1].transpose(1, 2)
    bias = torch.randn(1, 4, 7, 7, generator=g)
    mask = torch.rand(2, 1, 7, 7, generator=g) > 0.3 if masked else None
    if mask is not None:
        mask[0, 0, 2] = False  # a query with no key: a zero row
    kept = (both.clone(), bias.clone())
    with torch.no_grad():
        fast = attention_weights(q, k, mask=mask, bias=bias)
    graph = attention_weights(q.clone().requires_grad_(), k, mask=mask, bias=bias)
    assert torch.equal(fast, graph.detach())
    assert torch.equal(both, kept[0]) and torch.equal(bias, kept[1])
    if mask is not None:
        assert fast[0, :, 2].abs().sum() == 0
