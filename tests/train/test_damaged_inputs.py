"""Damaged or odd run and model folders are refused before use, by one line naming the file and the field;
every check reads a file once (linear in its size)."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.train.runs.checkpoint import RunFileError, committed_dir, load_checkpoint, load_finite_tensors
from attnkit.train.runs.run_files import check_labels
from tests.support.cli import TINY, write_keyword_csv
from tests.support.runs import recorded


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def _replace(path: Path, text: str) -> None:
    path.unlink()  # committed files may be linked between generations: never write through one
    path.write_text(text, encoding="utf-8")
    recorded(path)


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    return write_keyword_csv(tmp_path_factory.mktemp("data") / "reviews.csv", 120)


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, data_csv) -> Path:
    out = tmp_path_factory.mktemp("runs") / "good"
    result = _invoke("train", "--data", str(data_csv), "--out", str(out), *TINY)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture()
def run_copy(good_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    return run


# --- labels.json ------------------------------------------------------------------------------------


def test_repeated_labels_are_found_in_linear_time(tmp_path) -> None:
    """40,000 labels, each twice: found in well under a second (the old search took about a minute)."""
    labels = [f"label{i}" for i in range(40_000)] * 2
    start = time.perf_counter()
    with pytest.raises(RunFileError, match=r"labels\.json lists label\(s\) \['label0', 'label1', 'label10'"):
        check_labels(tmp_path / "labels.json", {"labels": labels}, len(labels))
    assert time.perf_counter() - start < 2.0


# --- config.json: every field attnkit reads is checked by type and range, the file and field named ----


def _edit_meta(run: Path, edit) -> None:
    path = committed_dir(run) / "config.json"
    meta = json.loads(path.read_text())
    edit(meta)
    _replace(path, json.dumps(meta))


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda m: m.update(model_name=["wide"]), "model_name must be a non-empty string, got ['wide'] (list)"),
    (lambda m: m.update(data_settings="x"), "data_settings must be a dict of fields, got 'x' (str)"),
    (lambda m: m["data_settings"].pop("max_len"), "data_settings lacks max_len"),
    (lambda m: m["data_settings"].update(max_len="lots"), "data_settings field max_len must be an int, got 'lots'"),
    (lambda m: m["data_settings"].update(max_len=0), "data_settings.max_len must be a positive int, got 0"),
    (lambda m: m.update(progress="x", status="training"), "progress must be a dict of fields, got 'x' (str)"),
    (lambda m: m["progress"].update(epoch=-1), "progress.epoch must be a non-negative int, got -1"),
    (lambda m: m.update(status=["done"]), "status must be one of ['done', 'training'], got ['done']"),
    (lambda m: m.update(run_id=7), "run_id must be a non-empty string, got 7 (int)"),
    (lambda m: m.update(train_config="x"), "train_config must be a dict of fields, got 'x' (str)"),
])
def test_config_fields_of_the_wrong_type_are_named_with_the_file(run_copy, edit, needle) -> None:
    import attnkit

    _edit_meta(run_copy, edit)
    line = f"{committed_dir(run_copy) / 'config.json'}: {needle}"
    with pytest.raises(RunFileError) as err:
        attnkit.load_run(run_copy, allow_unfinished=True)
    assert line in str(err.value)
    result = _invoke("predict", str(run_copy), "a fine film", "--allow-unfinished")
    assert result.exit_code == 1 and line in result.output and "Traceback" not in result.output, result.output


def test_a_numpy_runs_config_is_checked_by_the_same_table(tmp_path, data_csv) -> None:
    from attnkit.train.tasks.numpy.numpy_backend import load_numpy_run

    run = tmp_path / "np"
    result = _invoke("train", "--backend", "numpy", "--data", str(data_csv), "--out", str(run), "--epochs", "1",
                     "--model-opt", "layer.d_model=16")
    assert result.exit_code == 0, result.output
    _edit_meta(run, lambda m: m["data_settings"].update(max_len="lots"))
    with pytest.raises(RunFileError, match=r"config\.json: data_settings field max_len must be an int"):
        load_numpy_run(run)


# --- tokenizer.json: the right count, but an id beyond the embedding --------------------------------


def test_a_tokenizer_id_beyond_the_embedding_is_refused_at_load(run_copy, data_csv) -> None:
    path = committed_dir(run_copy) / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    word = max(vocab, key=vocab.get)
    vocab[word] = 10**6  # as many entries as before: only the id is out of range
    _replace(path, json.dumps(data))
    with pytest.raises(RunFileError, match=rf"tokenizer\.json gives token '{word}' the id 1000000, but the "
                                           r"model's embedding \(config\.json vocab_size\) has \d+ rows"):
        load_checkpoint(run_copy)
    result = _invoke("evaluate", str(run_copy), "--data", str(data_csv))
    assert result.exit_code == 1 and f"{path} gives token" in result.output, result.output


# --- weights: the dtype the model holds, and finite in every float dtype ------------------------------


def _rewrite_weights(run: Path, change) -> Path:
    from safetensors.torch import load_file, save_file

    path = committed_dir(run) / "model.safetensors"
    tensors = load_file(path)
    tensors = {k: change(v) if v.is_floating_point() else v for k, v in tensors.items()}
    path.unlink()
    save_file({k: v.contiguous() for k, v in tensors.items()}, path, metadata={"format": "pt"})
    recorded(path)
    return path


def test_weights_of_another_dtype_are_refused_not_converted(run_copy, data_csv) -> None:
    import torch

    path = _rewrite_weights(run_copy, lambda v: (v * 100).to(torch.int64))
    with pytest.raises(RunFileError, match=r"model\.safetensors does not fit model 'document': wrong dtype for "
                                           r"\S+ int64 \(expected float32\)"):
        load_checkpoint(run_copy)
    result = _invoke("predict", str(run_copy), "a fine film")
    assert result.exit_code == 1 and f"{path} does not fit" in result.output, result.output


def test_int64_weights_relabelled_float64_are_named_by_dtype_not_as_nan(run_copy, data_csv) -> None:
    """int64 values under a float64 label read as NaN (-1's bits) or tiny numbers: a wrong dtype, named so."""
    import torch

    path = _rewrite_weights(run_copy, lambda v: torch.full_like(v, -1, dtype=torch.int64))
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data.replace(b'"dtype":"I64"', b'"dtype":"F64"'))  # same length: the offsets hold
    recorded(path)
    with pytest.raises(RunFileError, match=r"model\.safetensors does not fit model 'document': wrong dtype for "
                                           r"\S+ float64 \(expected float32\)"):
        load_checkpoint(run_copy)
    result = _invoke("predict", str(run_copy), "a fine film")
    assert result.exit_code == 1 and "wrong dtype" in result.output and "NaN" not in result.output, result.output


