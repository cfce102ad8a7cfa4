"""Capture finds attention by behaviour, names every call, nests and runs in threads without mixing."""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

from attnkit.inspect import capture, find_attention
from attnkit.inspect.coverage import tiny_inputs, tiny_model

pytestmark = pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")


class Mixer(nn.Module):
    """Cross-covariance-like attention whose class name says neither attention nor attn."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return (q.transpose(-2, -1) @ k).softmax(-1).matmul(v.transpose(-2, -1)).transpose(-2, -1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Mixer()


class SelfAttentionBlock(nn.Module):  # a container named like attention, holding the attention-like module
    def __init__(self) -> None:
        super().__init__()
        self.inner = Mixer()


def test_attention_without_the_name_is_listed() -> None:
    model = nn.ModuleDict({"a": Block(), "b": SelfAttentionBlock(), "mha": nn.MultiheadAttention(8, 2)})
    assert find_attention(model)[1] == ["a.attn (Mixer)", "b.inner (Mixer)"]  # the child, not its container
    with pytest.raises(ValueError, match=r"cannot be captured: \['attn \(Mixer\)'\]"):
        with capture(Block()):
            pass
    with pytest.raises(ValueError, match=r"'a' \(Block\) cannot be captured"):
        with capture(model, modules=["a"]):
            pass


def test_a_linear_layer_with_a_softmax_head_is_not_attention() -> None:
    class Classifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).softmax(-1)
    with pytest.raises(ValueError, match="has no attention module"):
        with capture(Classifier()):
            pass


def test_a_top_level_module_is_named_after_its_class() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 3, 8)
    with capture(mha, modules=[mha]) as cap:
        mha(x, x, x)
        mha(x, x, x)
    assert list(cap.weights) == ["MultiheadAttention", "MultiheadAttention#1"]
    assert cap.roles == {"MultiheadAttention": "self", "MultiheadAttention#1": "self"}


def test_nested_captures_each_record_every_call() -> None:
    model = tiny_model("llama", "sdpa")
    inputs = tiny_inputs("llama")
    with torch.no_grad(), capture(model) as outer:
        model(**inputs)
        with capture(model, verify=True) as inner:
            model(**inputs)
        model(**inputs)
    assert list(outer.weights) == ["layers.0.self_attn", "layers.1.self_attn", "layers.0.self_attn#1",
                                   "layers.1.self_attn#1", "layers.0.self_attn#2", "layers.1.self_attn#2"]
    assert list(inner.weights) == ["layers.0.self_attn", "layers.1.self_attn"]
    assert not outer.missed and not inner.missed
    assert torch.equal(inner.weights["layers.0.self_attn"], outer.weights["layers.0.self_attn#1"])


def test_two_captures_in_two_threads_do_not_mix() -> None:
    model = tiny_model("llama", "sdpa")
    lengths = {"a": 5, "b": 7}
    caps = {}
    start = threading.Barrier(2)

    def run(tag: str) -> None:
        ids = torch.randint(1, 60, (1, lengths[tag]))
        with torch.no_grad(), capture(model) as cap:
            start.wait()
            for _ in range(3):
                model(input_ids=ids)
        caps[tag] = cap
    threads = [threading.Thread(target=run, args=(t,)) for t in lengths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tag, n in lengths.items():
        assert len(caps[tag].weights) == 6
        assert {tuple(w.shape[-2:]) for w in caps[tag].weights.values()} == {(n, n)}


def test_roles_of_an_encoder_decoder() -> None:
    model = nn.Transformer(16, 2, 1, 1, 32, batch_first=True).eval()
    src, tgt = torch.randn(1, 6, 16), torch.randn(1, 4, 16)
    with torch.no_grad(), capture(model, verify=True) as cap:
        model(src, tgt)
    shapes = {cap.roles[n]: tuple(w.shape[-2:]) for n, w in cap.weights.items()}
    assert shapes == {"encoder self": (6, 6), "decoder self": (4, 4), "cross": (4, 6)}
    assert max(cap.verified.values()) <= 1e-6
    bart = tiny_model("bart", "sdpa")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with capture(bart) as cap:
            bart(**tiny_inputs("bart"))
    assert [cap.roles[n] for n in cap.weights] == ["encoder self"] * 2 + ["decoder self", "cross"] * 2
    assert cap.weights["decoder.layers.0.encoder_attn"].shape == (2, 4, 5, 9)


def test_verify_on_torch_modules() -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2).eval()
    pad = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])
    with torch.no_grad(), capture(enc, verify=True) as cap:
        enc(torch.randn(2, 7, 16), src_key_padding_mask=pad)  # the nested-tensor fast path
    assert sorted(cap.verified) == ["layers.0.self_attn", "layers.1.self_attn"]
    assert max(cap.verified.values()) <= 1e-6


def test_a_timm_style_block_called_on_a_feature_map_is_missed_with_the_reason() -> None:
    """The reason names the shape that came, not an unpacking error from deep inside."""
    from attnkit.inspect.timm_attention import timm_call_weights

    class Attention(nn.Module):  # the standard block's parts
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.num_heads, self.head_dim, self.scale = nn.Linear(8, 24), 2, 4, 0.5
            self.q_norm = self.k_norm = nn.Identity()

        def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
            return x
    with pytest.raises(ValueError, match=r"reads tokens \(B, N, C\), got \(1, 8, 4, 4\)"):
        timm_call_weights(Attention(), (torch.randn(1, 8, 4, 4),), {})
    w, q, _ = timm_call_weights(Attention(), (torch.randn(1, 5, 8),), {})
    assert w.shape == (1, 2, 5, 5) and torch.allclose(w.sum(-1), torch.ones(1, 2, 5))


def test_roles_view_labels_source_and_target(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Whisper: audio frames are the source positions; the report has one named example per role."""
    model = tiny_model("whisper", "sdpa")
    inputs = tiny_inputs("whisper")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with capture(model) as cap:
            model(**inputs)
    frames = [f"frame {i}" for i in range(cap.weights["encoder.layers.0.self_attn"].shape[-1])]
    target = ["<start>", "a", "b", "c", "d"]
    data = cap.roles_view(frames, target).data
    assert [e["name"] for e in data["examples"]] == ["encoder self", "decoder self", "cross"]
    assert data["examples"][2]["queries"] == target and data["examples"][2]["keys"] == frames
    assert data["examples"][0]["keys"] == frames
    with pytest.raises(ValueError, match=r"target_tokens: the decoder self maps are 5 x 5 .* give 2 x 2"):
        cap.roles_view(frames, ["a", "b"])
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 3, 8)
    with capture(mha) as self_only:
        mha(x, x, x)
    with pytest.raises(ValueError, match="no encoder self-attention was recorded; recorded roles: \\['self'\\]"):
        self_only.roles_view(["a"] * 3, ["b"] * 3)
