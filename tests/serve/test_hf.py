"""``attnkit serve RUN --hf FOLDER``: a Hugging Face classifier folder answers beside a run, and a
folder with custom code is refused by name before transformers reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.serve import ServerProcess, env, train_tiny_run

transformers = pytest.importorskip("transformers")


def write_tiny_classifier(folder: Path) -> Path:
    """A randomly initialised 1-layer BERT sequence classifier with its tokenizer, saved as transformers does."""
    import torch

    folder.mkdir(parents=True)
    words = "superb brilliant excellent dreadful awful dull film the a is".split()
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    config = transformers.BertConfig(vocab_size=15, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64, num_labels=2,
                                     id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1})
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("serve-hf")
    return train_tiny_run(root)[0], write_tiny_classifier(root / "hf")


@pytest.fixture(scope="module")
def server(folders: tuple[Path, Path]) -> Iterator[ServerProcess]:
    proc = ServerProcess(str(folders[0]), "--hf", str(folders[1]))
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def test_a_hugging_face_folder_predicts_explains_and_shows_its_attention(server: ServerProcess) -> None:
    models = {m["name"]: m for m in httpx.get(server.url + "/v1/models").json()["models"]}
    assert set(models) == {"run", "hf"} and models["hf"]["labels"] == ["negative", "positive"]
    text = "superb film"
    together = httpx.post(server.url + "/v1/predict", json={"texts": [text, "dull"], "model": "hf"}).json()
    alone = httpx.post(server.url + "/v1/predict", json={"texts": [text], "model": "hf"}).json()
    assert together["predictions"][0] == alone["predictions"][0]
    assert abs(sum(alone["predictions"][0]["probabilities"].values()) - 1) < 1e-6
    explained = httpx.post(server.url + "/v1/explain", json={"text": text, "model": "hf"}).json()
    assert explained["method"] == models["hf"]["default_method"] and explained["faithfulness"] is None
    assert len(explained["tokens"]) == len(explained["scores"]) == 2
    assert explained["spans"] == [[0, 6], [7, 11]]  # where each token lies in the text, for the page's removal
    maps = httpx.post(server.url + "/v1/attention", json={"text": text, "model": "hf"}).json()
    assert len(maps["tokens"]) == 4 and maps["maps"][0]["shape"] == [2, 4, 4]  # [CLS] text [SEP], 2 heads


def test_a_folder_with_custom_code_is_refused_by_name(folders: tuple[Path, Path], tmp_path: Path) -> None:
    bad = tmp_path / "custom"
    bad.mkdir()
    config = json.loads((folders[1] / "config.json").read_text())
    config["auto_map"] = {"AutoModelForSequenceClassification": "modeling_evil.Evil"}
    (bad / "config.json").write_text(json.dumps(config))
    proc = subprocess.run([sys.executable, "-m", "attnkit", "serve", str(folders[0]), "--hf", str(bad), "--port", "0"],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "auto_map" in proc.stderr and "config.json" in proc.stderr
