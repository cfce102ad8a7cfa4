"""Parallel corpus reading, subword tokenizers, batching, translation runs and the two commands."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from attnkit.blocks import TransformerLayerConfig
from attnkit.cli import command
from attnkit.data.parallel import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    ParallelCorpus,
    batches_by_tokens,
    collate_pairs,
    encode_pairs,
    read_parallel,
    train_translation_tokenizers,
)
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.runs.resume import ResumeError
from attnkit.train.runs.rundir import committed_dir, read_run_config
from attnkit.train.tasks.translate.settings import TranslationModelSettings, TranslationSettings
from attnkit.train.tasks.translate.translation import Translator, load_translation_run, save_translation_run
from tests.support.cli import train_translate

translate = command("translate")

WORDS_DE = ["ein", "hund", "mann", "läuft", "rot", "blau", "haus", "kind", "spielt", "im"]
WORDS_EN = ["a", "dog", "man", "runs", "red", "blue", "house", "child", "plays", "in"]


def toy_corpus(n: int, seed: int = 0) -> ParallelCorpus:
    """Word-for-word 'translation' of random word strings: a task a tiny model can learn."""
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(WORDS_DE)) for _ in range(rng.randint(2, 5))]
        src.append(" ".join(WORDS_DE[i] for i in idx) + ".")
        tgt.append(" ".join(WORDS_EN[i] for i in idx) + ".")
    return ParallelCorpus(src, tgt)


def write_pair(folder: Path, corpus: ParallelCorpus, name: str, *, gz: bool = False) -> tuple[Path, Path]:
    paths = []
    for side, lines in (("de", corpus.sources), ("en", corpus.targets)):
        data = ("\n".join(lines) + "\n").encode("utf-8")
        path = folder / (f"{name}.{side}.gz" if gz else f"{name}.{side}")
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    return paths[0], paths[1]


# --- reading ---------------------------------------------------------------------------------------


def test_read_parallel_plain_and_gzip(tmp_path: Path) -> None:
    corpus = toy_corpus(5)
    for gz in (False, True):
        src, tgt = write_pair(tmp_path, corpus, f"c{gz}", gz=gz)
        read = read_parallel(src, tgt)
        assert read.sources == corpus.sources and read.targets == corpus.targets and read.dropped == 0
    (tmp_path / "a.de").write_bytes("\ufeffeins\r\n\nzwei\x85drei\n".encode())
    (tmp_path / "a.en").write_text("one\nblank\ntwo\n", encoding="utf-8")
    read = read_parallel(tmp_path / "a.de", tmp_path / "a.en")
    assert read.sources == ["eins", "zwei\x85drei"] and read.targets == ["one", "two"] and read.dropped == 1


def test_read_parallel_errors(tmp_path: Path) -> None:
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line counts differ: .*3 lines.*has 2"):
        read_parallel(tmp_path / "a.de", tmp_path / "a.en")
    (tmp_path / "e.de").write_text("\n\n", encoding="utf-8")
    (tmp_path / "e.en").write_text("x\ny\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentence pair"):
        read_parallel(tmp_path / "e.de", tmp_path / "e.en")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_parallel(tmp_path / "missing.de", tmp_path / "a.en")


# --- tokenizers and batches ------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False])
def test_subword_tokenizers_round_trip_text(shared: bool) -> None:
    corpus = toy_corpus(200)
    toks = train_translation_tokenizers(corpus, vocab_size=60, shared=shared)
    assert toks.shared == shared
    for tok in (toks.source, toks.target):
        assert [tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[BOS]", "[EOS]")] == [PAD_ID, 1, BOS_ID, EOS_ID]
    ids = toks.target.encode("a blue house. a red dog.", add_special_tokens=False).ids
    assert toks.decode_target([ids]) == ["a blue house. a red dog."]  # spaces restored exactly
    pairs = encode_pairs(toks, corpus, max_len=3)
    assert len(pairs) == len(corpus) and all(1 <= len(s) <= 3 and 1 <= len(t) <= 3 for s, t in pairs)
    if not shared:
        assert toks.source.token_to_id("▁hund") is not None and toks.source.token_to_id("▁dog") is None


def test_batches_respect_the_token_budget_and_cover_every_pair() -> None:
    rng = random.Random(0)
    pairs = [([rng.randint(4, 9)] * rng.randint(1, 12), [rng.randint(4, 9)] * rng.randint(1, 12)) for _ in range(300)]
    seen = 0
    for batch in batches_by_tokens(pairs, 64, seed=3):
        assert batch.src.numel() <= 64 and batch.tgt_in.numel() <= 64
        words = (batch.tgt_out[:, :-1] != PAD_ID) & (batch.tgt_out[:, :-1] != EOS_ID)
        assert torch.equal(batch.tgt_in[:, 1:][words], batch.tgt_out[:, :-1][words])  # shifted by one
        assert torch.all(batch.tgt_in[:, 0] == BOS_ID)
        assert int((batch.tgt_out == EOS_ID).sum()) == batch.src.shape[0]
        seen += batch.src.shape[0]
    assert seen == len(pairs)
    with pytest.raises(ValueError, match="at least one token"):
        collate_pairs([([], [5])])


# --- runs and commands -----------------------------------------------------------------------------


def tiny_translator(seed: int = 0) -> Translator:
    torch.manual_seed(seed)
    toks = train_translation_tokenizers(toy_corpus(100), vocab_size=50, shared=False)
    config = Seq2SeqConfig(src_vocab_size=toks.source.get_vocab_size(), tgt_vocab_size=toks.target.get_vocab_size(),
                           layer=TransformerLayerConfig(16, 2, 32, norm_first=True), encoder_layers=1, decoder_layers=1,
                           tie_embeddings=False)
    return Translator(Seq2SeqTransformer(config).eval(), toks)


def test_save_load_gives_the_same_translations(tmp_path: Path) -> None:
    translator = tiny_translator()
    texts = ["ein hund läuft.", "ein rot haus im blau."]
    before = translator.translate(texts, beam_size=3)
    save_translation_run(tmp_path / "run", translator.model, translator.tokenizers, run_id="r1")
    loaded = load_translation_run(tmp_path / "run")
    after = loaded.translate(texts, beam_size=3)
    assert [t.text for t in after] == [t.text for t in before]
    assert [t.score for t in after] == pytest.approx([t.score for t in before], abs=1e-6)
    meta = json.loads((committed_dir(tmp_path / "run") / "config.json").read_text())
    assert meta["model_name"] == "seq2seq" and meta["shared_tokenizer"] is False and meta["status"] == "done"
    with pytest.raises(FileExistsError, match="different run"):
        save_translation_run(tmp_path / "run", translator.model, translator.tokenizers, run_id="r2")
    with pytest.raises(ValueError, match="empty after tokenization"):
        translator.translate(["ok", "   "])


def test_train_and_translate_commands(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, toy_corpus(250), "train", gz=True)
    vsrc, vtgt = write_pair(tmp_path, toy_corpus(20, seed=1), "val")
    out = tmp_path / "run"
    args = ["--src", str(src), "--tgt", str(tgt), "--val-src", str(vsrc), "--val-tgt", str(vtgt), "--out", str(out),
            "--vocab-size", "60", "--d-model", "32", "--num-heads", "4", "--d-ff", "64", "--encoder-layers", "1",
            "--decoder-layers", "1", "--dropout", "0", "--epochs", "3", "--max-tokens", "400", "--lr", "5e-3",
            "--warmup-steps", "20", "--label-smoothing", "0"]
    result = CliRunner().invoke(train_translate, args)
    assert result.exit_code == 0, result.output
    assert "validation BLEU" in result.output and (committed_dir(out) / "model.safetensors").is_file()
    history = json.loads((committed_dir(out) / "config.json").read_text())["history"]
    assert len(history) == 3 and history[-1]["train_loss"] < 0.8 * history[0]["train_loss"]

    again = CliRunner().invoke(train_translate, args)
    assert again.exit_code == 1 and "different run" in again.output

    plot = tmp_path / "align.png"
    result = CliRunner().invoke(translate, [str(out), "ein hund läuft.", "ein kind spielt.", "--beam-size", "2",
                                            "--alignment", str(plot)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().split("\n")
    expected = load_translation_run(out).translate(["ein hund läuft.", "ein kind spielt."], beam_size=2)
    assert lines == [t.text for t in expected]
    assert plot.is_file() and plot.stat().st_size > 0
    # one decoding default: the command, load_run(...).translate() and the library's beam search
    import inspect

    import attnkit
    from attnkit.decoding import beam_search

    texts = ["ein hund läuft.", "ein kind spielt.", "ein rotes haus steht."]
    by_command = CliRunner().invoke(translate, [str(out), *texts]).stdout.strip().split("\n")
    assert by_command == [t.text for t in attnkit.load_run(out).translate(texts)]
    defaults = {name: p.default for name, p in inspect.signature(beam_search).parameters.items()}
    served = inspect.signature(attnkit.load_run(out).translate).parameters
    assert (served["beam_size"].default, served["length_penalty"].default) \
        == (defaults["beam_size"], defaults["length_penalty"])


def test_command_errors(tmp_path: Path) -> None:
    (tmp_path / "a.de").write_text("eins\nzwei\n", encoding="utf-8")
    (tmp_path / "a.en").write_text("one\n", encoding="utf-8")
    result = CliRunner().invoke(train_translate, ["--src", str(tmp_path / "a.de"), "--tgt", str(tmp_path / "a.en"),
                                                  "--out", str(tmp_path / "run")])
    assert result.exit_code == 1 and "line counts differ" in result.output
    result = CliRunner().invoke(translate, [str(tmp_path / "nowhere"), "hallo"])
    assert result.exit_code == 1 and "nowhere" in result.output and "Traceback" not in result.output
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(translate, [str(tmp_path / "empty"), "hallo"])
    assert result.exit_code == 1 and "not an attnkit run directory" in result.output
    translator = tiny_translator()
    save_translation_run(tmp_path / "run", translator.model, translator.tokenizers, run_id="r")
    result = CliRunner().invoke(translate, [str(tmp_path / "run")])
    assert result.exit_code == 2 and "at least one TEXT" in result.output


def _settings(epochs: int, *, average_last: int = 1, lr: float = 5e-3, dropout: float = 0.1) -> TranslationSettings:
    model = TranslationModelSettings(d_model=32, num_heads=4, d_ff=64, dropout=dropout, attention_dropout=0.0,
                                     encoder_layers=1, decoder_layers=1)
    return TranslationSettings(model=model, training=TranslationTrainConfig(
        epochs=epochs, max_tokens=300, lr=lr, warmup_steps=10, vocab_size=60, average_last=average_last))


def _fit(out: Path, epochs: int, *, resume: bool = False, log: Callable[[str], None] | None = None,
         **settings: Any) -> dict:
    from attnkit.train.tasks.translate.translation import fit_translation

    return fit_translation(toy_corpus(120), toy_corpus(12, seed=1), _settings(epochs, **settings),
                           out_dir=out, resume=resume, log=log)


def _weights(out: Path) -> dict[str, torch.Tensor]:
    from attnkit.train.runs.checkpoint import load_tensors

    return load_tensors(committed_dir(out) / "model.safetensors")


def interrupt_in_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int, seed: int = 0) -> None:
    """Make the training batches of ``epoch`` raise KeyboardInterrupt, as a Ctrl-C would."""
    import attnkit.train.tasks.translate.translation as translation

    batches = translation.batches_by_tokens

    def interrupted(*args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if kwargs.get("seed") == seed + epoch:
            raise KeyboardInterrupt
        return batches(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(translation, "batches_by_tokens", interrupted)


def test_resumed_translation_training_equals_an_uninterrupted_run(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _fit(tmp_path / "whole", 3, average_last=2)
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            _fit(tmp_path / "split", 3, average_last=2)
    assert json.loads((committed_dir(tmp_path / "split") / "config.json").read_text())["status"] == "training"
    resumed = _fit(tmp_path / "split", 3, resume=True, average_last=2)
    assert resumed["steps"] == whole["steps"] and resumed["run_id"] != whole["run_id"]
    assert [h["train_loss"] for h in resumed["history"]] == [h["train_loss"] for h in whole["history"]]
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "split")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # only the snapshots still needed for averaging are kept
    kept = sorted(p.name for p in (committed_dir(tmp_path / "split") / "train_state").glob("epoch-*.safetensors"))
    assert kept == ["epoch-2.safetensors", "epoch-3.safetensors"]
    with pytest.raises(ValueError, match="finished training already"):
        _fit(tmp_path / "split", 4, resume=True, average_last=2)


def test_resume_needs_a_train_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            _fit(tmp_path / "split", 3)
    (committed_dir(tmp_path / "split") / "train_state" / "state.json").unlink()
    with pytest.raises(ValueError, match=r"train_state/state\.json is missing"):
        _fit(tmp_path / "split", 3, resume=True)


def test_resume_refuses_changed_settings_and_missing_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="cannot resume: .*not an attnkit run directory"):
        _fit(tmp_path / "none", 2, resume=True)
    assert not (tmp_path / "none").exists()
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            _fit(tmp_path / "run", 2)
    with pytest.raises(ValueError, match=r"--lr is 0\.005 there, given 0\.001"):
        _fit(tmp_path / "run", 2, resume=True, lr=1e-3)


def test_a_run_records_its_whole_settings_tree_and_a_library_resume_keeps_the_one_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fit_translation(resume=True)`` checks every setting as ``attnkit train --resume`` does: a changed one
    (a model setting too) is refused by name with both values, a changed ``epochs`` is applied and said once."""
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            _fit(out, 2)
    config = json.loads((committed_dir(out) / "config.json").read_text())
    assert config["settings"] == dataclasses.asdict(_settings(2)) and "train_config" not in config
    assert TranslationSettings.from_run(config) == _settings(2)
    moved = {**config, "settings": {**config["settings"], "data": {"src": "gone.de", "tgt": "gone.en"}}}
    assert TranslationSettings.from_run(moved) == _settings(2)  # the data record finds the data
    with pytest.raises(ResumeError, match=rf"continues {out} with its saved settings: --dropout is 0\.1 there, "
                                          r"given 0\.2; leave it out"):
        _fit(out, 2, resume=True, dropout=0.2)
    lines: list[str] = []
    _fit(out, 3, resume=True, log=lines.append)
    assert [line for line in lines if "--epochs" in line] == [
        f"--epochs 3: {out} was started with 2 and now goes on with 3"]
    assert TranslationSettings.from_run(read_run_config(out)) == _settings(3)


