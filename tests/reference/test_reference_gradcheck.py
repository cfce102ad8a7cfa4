"""Every hand-written NumPy backward against central differences (float64)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from attnkit.reference.attention import ScaledDotProductAttention
from attnkit.reference.checking import GradcheckError, gradcheck, module_gradcheck
from attnkit.reference.chunked import ChunkedAttention
from attnkit.reference.encoder import TransformerEncoder, TransformerEncoderLayer
from attnkit.reference.functional import from_lengths, safe_softmax, softmax_backward
from attnkit.reference.layers import (
    GELU,
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    Linear,
    ReLU,
    SinusoidalPositionalEncoding,
    Softmax,
)
from attnkit.reference.linear_attention import LinearAttention
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.models import NUMPY_LAYER, ClassifierConfig, DocumentClassifier, TransformerClassifier
from attnkit.reference.module import Module
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.pooling import AttentionPooling, MeanPooling
from attnkit.reference.relative import RelativePositionAttention


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _x(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


MASK = from_lengths([5, 3], 5)  # second example has two padded keys


@pytest.mark.parametrize(
    "make, call",
    [
        (lambda g: Linear(4, 3, rng=g), lambda m, x: m.forward(x)),
        (lambda g: LayerNorm(4), lambda m, x: m.forward(x)),
        (lambda g: ReLU(), lambda m, x: m.forward(x)),
        (lambda g: GELU(), lambda m, x: m.forward(x)),
        (lambda g: GELU("tanh"), lambda m, x: m.forward(x)),
        (lambda g: Softmax(), lambda m, x: m.forward(x, np.array([True, True, False, True]))),
        (lambda g: SinusoidalPositionalEncoding(4), lambda m, x: m.forward(x)),
        (lambda g: FeedForward(4, 6, activation="gelu", rng=g), lambda m, x: m.forward(x)),
        (lambda g: FeedForward(4, 6, activation="relu", rng=g), lambda m, x: m.forward(x)),
        (lambda g: MeanPooling(), lambda m, x: m.forward(x, MASK)),
        (lambda g: AttentionPooling(4, rng=g), lambda m, x: m.forward(x, MASK)),
        (lambda g: AttentionPooling(4, hidden_dim=3, rng=g), lambda m, x: m.forward(x, MASK)),
    ],
    ids=["linear", "layernorm", "relu", "gelu", "gelu-tanh", "softmax", "positions", "ff-gelu",
         "ff-relu", "mean-pool", "attn-pool", "attn-pool-hidden"],
)
def test_simple_layers(make, call, rng: np.random.Generator) -> None:
    module = make(rng)
    x = _x(rng, 2, 5, 4) + 0.1  # keep ReLU inputs away from the kink
    result = module_gradcheck(module, {"x": x}, lambda x: call(module, x))
    assert result.worst < 1e-6


def test_dropout_with_fixed_mask(rng: np.random.Generator) -> None:
    drop = Dropout(0.4)

    def call(x: np.ndarray) -> np.ndarray:
        drop.rng = np.random.default_rng(7)  # same mask on every evaluation
        return drop.forward(x)

    assert module_gradcheck(drop, {"x": _x(rng, 3, 4)}, call).worst < 1e-6
    assert np.count_nonzero(drop._keep == 0) > 0  # something was dropped


def test_embedding_parameter_gradient(rng: np.random.Generator) -> None:
    ids = np.array([[1, 2, 2, 0], [5, 1, 0, 0]])
    up = rng.standard_normal((2, 4, 3))
    emb = Embedding(6, 3, rng=rng).astype(np.float64)
    emb.zero_grad()
    emb.forward(ids)
    emb.backward(up)
    w = emb.params["weight"]
    gradcheck(lambda: float(np.sum(emb.forward(ids) * up)), {"w": w}, {"w": emb.grads["weight"]},
              max_elements=None)
    padded = Embedding(6, 3, padding_idx=0, rng=rng)
    padded.forward(ids)
    padded.backward(up)
    assert np.all(padded.grads["weight"][0] == 0.0)  # the padding row never learns (as torch)
    assert np.allclose(padded.grads["weight"][1:], emb.grads["weight"][1:], atol=1e-6)


def test_cross_entropy(rng: np.random.Generator) -> None:
    loss = SoftmaxCrossEntropy()
    logits = _x(rng, 5, 3)
    labels = np.array([0, 2, 1, 1, 0])
    loss.forward(logits, labels)
    g = loss.backward()
    gradcheck(lambda: loss.forward(logits, labels), {"z": logits}, {"z": g}, max_elements=None)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_attention_with_mask_bias_gqa(causal: bool, kv_heads: int, rng: np.random.Generator) -> None:
    attn = ScaledDotProductAttention()
    q, k, v = _x(rng, 2, 4, 5, 3), _x(rng, 2, kv_heads, 5, 3), _x(rng, 2, kv_heads, 5, 2)
    bias = _x(rng, 1, 4, 5, 5)
    mask = MASK.copy()
    mask = np.broadcast_to(mask, (2, 1, 5, 5)).copy()
    mask[1, 0, 0, :] = False  # one query row with nothing to attend

    def call(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return attn.forward(q, k, v, mask=mask, bias=bias, causal=causal)

    out = call(q, k, v, bias)
    assert np.all(out[1, :, 0] == 0.0)
    up = rng.standard_normal(out.shape)
    dq, dk, dv = attn.backward(up)
    assert attn.bias_grad is not None and attn.bias_grad.shape == bias.shape
    assert np.all(dq[1, :, 0] == 0.0)  # the empty row gets zero gradient
    grads = {"q": dq, "k": dk, "v": dv, "bias": attn.bias_grad}
    gradcheck(lambda: float(np.sum(call(q, k, v, bias) * up)), {"q": q, "k": k, "v": v, "bias": bias}, grads)


def test_attention_dropout_with_fixed_rng(rng: np.random.Generator) -> None:
    attn = ScaledDotProductAttention(dropout=0.3)
    q, k, v = _x(rng, 1, 2, 4, 3), _x(rng, 1, 2, 4, 3), _x(rng, 1, 2, 4, 3)

    def call(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        attn.rng = np.random.default_rng(3)
        return attn.forward(q, k, v)

    assert module_gradcheck(attn, {"q": q, "k": k, "v": v}, call).worst < 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_attention(causal: bool, rng: np.random.Generator) -> None:
    attn = ChunkedAttention(block_q=3, block_k=2)
    q, k, v = _x(rng, 2, 2, 7, 3), _x(rng, 2, 1, 6, 3), _x(rng, 2, 1, 6, 4)
    mask = from_lengths([6, 4], 6)

    def call(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        return attn.forward(q, k, v, mask=mask, causal=causal)

    assert module_gradcheck(attn, {"q": q, "k": k, "v": v}, call).worst < 1e-6


@pytest.mark.parametrize("bias_shape", [(2, 2, 7, 6), (1, 2, 7, 6), (2, 1, 1, 6), (7, 1)])
def test_chunked_attention_with_bias(bias_shape: tuple[int, ...], rng: np.random.Generator) -> None:
    attn = ChunkedAttention(block_q=3, block_k=2)
    q, k, v = _x(rng, 2, 2, 7, 3), _x(rng, 2, 1, 6, 3), _x(rng, 2, 1, 6, 4)
    bias = _x(rng, *bias_shape)
    mask = from_lengths([6, 4], 6)

    def call(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return attn.forward(q, k, v, mask=mask, bias=bias, causal=True)

    up = rng.standard_normal(call(q, k, v, bias).shape)
    dq, dk, dv = attn.backward(up)
    assert attn.bias_grad is not None and attn.bias_grad.shape == bias.shape
    grads = {"q": dq, "k": dk, "v": dv, "bias": attn.bias_grad}
    gradcheck(lambda: float(np.sum(call(q, k, v, bias) * up)), {"q": q, "k": k, "v": v, "bias": bias}, grads)


@pytest.mark.parametrize("cross", [False, True])
def test_multi_head_attention(cross: bool, rng: np.random.Generator) -> None:
    if cross:
        mha = MultiHeadAttention(4, 2, kv_heads=1, kdim=3, vdim=5, rng=rng)
        inputs = {"q": _x(rng, 2, 4, 4), "k": _x(rng, 2, 5, 3), "v": _x(rng, 2, 5, 5)}
        result = module_gradcheck(mha, inputs, lambda q, k, v: mha.forward(q, k, v, mask=MASK))
    else:
        mha = MultiHeadAttention(4, 2, rng=rng)
        result = module_gradcheck(mha, {"x": _x(rng, 2, 5, 4)},
                                  lambda x: mha.forward(x, mask=MASK, causal=True))
    assert result.worst < 1e-6


def test_relative_position_attention(rng: np.random.Generator) -> None:
    rel = RelativePositionAttention(4, 2, 2, rng=rng)
    result = module_gradcheck(rel, {"x": _x(rng, 2, 5, 4)}, lambda x: rel.forward(x, mask=MASK))
    assert "param:rel_k" in result.errors and "param:rel_v" in result.errors
    assert result.worst < 1e-6


@pytest.mark.parametrize("causal", [False, True])
def test_linear_attention(causal: bool, rng: np.random.Generator) -> None:
    lin = LinearAttention(4, 2, causal, rng=rng)
    assert module_gradcheck(lin, {"x": _x(rng, 2, 5, 4)}, lambda x: lin.forward(x, mask=MASK)).worst < 1e-6


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder(norm_first: bool, rng: np.random.Generator) -> None:
    enc = TransformerEncoder(2, 4, 2, 6, norm_first=norm_first, activation="gelu", rng=rng)
    assert module_gradcheck(enc, {"x": _x(rng, 2, 5, 4)}, lambda x: enc.forward(x, MASK)).worst < 1e-6


def test_encoder_layer_with_dropout(rng: np.random.Generator) -> None:
    layer = TransformerEncoderLayer(4, 2, 6, dropout=0.2, rng=rng)
    drops = [m for _, m in layer.named_modules() if isinstance(m, Dropout)]

    def call(x: np.ndarray) -> np.ndarray:
        for i, d in enumerate(drops):
            d.rng = np.random.default_rng(i)
        layer.self_attn.rng = np.random.default_rng(99)
        return layer.forward(x, MASK)

    assert module_gradcheck(layer, {"x": _x(rng, 2, 5, 4)}, call).worst < 1e-6


def _model_check(model: Module, ids: np.ndarray, labels: np.ndarray) -> float:
    model.astype(np.float64).eval()
    loss = SoftmaxCrossEntropy()
    model.zero_grad()
    loss.forward(model.forward(ids), labels)  # type: ignore[attr-defined]
    model.backward(loss.backward())  # type: ignore[attr-defined]
    grads = {k: v.copy() for k, v in model.gradients().items()}
    return gradcheck(lambda: loss.forward(model.forward(ids), labels),  # type: ignore[attr-defined]
                     model.parameters(), grads, max_elements=12).worst


@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_transformer_classifier_end_to_end(pooling: str) -> None:
    cfg = ClassifierConfig(vocab_size=12, num_layers=2, pooling=pooling,
                           layer=replace(NUMPY_LAYER, d_model=8, num_heads=2, d_ff=8,
                                         norm_first=pooling == "attention"))
    ids = np.array([[3, 4, 5, 0], [7, 2, 0, 0], [1, 11, 9, 8]])
    assert _model_check(TransformerClassifier(cfg), ids, np.array([0, 1, 1])) < 1e-6


def test_document_classifier_end_to_end() -> None:
    cfg = ClassifierConfig(kind="document", vocab_size=12, num_classes=3,
                           layer=replace(NUMPY_LAYER, d_model=8, num_heads=2))
    ids = np.array([[3, 4, 5, 0], [7, 2, 0, 0], [1, 11, 9, 8]])
    assert _model_check(DocumentClassifier(cfg), ids, np.array([0, 2, 1])) < 1e-6


def test_negative_control_wrong_softmax_gradient_is_caught(rng: np.random.Generator) -> None:
    """Drop the ``- rowsum(dP * P)`` term of the softmax backward: the check must fail."""
    s = _x(rng, 3, 5)
    up = _x(rng, 3, 5)
    p = safe_softmax(s)
    right = softmax_backward(p, up)
    wrong = p * up
    f = lambda: float(np.sum(safe_softmax(s) * up))  # noqa: E731
    assert gradcheck(f, {"s": s}, {"s": right}).worst < 1e-8
    with pytest.raises(GradcheckError, match="'s'"):
        gradcheck(f, {"s": s}, {"s": wrong})


def test_negative_control_wrong_layer_backward_is_caught(rng: np.random.Generator) -> None:
    """A LayerNorm whose backward forgets the mean terms is caught through module_gradcheck."""

    class BrokenLayerNorm(LayerNorm):
        def backward(self, grad: np.ndarray) -> np.ndarray:
            super().backward(grad)
            xhat, inv = self._cache  # type: ignore[misc]
            return grad * self.params["weight"] * inv

    ln = BrokenLayerNorm(4)
    with pytest.raises(GradcheckError, match="'x'"):
        module_gradcheck(ln, {"x": _x(rng, 2, 3, 4)}, lambda x: ln.forward(x))
