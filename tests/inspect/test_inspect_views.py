"""What a capture draws: the report (file and inline), figures, rollout, entropy, image rollout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attnkit.inspect import capture

transformers = pytest.importorskip("transformers")


def _bert_capture(vectors: bool = True):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32)
    model = transformers.BertModel._from_config(cfg, attn_implementation="sdpa").eval()
    with torch.no_grad(), capture(model, vectors=vectors) as cap:
        model(torch.randint(0, 30, (1, 5)))
    return cap


def _data(page: str) -> dict:  # type: ignore[type-arg]
    return json.loads(page.split('id="attnkit-data">', 1)[1].split("</script>", 1)[0])


def test_report_with_neuron_view(tmp_path: Path) -> None:
    cap = _bert_capture()
    tokens = ["[CLS]", "a", "<b>", "c", "[SEP]"]
    page = cap.report(tmp_path / "r.html", tokens=tokens, neuron=True, title="tiny")
    html = page.read_text(encoding="utf-8")
    data = _data(html)
    assert data["examples"][0]["L"] == 2 and data["examples"][0]["H"] == 2
    n = data["neuron"]
    assert (n["L"], n["H"], n["Tq"], n["Tk"], n["Dh"]) == (2, 2, 5, 5, 8)
    q = np.frombuffer(__import__("base64").b64decode(n["q"]), dtype="<f4").reshape(2, 2, 5, 8)
    assert np.allclose(q[1], cap.vectors["encoder.layer.1.attention.self"][0][0].numpy())
    assert 'id="neuron-view"' in html and "<b>" not in html.split("<body>", 1)[1].split("<script>", 1)[0]
    plain = cap.report(tmp_path / "plain.html", tokens=tokens)
    assert 'id="neuron-view"' not in plain.read_text(encoding="utf-8")


def test_inline_display_is_a_sandboxed_offline_iframe() -> None:
    cap = _bert_capture(vectors=False)
    inline = cap._repr_html_()
    assert inline.startswith('<iframe sandbox="allow-scripts"') and "srcdoc=" in inline
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:|//)", inline)
    assert "&lt;script&gt;" in inline  # the whole page is escaped into the attribute


def test_figures_rollout_entropy() -> None:
    cap = _bert_capture(vectors=False)
    tokens = list("abcde")
    assert len(cap.figure().axes) >= 4  # 2 layers x 2 heads (+ colour bar)
    assert len(cap.figure(layer=1, tokens=tokens).axes) >= 2
    fig = cap.figure(layer="encoder.layer.0.attention.self", head=1, tokens=tokens)
    assert fig.axes[0].get_title().endswith("head 1")
    r = cap.rollout()
    assert r.shape == (5, 5) and np.allclose(r.sum(-1), 1.0)
    assert cap.entropy().shape == (2, 2)
    with pytest.raises(ValueError, match="layer: expected an index"):
        cap.figure(layer=7)
    with pytest.raises(ValueError, match="got 4 tokens, but the weights have Tq = 5"):
        cap.report("x.html", tokens=list("abcd"))
    with pytest.raises(ValueError, match="capture with vectors=True"):
        cap.view(neuron=True)


def test_batch_needs_an_example_or_one_token_list_each(tmp_path: Path) -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
    with torch.no_grad(), capture(enc) as cap:
        enc(torch.randn(2, 4, 8))
    with pytest.raises(ValueError, match="batch of 2: pass example="):
        cap.figure(tokens=list("abcd"))
    with pytest.raises(ValueError, match="2 examples, got 1 token lists"):
        cap.report(tmp_path / "b.html", tokens=[list("abcd")])
    page = cap.report(tmp_path / "b.html", tokens=[list("abcd"), list("abc")])
    assert [e["Tq"] for e in _data(page.read_text(encoding="utf-8"))["examples"]] == [4, 3]
    assert cap.rollout().shape == (2, 4, 4)


def test_vision_rollout_over_the_image(tmp_path: Path) -> None:
    torch.manual_seed(1)
    cfg = transformers.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=16,
                                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    model = transformers.ViTModel._from_config(cfg, attn_implementation="sdpa").eval()
    image = torch.rand(1, 3, 16, 16)
    with torch.no_grad(), capture(model) as cap:
        model(image)
    fig = cap.image_rollout(image[0].permute(1, 2, 0).numpy(), path=tmp_path / "roll.png")
    assert (tmp_path / "roll.png").stat().st_size > 1000 and "4×4" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="square grid"):
        cap.image_rollout(image[0].permute(1, 2, 0).numpy(), prefix_tokens=2)


def test_an_empty_capture_says_so() -> None:
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 1).eval()
    with capture(enc) as cap:
        pass  # the model never ran
    assert cap.weights == {} and cap._repr_html_() is None  # Jupyter falls back to repr()
    assert "0 calls" in repr(cap)
    with pytest.raises(ValueError, match="recorded no attention weights"):
        cap.rollout()