@pytest.mark.parametrize("kind", ["translation", "captioning"])
def test_the_translation_and_caption_loaders_name_a_wrong_dtype_not_nan(tmp_path, kind) -> None:
    """int64 weights relabelled float64 in a translation or captioning run: named as a wrong dtype."""
    import torch

    import attnkit
    from tests.train.test_run_digests import KINDS

    run = KINDS[kind](tmp_path / "run")
    path = _rewrite_weights(run, lambda v: torch.full_like(v, -1, dtype=torch.int64))
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data.replace(b'"dtype":"I64"', b'"dtype":"F64"'))
    recorded(path)
    with pytest.raises(RunFileError, match=r"model\.safetensors does not fit .*wrong dtype for \S+ float64 "
                                           r"\(expected float32\)") as err:
        attnkit.load_run(run)
    assert "NaN" not in str(err.value)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_nan_weights_in_half_precision_are_refused(run_copy, dtype) -> None:
    import torch

    half = getattr(torch, dtype)
    path = _rewrite_weights(run_copy, lambda v: v.to(half))  # finite, but not what the model holds
    with pytest.raises(RunFileError, match=rf"wrong dtype for \S+ {dtype} \(expected float32\)"):
        load_checkpoint(run_copy)
    _rewrite_weights(run_copy, lambda v: torch.full_like(v, float("nan")))
    with pytest.raises(RunFileError, match=rf"{path} holds NaN or infinite values in \d+ tensor"):
        load_finite_tensors(path)  # a file of half-precision weights, read as such


def test_a_numpy_run_refuses_weights_of_another_dtype(tmp_path, data_csv) -> None:
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from attnkit.train.tasks.numpy.numpy_backend import load_numpy_run

    run = tmp_path / "np"
    result = _invoke("train", "--backend", "numpy", "--data", str(data_csv), "--out", str(run), "--epochs", "1",
                     "--model-opt", "layer.d_model=16")
    assert result.exit_code == 0, result.output
    path = committed_dir(run) / "model.safetensors"
    arrays = {k: (v * 100).astype(np.int64) for k, v in load_file(path).items()}
    path.unlink()
    save_file(arrays, path)
    recorded(path)
    with pytest.raises(RunFileError, match=r"model\.safetensors is not readable as this run's weights .*weight "
                                           r"'\S+' is int64 in .*model holds float32"):
        load_numpy_run(run)


