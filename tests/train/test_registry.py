"""One registry of run kinds: ``attnkit.load_run`` serves every kind of run, and a new kind is one registration."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner

import attnkit
from attnkit.api import Predictor
from attnkit.cli import cli, train_tasks
from attnkit.cli.options import task_option
from attnkit.data.shapes import shapes_vocab
from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
from attnkit.train import registry
from attnkit.train.runs.rundir import RunFileError, RunWriter, atomic_write_json
from attnkit.train.tasks.caption.captioning import save_caption_run
from attnkit.train.tasks.translate.translation_run import Translator
from tests.support.cli import TINY, write_keyword_csv


def _train(*args: str) -> None:
    result = CliRunner().invoke(cli, ["train", *args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    data = write_keyword_csv(root / "data.csv", 64)
    src, tgt = root / "src.txt", root / "tgt.txt"
    src.write_text("ein haus\nein baum\n" * 20)
    tgt.write_text("a house\na tree\n" * 20)
    _train("--data", str(data), "--out", str(root / "classification"), *TINY)
    _train("--data", str(data), "--out", str(root / "numpy"), "--backend", "numpy", "--epochs", "1", "--quiet")
    _train("--task", "translate", "--src", str(src), "--tgt", str(tgt), "--out", str(root / "translation"),
           "--epochs", "1")
    model = ImageCaptioner(CaptionerConfig(vocab_size=len(shapes_vocab()), image_size=32, channels=(2, 2, 2)))
    save_caption_run(root / "captioning", model, shapes_vocab(), run_id="caption-run")
    return {kind: root / kind for kind in ("classification", "numpy", "translation", "captioning")}


def test_load_run_serves_each_of_the_four_kinds(runs: dict[str, Path]) -> None:
    for kind, path in runs.items():
        assert registry.run_kind(path).name == kind
    for kind in ("classification", "numpy"):
        served = attnkit.load_run(runs[kind])
        assert isinstance(served, Predictor) and served.predict(["good film"])[0] in served.labels
    translator = attnkit.load_run(runs["translation"])
    assert isinstance(translator, Translator) and isinstance(translator.translate(["ein haus"])[0].text, str)
    captioner = attnkit.load_run(runs["captioning"])
    assert isinstance(captioner, registry.CaptionRun) and captioner.config["run_id"] == "caption-run"
    captions = captioner.caption(torch.rand(2, 3, 32, 32))
    assert len(captions) == 2 and all(isinstance(c, str) for c in captions)


def test_a_fifth_kind_is_one_registration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "tagger"
    with RunWriter(run, "tag-run") as writer:
        staging = writer.stage()
        atomic_write_json(staging / "config.json", {"run_id": "tag-run", "model_name": "tagger", "status": "done"})
        writer.commit(staging, status="done")
    with pytest.raises(RunFileError, match="no registered kind of run claims"):
        attnkit.load_run(run)
    monkeypatch.setattr(registry, "RUN_KINDS", dict(registry.RUN_KINDS))
    registry.register_run_kind(registry.RunKind(
        "tagging", "token tagging", lambda config: config.get("model_name") == "tagger",
        lambda path, allow_unfinished, device: ("tagger served", json.loads(
            (path / "current.json").read_text())["run_id"])))
    assert attnkit.load_run(run) == ("tagger served", "tag-run")
    with pytest.raises(ValueError, match="registered already"):
        registry.register_run_kind(registry.RUN_KINDS["tagging"])


@click.command("train-tagging")
@task_option("tagging")
@click.option("--sentences", type=int, required=True)
@click.option("--out", required=True)
def train_tagging(sentences: int, out: str) -> None:
    click.echo(f"tagging trained on {sentences} sentences into {out}")


def test_a_fifth_task_trains_through_its_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    """``attnkit train --task NAME`` runs the command the registry names: a new task needs no CLI edit."""
    runner = CliRunner()
    unknown = runner.invoke(cli, ["train", "--task", "tagging", "--sentences", "3", "--out", "runs/t"])
    assert unknown.exit_code == 2 and "'tagging' is not a task; tasks: translate, caption, classify" \
        in unknown.output, unknown.output
    monkeypatch.setattr(registry, "RUN_KINDS", dict(registry.RUN_KINDS))
    registry.register_run_kind(registry.RunKind(
        "tagging", "token tagging", lambda config: config.get("model_name") == "tagger", lambda *a, **k: None,
        task="tagging", train=f"{__name__}:train_tagging"))
    result = runner.invoke(cli, ["train", "--out", "runs/t", "--task", "tagging", "--sentences", "3"])
    assert result.exit_code == 0, result.output
    assert result.output == "tagging trained on 3 sentences into runs/t\n"
    helped = runner.invoke(cli, ["train", "--task", "tagging", "--help"])
    assert "--sentences" in helped.output and "--data" not in helped.output
    assert registry.train_commands()["translate"] == ""  # train/ names nothing in cli/: the command line does
    assert train_tasks()["translate"] == "attnkit.cli.translate:train_translate" and "classify" not in train_tasks()


@pytest.mark.parametrize("task", ["translate", "classify"])
def test_a_second_kind_naming_a_task_does_not_take_it_over(monkeypatch: pytest.MonkeyPatch, task: str) -> None:
    monkeypatch.setattr(registry, "RUN_KINDS", dict(registry.RUN_KINDS))
    before = (dict(registry.RUN_KINDS), registry.train_commands())
    owner = {"translate": "translation", "classify": "classification"}[task]
    with pytest.raises(ValueError) as err:
        registry.register_run_kind(registry.RunKind(
            "tagging", "token tagging", lambda config: config.get("model_name") == "tagger", lambda *a, **k: None,
            task=task, train=f"{__name__}:train_tagging"))
    assert str(err.value) == (f"run kind 'tagging' names task {task!r}, which run kind {owner!r} trains already: "
                              "give it a task name of its own")
    assert (registry.RUN_KINDS, registry.train_commands()) == before
    result = CliRunner().invoke(cli, ["train", "--task", task, "--sentences", "3", "--out", "runs/t"])
    assert result.exit_code == 2 and "No such option '--sentences'" in result.output, result.output


@pytest.mark.parametrize("kind", ["translation", "captioning"])
def test_the_classifier_commands_name_a_run_of_another_kind_and_its_command(runs: dict[str, Path], kind: str,
                                                                           tmp_path: Path) -> None:
    command = registry.RUN_KINDS[kind].command
    data = write_keyword_csv(tmp_path / "data.csv", 8)
    for args in (["predict", str(runs[kind]), "a text"], ["evaluate", str(runs[kind]), "--data", str(data)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        assert f"{runs[kind]} is a {registry.RUN_KINDS[kind].description} run, not a text classifier: use " \
               f"{command} {runs[kind]}" in result.output, result.output


def test_a_task_without_a_command_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "RUN_KINDS", dict(registry.RUN_KINDS))
    registry.register_run_kind(registry.RunKind("tagging", "token tagging", lambda config: False,
                                                lambda *a, **k: None, task="tagging"))
    result = CliRunner().invoke(cli, ["train", "--task", "tagging", "--out", "runs/t"])
    assert result.exit_code == 1, result.output
    assert "Error: task 'tagging' has no train command: give its RunKind train='module:attribute'" in result.output
