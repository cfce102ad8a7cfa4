"""Check the captioner's torchvision ResNet path against real torchvision.

    python evals/torchvision_backbones.py

Needs torchvision, which the pinned environment does not install (its wheels
need a newer torch than the project's CPU build), so this runs from a separate
environment, for example::

    python -m venv /tmp/tvenv
    /tmp/tvenv/bin/pip install torch==2.14.1 torchvision==0.29.1 safetensors numpy
    PYTHONPATH=src /tmp/tvenv/bin/python evals/torchvision_backbones.py

For resnet18 and resnet50 it checks that :class:`ImageCaptioner` builds the
backbone with the documented grid and feature width, that a torchvision
checkpoint saved to a local file (``.safetensors`` and ``.pt``) loads through
:func:`load_backbone_weights` with only the classifier left over, that the
region features then equal torchvision's own forward pass up to ``layer4``,
and that a training step and greedy and beam decoding run. No weights are
downloaded: the "pretrained" checkpoint is a seeded torchvision model.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from attnkit.models.captioning import CaptionerConfig, ImageCaptioner, load_backbone_weights


def check(name: str, width: int, folder: Path) -> None:
    import torchvision

    torch.manual_seed(0)
    donor = getattr(torchvision.models, name)(weights=None).eval()
    size = 128
    model = ImageCaptioner(CaptionerConfig(vocab_size=12, backbone=name, image_size=size, hidden_dim=32,
                                           attention_dim=16, embed_dim=16))
    assert model.grid == (size // 32, size // 32), model.grid
    assert model.feature_dim == width, model.feature_dim
    for suffix in (".safetensors", ".pt"):
        path = folder / f"{name}{suffix}"
        state = {k: v.contiguous() for k, v in donor.state_dict().items()}
        save_file(state, str(path)) if suffix == ".safetensors" else torch.save(state, path)
        unused = load_backbone_weights(model, path)
        assert sorted(unused) == ["fc.bias", "fc.weight"], unused
    model.eval()
    images = torch.rand(2, 3, size, size)
    features = model.encode(images)  # (B, R, C)
    normalised = (images - model.mean) / model.std
    with torch.no_grad():
        x = normalised
        for part in ("conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4"):
            x = getattr(donor, part)(x)
    expected = x.flatten(2).transpose(1, 2)
    err = (features - expected).abs().max().item()
    assert err < 1e-5, err
    model.train()
    captions = torch.randint(3, 12, (2, 6))
    loss, _ = model.loss(images, captions, torch.tensor([6, 4]))
    loss.backward()
    grads = sum(p.grad is not None for p in model.encoder.parameters())
    model.eval()
    greedy = model.greedy(images, max_len=5)
    beam = model.beam_search(images[:1], beam_size=3, max_len=5)
    print(f"{name}: grid {model.grid}, width {model.feature_dim}, local checkpoint loaded (.safetensors, .pt; "
          f"unused fc.*), features = torchvision layer4 within {err:.1e}, training step reached "
          f"{grads} encoder tensors, greedy {len(greedy)} and beam {len(beam)} captions  OK")


def main() -> int:
    try:
        import torchvision
    except ImportError:
        print("torchvision is not installed here; see this script's docstring", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, width in (("resnet18", 512), ("resnet50", 2048)):
            check(name, width, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