# --- Hugging Face folders: sized from their config before anything is allocated; finite weights ------

_BERT = {"model_type": "bert", "vocab_size": 30, "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
         "intermediate_size": 16, "max_position_embeddings": 16}


def _bert_folder(folder: Path, weights=None, **config) -> Path:
    """A tiny BERT folder as Hugging Face writes it; ``weights`` changes each float tensor before saving."""
    import torch
    from safetensors.torch import save_file

    from attnkit.models.bert import BertConfig, BertModel

    folder.mkdir(exist_ok=True)
    torch.manual_seed(0)
    tensors = {f"bert.{k}": v.contiguous() for k, v in BertModel(BertConfig.from_dict(_BERT)).state_dict().items()}
    if weights is not None:
        tensors = {k: weights(v).contiguous() if v.is_floating_point() else v for k, v in tensors.items()}
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({**_BERT, **config}))
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "text"]))
    return folder


def _visualize_error(folder: Path, tmp_path: Path) -> str:
    result = _invoke("visualize", str(folder), "a text", "-o", str(tmp_path / "out.html"))
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert not (tmp_path / "out.html").exists()
    return " ".join(result.output.split())


@pytest.mark.parametrize(("config", "needle"), [
    ({"hidden_size": -32}, "config.json field hidden_size must be a positive int, got -32"),
    ({"num_attention_heads": "2"}, "config.json field num_attention_heads must be a positive int, got '2'"),
    ({"max_position_embeddings": True}, "config.json field max_position_embeddings must be a positive int"),
    ({"vocab_size": 10**8}, "config.json describes a model of about"),  # 3 GB here; 307 GB at BERT-base's width
    ({"vocab_size": 10**8, "hidden_size": 768}, "GiB of float32 weights, more than the"),
    ({"num_hidden_layers": 100_000}, "parameters (num_hidden_layers=100,000, "),
])
def test_a_hugging_face_config_is_sized_before_anything_is_built(tmp_path, config, needle) -> None:
    from attnkit.models.bert import BertModel

    folder = _bert_folder(tmp_path / "bert", **config)
    start = time.perf_counter()
    line = _visualize_error(folder, tmp_path)
    assert f"{folder / 'config.json'}" in line and needle in line, line
    with pytest.raises(ValueError, match=re.escape(needle)):
        BertModel.from_pretrained(folder)
    assert time.perf_counter() - start < 10  # nothing of the described size was allocated or built


def test_a_gpt2_config_is_sized_by_its_own_field_names(tmp_path) -> None:
    from attnkit.inspect.sources import hf_folder_attention

    folder = _bert_folder(tmp_path / "gpt2")  # the weights do not matter: the config is refused first
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 50, "n_embd": 8,
                                                    "n_layer": 1, "n_head": -2, "n_positions": 16}))
    with pytest.raises(ValueError, match=r"config\.json field n_head must be a positive int, got -2"):
        hf_folder_attention(folder, ["a text"])
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 50, "n_embd": 8,
                                                    "n_layer": 1, "n_head": 2, "n_positions": 16,
                                                    "text_config": {"d_model": 0}}))
    with pytest.raises(ValueError, match=r"config\.json field text_config\.d_model must be a positive int"):
        hf_folder_attention(folder, ["a text"])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_nan_weights_of_a_hugging_face_folder_are_named_by_file_and_tensor(tmp_path, dtype) -> None:
    import torch

    from attnkit._hf_folder import check_finite_weights

    half = getattr(torch, dtype)
    folder = _bert_folder(tmp_path / "bert", weights=lambda v: torch.full_like(v, float("nan"), dtype=half))
    needle = f"{folder / 'model.safetensors'} holds NaN or infinite values in"
    line = _visualize_error(folder, tmp_path)
    assert needle in line and "bert.embeddings" in line, line
    assert "negative or non-finite" not in line
    with pytest.raises(ValueError, match=re.escape(needle)):
        check_finite_weights(folder)  # what a folder read by transformers is checked with


