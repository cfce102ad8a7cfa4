"""Translation, captioning and NumPy runs are transactions: a kill, a refused resume or a second
writer never leaves a run half-written, and an unfinished run says so."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from attnkit.data.parallel import ParallelCorpus
from attnkit.train.runs.checkpoint import load_tensors
from attnkit.train.runs.rundir import RunFileError, RunLock, RunLockedError, committed_dir
from tests.support.runs import recorded

# --- helpers ---------------------------------------------------------------------------------------


def tree(directory: Path) -> dict[str, bytes | None]:
    """Every name under ``directory`` with its bytes (None for a folder)."""
    return {p.relative_to(directory).as_posix(): (None if p.is_dir() else p.read_bytes())
            for p in sorted(directory.rglob("*"))}


def status(run: Path) -> str:
    return str(json.loads((committed_dir(run) / "config.json").read_text())["status"])


# --- translation -----------------------------------------------------------------------------------

DE = ["ein", "hund", "mann", "rot", "haus", "kind"]
EN = ["a", "dog", "man", "red", "house", "child"]


def corpus(n: int, seed: int = 0) -> ParallelCorpus:
    rng = random.Random(seed)
    rows = [[rng.randrange(len(DE)) for _ in range(rng.randint(2, 4))] for _ in range(n)]
    return ParallelCorpus([" ".join(DE[i] for i in r) for r in rows], [" ".join(EN[i] for i in r) for r in rows])


def fit(out: Path, epochs: int = 2, *, resume: bool = False, overwrite: bool = False, seed: int = 0) -> dict:
    from attnkit.train.tasks.translate.settings import TranslationModelSettings, TranslationSettings
    from attnkit.train.tasks.translate.translation import TranslationTrainConfig, fit_translation

    model = TranslationModelSettings(d_model=16, num_heads=2, d_ff=32, dropout=0.0, encoder_layers=1, decoder_layers=1)
    config = TranslationTrainConfig(epochs=epochs, max_tokens=200, lr=5e-3, warmup_steps=5, vocab_size=40, seed=seed,
                                    average_last=2)
    return fit_translation(corpus(40), corpus(4, seed=1), TranslationSettings(model=model, training=config),
                           out_dir=out, resume=resume, overwrite=overwrite)


def interrupt_translation(monkeypatch: pytest.MonkeyPatch, epoch: int, seed: int = 0) -> None:
    """The training batches of ``epoch`` raise, as a kill during that epoch would."""
    import attnkit.train.tasks.translate.translation as translation

    batches = translation.batches_by_tokens

    def killed(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if kwargs.get("seed") == seed + epoch:
            raise KeyboardInterrupt
        return batches(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(translation, "batches_by_tokens", killed)


@pytest.fixture(scope="module")
def unfinished_translation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A translation run killed during its second epoch: epoch 1 committed, status "training"."""
    out = tmp_path_factory.mktemp("translation") / "run"
    with pytest.MonkeyPatch.context() as patch:
        interrupt_translation(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            fit(out)
    yield out


def test_translation_overwrite_killed_before_its_first_commit_keeps_the_old_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.train.tasks.translate.translation import load_translation_run

    out = tmp_path / "run"
    old = fit(out, 1)
    before = tree(out)
    interrupt_translation(monkeypatch, 1, seed=3)
    with pytest.raises(KeyboardInterrupt):
        fit(out, 2, overwrite=True, seed=3)
    assert tree(out) == before
    translator = load_translation_run(out)
    assert translator.meta["run_id"] == old["run_id"] and translator.meta["status"] == "done"


def test_translation_failed_resume_leaves_the_run_byte_identical(unfinished_translation: Path,
                                                                 tmp_path: Path) -> None:
    import shutil

    out = tmp_path / "run"
    shutil.copytree(unfinished_translation, out)
    assert status(out) == "training"
    state = committed_dir(out) / "train_state" / "state.json"
    state.write_text('{"epoch": 1, "step":', encoding="utf-8")
    recorded(state)
    before = tree(out)
    with pytest.raises(RunFileError, match=r"state\.json is not valid JSON"):
        fit(out, resume=True)
    assert tree(out) == before


def test_translation_resume_of_a_finished_run_changes_nothing(tmp_path: Path) -> None:
    from tests.support.cli import train_translate

    out = tmp_path / "run"
    fit(out, 1)
    before = tree(out)
    with pytest.raises(ValueError, match="finished training already"):
        fit(out, 2, resume=True)
    for side, lines in (("de", ["ein hund"]), ("en", ["a dog"])):
        (tmp_path / f"t.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(train_translate, ["--src", str(tmp_path / "t.de"), "--tgt", str(tmp_path / "t.en"),
                                                  "--out", str(out), "--resume"])
    assert result.exit_code == 0 and "finished training already" in result.output
    assert tree(out) == before


