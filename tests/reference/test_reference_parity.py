"""The NumPy twin against torch autograd and the attnkit torch layers (float64, <= 1e-10)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnkit.blocks.encoder import TransformerEncoderLayer as TorchEncoderLayer
from attnkit.core import functional as tf
from attnkit.layers.linear import LinearAttention as TorchLinearAttention
from attnkit.layers.multi_head import MultiHeadAttention as TorchMHA
from attnkit.layers.pooling import AttentionPooling as TorchAttentionPooling
from attnkit.layers.relative import RelativePositionAttention as TorchRelative
from attnkit.reference.attention import attention_backward, attention_forward
from attnkit.reference.chunked import chunked_attention_backward, chunked_attention_forward
from attnkit.reference.encoder import TransformerEncoderLayer
from attnkit.reference.functional import from_lengths
from attnkit.reference.layers import GELU, LayerNorm, Linear
from attnkit.reference.linear_attention import LinearAttention
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.module import Module
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.optim import SGD, Adam, AdamW, clip_grad_norm
from attnkit.reference.pooling import AttentionPooling
from attnkit.reference.relative import RelativePositionAttention

TOL = 1e-10


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).requires_grad_(a.dtype == np.float64)


def _close(a: np.ndarray, b: torch.Tensor, tol: float = TOL) -> None:
    diff = float(np.max(np.abs(a - b.detach().numpy()))) if a.size else 0.0
    assert diff <= tol, f"max abs diff {diff:.3g} > {tol:g}"


def _copy_into_torch(module: Module, torch_module: torch.nn.Module) -> None:
    state = {k: torch.from_numpy(v.copy()) for k, v in module.parameters().items()}
    torch_module.double().load_state_dict(state, strict=True)


def _check_layer(ours: Module, theirs: torch.nn.Module, x: np.ndarray, call_ours, call_theirs) -> None:
    """Outputs, input gradients and every parameter gradient agree."""
    ours.astype(np.float64).eval()
    _copy_into_torch(ours, theirs)
    theirs.eval()
    out = call_ours(x)
    up = np.random.default_rng(5).standard_normal(out.shape)
    ours.zero_grad()
    dx = ours.backward(up)  # type: ignore[attr-defined]
    xt = _t(x)
    out_t = call_theirs(xt)
    out_t.backward(torch.from_numpy(up))
    _close(out, out_t)
    _close(dx, xt.grad)
    named = dict(theirs.named_parameters())
    for name, g in ours.gradients().items():
        _close(g, named[name].grad)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.mark.parametrize("backend", ["math", "fused"])
@pytest.mark.parametrize("causal,tq,tk,kv", [(False, 5, 5, 4), (True, 5, 5, 2), (True, 7, 4, 1)])
def test_attention_matches_torch_core(backend: str, causal: bool, tq: int, tk: int, kv: int,
                                      rng: np.random.Generator) -> None:
    q = rng.standard_normal((2, 4, tq, 3))
    k, v = rng.standard_normal((2, kv, tk, 3)), rng.standard_normal((2, kv, tk, 2))
    bias = rng.standard_normal((1, 4, tq, tk))
    mask = from_lengths([tk, 2], tk)
    out, cache = attention_forward(q, k, v, mask=mask, bias=bias, causal=causal)
    up = rng.standard_normal(out.shape)
    grads = attention_backward(up, cache)
    qt, kt, vt, bt = _t(q), _t(k), _t(v), _t(bias)
    out_t, w_t = tf.attention(qt, kt, vt, mask=torch.from_numpy(mask), bias=bt, causal=causal,
                              backend=backend, return_weights=True)  # type: ignore[arg-type]
    out_t.backward(torch.from_numpy(up))
    _close(out, out_t)
    _close(cache.weights, w_t)
    for ours, theirs in zip(grads, (qt, kt, vt, bt), strict=True):
        _close(ours, theirs.grad)


def test_chunked_matches_plain_float32(rng: np.random.Generator) -> None:
    q = rng.standard_normal((1, 2, 300, 16)).astype(np.float32)
    k = rng.standard_normal((1, 2, 300, 16)).astype(np.float32)
    v = rng.standard_normal((1, 2, 300, 16)).astype(np.float32)
    mask = from_lengths([250], 300)
    out, cache = attention_forward(q, k, v, mask=mask, causal=True)
    out_c, lse = chunked_attention_forward(q, k, v, mask=mask, causal=True, block_q=64, block_k=48)
    up = rng.standard_normal(out.shape).astype(np.float32)
    plain = attention_backward(up, cache)[:3]
    chunk = chunked_attention_backward(up, q, k, v, out_c, lse, mask=mask, causal=True, block_q=64, block_k=48)
    assert chunk[3] is None
    chunk = chunk[:3]
    assert out_c.dtype == np.float32
    assert np.max(np.abs(out - out_c)) <= 1e-5
    for a, b in zip(plain, chunk, strict=True):
        assert np.max(np.abs(a - b)) <= 1e-5


def test_chunked_with_alibi_bias_matches_plain_float32(rng: np.random.Generator) -> None:
    q, k, v = (rng.standard_normal((1, 4, 200, 16)).astype(np.float32) for _ in range(3))
    slopes = 2.0 ** -np.arange(1, 5, dtype=np.float32)
    distance = np.arange(200, dtype=np.float32)[None, :] - np.arange(200, dtype=np.float32)[:, None]
    bias = (slopes[:, None, None] * distance)[None]  # (1, 4, 200, 200): ALiBi
    out, cache = attention_forward(q, k, v, bias=bias, causal=True)
    out_c, lse = chunked_attention_forward(q, k, v, bias=bias, causal=True, block_q=48, block_k=64)
    up = rng.standard_normal(out.shape).astype(np.float32)
    plain = attention_backward(up, cache)
    chunk = chunked_attention_backward(up, q, k, v, out_c, lse, bias=bias, causal=True, block_q=48, block_k=64)
    assert np.max(np.abs(out - out_c)) <= 1e-5
    for a, b in zip(plain, chunk, strict=True):
        assert a is not None and b is not None and a.shape == b.shape
        assert np.max(np.abs(a - b)) <= 1e-5


def test_chunked_matches_torch_sdpa_float64(rng: np.random.Generator) -> None:
    q, k, v = (rng.standard_normal((2, 2, 33, 8)) for _ in range(3))
    out, lse = chunked_attention_forward(q, k, v, causal=True, block_q=8, block_k=5)
    up = rng.standard_normal(out.shape)
    dq, dk, dv, _ = chunked_attention_backward(up, q, k, v, out, lse, causal=True, block_q=8, block_k=5)
    qt, kt, vt = _t(q), _t(k), _t(v)
    ref = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    ref.backward(torch.from_numpy(up))
    _close(out, ref)
    for a, b in ((dq, qt), (dk, kt), (dv, vt)):
        _close(a, b.grad)


@pytest.mark.parametrize("causal", [False, True])
def test_multi_head_self_attention(causal: bool, rng: np.random.Generator) -> None:
    mask = torch.from_numpy(from_lengths([6, 4], 6))
    ours, theirs = MultiHeadAttention(8, 4, kv_heads=2, rng=rng), TorchMHA(8, 4, kv_heads=2)
    _check_layer(ours, theirs, rng.standard_normal((2, 6, 8)),
                 lambda x: ours.forward(x, mask=mask.numpy(), causal=causal),
                 lambda x: theirs(x, mask=mask, causal=causal))


def test_multi_head_cross_attention(rng: np.random.Generator) -> None:
    ours, theirs = MultiHeadAttention(8, 2, kdim=5, vdim=3, rng=rng), TorchMHA(8, 2, kdim=5, vdim=3)
    ours.astype(np.float64).eval()
    _copy_into_torch(ours, theirs)
    q, k, v = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 6, 5)), rng.standard_normal((2, 6, 3))
    out = ours.forward(q, k, v)
    up = rng.standard_normal(out.shape)
    grads = ours.backward(up)
    ts = [_t(a) for a in (q, k, v)]
    out_t = theirs(*ts)
    out_t.backward(torch.from_numpy(up))
    _close(out, out_t)
    for g, t in zip(grads, ts, strict=True):
        _close(g, t.grad)


def test_relative_position_attention(rng: np.random.Generator) -> None:
    mask = torch.from_numpy(from_lengths([7, 5], 7))
    ours, theirs = RelativePositionAttention(8, 2, 3, rng=rng), TorchRelative(8, 2, 3)
    _check_layer(ours, theirs, rng.standard_normal((2, 7, 8)),
                 lambda x: ours.forward(x, mask=mask.numpy(), causal=True),
                 lambda x: theirs(x, mask=mask, causal=True))


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention(causal: bool, rng: np.random.Generator) -> None:
    mask = torch.from_numpy(from_lengths([6, 3], 6))
    ours, theirs = LinearAttention(8, 2, causal, rng=rng), TorchLinearAttention(8, 2, causal)
    _check_layer(ours, theirs, rng.standard_normal((2, 6, 8)),
                 lambda x: ours.forward(x, mask=mask.numpy()), lambda x: theirs(x, mask=mask))


@pytest.mark.parametrize("hidden", [None, 5])
def test_attention_pooling(hidden: int | None, rng: np.random.Generator) -> None:
    mask = from_lengths([6, 2], 6)[:, 0, 0]
    ours, theirs = AttentionPooling(8, hidden_dim=hidden, rng=rng), TorchAttentionPooling(8, hidden_dim=hidden)
    _check_layer(ours, theirs, rng.standard_normal((2, 6, 8)),
                 lambda x: ours.forward(x, mask), lambda x: theirs(x, mask=torch.from_numpy(mask)))


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_encoder_layer(norm_first: bool, activation: str, rng: np.random.Generator) -> None:
    mask = torch.from_numpy(from_lengths([5, 3], 5))
    ours = TransformerEncoderLayer(8, 2, 12, norm_first=norm_first, activation=activation, rng=rng)
    theirs = TorchEncoderLayer(8, 2, 12, norm_first=norm_first, activation=activation)
    _check_layer(ours, theirs, rng.standard_normal((2, 5, 8)),
                 lambda x: ours.forward(x, mask.numpy()), lambda x: theirs(x, mask=mask))


def test_encoder_layer_matches_pytorch_own(rng: np.random.Generator) -> None:
    """Against ``nn.TransformerEncoderLayer`` (batch-first, post-norm, ReLU) with copied weights."""
    ours = TransformerEncoderLayer(8, 2, 12, rng=rng).astype(np.float64).eval()
    theirs = torch.nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, batch_first=True).double().eval()
    p = {k: torch.from_numpy(v.copy()) for k, v in ours.parameters().items()}
    sa = theirs.self_attn
    with torch.no_grad():
        sa.in_proj_weight.copy_(torch.cat([p[f"self_attn.{n}_proj.weight"] for n in "qkv"]))
        sa.in_proj_bias.copy_(torch.cat([p[f"self_attn.{n}_proj.bias"] for n in "qkv"]))
        sa.out_proj.weight.copy_(p["self_attn.out_proj.weight"])
        sa.out_proj.bias.copy_(p["self_attn.out_proj.bias"])
        for name in ("linear1", "linear2"):
            getattr(theirs, name).weight.copy_(p[f"ff.{name}.weight"])
            getattr(theirs, name).bias.copy_(p[f"ff.{name}.bias"])
        for name in ("norm1", "norm2"):
            getattr(theirs, name).weight.copy_(p[f"{name}.weight"])
            getattr(theirs, name).bias.copy_(p[f"{name}.bias"])
    x = rng.standard_normal((2, 5, 8))
    padding = np.array([[False] * 5, [False] * 3 + [True] * 2])  # torch: True = ignore
    out = ours.forward(x, (~padding)[:, None, None, :])
    ref = theirs(torch.from_numpy(x), src_key_padding_mask=torch.from_numpy(padding))
    _close(out, ref)


def test_small_layers_against_torch(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 4, 6))
    for ours, theirs in ((LayerNorm(6), torch.nn.LayerNorm(6)), (Linear(6, 5, rng=rng), torch.nn.Linear(6, 5))):
        _check_layer(ours, theirs, x, ours.forward, theirs)
    for approx in ("none", "tanh"):
        g = GELU(approx)
        out = g.forward(x)
        up = rng.standard_normal(out.shape)
        xt = _t(x)
        ref = F.gelu(xt, approximate=approx)
        ref.backward(torch.from_numpy(up))
        _close(out, ref)
        _close(g.backward(up), xt.grad)


def test_cross_entropy(rng: np.random.Generator) -> None:
    logits, labels = rng.standard_normal((6, 4)), np.array([0, 3, 1, 1, 2, 0])
    loss = SoftmaxCrossEntropy()
    value = loss.forward(logits, labels)
    zt = _t(logits)
    ref = F.cross_entropy(zt, torch.from_numpy(labels))
    ref.backward()
    assert abs(value - ref.item()) <= TOL
    _close(loss.backward(), zt.grad)


@pytest.mark.parametrize(
    "ours_cls, kwargs, torch_cls",
    [
        (SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}, torch.optim.SGD),
        (SGD, {"lr": 0.1, "momentum": 0.9, "nesterov": True}, torch.optim.SGD),
        (Adam, {"lr": 0.01, "weight_decay": 0.01}, torch.optim.Adam),
        (AdamW, {"lr": 0.01, "weight_decay": 0.1}, torch.optim.AdamW),
    ],
)
def test_optimizers_match_torch(ours_cls, kwargs, torch_cls, rng: np.random.Generator) -> None:
    params = {"a": rng.standard_normal((3, 2)), "b": rng.standard_normal(4)}
    grads = {k: np.zeros_like(v) for k, v in params.items()}
    tparams = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    opt = ours_cls(params, grads, **kwargs)
    topt = torch_cls(list(tparams.values()), **kwargs)
    for _ in range(4):
        for k in params:
            g = rng.standard_normal(params[k].shape)
            grads[k][...] = g
            tparams[k].grad = torch.from_numpy(g.copy())
        opt.step()
        topt.step()
    for k in params:
        _close(params[k], tparams[k])


def test_clip_grad_norm_matches_torch(rng: np.random.Generator) -> None:
    grads = {"a": rng.standard_normal((3, 3)) * 5, "b": rng.standard_normal(2)}
    tp = [torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.float64)) for g in grads.values()]
    for p, g in zip(tp, grads.values(), strict=True):
        p.grad = torch.from_numpy(g.copy())
    total = clip_grad_norm(grads, 1.0)
    ref = torch.nn.utils.clip_grad_norm_(tp, 1.0)
    assert abs(total - ref.item()) <= TOL
    for g, p in zip(grads.values(), tp, strict=True):
        _close(g, p.grad)


@pytest.mark.parametrize("logit_scale", [1.0, 40.0])
def test_chunked_large_logits_and_threads(logit_scale: float, rng: np.random.Generator) -> None:
    """Logits far outside [-60, 60] take the max-shift path; threads change nothing."""
    q = (rng.standard_normal((2, 3, 40, 8)) * logit_scale).astype(np.float32)
    k, v = rng.standard_normal((2, 3, 50, 8)).astype(np.float32), rng.standard_normal((2, 3, 50, 4)).astype(np.float32)
    mask = from_lengths([50, 30], 50)
    out, cache = attention_forward(q, k, v, mask=mask)
    one, lse1 = chunked_attention_forward(q, k, v, mask=mask, block_q=16, block_k=16)
    two, lse2 = chunked_attention_forward(q, k, v, mask=mask, block_q=16, block_k=16, workers=2)
    assert np.isfinite(one).all() and np.max(np.abs(one - out)) <= 1e-5
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(lse1, lse2)
    scores = np.where(mask, np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k) / np.sqrt(8), -np.inf)
    lse_ref = np.log(np.exp(scores - scores.max(-1, keepdims=True)).sum(-1)) + scores.max(-1)
    assert np.max(np.abs(lse1 - lse_ref) / np.maximum(1.0, np.abs(lse_ref))) <= 1e-5
