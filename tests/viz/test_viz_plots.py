"""Static figures checked by their structure: size, axes, tick labels, colour bars,
titles and the data drawn — not by pixels."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from attnkit.viz import explain, plots

TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


def _weights(*shape: int) -> np.ndarray:
    w = np.random.default_rng(0).random(shape)
    return w / w.sum(-1, keepdims=True)


def _colorbars(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def _ticks(ax, axis: str) -> list[str]:
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in labels]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_heatmap_has_token_ticks_colorbar_and_saves_three_formats(tmp_path: Path) -> None:
    w = torch.softmax(torch.randn(1, 1, 6, 6), dim=-1)  # (B, H, T, T) from an attnkit layer
    fig = plots.plot_attention(w, TOKENS, title="Layer 0, head 0", path=tmp_path / "a.png")
    ax = fig.axes[0]
    assert _ticks(ax, "x") == TOKENS and _ticks(ax, "y") == TOKENS
    assert ax.get_title() == "Layer 0, head 0"
    assert ax.get_xlabel() == "key" and ax.get_ylabel() == "query"
    assert len(_colorbars(fig)) == 1
    np.testing.assert_allclose(ax.images[0].get_array(), w[0, 0].numpy(), rtol=1e-6)
    assert len(ax.texts) == 36  # small matrices carry their values
    w_px, h_px = _png_size(tmp_path / "a.png")
    fw, fh = fig.get_size_inches() * 120
    assert abs(w_px - fw) <= 1 and abs(h_px - fh) <= 1
    plots.plot_attention(w, TOKENS, path=tmp_path / "a.svg")
    plots.plot_attention(w, TOKENS, path=tmp_path / "a.pdf")
    assert (tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    assert (tmp_path / "a.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="path"):
        plots.plot_attention(w, TOKENS, path=tmp_path / "a.jpg")


def test_heatmap_checks_tokens_and_shape() -> None:
    with pytest.raises(ValueError, match="tokens"):
        plots.plot_attention(_weights(6, 6), TOKENS[:5])
    with pytest.raises(ValueError, match=r"\(Tq, Tk\)"):
        plots.plot_attention(_weights(2, 6, 6))
    with pytest.raises(TypeError, match="tokens"):
        plots.plot_attention(_weights(6, 6), "the cat")


def test_long_inputs_thin_the_tick_labels() -> None:
    n = 200
    fig = plots.plot_attention(_weights(n, n), [f"t{i}" for i in range(n)])
    ticks = _ticks(fig.axes[0], "x")
    assert len(ticks) <= 64 and ticks[:2] == ["t0", "t4"]


def test_head_grid_and_layer_overview() -> None:
    fig = plots.plot_heads(_weights(5, 6, 6), TOKENS, cols=3)
    heads = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heads] == [f"head {i}" for i in range(5)]
    assert all(_ticks(ax, "x") == TOKENS for ax in heads)
    assert len(_colorbars(fig)) == 1 and fig.get_suptitle() == "Attention heads"
    layers = [_weights(4, 6, 6) for _ in range(3)]  # list per layer, as models return them
    fig = plots.plot_layers_heads(layers)
    cells = [ax for ax in fig.axes if ax.images]
    assert len(cells) == 12 and len(_colorbars(fig)) == 1
    assert [ax.get_ylabel() for ax in cells[::4]] == ["layer 0", "layer 1", "layer 2"]
    assert max(float(ax.images[0].get_array().max()) for ax in cells) == pytest.approx(1.0)


def test_positional_encoding_matrix() -> None:
    t, d = 50, 32
    pos = np.arange(t)[:, None]
    freq = 1.0 / 10000 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((t, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    fig = plots.plot_positional_encoding(pe)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "embedding dimension" and ax.get_ylabel() == "position"
    assert "T=50, D=32" in ax.get_title() and len(_colorbars(fig)) == 1
    assert ax.images[0].get_array().shape == (t, d)


def test_masked_pattern_greys_out_masked_cells() -> None:
    w = np.tril(np.ones((6, 6)))
    w /= w.sum(-1, keepdims=True)
    fig = plots.plot_masked_attention(w, tokens=TOKENS)
    shown = fig.axes[0].images[0].get_array()
    np.testing.assert_array_equal(np.ma.getmaskarray(shown), np.triu(np.ones((6, 6), bool), k=1))
    band = np.abs(np.subtract.outer(np.arange(6), np.arange(6))) <= 1  # a sliding window
    fig = plots.plot_masked_attention(w, band, TOKENS, title="Window")
    np.testing.assert_array_equal(np.ma.getmaskarray(fig.axes[0].images[0].get_array()), ~band)
    assert _ticks(fig.axes[0], "y") == TOKENS and len(_colorbars(fig)) == 1


def test_classification_explanation() -> None:
    scores = np.array([0.05, 0.1, 0.5, 0.05, 0.1, 0.2])
    fig = explain.plot_classification(TOKENS, scores, label="positive", probability=0.93)
    text_ax, bar_ax = fig.axes[0], fig.axes[1]
    assert "predicted: positive" in text_ax.get_title() and "0.93" in text_ax.get_title()
    assert [t.get_text() for t in text_ax.texts] == TOKENS
    assert _ticks(bar_ax, "x") == TOKENS and bar_ax.get_ylabel() == "attention"
    np.testing.assert_allclose([p.get_height() for p in bar_ax.patches], scores)
    assert len(_colorbars(fig)) == 1
    with pytest.raises(ValueError, match="probability"):
        explain.plot_classification(TOKENS, scores, label="x", probability=1.5)


def test_alignment_puts_source_across_and_target_down() -> None:
    src, tgt = ["ein", "hund", "läuft"], ["a", "dog", "runs", "<eos>"]
    fig = explain.plot_alignment(_weights(4, 3), src, tgt, source_label="German", target_label="English")
    ax = fig.axes[0]
    assert _ticks(ax, "x") == src and _ticks(ax, "y") == tgt
    assert ax.get_xlabel() == "German tokens" and ax.get_ylabel() == "English tokens"


def test_upsample_matches_torch_bilinear() -> None:
    a = np.random.default_rng(1).random((3, 5))
    got = explain.upsample(a, (12, 20))
    want = torch.nn.functional.interpolate(torch.tensor(a)[None, None], size=(12, 20),
                                           mode="bilinear", align_corners=False)[0, 0].numpy()
    np.testing.assert_allclose(got, want, atol=1e-12)
    np.testing.assert_allclose(explain.upsample(np.full((2, 2), 0.25), (7, 9)), 0.25)


def test_image_overlay_and_caption_panels() -> None:
    rng = np.random.default_rng(2)
    image = rng.random((32, 48, 3))
    fig = explain.plot_image_attention(image, rng.random((4, 6)))
    ax = fig.axes[0]
    assert len(ax.images) == 2 and ax.images[1].get_array().shape == (32, 48)
    assert len(_colorbars(fig)) == 1 and "4×6" in ax.get_title()
    words = ["a", "dog", "on", "grass", "<eos>"]
    fig = explain.plot_caption_attention(image[..., 0], rng.random((5, 16)), words, cols=3)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == words
    assert all(ax.images[1].get_array().shape == (32, 48) for ax in panels)
    with pytest.raises(ValueError, match="square"):
        explain.plot_caption_attention(image, rng.random((5, 15)), words)
    with pytest.raises(ValueError, match="image"):
        explain.plot_image_attention(rng.random((4, 4, 2)), rng.random((2, 2)))


@pytest.mark.parametrize(("cmap", "dark_end"), [("viridis", "low"), ("Greys", "high"), ("Reds", "high")])
def test_cell_values_stay_readable_on_any_colormap(cmap: str, dark_end: str) -> None:
    w = np.array([[0.95, 0.05], [0.5, 0.5]])
    ax = plots.plot_attention(w, ["a", "b"], cmap=cmap).axes[0]
    colours = {t.get_text(): t.get_color() for t in ax.texts}
    # the darkest cell gets white text, the lightest black text, whichever end of the map is dark
    high, low = colours["0.95"], colours["0.05"]
    assert (high, low) == (("black", "white") if dark_end == "low" else ("white", "black"))
