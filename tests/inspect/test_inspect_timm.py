"""attnkit.inspect.capture on a timm vision transformer, against a hand computation.

timm needs torchvision, which this project's main torch build cannot load;
``./dev install-check`` runs this file in its second environment (torch
2.14.1, torchvision and timm pinned there) with ``ATTNKIT_REQUIRE_TIMM=1``, so
it runs in every full check instead of being skipped.
"""

from __future__ import annotations

import base64
import os

import numpy as np
import pytest
import torch

from attnkit.inspect import capture
from attnkit.inspect.coverage import TIMM_FAMILIES, timm_coverage_row

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


def _weights_and_image(tmp_path, name: str):  # type: ignore[no-untyped-def]
    """A random-weight timm model's safetensors file and a random image, both in ``tmp_path``."""
    import numpy as np
    from PIL import Image
    from safetensors.torch import save_file

    torch.manual_seed(1)
    model = timm.create_model(name, pretrained=False, num_classes=3)
    weights = tmp_path / f"{name}.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    image = tmp_path / "img.png"
    Image.fromarray((np.random.default_rng(0).random((64, 80, 3)) * 255).astype(np.uint8)).save(image)
    return weights, image


def test_visualize_a_timm_model_from_a_local_weights_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from attnkit.cli.visualize import visualize

    weights, image = _weights_and_image(tmp_path, "vit_tiny_patch16_224")
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


def test_the_coverage_table_holds_every_timm_family() -> None:
    from attnkit.inspect.coverage import TIMM_FAMILIES

    assert {"timm swin", "timm beit", "timm eva02", "timm cait", "timm convit", "timm maxvit",
            "timm xcit"} <= set(TIMM_FAMILIES)


@pytest.mark.parametrize("family", sorted(TIMM_FAMILIES))
def test_timm_family_reads_every_block_exactly(family: str) -> None:
    row = timm_coverage_row(family)
    assert row.outputs_equal  # the fused kernels ran, their output untouched
    assert row.status == "read" and not row.refused, row.refused
    assert row.read >= 2 and row.worst <= 1e-5 and row.verified is True


