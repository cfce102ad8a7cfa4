"""One registry of tasks: ``attnkit.load_run`` serves every kind of run, ``attnkit train --task NAME`` is
generated from each task's settings, and a new task is one folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import attnkit
import attnkit.train.tasks
from attnkit.api import Predictor
from attnkit.cli import cli, train_tasks
from attnkit.data.shapes import shapes_vocab
from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
from attnkit.train import registry
from attnkit.train.runs.rundir import committed_dir, read_run_config
from attnkit.train.tasks.caption.captioning import CaptionRun, save_caption_run
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


TASK_OF = {"classification": "classify", "numpy": "classify", "translation": "translate", "captioning": "caption"}


def test_load_run_serves_each_of_the_four_kinds(runs: dict[str, Path]) -> None:
    for kind, path in runs.items():
        assert registry.task_of_run(path).name == TASK_OF[kind]
    for kind in ("classification", "numpy"):
        served = attnkit.load_run(runs[kind])
        assert isinstance(served, Predictor) and served.predict(["good film"])[0] in served.labels
    translator = attnkit.load_run(runs["translation"])
    assert isinstance(translator, Translator) and isinstance(translator.translate(["ein haus"])[0].text, str)
    captioner = attnkit.load_run(runs["captioning"])
    assert isinstance(captioner, CaptionRun) and captioner.config["run_id"] == "caption-run"
    captions = captioner.caption(torch.rand(2, 3, 32, 32))
    assert len(captions) == 2 and all(isinstance(c, str) for c in captions)


def test_every_kind_of_run_is_committed_in_one_frame(runs: dict[str, Path]) -> None:
    """One function writes every task's generation (:func:`attnkit.train.runs.run.commit_generation`): each
    kind's config.json holds its run id (the manifest's), names its model, says its status and the attnkit
    that wrote it, and the manifest records its files."""
    import json

    from attnkit._version import __version__

    for kind, path in runs.items():
        config = read_run_config(path)
        manifest = json.loads((path / "current.json").read_text(encoding="utf-8"))
        assert config["run_id"] == manifest["run_id"] and config["status"] == "done", kind
        assert config["attnkit_version"] == __version__ and config["model_name"], kind
        assert {"config.json", "model.safetensors"} <= set(manifest["files"]), kind


def test_one_generation_writer_keeps_the_frame_and_carries_what_it_is_told(tmp_path: Path) -> None:
    """:func:`commit_generation`: text, JSON, bytes and written files; the frame's run id and status are the
    writer's whatever the task's fields say; a carried file is linked from the committed generation, not
    written again; a carried folder brings all its files."""
    import json

    from attnkit.train.runs.run import commit_generation, start_run

    out = tmp_path / "run"
    with start_run(out) as writer:
        commit_generation(writer, {"run_id": "not-this", "status": "nor-this", "model_name": "m"}, status="training",
                          progress={"epoch": 1}, files={"a.txt": "first", "b.json": {"k": 1}, "c.bin": b"\0\1",
                                                        "state/x.txt": lambda path: path.write_text("x")})
        first = committed_dir(out)
        commit_generation(writer, {"model_name": "m", "run_id": "not-this"}, status="done", progress={"epoch": 2},
                          files={"a.txt": "second"}, carry=["a.txt", "state/"])
    config, folder = read_run_config(out), committed_dir(out)
    assert config["run_id"] == writer.run_id and config["status"] == "done" and config["progress"] == {"epoch": 2}
    assert json.loads((out / "current.json").read_text(encoding="utf-8"))["epoch"] == 2
    assert json.loads((first / "b.json").read_text(encoding="utf-8")) == {"k": 1}
    assert (first / "c.bin").read_bytes() == b"\0\1"
    assert (folder / "a.txt").read_text(encoding="utf-8") == "first"  # carried, not written again
    assert (folder / "a.txt").stat().st_ino == (first / "a.txt").stat().st_ino
    assert (folder / "state" / "x.txt").read_text(encoding="utf-8") == "x" and not (folder / "b.json").exists()


@pytest.fixture
def fifth_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder ``tests/train/fifth_task`` copied in as ``attnkit/train/tasks/count/`` (a second folder of
    the package, as an installed plug-in folder would be): no other file is edited."""
    root = tmp_path / "plugin" / "attnkit" / "train" / "tasks"
    shutil.copytree(Path(__file__).parent / "fifth_task", root / "count")
    monkeypatch.setattr(attnkit.train.tasks, "__path__", [*attnkit.train.tasks.__path__, str(root)])
    monkeypatch.setattr(registry, "_TASKS", dict(registry.tasks()))
    monkeypatch.setattr(registry, "_found", False)
    yield root / "count"
    import sys

    for name in [n for n in sys.modules if n.startswith("attnkit.train.tasks.count")]:
        del sys.modules[name]


