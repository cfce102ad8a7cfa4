"""The captioning commands, called directly through click's CliRunner, and run save/load."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import command
from attnkit.data.captions import encode_captions, images_to_tensor
from attnkit.data.shapes import generate_scenes, shapes_vocab
from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.caption.captioning import (
    corpus_bleu,
    fit_captioner,
    generate,
    load_caption_run,
    save_caption_run,
)
from tests.support.cli import train_caption

caption = command("caption")

SMALL = ["--train-size", "24", "--val-size", "4", "--epochs", "1", "--image-size", "32", "--batch-size", "12"]


def _png(path: Path, pixels: np.ndarray) -> None:
    from PIL import Image

    Image.fromarray(pixels).save(path)


@pytest.fixture(scope="module")
def shapes_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "shapes"
    result = CliRunner().invoke(train_caption, ["--out", str(out), *SMALL, "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def test_train_writes_a_complete_run(shapes_run: Path) -> None:
    folder = committed_dir(shapes_run)
    meta = json.loads((folder / "config.json").read_text())
    assert meta["model_name"] == "captioner" and meta["model_config"]["image_size"] == 32
    assert meta["vocab"]["words"] == shapes_vocab().words
    # SMALL holds out 4 scenes (seed 0 + 1_000_003), all 4 listed in val_examples: their BLEU is the run's.
    examples = meta["metrics"]["val_examples"]
    held_out = generate_scenes(4, seed=1_000_003, size=32)
    assert [e["reference"] for e in examples] == [s.caption for s in held_out]
    model, vocab, _ = load_caption_run(shapes_run)
    greedy = model.greedy(images_to_tensor([s.image for s in held_out]))
    assert [e["generated"] for e in examples] == [" ".join(vocab.decode(c.ids)) for c in greedy]
    expected = corpus_bleu([e["generated"] for e in examples], [[e["reference"]] for e in examples])
    assert meta["metrics"]["val_bleu4"] == pytest.approx(expected, abs=1e-9)
    assert meta["status"] == "done" and meta["progress"] == {"epoch": 1, "epochs": 1}
    history = [json.loads(line) for line in (folder / "history.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["epoch"] == 1
    assert (folder / "model.safetensors").is_file()
    assert json.loads((folder / "metrics.json").read_text()) == meta["metrics"]
    assert sorted(p.name for p in shapes_run.iterdir()) == [".lock", "checkpoints", "current.json"]
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())


def test_save_load_gives_the_same_caption(shapes_run: Path, tmp_path: Path) -> None:
    model, vocab, _ = load_caption_run(shapes_run)
    images = images_to_tensor([s.image for s in generate_scenes(4, seed=9, size=32)])
    before = [(c.ids, c.weights) for c in model.beam_search(images, beam_size=2)]
    save_caption_run(tmp_path / "copy", model, vocab, run_id="copy")
    again, vocab2, meta = load_caption_run(tmp_path / "copy")
    assert meta["run_id"] == "copy" and vocab2.words == vocab.words
    for (ids, w), c in zip(before, again.beam_search(images, beam_size=2), strict=True):
        assert ids == c.ids
        assert torch.equal(w, c.weights)


def test_caption_command_prints_the_model_caption_and_saves_the_figure(shapes_run: Path, tmp_path: Path) -> None:
    scene = generate_scenes(1, seed=11, size=32)[0]
    _png(tmp_path / "scene.png", scene.image)
    model, vocab, _ = load_caption_run(shapes_run)
    expected = " ".join(vocab.decode(model.greedy(images_to_tensor(scene.image[None]))[0].ids))
    result = CliRunner().invoke(caption, [str(shapes_run), str(tmp_path / "scene.png")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (expected or "(empty caption)")
    result = CliRunner().invoke(caption, [str(shapes_run), str(tmp_path / "scene.png"), "--beam-size", "2",
                                          "--attention", str(tmp_path / "att.png")])
    assert result.exit_code == 0, result.output
    if "(empty caption)" not in result.output:
        assert (tmp_path / "att.png").stat().st_size > 1000
    model_max = model.config.max_len
    result = CliRunner().invoke(caption, [str(shapes_run), str(tmp_path / "scene.png"), "--beam-size", "2",
                                          "--length-bonus", "0.5", "--min-len", "2", "--block-repeats"])
    assert result.exit_code == 0, result.output
    words = result.output.splitlines()[0].split()
    assert len(words) >= 2 and all(a != b for a, b in itertools.pairwise(words))
    result = CliRunner().invoke(caption, [str(shapes_run), str(tmp_path / "scene.png"), "--beam-size", "2",
                                          "--min-len", str(model_max)])
    assert result.exit_code != 0 and "min_len" in result.output


def test_a_different_run_is_not_overwritten(shapes_run: Path) -> None:
    before = (shapes_run / "current.json").read_text()
    result = CliRunner().invoke(train_caption, ["--out", str(shapes_run), *SMALL, "--quiet"])
    assert result.exit_code == 1
    assert "already holds a different run" in result.output and "continue it with --resume" in result.output
    assert (shapes_run / "current.json").read_text() == before


def test_overwrite_replaces_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["--out", str(out), *SMALL, "--quiet"]
    assert CliRunner().invoke(train_caption, args).exit_code == 0
    first = json.loads((committed_dir(out) / "config.json").read_text())["run_id"]
    result = CliRunner().invoke(train_caption, [*args, "--overwrite", "--seed", "1"])
    assert result.exit_code == 0, result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert meta["run_id"] != first and meta["options"]["training"]["seed"] == 1 and "train" not in meta


def test_real_caption_set(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    lines = []
    for i, scene in enumerate(generate_scenes(12, seed=2, size=40)):
        _png(folder / f"img{i}.png", scene.image)
        lines += [f"img{i}.png#0\t{scene.caption.capitalize()}.", f"img{i}.png#1\tan image"]
    (tmp_path / "captions.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = CliRunner().invoke(train_caption, ["--out", str(out), "--images", str(folder), "--captions",
                                                str(tmp_path / "captions.txt"), "--epochs", "1",
                                                "--image-size", "32", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "22 training pairs, 1 held-out images" in result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    words = set(meta["vocab"]["words"])
    assert {"an", "image", "a"} <= words
    assert words - {"<pad>", "<bos>", "<eos>", "<unk>"} <= set(shapes_vocab().words) | {"an", "image"}
    assert meta["data"]["captions"].endswith("captions.txt")
    # a resume finds the data beside a run moved with it, or where a flag points, and checks the bytes
    import shutil

    from attnkit.train.runs.data_record import DataRecordError
    from attnkit.train.tasks.caption.caption_settings import CaptionSettings
    from attnkit.train.tasks.caption.captioning import _resumed

    settings = CaptionSettings.from_run(meta)
    shutil.copytree(tmp_path, tmp_path.parent / "moved")
    shutil.rmtree(folder)
    (tmp_path / "captions.txt").unlink()
    moved = tmp_path.parent / "moved"
    data = _resumed(moved / "run", settings)[1].data
    assert (data.images, data.captions) == (str(moved / "images"), str(moved / "captions.txt"))
    with pytest.raises(DataRecordError, match="the data run .* was trained on is gone"):
        _resumed(out, settings)
    (moved / "captions.txt").write_text("img0.png#0\tother words\n", encoding="utf-8")
    given = dataclasses.replace(settings, data=dataclasses.replace(settings.data, images=str(moved / "images"),
                                                                   captions=str(moved / "captions.txt")))
    with pytest.raises(DataRecordError, match=r"--captions .*captions.txt is not the data"):
        _resumed(out, given)


def test_command_errors(tmp_path: Path, shapes_run: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(train_caption, ["--out", str(tmp_path / "x"), "--images", str(tmp_path)])
    assert result.exit_code == 2 and "--images and --captions go together" in result.output
    result = runner.invoke(train_caption, ["--out", str(tmp_path / "x"), *SMALL, "--backbone", "vgg"])
    assert result.exit_code == 1 and "backbone must be one of ['small', 'resnet18'" in result.output
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    result = runner.invoke(caption, [str(tmp_path), str(tmp_path / "notes.txt")])
    assert result.exit_code == 1 and "not an attnkit run directory" in result.output
    result = runner.invoke(caption, [str(shapes_run), str(tmp_path / "notes.txt")])
    assert result.exit_code == 1 and "notes.txt is not a readable image" in result.output


def test_resnet_without_torchvision_is_a_clear_cli_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    result = CliRunner().invoke(train_caption, ["--out", str(tmp_path / "r"), *SMALL, "--backbone", "resnet18"])
    assert result.exit_code == 1 and "needs torchvision" in result.output
    assert not (tmp_path / "r").exists()


def test_corpus_bleu_scale_and_errors() -> None:
    assert corpus_bleu(["a red circle on the left"], [["a red circle on the left"]]) == pytest.approx(100.0)
    low = corpus_bleu(["a blue square above a red circle"], [["a red circle on the left"]])
    assert 0.0 <= low < 30.0
    with pytest.raises(ValueError, match="equally long"):
        corpus_bleu(["a"], [])


def test_training_lifts_held_out_bleu_far_above_an_untrained_model() -> None:
    vocab = shapes_vocab()
    train, held_out = generate_scenes(32, seed=5, size=32), generate_scenes(32, seed=6, size=32)
    ids, lengths = encode_captions([s.caption for s in train], vocab)
    torch.manual_seed(0)
    model = ImageCaptioner(CaptionerConfig(vocab_size=len(vocab), image_size=32, channels=(8, 16, 32), embed_dim=16,
                                           hidden_dim=48, attention_dim=16, dropout=0.0))

    def held_out_bleu() -> float:
        captions = generate(model, images_to_tensor([s.image for s in held_out]))
        return corpus_bleu([" ".join(vocab.decode(c.ids)) for c in captions], [s.caption for s in held_out])

    untrained = held_out_bleu()
    fit_captioner(model, images_to_tensor([s.image for s in train]), ids, lengths, epochs=20, batch_size=8, lr=1e-2)
    trained = held_out_bleu()
    assert untrained < 5.0 and trained > untrained + 20.0, (untrained, trained)  # measured: 0.2 -> 35


def test_load_rejects_other_runs(tmp_path: Path) -> None:
    (tmp_path / "checkpoints" / "000001").mkdir(parents=True)  # a committed run of another kind
    (tmp_path / "current.json").write_text(json.dumps({"generation": 1}))
    (tmp_path / "checkpoints" / "000001" / "config.json").write_text(
        json.dumps({"run_id": "x", "model_name": "sentiment"}))
    with pytest.raises(ValueError, match="is a text classification run, not an image captioning run: use attnkit "
                                         "predict"):
        load_caption_run(tmp_path)
    model = ImageCaptioner(CaptionerConfig(vocab_size=len(shapes_vocab()), image_size=32, channels=(2, 2, 2)))
    save_caption_run(tmp_path / "ok", model, shapes_vocab(), run_id="a")
    with pytest.raises(FileExistsError, match="different run"):
        save_caption_run(tmp_path / "ok", model, shapes_vocab(), run_id="b")


def test_one_decoding_default_for_the_command_and_the_library() -> None:
    """``attnkit caption``, ``generate`` and ``load_run(RUN).caption`` decode alike unless told otherwise."""
    import inspect

    from attnkit.train.tasks.caption.caption_settings import DECODING
    from attnkit.train.tasks.caption.captioning import CaptionRun, generate

    flags = {p.name: p.default for p in caption.params}
    library = {**{n: p.default for n, p in inspect.signature(generate).parameters.items()},
               **{n: p.default for n, p in inspect.signature(CaptionRun.caption).parameters.items()}}
    for name, value in vars(DECODING).items():
        assert flags[name] == value, name
    assert library["beam_size"] == DECODING.beam_size and library["length_penalty"] == DECODING.length_penalty
    # the model and the shared search keep no beam width of their own that could differ from the task's
    from attnkit.decoding import beam_search_over_steps, n_best_over_steps
    from attnkit.models.captioning import ImageCaptioner

    for searcher in (ImageCaptioner.beam_search, beam_search_over_steps, n_best_over_steps):
        assert inspect.signature(searcher).parameters["beam_size"].default is inspect.Parameter.empty, searcher


def test_every_model_setting_reaches_the_captioners_config() -> None:
    """Each model setting named as a config field is that field (no hand-kept list), ``no_gate`` its opposite."""
    from attnkit.models.captioning import CaptionerConfig
    from attnkit.train.tasks.caption.caption_settings import CaptionModelSettings, CaptionSettings

    changed = {"embed_dim": 7, "hidden_dim": 9, "attention_dim": 5, "dropout": 0.25, "region_dim": 6,
               "backbone": "resnet18", "attention_reg": 0.5, "attend_with": "previous_state", "no_gate": True}
    config = CaptionSettings(model=CaptionModelSettings(**changed)).resolved().model_config(11)
    names = set(CaptionerConfig.field_names())
    assert {f.name for f in dataclasses.fields(CaptionModelSettings)} - names == {"pretrained", "no_gate"}
    assert all(getattr(config, k) == v for k, v in changed.items() if k in names) and config.gate is False
    assert (config.vocab_size, config.max_len) == (11, 20)
