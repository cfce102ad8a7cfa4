"""A run of a fine-tuning preset (`--preset balanced`, a stand-in MiniLM folder) is an ordinary run: its most
faithful method is measured at the end of training, and `load_run`, `attnkit predict` and `attnkit serve`
(over a real socket) answer alike, without the pretrained folder it started from."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from tests.support.bert import install_fake_pretrained, write_tiny_bert
from tests.support.cli import write_keyword_csv
from tests.support.serve import ServerProcess, env, post_json, serving

TEXTS = ["superb brilliant film", "dreadful boring plot", "a film",
         "a film " * 6 + "dreadful boring plot"]  # past --max-len 8: its head and tail are read


@pytest.fixture(scope="module")
def balanced_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("preset-run")
    data = write_keyword_csv(folder / "data.csv", 120)
    words = {w for line in data.read_text().splitlines()[1:] for w in line.split(",")[0].split()}
    minilm = folder / "minilm"
    minilm.mkdir()
    write_tiny_bert(minilm, words, layers=3)
    run = folder / "run"
    with pytest.MonkeyPatch.context() as patch:
        install_fake_pretrained(patch, minilm)
        result = CliRunner().invoke(cli, ["train", "--data", str(data), "--preset", "balanced", "--epochs", "2",
                                          "--max-len", "8", "--device", "cpu", "--out", str(run), "-q"])
    assert result.exit_code == 0, result.output
    shutil.rmtree(minilm)  # the run holds every weight: nothing below reads the folder it started from
    return run


@pytest.fixture(scope="module")
def server(balanced_run: Path) -> Iterator[ServerProcess]:
    yield from serving(str(balanced_run))


def test_a_preset_run_measures_its_most_faithful_method(balanced_run: Path) -> None:
    record = json.loads((balanced_run / "faithfulness.json").read_text())
    methods = record["test"]["methods"]
    assert record["shown_first"] in methods and len(methods) >= 2
    assert all(0 <= m["comprehensiveness"] <= 1 for m in methods.values())


def test_load_run_predict_and_serve_answer_alike(balanced_run: Path, server: ServerProcess) -> None:
    import attnkit

    predictor = attnkit.load_run(balanced_run)
    assert predictor.config["model_config"]["frozen_layers"] == 2
    assert (predictor.config["model_config"]["tail_share"], predictor.config["data_settings"]["max_len"]) == (0.75, 8)
    cli_out = subprocess.run([sys.executable, "-m", "attnkit", "predict", str(balanced_run), *TEXTS, "--json"],
                             capture_output=True, text=True, env=env(), check=True)
    expected = [json.loads(line) for line in cli_out.stdout.splitlines()]
    assert [p["label"] for p in expected] == predictor.predict(TEXTS)
    reply = post_json(server, "/v1/predict", {"texts": TEXTS})
    assert reply.status_code == 200, reply.text
    assert reply.json()["predictions"] == expected
    record = json.loads((balanced_run / "faithfulness.json").read_text())
    explained = post_json(server, "/v1/explain", {"text": TEXTS[0]})
    assert explained.status_code == 200, explained.text
    assert explained.json()["method"] == record["shown_first"]
    assert len(explained.json()["scores"]) == len(explained.json()["tokens"]) > 0
    long = post_json(server, "/v1/explain", {"text": TEXTS[3]}).json()  # the encoder read 2 + 6 of 15 tokens
    assert len(long["tokens"]) == len(long["scores"]) == 15
    assert all(score == 0 for score in long["scores"][2:9]) and any(long["scores"][9:]), long