def _swin_block() -> tuple[torch.nn.Module, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = timm.create_model("swin_tiny_patch4_window7_224", pretrained=False, img_size=56, depths=(2, 1),
                              num_heads=(2, 4), embed_dim=16).eval()
    block = model.layers[0].blocks[1]
    assert tuple(block.shift_size) == (3, 3)  # the shifted-window block, with its mask
    return model, block, torch.randn(2, 3, 56, 56)


def test_swin_shifted_window_maps_equal_a_hand_computation() -> None:
    model, block, images = _swin_block()
    attn = block.attn
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    hook = attn.register_forward_pre_hook(lambda m, a, kw: seen.append((a[0], kw["mask"])), with_kwargs=True)
    with torch.no_grad(), capture(model) as cap:
        model(images)
    hook.remove()
    x, mask = seen[0]  # (B * windows, 49, C), (windows, 49, 49) of 0 / -100
    b_, n, c = x.shape
    h = attn.num_heads
    qkv = (x @ attn.qkv.weight.T + attn.qkv.bias).reshape(b_, n, 3, h, c // h).permute(2, 0, 3, 1, 4)
    scores = qkv[0] @ qkv[1].transpose(-1, -2) * (c // h) ** -0.5  # (B * windows, H, 49, 49)
    table = attn.relative_position_bias_table[attn.relative_position_index.view(-1)].view(n, n, h)
    scores = scores + table.permute(2, 0, 1)[None]
    scores = scores.view(-1, mask.shape[0], h, n, n) + mask[None, :, None]
    hand = torch.softmax(scores.view(b_, h, n, n), dim=-1)
    w = cap.weights["layers.0.blocks.1.attn"]
    assert w.shape == (2 * 4, 2, 49, 49) and (w - hand).abs().max().item() <= 1e-6
    layout = cap.layouts["layers.0.blocks.1.attn"]
    assert (layout.kind, layout.image, layout.window, layout.shift) == ("window", (14, 14), (7, 7), (3, 3))


def test_swin_maps_on_the_image_give_the_blocks_output() -> None:
    """Laid on image positions, the windows' maps times the values are the block's attention output."""
    model, block, images = _swin_block()
    inputs: list[torch.Tensor] = []
    hook = block.register_forward_pre_hook(lambda m, a: inputs.append(a[0]))
    with torch.no_grad(), capture(model) as cap:
        model(images)
        hook.remove()
        x = block.norm1(inputs[0])  # (B, 14, 14, C)
        expected = block._attn(x).reshape(2, 196, -1)  # the block's windowed, shifted attention
        on_image = cap.on_image("layers.0.blocks.1.attn")  # (B, H, 196, 196)
        attn = block.attn
        c, h = x.shape[-1], attn.num_heads
        v = (x.reshape(2, 196, c) @ attn.qkv.weight[2 * c:].T + attn.qkv.bias[2 * c:])  # (B, 196, C)
        mixed = on_image @ v.reshape(2, 196, h, c // h).transpose(1, 2)  # (B, H, 196, Dh)
        out = attn.proj(mixed.transpose(1, 2).reshape(2, 196, c))
    assert on_image.shape == (2, 2, 196, 196)
    assert torch.allclose(on_image.sum(-1), torch.ones(2, 2, 196), atol=1e-5)
    assert (out - expected).abs().max().item() <= 1e-5


def test_window_positions_follow_timms_own_partitions() -> None:
    from timm.models.maxxvit import grid_partition
    from timm.models.maxxvit import window_partition as maxvit_window_partition
    from timm.models.swin_transformer import window_partition

    from attnkit.inspect.timm_blocks import WindowLayout

    index = torch.arange(12 * 8).view(1, 12, 8, 1)  # (B, H, W, C): each token's own position
    shifted = torch.roll(index, shifts=(-2, -3), dims=(1, 2))
    swin = window_partition(shifted, (4, 4)).reshape(-1, 16)
    assert torch.equal(WindowLayout("window", (12, 8), (4, 4), (2, 3)).positions(), swin)
    block = maxvit_window_partition(index, [3, 4]).reshape(-1, 12)
    assert torch.equal(WindowLayout("window", (12, 8), (3, 4)).positions(), block)
    grid = grid_partition(index, [3, 4]).reshape(-1, 12)
    assert torch.equal(WindowLayout("grid", (12, 8), (3, 4)).positions(), grid)


def test_xcit_channel_maps_are_named_channel() -> None:
    torch.manual_seed(0)
    model = timm.create_model("xcit_nano_12_p16_224", pretrained=False, img_size=32, depth=2).eval()
    with torch.no_grad(), capture(model) as cap:
        model(torch.randn(2, 3, 32, 32))
    channel = [n for n, r in cap.roles.items() if r == "channel"]
    assert channel == ["blocks.0.attn", "blocks.1.attn"]  # XCA: channels attend to channels
    dim, heads = 128, 4
    assert cap.weights["blocks.0.attn"].shape == (2, heads, dim // heads, dim // heads)
    assert all(r == "self" for n, r in cap.roles.items() if n not in channel)  # the class-attention blocks
    with pytest.raises(ValueError, match="not a recorded call of a windowed block"):
        cap.on_image("blocks.0.attn")


def test_a_fused_block_whose_plain_path_disagrees_is_missed_by_name() -> None:
    torch.manual_seed(0)
    model = timm.create_model("beit_base_patch16_224", pretrained=False, img_size=32, patch_size=8, depth=2,
                              embed_dim=32, num_heads=4).eval()
    assert model.blocks[1].attn.fused_attn
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight.mul_(20)  # scores far from uniform
    model.blocks[1].attn.scale = 1.0  # the non-fused path reads it, the fused kernel does not
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), pytest.warns(UserWarning, match="not recorded"), capture(model) as cap:
        model(images)
    assert list(cap.weights) == ["blocks.0.attn"]
    assert "another output than its fused kernel" in cap.missed["blocks.1.attn"]


def test_nested_captures_of_a_fused_timm_block_each_record_every_call() -> None:
    torch.manual_seed(0)
    model = timm.create_model("eva02_tiny_patch14_224", pretrained=False, img_size=28, patch_size=7, depth=2,
                              embed_dim=32, num_heads=4).eval()
    images = torch.randn(2, 3, 28, 28)
    with torch.no_grad():
        plain = model(images)
        with capture(model) as outer:
            model(images)
            with capture(model) as inner:
                seen = model(images)
    assert torch.equal(plain, seen)
    assert list(inner.weights) == ["blocks.0.attn", "blocks.1.attn"]
    assert list(outer.weights) == ["blocks.0.attn", "blocks.1.attn", "blocks.0.attn#1", "blocks.1.attn#1"]
    assert torch.equal(outer.weights["blocks.1.attn#1"], inner.weights["blocks.1.attn"])


def _report(tmp_path, name: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    """``attnkit visualize --timm name`` on a random-weight model and image: the report's data."""
    import json

    from click.testing import CliRunner

    from attnkit.cli.visualize import visualize

    weights, image = _weights_and_image(tmp_path, name)
    out = tmp_path / f"{name}.html"
    result = CliRunner().invoke(visualize, [str(weights), "--timm", name, "--image", str(image), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text(encoding="utf-8").split('id="attnkit-data">', 1)[1].split("</script>", 1)[0])


def test_visualize_lays_swin_windows_on_the_image_one_view_per_stage(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _report(tmp_path, "swin_tiny_patch4_window7_224")
    shapes = [(e["L"], e["H"], e["Tq"], e["Tk"]) for e in data["examples"]]
    assert shapes == [(2, 3, 3136, 3136), (2, 6, 784, 784), (6, 12, 196, 196), (2, 24, 49, 49)]
    first = data["examples"][0]
    assert first["name"].startswith("image 1 · layers.0.blocks.0.attn … layers.0.blocks.1.attn · 56x56 patches")
    assert first["queries"][57] == "patch (1, 1)" and not first["cross"]
    shape = (first["L"], first["H"], first["Tq"], first["k"])
    idx = np.frombuffer(base64.b64decode(first["idx"]), "<u2").reshape(shape)
    rows, cols = idx[0, :, 57] // 56, idx[0, :, 57] % 56  # unshifted block: patch (1, 1)'s window is 7 x 7
    assert rows.max() < 7 and cols.max() < 7


def test_maxvit_block_and_grid_views_lay_each_window_on_its_patches() -> None:
    torch.manual_seed(0)
    model = timm.create_model("maxvit_tiny_tf_224", pretrained=False, img_size=64).eval()
    with torch.no_grad(), capture(model) as cap:
        model(torch.randn(2, 3, 64, 64))
    name, tokens, maps = cap.image_views(example=1)[0]
    assert name.startswith("stages.0.blocks.0.attn_block.attn … stages.0.blocks.1.attn_grid.attn · 16x16 patches, "
                           "grid 2x2 and window 2x2")
    assert maps.shape == (4, 2, 256, 256) and tokens[17] == "patch (1, 1)"
    block, grid = maps[0, 0, 17].nonzero()[0], maps[1, 0, 17].nonzero()[0]  # partition 2 x 2 on a 16 x 16 map
    assert set(block // 16) == {0, 1} and set(block % 16) == {0, 1}  # its 2 x 2 block
    assert set(grid // 16) == {1, 9} and set(grid % 16) == {1, 9}  # its 2 x 2 grid, strided by 8
    assert torch.equal(torch.from_numpy(maps[1]), cap.on_image("stages.0.blocks.0.attn_grid.attn")[1])


def test_visualize_draws_xcit_channel_maps_labelled_as_channels(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = _report(tmp_path, "xcit_nano_12_p16_224")
    (ex,) = data["examples"]
    assert (ex["L"], ex["H"], ex["Tq"], ex["Tk"]) == (12, 4, 32, 32)
    assert ex["queries"][:2] == ["channel 0", "channel 1"] and not any("patch" in q for q in ex["queries"])
    assert "channel x channel, each head over its own 32 channels" in ex["name"]