def test_a_fifth_task_is_one_folder(fifth_task: Path, tmp_path: Path) -> None:
    """Its flags in ``--help``; train; resume with a changed flag (refused by name, with both values); resume
    with more epochs (said); ``load_run``; its runs named by the classifier commands."""
    runner = CliRunner()
    text = tmp_path / "text.txt"
    text.write_text("the cat saw the dog\n", encoding="utf-8")
    helped = runner.invoke(cli, ["train", "--task", "count", "--help"])
    assert helped.exit_code == 0, helped.output
    assert "Count the words of a text" in helped.output
    for flag in ("--text FILE", "--epochs", "--lr", "--stop-after", "--out", "--resume", "--max-memory"):
        assert flag in helped.output, flag
    assert "count: word counting" in " ".join(runner.invoke(cli, ["train", "--help"]).output.split())
    out = tmp_path / "run"
    stopped = runner.invoke(cli, ["train", "--task", "count", "--text", str(text), "--out", str(out),
                                  "--stop-after", "1"])
    assert stopped.exit_code == 130, stopped.output  # the one rule of an interrupted run, as every task's
    assert f"interrupted; continue with: attnkit train --task count --out {out} --resume" in stopped.output
    assert read_run_config(out)["status"] == "training"
    before = (committed_dir(out) / "config.json").read_bytes()
    changed = runner.invoke(cli, ["train", "--task", "count", "--text", str(text), "--out", str(out), "--resume",
                                  "--lr", "2"])
    assert changed.exit_code == 2, changed.output
    assert f"--resume continues {out} with its saved settings: --lr is 0.5 there, given 2" in changed.output
    assert (committed_dir(out) / "config.json").read_bytes() == before
    resumed = runner.invoke(cli, ["train", "--task", "count", "--text", str(text), "--out", str(out), "--resume",
                                  "--lr", "0.5", "--epochs", "3"])
    assert resumed.exit_code == 0, resumed.output
    assert f"--epochs 3: {out} was started with 2 and now goes on with 3" in resumed.output
    assert f"counted 4 words into {out}" in resumed.output
    assert attnkit.load_run(out) == {"the": 3.0, "cat": 1.5, "saw": 1.5, "dog": 1.5}
    assert registry.task_of_run(out).name == "count"
    # its own command, generated from its tree: listed, its flags and arguments, a usage error by the one rule
    assert "weigh" in runner.invoke(cli, ["--help"]).output
    assert "--digits INTEGER RANGE" in runner.invoke(cli, ["weigh", "--help"]).output
    weighed = runner.invoke(cli, ["weigh", str(out), "the", "dog", "owl", "--digits", "1"])
    assert weighed.exit_code == 0 and weighed.output == "the\t3.0\ndog\t1.5\nowl\t0.0\n", weighed.output
    assert runner.invoke(cli, ["weigh", str(out), "the", "--digits", "7"]).exit_code == 2  # its range
    nothing = runner.invoke(cli, ["weigh", str(out)])
    assert nothing.exit_code == 2 and "give at least one WORD" in nothing.output
    other = runner.invoke(cli, ["predict", str(out), "a text"])
    assert other.exit_code == 1 and f"{out} is a word counting run, not a text classification run: use" in other.output
    again = runner.invoke(cli, ["train", "--task", "count", "--text", str(text), "--out", str(out), "--resume"])
    assert again.exit_code == 0 and "finished training already" in again.output
    # --config, as on every training command: a file's values are the flags' defaults, a flag overrides them
    config = tmp_path / "count.toml"
    config.write_text(f'text = "{text.as_posix()}"\nlr = 0.25\nepochs = 1\n', encoding="utf-8")
    via = runner.invoke(cli, ["train", "--task", "count", "--config", str(config), "--epochs", "2",
                              "--out", str(tmp_path / "via")])
    assert via.exit_code == 0, via.output
    assert attnkit.load_run(tmp_path / "via") == {"the": 1.0, "cat": 0.5, "saw": 0.5, "dog": 0.5}
    config.write_text("rate = 0.25\n", encoding="utf-8")
    wrong = runner.invoke(cli, ["train", "--task", "count", "--config", str(config), "--out", str(tmp_path / "x")])
    assert wrong.exit_code == 2 and "unknown key(s) ['rate']" in wrong.output and "'lr'" in wrong.output


def test_a_task_name_registered_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_TASKS", dict(registry.tasks()))
    before = dict(registry.tasks())
    with pytest.raises(ValueError, match="a task named 'translate' is registered already"):
        registry.register_task(registry.Task("translate", "x", lambda config: False, lambda *a, **k: None))
    command = registry.TaskCommand("x:Tree", "x:run")
    with pytest.raises(ValueError, match="registers the command 'predict', which 'classify' answers already"):
        registry.register_task(registry.Task("y", "x", lambda config: False, lambda *a, **k: None,
                                             commands={"predict": command}))
    with pytest.raises(ValueError, match="registers the command 'train', which 'every task' answers already"):
        registry.register_task(registry.Task("y", "x", lambda config: False, lambda *a, **k: None,
                                             commands={"train": command}))
    assert registry.tasks() == before


def test_an_unknown_task_is_named_with_the_known_ones() -> None:
    result = CliRunner().invoke(cli, ["train", "--task", "tagging", "--out", "runs/t"])
    assert result.exit_code == 2 and "'tagging' is not a task; tasks: caption, classify, translate" \
        in result.output, result.output
    assert list(train_tasks()) == ["caption", "classify", "translate"]  # every task's command is generated


