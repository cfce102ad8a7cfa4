"""ImageCaptioner: attention, decoding, training signal, backbones and errors."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn

from attnkit.data.captions import encode_captions, images_to_tensor
from attnkit.data.shapes import generate_scenes, shapes_vocab
from attnkit.models.captioning import (
    ATTEND_WITH,
    BACKBONES,
    CaptionerConfig,
    ImageCaptioner,
    load_backbone_weights,
)

VOCAB = shapes_vocab()
TINY = {"image_size": 32, "channels": (4, 8, 8), "embed_dim": 8, "hidden_dim": 16, "attention_dim": 8,
        "dropout": 0.0, "max_len": 8}


def _tiny(**changes: object) -> ImageCaptioner:
    return ImageCaptioner(CaptionerConfig(vocab_size=len(VOCAB), **{**TINY, **changes}))  # type: ignore[arg-type]


def _batch(n: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    scenes = generate_scenes(n, seed=seed, size=32)
    ids, lengths = encode_captions([s.caption for s in scenes], VOCAB)
    return images_to_tensor([s.image for s in scenes]), ids, lengths


def test_grid_and_shapes() -> None:
    model = _tiny()
    images, ids, lengths = _batch()
    assert model.grid == (4, 4)
    assert model.encode(images).shape == (6, 16, 8)  # (B, R, C)
    out = model(images, ids, lengths)
    assert out.logits.shape == (6, ids.shape[1] - 1, len(VOCAB))
    assert out.weights.shape == (6, ids.shape[1] - 1, 16)


@pytest.mark.parametrize("attend_with", ATTEND_WITH)
def test_attention_sums_to_one_each_step_and_is_zero_past_the_end(attend_with: str) -> None:
    model = _tiny(attend_with=attend_with)
    images, ids, lengths = _batch()
    weights = model(images, ids, lengths).weights  # (B, T-1, R)
    assert (weights >= 0).all()
    for b in range(6):
        live = int(lengths[b]) - 1
        torch.testing.assert_close(weights[b, :live].sum(-1), torch.ones(live))
        assert (weights[b, live:] == 0).all()
    assert lengths.min() < lengths.max()  # the batch really has padding
    model.eval()
    for cap in model.greedy(images):
        torch.testing.assert_close(cap.weights.sum(-1), torch.ones(len(cap.ids)))
        assert model.attention_maps(cap.weights).shape == (len(cap.ids), 4, 4)


@pytest.mark.parametrize("attend_with", ATTEND_WITH)
def test_beam_of_one_is_greedy(attend_with: str) -> None:
    torch.manual_seed(3)
    model = _tiny(max_len=6, attend_with=attend_with).eval()
    images, _, _ = _batch(5, seed=4)
    greedy = model.greedy(images)
    beam = model.beam_search(images, beam_size=1)
    for g, b in zip(greedy, beam, strict=True):
        assert g.ids == b.ids
        assert g.score == pytest.approx(b.score, abs=1e-4)
        torch.testing.assert_close(g.weights, b.weights, atol=1e-5, rtol=1e-4)


def test_wider_beam_finds_a_caption_at_least_as_likely_on_a_trained_model() -> None:
    torch.manual_seed(0)
    model = _tiny()
    images, ids, lengths = _batch(8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(15):
        loss, _ = model.loss(images, ids, lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    for g, b in zip(model.greedy(images), model.beam_search(images, beam_size=3), strict=True):
        assert b.score >= g.score - 1e-4
        assert len(b.weights) == len(b.ids)


def test_loss_falls_on_a_tiny_batch() -> None:
    torch.manual_seed(0)
    model = _tiny()
    images, ids, lengths = _batch(8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(40):
        loss, parts = model.loss(images, ids, lengths)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(parts["nll"])
    assert losses[-1] < 0.3 * losses[0], losses[::8]


@pytest.mark.parametrize("attend_with", ATTEND_WITH)
def test_every_parameter_gets_a_gradient(attend_with: str) -> None:
    model = _tiny(attend_with=attend_with)
    images, ids, lengths = _batch()
    loss, _ = model.loss(images, ids, lengths)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert p.grad.abs().sum() > 0, name


def test_loss_is_cross_entropy_plus_doubly_stochastic_term() -> None:
    model = _tiny(attention_reg=0.5).eval()
    images, ids, lengths = _batch()
    with torch.no_grad():
        out = model(images, ids, lengths)
        total, parts = model.loss(images, ids, lengths)
    # Recompute by hand: mean CE over real words, and mean over (b, i) of (1 - Σ_t α_ti)².
    ce, words = 0.0, 0
    for b in range(6):
        n = int(lengths[b]) - 1
        ce += float(nn.functional.cross_entropy(out.logits[b, :n], ids[b, 1 : n + 1], reduction="sum"))
        words += n
    reg = float(((1 - out.weights.sum(1)) ** 2).mean())
    assert parts["nll"] == pytest.approx(ce / words, rel=1e-5)
    assert parts["attention_reg"] == pytest.approx(reg, rel=1e-5)
    assert float(total) == pytest.approx(ce / words + 0.5 * reg, rel=1e-5)
    # The regulariser pushes the attention summed over time towards 1 for every region.
    assert reg > 0


@pytest.mark.parametrize(("second_kernel", "reaches"), [(1, False), (3, True)])
def test_second_kernel_sets_how_far_a_region_sees(second_kernel: int, reaches: bool) -> None:
    model = _tiny(image_size=48, second_kernel=second_kernel).eval()
    images = torch.rand(1, 3, 48, 48)
    moved = images.clone()
    moved[0, :, 20, 20] += 0.5  # a pixel 16 px from the corner region's centre
    with torch.no_grad():
        corner = model.encode(images)[0, 0], model.encode(moved)[0, 0]  # region (0, 0)
    assert (not torch.equal(*corner)) == reaches


def test_image_and_caption_errors() -> None:
    model = _tiny()
    images, ids, lengths = _batch(2)
    with pytest.raises(ValueError, match=r"images must be \(B, 3, 32, 32\).*got shape \(2, 3, 48, 48\)"):
        model.encode(torch.zeros(2, 3, 48, 48))
    with pytest.raises(ValueError, match=r"got shape \(2, 32, 32, 3\)"):
        model.greedy(images.permute(0, 2, 3, 1))
    with pytest.raises(TypeError, match="floating"):
        model.encode((images * 255).to(torch.uint8))
    with pytest.raises(ValueError, match="lengths must lie in"):
        model(images, ids, torch.tensor([1, 3]))
    with pytest.raises(ValueError, match=r"captions must hold ids in \[0, 21\)"):
        model(images, ids + 100, lengths)
    with pytest.raises(ValueError, match="beam_size must be a positive int"):
        model.beam_search(images, beam_size=0)


def test_config_errors_list_valid_choices() -> None:
    with pytest.raises(ValueError, match=r"backbone must be one of \['small', 'resnet18'.*got 'vgg'"):
        CaptionerConfig(vocab_size=10, backbone="vgg")
    with pytest.raises(ValueError, match=r"attend_with must be one of \['previous_state', 'current_state'\]"):
        CaptionerConfig(vocab_size=10, attend_with="later")
    with pytest.raises(ValueError, match="second_kernel must be 1 or 3, got 5"):
        CaptionerConfig(vocab_size=10, second_kernel=5)
    with pytest.raises(ValueError, match="channels must be a tuple of 3"):
        CaptionerConfig(vocab_size=10, channels=(4, 8))
    with pytest.raises(ValueError, match="eos_id must be < vocab_size=2"):
        CaptionerConfig(vocab_size=2)
    cfg = CaptionerConfig(vocab_size=30, channels=(2, 3, 4))
    assert CaptionerConfig.from_dict(cfg.to_dict()) == cfg
    assert set(BACKBONES) >= {"small", "resnet18", "resnet50"}


def test_resnet_without_torchvision_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)  # import now fails as if not installed
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    with pytest.raises(ImportError, match="backbone 'resnet18' needs torchvision"):
        ImageCaptioner(CaptionerConfig(vocab_size=len(VOCAB), backbone="resnet18", image_size=64))


class _FakeResNet(nn.Module):
    """torchvision's child layout (conv1 ... layer4, avgpool, fc) at toy size, final width 512."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(2)
        self.layer1 = nn.Identity()
        self.layer2 = nn.Identity()
        self.layer3 = nn.Conv2d(4, 4, 1, stride=2)
        self.layer4 = nn.Conv2d(4, 512, 1, stride=4)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, 1000)