def test_translate_refuses_an_unfinished_run_unless_allowed(unfinished_translation: Path) -> None:
    from attnkit.cli import command
    translate = command("translate")

    out = unfinished_translation
    refused = CliRunner().invoke(translate, [str(out), "ein hund", "--beam-size", "1"])
    assert refused.exit_code == 1, refused.output
    assert "did not finish training" in refused.output and "--allow-unfinished" in refused.output
    assert "--task translate" in refused.output
    served = CliRunner().invoke(translate, [str(out), "ein hund", "--beam-size", "1", "--allow-unfinished"])
    assert served.exit_code == 0, served.output
    assert "unfinished (epoch 1 of 2)" in served.stderr and served.stdout.strip()


# --- captioning ------------------------------------------------------------------------------------

SMALL = ["--train-size", "12", "--val-size", "2", "--epochs", "2", "--image-size", "32", "--batch-size", "12",
         "--quiet"]


def kill_captioner_at_call(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """``ImageCaptioner.loss`` raises on its ``call``-th call (one call per batch)."""
    from attnkit.models.captioning import ImageCaptioner

    loss, calls = ImageCaptioner.loss, []

    def killed(self: ImageCaptioner, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == call:
            raise RuntimeError("killed")
        return loss(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ImageCaptioner, "loss", killed)


def test_caption_overwrite_killed_keeps_the_old_run_and_unfinished_runs_say_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.cli import command
    caption = command("caption")
    from attnkit.data.shapes import generate_scenes
    from attnkit.train.tasks.caption.captioning import load_caption_run
    from tests.support.cli import train_caption

    out = tmp_path / "run"
    assert CliRunner().invoke(train_caption, ["--out", str(out), *SMALL]).exit_code == 0
    old_id = load_caption_run(out)[2]["run_id"]
    before = tree(out)
    with monkeypatch.context() as patch:  # killed in the first epoch: nothing committed yet
        kill_captioner_at_call(patch, 1)
        result = CliRunner().invoke(train_caption, ["--out", str(out), *SMALL, "--overwrite", "--seed", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)
    assert tree(out) == before and load_caption_run(out)[2]["run_id"] == old_id

    with monkeypatch.context() as patch:  # killed in the second epoch: the first one is the run now
        kill_captioner_at_call(patch, 2)
        result = CliRunner().invoke(train_caption, ["--out", str(out), *SMALL, "--overwrite", "--seed", "1"])
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)
    assert status(out) == "training" and not (committed_dir(out) / "metrics.json").exists()
    assert [json.loads(line)["epoch"] for line in (committed_dir(out) / "history.jsonl").read_text().splitlines()] \
        == [1.0]

    from PIL import Image

    Image.fromarray(generate_scenes(1, seed=5, size=32)[0].image).save(tmp_path / "scene.png")
    refused = CliRunner().invoke(caption, [str(out), str(tmp_path / "scene.png")])
    assert refused.exit_code == 1 and "did not finish training" in refused.output
    assert "--task caption" in refused.output and "--resume" in refused.output
    served = CliRunner().invoke(caption, [str(out), str(tmp_path / "scene.png"), "--allow-unfinished"])
    assert served.exit_code == 0, served.output
    assert "unfinished (epoch 1 of 2)" in served.stderr and served.stdout.strip()

    # --resume finishes it with the weights of an uninterrupted run of the same settings
    changed = CliRunner().invoke(train_caption, ["--out", str(out), "--resume", "--seed", "2", "--lr", "0.1"])
    assert changed.exit_code == 2, changed.output  # refused by name with both values, never ignored
    assert "--seed is 1 there, given 2; --lr is 0.003 there, given 0.1" in changed.output
    resumed = CliRunner().invoke(train_caption, ["--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert status(out) == "done"
    straight = tmp_path / "straight"
    assert CliRunner().invoke(train_caption, ["--out", str(straight), *SMALL, "--seed", "1"]).exit_code == 0
    a = load_tensors(committed_dir(out) / "model.safetensors")
    b = load_tensors(committed_dir(straight) / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    again = CliRunner().invoke(train_caption, ["--out", str(out), "--resume"])
    assert again.exit_code == 0 and "nothing to resume" in again.output


# --- numpy -----------------------------------------------------------------------------------------


def numpy_data() -> list:
    from attnkit.data.readers import Example
    from attnkit.data.synthetic import keyword_corpus

    return [Example(d.text, d.label) for d in keyword_corpus(60, seed=2, length=(4, 6))]


def train_numpy(out: Path, log: list[str] | None = None):  # type: ignore[no-untyped-def]
    from attnkit.train.tasks.numpy.numpy_backend import NumpyTrainSettings, train_numpy_run

    data = numpy_data()
    return train_numpy_run(data[:50], data[50:55], data[55:], model_options={"layer": {"d_model": 8, "d_ff": 16}},
                           settings=NumpyTrainSettings(epochs=1, batch_size=25), out_dir=out,
                           log=None if log is None else log.append)


def test_numpy_run_commits_its_epoch_then_is_done(tmp_path: Path) -> None:
    from attnkit.train.runs.rundir import read_manifest
    from attnkit.train.tasks.numpy.numpy_backend import is_numpy_run, load_numpy_run

    out = tmp_path / "run"
    run, _ = train_numpy(out)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "checkpoints", "current.json"]
    folder = committed_dir(out)
    assert folder == out / "checkpoints" / "000002"  # epoch 1 (with its train state), then done (without)
    assert sorted(p.name for p in folder.iterdir()) == [".attnkit-generation", "config.json", "labels.json",
                                                         "model.safetensors", "vocab.json"]
    manifest = read_manifest(out)
    assert manifest is not None and manifest["status"] == "done"
    assert is_numpy_run(out) and not is_numpy_run(tmp_path / "nowhere")
    texts = [e.text for e in numpy_data()[:5]]
    assert (load_numpy_run(out).logits(texts)[0] == run.logits(texts)[0]).all()


def test_numpy_training_is_refused_while_another_writer_holds_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    lock = RunLock(out).acquire()
    try:
        lines: list[str] = []
        with pytest.raises(RunLockedError, match="being written by another process"):
            train_numpy(out, lines)
        assert lines == []  # refused before training started
        assert [p.name for p in out.iterdir()] == [".lock"]
    finally:
        lock.release()
    train_numpy(out)
    assert status(out) == "done"


def test_numpy_damaged_files_are_named(tmp_path: Path) -> None:
    from attnkit.train.tasks.numpy.numpy_backend import load_numpy_run

    out = tmp_path / "run"
    train_numpy(out)
    weights = committed_dir(out) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    recorded(weights)
    with pytest.raises(RunFileError, match=r"model\.safetensors is not readable") as err:
        load_numpy_run(out)
    assert str(weights) in str(err.value)
    vocab = committed_dir(out) / "vocab.json"
    vocab.write_text('{"itos": [', encoding="utf-8")
    recorded(vocab)
    with pytest.raises(RunFileError, match=r"vocab\.json is not valid JSON"):
        load_numpy_run(out)
