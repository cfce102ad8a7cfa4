"""torch.compile(fullgraph=True) of attention, MultiHeadAttention, the encoder layer and a model.

Every case compiles with no graph break (``fullgraph=True`` raises at the first
one; ``torch._dynamo.explain`` counts them) and gives eager's outputs and
gradients. Most cases use the ``aot_eager`` backend, which traces forward and
backward through AOTAutograd like inductor does but skips code generation; one
case runs inductor itself (it compiles C++, about 15 s on a busy 2-core CPU).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import torch

import attnkit
from attnkit import masks
from attnkit.blocks import (
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
    TransformerLayerConfig,
)
from attnkit.core.functional import BackendChoice, last_backend
from attnkit.layers import MultiHeadAttention
from attnkit.models import DocumentClassifier, DocumentClassifierConfig, build_model

B, H, T, DH = 2, 4, 24, 8
BS = 8  # small blocks: empty, full and partial blocks all occur

Tensors = tuple[torch.Tensor, ...]


def _qkv(hkv: int = H) -> Tensors:
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, DH, generator=g, requires_grad=True)
    k = torch.randn(B, hkv, T, DH, generator=g, requires_grad=True)
    v = torch.randn(B, hkv, T, DH, generator=g, requires_grad=True)
    return q, k, v


def _alibi(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor,
           ki: torch.Tensor) -> torch.Tensor:
    return score - (h + 1) * 0.25 * (qi - ki).abs()


def _softcap(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, qi: torch.Tensor,
             ki: torch.Tensor) -> torch.Tensor:
    return 2.0 * torch.tanh(score / 2.0)


PADDING = masks.from_lengths(torch.tensor([T, 0]), T)  # the second example has no key at all
IDS = torch.tensor([0] * 9 + [1] * 11 + [-1] * 4)
BIAS = torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(1))
NEG_BIAS = BIAS.masked_fill(torch.eye(T, dtype=torch.bool), float("-inf"))


def _block(mod: Callable[..., torch.Tensor], b: int | None = None) -> masks.BlockMask:
    return masks.create_block_mask(mod, b, None, T, T, block_size=BS)


CAUSAL_WINDOW = masks.and_mods(masks.causal_mod, masks.sliding_window_mod(6))
# name -> (keyword arguments of attention, key/value heads). Block masks are built afresh for
# each run, so that the compiled call meets a mask that no eager call has used (and cached) yet.
CASES: dict[str, tuple[Callable[[], dict[str, object]], int]] = {
    "dense": (lambda: {}, H),
    "padding-mask": (lambda: {"mask": PADDING}, H),
    "causal": (lambda: {"causal": True}, H),
    "gqa-causal": (lambda: {"causal": True}, 2),
    "bias-weights": (lambda: {"mask": PADDING, "bias": BIAS, "return_weights": True}, H),
    "neg-inf-bias-weights": (lambda: {"bias": NEG_BIAS, "return_weights": True}, H),
    "math": (lambda: {"mask": PADDING, "bias": BIAS, "backend": "math"}, H),
    "score-mod-dense": (lambda: {"mask": PADDING, "score_mod": _alibi}, H),
    "score-mod-only": (lambda: {"score_mod": _softcap}, H),
    "block": (lambda: {"mask": _block(CAUSAL_WINDOW)}, H),
    "block-gqa": (lambda: {"mask": _block(CAUSAL_WINDOW)}, 2),
    "block-document-rows-without-keys": (lambda: {"mask": _block(masks.document_mod(IDS))}, H),
    "block-score-mod": (lambda: {"mask": _block(CAUSAL_WINDOW), "score_mod": _alibi}, H),
    "block-weights": (lambda: {"mask": _block(masks.causal_mod), "return_weights": True}, H),
    "block-math": (lambda: {"mask": _block(masks.causal_mod), "backend": "math"}, H),
}


def _attend(kwargs: dict[str, object]) -> Callable[..., object]:
    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
        return attnkit.attention(q, k, v, **kwargs)  # type: ignore[arg-type]

    return fn


def _run(fn: Callable[..., object], *xs: torch.Tensor) -> Tensors:
    """Outputs of ``fn(*xs)`` and the gradients of a fixed upstream through them."""
    result = fn(*xs)
    outs = result if isinstance(result, tuple) else (result,)
    g = torch.Generator().manual_seed(2)
    loss = sum((o * torch.randn(o.shape, generator=g)).sum() for o in outs)  # type: ignore[union-attr]
    grads = torch.autograd.grad(loss, xs)
    return (*[o.detach() for o in outs], *grads)  # type: ignore[union-attr]


def _assert_same(got: Tensors, want: Tensors) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert not a.isnan().any()
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> None:
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(CASES))
def test_attention_compiles_without_graph_break_and_matches_eager(name: str) -> None:
    make, hkv = CASES[name]
    compiled = torch.compile(_attend(make()), backend="aot_eager", fullgraph=True)  # raises at a break
    got = _run(compiled, *_qkv(hkv))
    _assert_same(got, _run(_attend(make()), *_qkv(hkv)))


@pytest.mark.parametrize("name", list(CASES))
def test_explain_counts_no_graph_break(name: str) -> None:
    make, hkv = CASES[name]
    report = torch._dynamo.explain(_attend(make()))(*_qkv(hkv))
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1


def test_explain_sees_a_graph_break_when_there_is_one() -> None:
    """Negative control: the logging check attention skips under compile does break a graph."""
    log = logging.getLogger("attnkit.attention")

    def eager_only(q: torch.Tensor) -> torch.Tensor:
        q = q * 2
        if log.isEnabledFor(logging.DEBUG):
            q = q + 1
        return q.sum()

    assert torch._dynamo.explain(eager_only)(torch.ones(2)).graph_break_count >= 1


def test_compiled_calls_leave_the_eager_record_alone(caplog: pytest.LogCaptureFixture) -> None:
    q, k, v = _qkv()
    with caplog.at_level(logging.DEBUG, logger="attnkit.attention"):
        attnkit.attention(q, k, v, backend="math")
        assert last_backend() == BackendChoice("math", "requested with backend='math'", route="math")
        compiled = torch.compile(lambda q, k, v: attnkit.attention(q, k, v, mask=PADDING),
                                 backend="aot_eager", fullgraph=True)
        compiled(q, k, v)  # debug logging on: still one graph, no record, no log line
        assert last_backend().name == "math"  # type: ignore[union-attr]
        assert sum("attention backend" in r.getMessage() for r in caplog.records) == 1
        attnkit.attention(q, k, v, mask=PADDING)  # eager still says what ran and why
    assert last_backend().name == "fused"  # type: ignore[union-attr]
    assert sum("attention backend fused" in r.getMessage() for r in caplog.records) == 1


def test_bad_arguments_keep_their_message_when_compiled() -> None:
    """Compiled code checks shapes as eager code does; fullgraph=True wraps the error, message included."""
    q, k, v = _qkv()
    other = masks.create_block_mask(masks.causal_mod, None, None, 2 * T, 2 * T, block_size=BS)
    wrong_mask = torch.ones(3, 1, T, T, dtype=torch.bool)
    message = r"BlockMask built for \(B, H, Tq, Tk\) = \(None, None, 48, 48\) cannot be used with"
    with pytest.raises(ValueError, match=message):
        torch.compile(attnkit.attention, backend="aot_eager")(q, k, v, mask=other)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 24, 24\) does not broadcast"):
        torch.compile(attnkit.attention, backend="aot_eager")(q, k, v, mask=wrong_mask)
    with pytest.raises(Exception, match=message):
        torch.compile(attnkit.attention, backend="aot_eager", fullgraph=True)(q, k, v, mask=other)


def _layer_run(module: torch.nn.Module, call: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor],
               x: torch.Tensor) -> Tensors:
    out = call(module, x)
    g = torch.Generator().manual_seed(3)
    loss = (out * torch.randn(out.shape, generator=g)).sum()
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [x, *params])
    return (out.detach(), *grads)


LAYER_MASKS: dict[str, Callable[[], dict[str, object]]] = {
    "padding": lambda: {"mask": PADDING},
    "causal": lambda: {"causal": True},
    "block": lambda: {"mask": _block(masks.and_mods(CAUSAL_WINDOW, masks.document_mod(IDS)))},
}


@pytest.mark.parametrize("kind", list(LAYER_MASKS))
@pytest.mark.parametrize("which", ["multi-head", "encoder-layer"])
def test_layers_compile_forward_and_backward(which: str, kind: str) -> None:
    torch.manual_seed(0)
    module: torch.nn.Module
    if which == "multi-head":
        module = MultiHeadAttention(32, H, kv_heads=2).eval()
    else:
        module = TransformerEncoderLayer(32, H, 48, norm_first=True).eval()
    x = torch.randn(B, T, 32, requires_grad=True)
    compiled = torch.compile(module, backend="aot_eager", fullgraph=True)
    kwargs, eager_kwargs = LAYER_MASKS[kind](), LAYER_MASKS[kind]()
    got = _layer_run(module, lambda m, x: compiled(x, **kwargs), x)
    _assert_same(got, _layer_run(module, lambda m, x: m(x, **eager_kwargs), x))


def test_document_classifier_compiles_once_for_every_batch_shape() -> None:
    """dynamic=True: one graph serves other batch sizes and lengths, padding included."""
    from torch._dynamo.utils import counters

    layer = TransformerLayerConfig(16, H, 32, activation="gelu", norm_first=True)
    config = DocumentClassifierConfig(vocab_size=40, num_classes=3, layer=layer,
                                      num_layers=1, max_len=32)
    model = DocumentClassifier(config).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=True)  # dynamo alone
    counters.clear()
    for lengths in ([7, 3], [11, 2, 5], [4, 4, 4, 1]):
        lens = torch.tensor(lengths)
        ids = torch.randint(1, 40, (len(lengths), max(lengths)))
        torch.testing.assert_close(compiled(ids, lens), model(ids, lens), atol=1e-6, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]


def _traced(name: str) -> tuple[Callable[..., object], Tensors]:
    x, memory = torch.randn(B, T, 16), torch.randn(B, 7, 16)
    memory_mask = masks.from_lengths(torch.tensor([7, 3]), 7)
    ids, lengths = torch.randint(1, 40, (3, 9)), torch.tensor([9, 5, 2])
    stack = TransformerLayerConfig(16, H, 32)
    if name == "decoder-layer":
        layer = TransformerDecoderLayer(16, H, 32).eval()
        return lambda x, m: layer(x, m, causal=True, memory_mask=memory_mask), (x, memory)
    if name == "decoder-stack":
        decoder = TransformerDecoder(stack, 2).eval()
        return lambda x, m: decoder(x, m, causal=True, memory_mask=memory_mask), (x, memory)
    if name == "encoder-stack":
        encoder = TransformerEncoder(stack, 2).eval()
        return lambda x: encoder(x, mask=PADDING), (x,)
    if name == "bert-classifier":
        bert = build_model("bert", {"vocab_size": 40, "num_classes": 3, "hidden_size": 16, "num_hidden_layers": 2,
                                    "num_attention_heads": H, "intermediate_size": 32, "max_position_embeddings": 32,
                                    "cls_token_id": 1, "sep_token_id": 2, "max_len": 30}).eval()
        return bert, (ids, lengths)
    config = {"vocab_size": 40, "num_classes": 3, "layer": {"d_model": 16, "num_heads": H, "d_ff": 32}, "max_len": 32}
    if name == "document-parameter-free":
        config.update(num_layers=0, parameter_free_layers=1, pooling="mean", positional="learned")
    return build_model("document", config).eval(), (ids, lengths)


@pytest.mark.parametrize("name", ["decoder-layer", "decoder-stack", "encoder-stack", "bert-classifier",
                                  "document", "document-parameter-free"])
def test_blocks_and_models_trace_as_one_graph(name: str) -> None:
    fn, args = _traced(name)
    report = torch._dynamo.explain(fn)(*args)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1


@pytest.mark.slow
def test_inductor_compiles_attention_forward_and_backward() -> None:
    """The real compiler: C++ kernels for the padded, biased attention and its backward."""

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> object:
        return attnkit.attention(q, k, v, mask=PADDING, bias=BIAS)

    want = _run(fn, *_qkv())
    compiled = torch.compile(fn, backend="inductor", fullgraph=True)
    got = _run(compiled, *_qkv())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