def test_resnet_path_and_local_pretrained_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_models = types.ModuleType("torchvision.models")
    fake_models.resnet18 = lambda weights=None: _FakeResNet()  # type: ignore[attr-defined]
    fake = types.ModuleType("torchvision")
    fake.models = fake_models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    monkeypatch.setitem(sys.modules, "torchvision.models", fake_models)
    model = ImageCaptioner(CaptionerConfig(vocab_size=len(VOCAB), backbone="resnet18", image_size=64,
                                           hidden_dim=16, attention_dim=8, embed_dim=8))
    assert model.grid == (2, 2) and model.feature_dim == 512
    images = torch.rand(2, 3, 64, 64)
    assert model.encode(images).shape == (2, 4, 512)
    assert len(model.greedy(images)) == 2

    donor = _FakeResNet()
    torch.nn.init.constant_(donor.layer4.weight, 0.25)
    from safetensors.torch import save_file

    save_file(dict(donor.state_dict()), str(tmp_path / "r18.safetensors"))
    unused = load_backbone_weights(model, tmp_path / "r18.safetensors")
    assert sorted(unused) == ["fc.bias", "fc.weight"]
    assert torch.equal(model.encoder[7].weight, donor.layer4.weight)
    torch.save(donor.state_dict(), tmp_path / "r18.pt")
    load_backbone_weights(model, tmp_path / "r18.pt")
    torch.save({"conv1.weight": torch.zeros(1)}, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="does not fit backbone 'resnet18': missing"):
        load_backbone_weights(model, tmp_path / "partial.pt")