@pytest.mark.parametrize("kind", ["translation", "captioning"])
def test_the_classifier_commands_name_a_run_of_another_kind_and_its_command(runs: dict[str, Path], kind: str,
                                                                           tmp_path: Path) -> None:
    task = registry.tasks()[TASK_OF[kind]]
    data = write_keyword_csv(tmp_path / "data.csv", 8)
    for args in (["predict", str(runs[kind]), "a text"], ["evaluate", str(runs[kind]), "--data", str(data)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, result.output
        article = "an" if task.description.startswith("image") else "a"
        assert f"{runs[kind]} is {article} {task.description} run, not a text classification run: use " \
               f"{task.command} {runs[kind]}" in result.output, result.output


def test_a_torch_run_explains_through_the_api_as_predict_does(runs: dict[str, Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_run(...).explain`` scores tokens by the method the run's reports chose, as ``attnkit predict
    --explain`` does (it took the first method that applies, whatever the run had measured), to the last digit."""
    import json

    from attnkit.attribution import report
    from attnkit.attribution.methods import applicable_methods

    predictor = attnkit.load_run(runs["classification"])
    last = applicable_methods(predictor.model)[-1]
    assert last != report.PREFERRED[0]
    monkeypatch.setattr(report, "read_record", lambda run: {"validation": {"shown_first": last}})
    texts = ["good great fine", "bad awful poor"]
    predictions = predictor.explain(texts, top=2)
    assert predictor.default_method() == last and {p.explanation["method"] for p in predictions} == {last}
    result = CliRunner().invoke(cli, ["predict", str(runs["classification"]), *texts, "--json", "--explain",
                                      "--top", "2"])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.splitlines()] == [p.fields() for p in predictions]


def test_every_tasks_flags_are_its_settings_tree() -> None:
    """``attnkit train --task NAME``, classification's ``attnkit train`` included, has one flag per leaf of the
    task's tree and no other but the run's own: no flag is written by hand."""
    from attnkit._checks import setting_fields

    run_flags = {"config", "task", "out", "overwrite", "resume", "max_memory", "quiet"}
    for name, command in train_tasks().items():
        leaves = {f.name for f, _ in setting_fields(registry.resolve(registry.tasks()[name].settings))}
        assert {p.name for p in command.params} - run_flags == leaves, name
    assert {"model", "model_opt", "backend", "baseline", "epochs", "max_len", "data"} <= \
        {p.name for p in train_tasks()["classify"].params}


@pytest.mark.parametrize(("task", "kind"), [("classify", "translation"), ("translate", "classification"),
                                          ("classify", "captioning"), ("caption", "translation")])
def test_every_task_resumes_only_its_own_runs(runs: dict[str, Path], task: str, kind: str) -> None:
    """``attnkit train --resume`` of every task (classification's generated command too) refuses another task's
    run by one rule, naming both, and leaves it as it was."""
    before = read_run_config(runs[kind])
    result = CliRunner().invoke(cli, ["train", "--task", task, "--out", str(runs[kind]), "--resume"])
    assert result.exit_code == 1, result.output
    description = registry.tasks()[task].description
    assert f"cannot resume: {runs[kind]} holds a {before['model_name']!r} run, not " \
           f"{'an' if description.startswith('image') else 'a'} {description} run" in result.output, result.output
    assert read_run_config(runs[kind]) == before


def test_an_interrupted_run_is_told_what_it_saved_by_one_rule(tmp_path: Path) -> None:
    """Every task's command says after Ctrl-C what the run had committed (:func:`interrupted_advice`): nothing
    (the run there before kept as it was), some epochs (the command that goes on), or all of its training."""
    from attnkit.train.runs.run import interrupted_advice
    from attnkit.train.runs.rundir import RunWriter

    out = tmp_path / "run"
    go_on = f"attnkit train --task count --out {out} --resume"
    assert interrupted_advice(out, None, resume=go_on).startswith("nothing of this run was saved before its first "
                                                                 "epoch ended, so there is nothing to resume")

    def commit(run_id: str, status: str) -> None:
        with RunWriter(out, run_id, overwrite=True) as writer:
            staging = writer.stage()
            (staging / "config.json").write_text(f'{{"run_id": "{run_id}", "status": "{status}"}}', encoding="utf-8")
            writer.commit(staging, status=status, epoch=1)

    commit("a" * 32, "training")
    kept = interrupted_advice(out, None, before="a" * 32, resume=go_on)  # a new run stopped before its commit
    assert f"({out} holds the run that was there before, as it was)" in kept
    assert interrupted_advice(out, None, before=None, resume=go_on) == f"continue with: {go_on}"
    assert interrupted_advice(out, "a" * 32, resume=go_on) == f"continue with: {go_on}"
    commit("a" * 32, "done")
    assert interrupted_advice(out, "a" * 32, resume=go_on) == f"training had finished and {out} is saved"
    assert interrupted_advice(out, "a" * 32, resume=go_on, after="write the reports").endswith(
        "is saved, but write the reports")
