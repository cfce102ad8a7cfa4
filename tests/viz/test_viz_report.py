"""The HTML report's data and page, read back without a browser (the browser
checks are in test_report_browser.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html import unescape
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.layers.multi_head import MultiHeadAttention
from attnkit.viz.report import ExampleMaps, report_data, write_report

XSS = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']


def _weights(*shape: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random(shape) ** 3
    return w / w.sum(-1, keepdims=True)


def _embedded(html: str) -> dict:
    body = html.split('<script type="application/json" id="attnkit-data">', 1)[1]
    return json.loads(body.split("</script>", 1)[0])


def _decode(ex: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    shape = (ex["L"], ex["H"], ex["Tq"], ex["k"])
    idx = np.frombuffer(base64.b64decode(ex["idx"]), "<u2").reshape(shape)
    val = np.frombuffer(base64.b64decode(ex["val"]), np.uint8).reshape(shape)
    thumb = np.frombuffer(base64.b64decode(ex["thumb"]), np.uint8).reshape(
        ex["L"], ex["H"], ex["sq"], ex["sk"])
    return idx, val, thumb


def test_top_k_edges_and_quantised_weights_round_trip() -> None:
    a = _weights(2, 3, 10, 10)  # (L, H, T, T)
    ex = report_data([f"t{i}" for i in range(10)], a)["examples"][0]
    assert ex["k"] == 8 and (ex["L"], ex["H"], ex["Tq"], ex["Tk"]) == (2, 3, 10, 10)
    idx, val, _ = _decode(ex)
    want_idx = np.argsort(-a, axis=-1, kind="stable")[..., :8]
    np.testing.assert_array_equal(np.sort(idx, -1), np.sort(want_idx, -1))
    np.testing.assert_allclose(val / 255, np.take_along_axis(a, idx.astype(int), -1), atol=0.5 / 255)
    assert np.all(np.diff(val.astype(int), axis=-1) <= 0)  # strongest edge first
    kept = np.take_along_axis(a, idx.astype(int), -1).sum(-1).mean(-1)
    np.testing.assert_allclose(ex["coverage"], kept, atol=1e-3)


def test_short_rows_keep_every_edge_and_thumbnails_average_blocks() -> None:
    a = _weights(1, 2, 6, 6)
    ex = report_data(None, a, limits=None)["examples"][0]
    assert ex["k"] == 6 and ex["coverage"] == [[1.0, 1.0]] and ex["queries"] == list("012345")
    a = _weights(1, 1, 100, 100)
    from attnkit.viz.report import ReportLimits
    ex = report_data(None, a, limits=ReportLimits(top_k=3, thumb_size=10))["examples"][0]
    _, _, thumb = _decode(ex)
    blocks = a[0, 0].reshape(10, 10, 10, 10).mean(axis=(1, 3))
    np.testing.assert_allclose(thumb[0, 0] / 255, blocks / blocks.max(), atol=0.5 / 255)
    with pytest.raises(ValueError, match="top_k"):
        ReportLimits(top_k=0)


def test_batch_cuts_padding_and_cross_attention_keeps_source_tokens() -> None:
    a = _weights(2, 3, 2, 5, 5)  # (B, L, H, T, T)
    data = report_data([list("abcde"), list("xy")], a, predictions=["pos", {"label": "neg", "probability": 0.25}])
    short = data["examples"][1]
    assert (short["Tq"], short["Tk"], short["queries"], short["keys"]) == (2, 2, ["x", "y"], ["x", "y"])
    assert [e["prediction"] for e in data["examples"]] == ["pos", "neg (p = 0.250)"]
    per_layer = [torch.tensor(a[:, i]) for i in range(3)]  # HF style: L tensors of (B, H, T, T)
    assert report_data([list("abcde"), list("xy")], per_layer)["examples"][1]["Tq"] == 2
    cross = _weights(2, 4, 3, 7)  # (L, H, Tt, Ts)
    ex = report_data(["a", "dog", "runs"], cross, source_tokens=list("einhund"))["examples"][0]
    assert ex["cross"] and ex["keys"] == list("einhund") and ex["Tk"] == 7


def test_examples_of_their_own_shapes_are_not_padded() -> None:
    big, small, cross = _weights(2, 3, 6, 6, seed=1), _weights(4, 1, 2, 2, seed=2), _weights(1, 2, 2, 6, seed=3)
    data = report_data([list("abcdef"), list("xy"), list("xy")], ExampleMaps([big, small, cross]),
                       source_tokens=[None, None, list("abcdef")])
    shapes = [(e["L"], e["H"], e["Tq"], e["Tk"], e["cross"]) for e in data["examples"]]
    assert shapes == [(2, 3, 6, 6, False), (4, 1, 2, 2, False), (1, 2, 2, 6, True)]
    idx, val, _ = _decode(data["examples"][1])
    assert idx.shape == (4, 1, 2, 2)  # its own 4 layers of 1 head, not padded to the first's 3 heads
    assert np.abs(np.take_along_axis(small, idx.astype(np.int64), -1) - val / 255.0).max() <= 0.5 / 255
    with pytest.raises(ValueError, match=r"tokens: expected 2 token lists \(one per example of ExampleMaps\)"):
        report_data([list("abcdef")], ExampleMaps([big, small]))
    with pytest.raises(ValueError, match=r"tokens\[1\]: expected at most 2 tokens"):
        report_data([list("abcdef"), list("xyz")], ExampleMaps([big, small]))


def test_arguments_are_checked_with_shapes() -> None:
    with pytest.raises(ValueError, match=r"tokens: expected at most 5"):
        report_data(list("abcdef"), _weights(1, 1, 5, 5))
    with pytest.raises(ValueError, match=r"\(L, H, Tq, Tk\)"):
        report_data(list("abc"), _weights(3, 3))
    with pytest.raises(ValueError, match="token lists"):
        report_data([list("ab")], _weights(2, 1, 1, 2, 2))
    with pytest.raises(ValueError, match="predictions"):
        report_data([list("ab"), list("ab")], _weights(2, 1, 1, 2, 2), predictions=["x"])
    with pytest.raises(ValueError, match=r"\.html"):
        write_report("/tmp/report.txt", list("ab"), _weights(1, 1, 2, 2))


def test_page_is_self_contained_and_escapes_hostile_text(tmp_path: Path) -> None:
    tokens = ["[CLS]", *XSS, "<!--", "@JS@", "a & b"]
    page = write_report(tmp_path / "r.html", tokens, _weights(1, 2, 6, 6),
                        title=XSS[0], predictions={"label": XSS[1], "probability": 0.5})
    html = page.read_text(encoding="utf-8")
    data_block = html.split('id="attnkit-data">', 1)[1].split("</script>", 1)[0]
    assert not re.search(r"[<>&]", data_block)
    assert _embedded(html)["examples"][0]["queries"] == tokens
    assert "<script>alert" not in html and "<img" not in html
    assert html.count("<script") == 2
    assert f"<title>{'&lt;script&gt;alert(1)&lt;/script&gt;'}</title>" in html
    # no address to fetch anything from, and a policy that would block it anyway
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html, re.I)
    script = html.rsplit("<script>", 1)[1].split("</script>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    found = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert found
    csp = unescape(found.group(1))
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert not any(p.name.startswith(".r.html") for p in tmp_path.iterdir())  # temp file renamed


def test_weights_from_an_attnkit_layer(tmp_path: Path) -> None:
    mha = MultiHeadAttention(16, 4)
    x = torch.randn(1, 5, 16)
    _, w = mha(x, return_weights=True, causal=True)  # (B, H, T, T)
    page = write_report(tmp_path / "mha.html", list("abcde"), [w, w])
    ex = _embedded(page.read_text(encoding="utf-8"))["examples"][0]
    idx, val, _ = _decode(ex)
    # causal: query 0 has a single edge, to key 0, with all its weight
    assert idx[0, 0, 0, 0] == 0 and val[0, 0, 0, 0] == 255 and np.all(val[0, 0, 0, 1:] == 0)


def test_512_tokens_6_layers_12_heads_fit_in_5_mb(tmp_path: Path) -> None:
    a = _weights(6, 12, 512, 512).astype(np.float32)
    page = write_report(tmp_path / "long.html", [f"w{i}" for i in range(512)], a)
    assert page.stat().st_size <= 5_000_000