def test_a_run_saved_before_the_settings_tree_loads_and_resumes(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A run written before runs recorded ``settings`` (it holds ``train_config`` and ``model_config``) loads,
    gives back its settings from those, and resumes by the same rule."""
    from tests.support.runs import recorded

    out = tmp_path / "old"
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            _fit(out, 2, dropout=0.0, lr=1e-3)
    path = committed_dir(out) / "config.json"
    config = json.loads(path.read_text())
    config["train_config"] = config.pop("settings")["training"]  # what such a run recorded
    path.unlink()  # committed files may be linked between generations: never write through one
    path.write_text(json.dumps(config), encoding="utf-8")
    recorded(path)
    assert TranslationSettings.from_run(read_run_config(out)) == _settings(2, dropout=0.0, lr=1e-3)
    assert load_translation_run(out, allow_unfinished=True).max_src_len == 100
    with pytest.raises(ResumeError, match=r"--dropout is 0 there, given 0\.1"):
        _fit(out, 2, resume=True, lr=1e-3)
    _fit(out, 2, resume=True, dropout=0.0, lr=1e-3)
    resumed = read_run_config(out)
    assert resumed["status"] == "done" and TranslationSettings.from_run(resumed) == _settings(2, dropout=0.0, lr=1e-3)


def test_weight_averaging_is_the_mean_of_the_last_epochs(tmp_path: Path) -> None:
    from attnkit.train.runs.checkpoint import load_tensors

    summary = _fit(tmp_path / "avg", 3, average_last=3, dropout=0.0)
    folder = committed_dir(tmp_path / "avg")
    meta = json.loads((folder / "config.json").read_text())
    snaps = [load_tensors(folder / "train_state" / f"epoch-{e}.safetensors") for e in (1, 2, 3)]
    final = _weights(tmp_path / "avg")
    if meta.get("averaged_epochs") == 3:
        assert meta["averaged_val_loss"] <= summary["history"][-1]["val_loss"]
        expected = {k: torch.stack([s[k] for s in snaps]).mean(0) for k in final}
    else:  # the average was worse on validation: the last epoch's weights stay
        expected = snaps[-1]
    assert all(torch.allclose(final[k], expected[k], atol=1e-7) for k in final)
    assert not all(torch.equal(snaps[0][k], snaps[-1][k]) for k in final)


def test_train_translate_resume_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, tgt = write_pair(tmp_path, toy_corpus(120), "train")
    out = tmp_path / "run"
    base = ["--src", str(src), "--tgt", str(tgt), "--out", str(out), "--vocab-size", "60", "--d-model", "32",
            "--num-heads", "4", "--d-ff", "64", "--encoder-layers", "1", "--decoder-layers", "1",
            "--max-tokens", "300", "--warmup-steps", "10", "--attention-dropout", "0", "--activation-dropout", "0",
            "--epochs", "2"]
    with monkeypatch.context() as patch:
        interrupt_in_epoch(patch, 2)
        stopped = CliRunner().invoke(train_translate, base)
    assert stopped.exit_code == 130 and "--resume" in stopped.output
    # the run records what it read, and resuming checks it by the rule every task keeps
    from attnkit.train.runs.rundir import data_fingerprint

    data = json.loads((committed_dir(out) / "config.json").read_text())["data"]
    assert data["src"] == str(src.resolve()) and data["val_src"] is None
    assert data["tgt_sha256"] == data_fingerprint(tgt) and data["src_sha256"] == data_fingerprint(src)
    assert data["src_bytes"] == src.stat().st_size
    other = tmp_path / "other.en"
    other.write_text(tgt.read_text(encoding="utf-8").replace("a", "b", 1), encoding="utf-8")
    before = (committed_dir(out) / "config.json").read_bytes()
    data = ["--src", str(src), "--tgt", str(tgt), "--out", str(out)]
    changed = CliRunner().invoke(train_translate, ["--src", str(src), "--tgt", str(other), "--out", str(out),
                                                   "--resume"])
    assert changed.exit_code == 1 and f"--tgt {other.resolve()} is not the data run" in changed.output, changed.output
    assert (committed_dir(out) / "config.json").read_bytes() == before
    both = CliRunner().invoke(train_translate, [*base, "--resume", "--overwrite"])
    assert both.exit_code == 2 and "give one" in both.output
    # the one resume rule: a changed setting is refused by name with both values, never ignored; the same
    # values are accepted; --epochs may change, and says so
    flags = CliRunner().invoke(train_translate, [*data, "--resume", "--d-model", "64", "--num-heads", "2"])
    assert flags.exit_code == 2 and "--d-model is 32 there, given 64; --num-heads is 4 there, given 2" \
        in flags.output, flags.output
    assert (committed_dir(out) / "config.json").read_bytes() == before
    # the data is found by the run's record, as every task's is: --src and --tgt need not be given again
    result = CliRunner().invoke(train_translate, ["--out", str(out), "--resume", "--epochs", "3"])
    assert result.exit_code == 0, result.output
    assert f"--epochs 3: {out} was started with 2 and now goes on with 3" in result.output
    assert "resuming" in result.output
    meta = json.loads((committed_dir(out) / "config.json").read_text())
    assert [h["epoch"] for h in meta["history"]] == [1, 2, 3] and meta["status"] == "done"
    assert meta["model_config"]["layer"]["attention_dropout"] == 0.0
    again = CliRunner().invoke(train_translate, [*data, "--resume"])
    assert again.exit_code == 0 and "finished training already" in again.output