def test_init_from_a_folder_with_nan_weights_names_the_file(tmp_path, data_csv) -> None:
    import torch

    folder = _bert_folder(tmp_path / "bert", weights=lambda v: torch.full_like(v, float("inf")))
    result = _invoke("train", "--data", str(data_csv), "--model", "bert", "--init-from", str(folder),
                     "--out", str(tmp_path / "run"), "--device", "cpu", "--epochs", "1", "--max-len", "14", "--quiet")
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"{folder / 'model.safetensors'} holds NaN or infinite values" in output, output
    assert "diverged" not in output and "--lr" not in output
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_translation_runs_train_config_is_checked_by_its_settings_class(tmp_path) -> None:
    from attnkit.train.tasks.translate.translation_run import load_translation_run, save_translation_run
    from tests.cli.test_cli_translate import tiny_translator

    translator = tiny_translator()
    save_translation_run(tmp_path / "run", translator.model, translator.tokenizers, run_id="r1")
    for value, needle in (("lots", "train_config field max_len must be an int, got 'lots' (str)"),
                          (0, "train_config.max_len must be a positive int, got 0")):
        _edit_meta(tmp_path / "run", lambda m, v=value: m.update(train_config={"max_len": v}))
        with pytest.raises(RunFileError, match=re.escape(f"config.json: {needle}")):
            load_translation_run(tmp_path / "run")


def test_the_size_estimate_counts_no_rotary_position_table_and_reads_per_stage_lists() -> None:
    from attnkit._hf_folder import estimated_parameters

    llama = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128,
             "num_attention_heads": 4, "max_position_embeddings": 131072}
    layers = 2 * (4 * 64 * 64 + 2 * 64 * 128)
    assert estimated_parameters(llama) == (1000 + 131072) * 64 + layers  # a learned table of positions
    assert estimated_parameters({**llama, "rope_theta": 1e6}) == 1000 * 64 + layers  # rotary: no table
    swin = {"embed_dim": 96, "num_heads": [3, 6, 12, 24], "num_layers": 4}
    assert estimated_parameters(swin) == 4 * (4 * 96 * 96 + 2 * 96 * 4 * 96)
    with pytest.raises(ValueError, match=r"x\.json field num_heads must be a positive int, got \[3, 0\]"):
        estimated_parameters({**swin, "num_heads": [3, 0]}, "x.json")


@pytest.mark.parametrize("damage", ["labels", "tokenizer"])
def test_resume_checks_labels_and_tokenizer_as_loading_does(run_copy, data_csv, damage) -> None:
    """``train --resume`` reads the run's vocabularies through the loader's checks, before anything is written."""
    manifest = json.loads((run_copy / "current.json").read_text())
    _replace(run_copy / "current.json", json.dumps({**manifest, "status": "training"}))
    folder = committed_dir(run_copy)
    _edit_meta(run_copy, lambda meta: meta.update(status="training"))
    if damage == "labels":
        _replace(folder / "labels.json", json.dumps({"labels": ["negative", "negative"]}))
        needle = r"labels\.json lists label\(s\) \['negative'\]"
    else:
        data = json.loads((folder / "tokenizer.json").read_text())
        vocab = data["model"]["vocab"]
        vocab[max(vocab, key=vocab.get)] = 10**6
        _replace(folder / "tokenizer.json", json.dumps(data))
        needle = r"tokenizer\.json gives token '.+' the id 1000000"
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"}
    result = _invoke("train", "--data", str(data_csv), "--out", str(run_copy), "--resume", "--quiet")
    assert result.exit_code == 1 and re.search(needle, result.output), result.output
    assert {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file() and p.name != ".lock"} == before


def test_a_hugging_face_folder_over_the_cgroup_room_is_refused_naming_it(tmp_path, monkeypatch) -> None:
    """Sizing a folder reads the whole budget (here a cgroup's room), not only MemAvailable."""
    from attnkit import _hf_folder
    from attnkit._memory import MemoryBudget
    from attnkit.models.bert import BertModel

    room = MemoryBudget(2**30, "left by the memory cgroup's /sys/fs/cgroup/job/memory.max")
    monkeypatch.setattr(_hf_folder, "memory_budget", lambda: room)
    folder = _bert_folder(tmp_path / "bert", vocab_size=10**6, hidden_size=512)  # about 1.9 GiB
    with pytest.raises(ValueError, match=r"more than the 1.0 GiB of memory left by the memory cgroup's "
                                         r"/sys/fs/cgroup/job/memory.max"):
        BertModel.from_pretrained(folder)
