"""A windowed or channel capture's views for a report, without timm: windows laid on named patches."""

from __future__ import annotations

import pytest
import torch

from attnkit.inspect import Capture
from attnkit.inspect.timm_blocks import WindowLayout


def _windowed_capture() -> Capture:
    """Two 2x2-window calls over a 4x4 feature map (batch 2, one head), then a channel call with 2 heads.

    Window ``w`` of example ``b`` weighs its 4 tokens evenly, scaled by ``1 + w + 10 * b`` so that
    each window and example can be told apart.
    """
    cap = Capture({}, [], False)
    layout = WindowLayout("window", (4, 4), (2, 2))
    scale = torch.tensor([1.0 + w + 10 * b for b in range(2) for w in range(4)])  # (B * windows,)
    maps = torch.full((8, 1, 4, 4), 0.25) * scale[:, None, None, None]
    for name in ("stage.0", "stage.1"):
        cap.weights[name], cap.roles[name], cap.layouts[name] = maps, "self", layout
    cap.weights["cls"], cap.roles["cls"] = torch.full((2, 1, 1, 17), 1 / 17), "self"  # neither: left out
    cap.weights["xca"], cap.roles["xca"] = torch.softmax(torch.randn(2, 2, 3, 3), -1), "channel"
    return cap


def test_windowed_calls_are_laid_on_named_patches_one_view_per_stage() -> None:
    cap = _windowed_capture()
    views = cap.image_views(example=1)
    assert [v[0] for v in views] == [
        "stage.0 … stage.1 · 4x4 patches, window 2x2 attention laid on the image",
        "xca · channel x channel, each head over its own 3 channels",
    ]
    _, tokens, maps = views[0]
    assert maps.shape == (2, 1, 16, 16) and tokens[6] == "patch (1, 2)"
    row = maps[0, 0, 6]  # patch (1, 2) lies in window 1 (rows 0-1, columns 2-3) of example 1
    assert sorted(int(i) for i in row.nonzero()[0]) == [2, 3, 6, 7]
    assert row[2] == pytest.approx(0.25 * (1 + 1 + 10))
    _, tokens, maps = views[1]
    assert tokens == ["channel 0", "channel 1", "channel 2"]
    assert torch.equal(torch.from_numpy(maps[0]), cap.weights["xca"][1])


def test_image_views_need_windowed_or_channel_maps_and_a_batch_index() -> None:
    cap = _windowed_capture()
    with pytest.raises(ValueError, match="example: expected an index into the batch of 2, got 2"):
        cap.image_views(example=2)
    plain = Capture({}, [], False)
    plain.weights["a"], plain.roles["a"] = torch.full((1, 1, 3, 3), 1 / 3), "self"
    with pytest.raises(ValueError, match=r"no windowed \(Swin, MaxViT\) or channel \(XCiT\) maps"):
        plain.image_views()
