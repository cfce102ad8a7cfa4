"""VisualAttentionClassifier on real digits: shapes, gradients, learning, persistence, errors."""

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from attnkit.models.visual import VisualAttentionClassifier, VisualAttentionConfig

sklearn_datasets = pytest.importorskip("sklearn.datasets", reason="the pinned environment installs scikit-learn")


def digits(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    d = sklearn_datasets.load_digits()
    x = torch.from_numpy((d.images[:n] / 16.0).astype(np.float32))[:, None]  # (N, 1, 8, 8)
    return x, torch.from_numpy(d.target[:n].astype(np.int64))


def test_shapes_and_attention_maps() -> None:
    model = VisualAttentionClassifier(VisualAttentionConfig(num_blocks=2)).eval()
    x, _ = digits(4)
    logits, maps = model(x, return_weights=True)
    assert logits.shape == (4, 10) and len(maps) == 2
    assert maps[0].shape == (4, 64, 64)
    assert torch.allclose(maps[0].sum(-1), torch.ones(4, 64), atol=1e-5)
    assert torch.equal(model(x), logits)


def test_every_parameter_gets_a_gradient_and_loss_falls() -> None:
    model = VisualAttentionClassifier(VisualAttentionConfig(channels=16, num_blocks=1, dropout=0.0))
    with torch.no_grad():
        for block in model.attention:
            block.gamma.fill_(0.5)  # at 0 the attention branch is switched off
    x, y = digits(64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if not losses:
            missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not missing, missing
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_save_load_same_predictions(tmp_path: Path) -> None:
    config = VisualAttentionConfig(channels=16)
    model = VisualAttentionClassifier(config).eval()
    save_file(model.state_dict(), str(tmp_path / "model.safetensors"))
    again = VisualAttentionClassifier(VisualAttentionConfig.from_dict(config.to_dict())).eval()
    again.load_state_dict(load_file(str(tmp_path / "model.safetensors")))
    x, _ = digits(8)
    assert torch.equal(model(x), again(x))


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="channels=30 must be divisible by reduction=4"):
        VisualAttentionConfig(channels=30)
    with pytest.raises(ValueError, match="dropout"):
        VisualAttentionConfig(dropout=1.5)
    model = VisualAttentionClassifier(VisualAttentionConfig(channels=16))
    with pytest.raises(ValueError, match=r"images must be \(B, 1, H, W\), got \(2, 3, 8, 8\)"):
        model(torch.zeros(2, 3, 8, 8))
