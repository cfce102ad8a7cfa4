"""attnkit.inspect.capture on a timm vision transformer, against a hand computation.

timm needs torchvision, which this project's main torch build cannot load;
``./dev install-check`` runs this file in its second environment (torch
2.14.1, torchvision and timm pinned there) with ``ATTNKIT_REQUIRE_TIMM=1``, so
it runs in every full check instead of being skipped.
"""

from __future__ import annotations

import os

import pytest
import torch

from attnkit.inspect import capture

if os.environ.get("ATTNKIT_REQUIRE_TIMM") == "1":
    import timm
else:
    timm = pytest.importorskip("timm", reason="timm needs torchvision; ./dev install-check runs this test")


def _hand(attn: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T * scale) from the block's qkv layer, written out with plain torch ops."""
    b, n, c = x.shape
    h = attn.num_heads
    qkv = x @ attn.qkv.weight.T + attn.qkv.bias  # (B, N, 3 * C)
    q = qkv[..., :c].reshape(b, n, h, c // h).transpose(1, 2)  # (B, H, N, Dh)
    k = qkv[..., c: 2 * c].reshape(b, n, h, c // h).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * (c // h) ** -0.5
    return torch.softmax(scores, dim=-1)  # (B, H, N, N)


def test_timm_vit_capture_equals_hand_computation() -> None:
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                              num_classes=5).eval()
    assert all(block.attn.fused_attn for block in model.blocks)  # timm's fused SDPA path
    images = torch.randn(2, 3, 32, 32)
    inputs: list[torch.Tensor] = []
    handles = [blk.attn.register_forward_pre_hook(lambda m, a: inputs.append(a[0])) for blk in model.blocks]
    with torch.no_grad():
        plain = model(images)
        inputs.clear()
        with capture(model) as cap:
            seen = model(images)
        hand = [_hand(blk.attn, x) for blk, x in zip(model.blocks, inputs, strict=True)]
    for hd in handles:
        hd.remove()
    assert torch.equal(plain, seen)
    assert list(cap.weights) == [f"blocks.{i}.attn" for i in range(3)] and not cap.unsupported
    for w, ref in zip(cap.weights.values(), hand, strict=True):
        assert w.shape == (2, 4, 17, 17)  # the class token and 4 x 4 patches
        assert (w - ref).abs().max().item() <= 1e-6
    assert cap.rollout(example=0).shape == (17, 17)


def test_visualize_a_timm_model_from_a_local_weights_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    import numpy as np
    from click.testing import CliRunner
    from PIL import Image
    from safetensors.torch import save_file

    from attnkit.cli.visualize import visualize

    torch.manual_seed(1)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3)
    weights = tmp_path / "vit.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    image = tmp_path / "img.png"
    Image.fromarray((np.random.default_rng(0).random((64, 80, 3)) * 255).astype(np.uint8)).save(image)
    out = tmp_path / "vit.html"
    args = [str(weights), "--timm", "vit_tiny_patch16_224", "--image", str(image), "-o", str(out)]
    result = CliRunner().invoke(visualize, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text(encoding="utf-8").split('id="attnkit-data">', 1)[1].split("</script>", 1)[0])
    ex = data["examples"][0]
    assert (ex["L"], ex["H"], ex["Tq"]) == (12, 3, 197) and ex["queries"][0] == "[CLS]"
    result = CliRunner().invoke(visualize, [str(weights), "--timm", "vit_small_patch16_224", "--image",
                                            str(image), "-o", str(tmp_path / "bad.html")])
    assert result.exit_code != 0 and "do not fit timm model 'vit_small_patch16_224'" in result.output
