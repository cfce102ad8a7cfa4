"""Checkpoints: save -> load gives identical predictions; runs are never silently overwritten."""

from __future__ import annotations

import pytest
import torch

from attnkit.data.batching import LabelVocab
from attnkit.data.tokenization import train_tokenizer
from attnkit.models import build_model
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.tasks.classify.inference import attention_focus, predict_texts
from tests.support.runs import recorded

TEXTS = ["a quietly moving film", "dull and boring plot", "the best scene of the year", "worst movie"]


def _run(tmp_path, run_id="run-a"):
    tok = train_tokenizer(TEXTS * 3, kind="word")
    labels = LabelVocab(["neg", "pos"])
    config = {"vocab_size": tok.get_vocab_size(), "num_classes": 2,
              "layer": {"d_model": 16, "num_heads": 2, "d_ff": 32}, "num_layers": 1, "max_len": 32}
    torch.manual_seed(0)
    model = build_model("document", config).eval()
    ckpt.save_checkpoint(tmp_path, model, "document", config, tok, labels, run_id=run_id,
                         extra={"data_settings": {"max_len": 32}})
    return model, tok, labels


def test_round_trip_gives_identical_predictions(tmp_path) -> None:
    model, tok, labels = _run(tmp_path)
    loaded, tok2, labels2, meta = ckpt.load_checkpoint(tmp_path)
    assert meta["model_name"] == "document" and labels2 == labels
    assert tok2.to_str() == tok.to_str()
    a = predict_texts(model, tok, labels, TEXTS, max_len=32, top_k=3)
    b = predict_texts(loaded, tok2, labels2, TEXTS, max_len=32, top_k=3)
    assert a == b
    for name, value in model.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[name]), name
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_refuses_to_overwrite_a_different_run(tmp_path) -> None:
    _run(tmp_path, run_id="run-a")
    _run(tmp_path, run_id="run-a")  # the same run may rewrite its own files
    with pytest.raises(ckpt.RunExistsError, match="different run"):
        _run(tmp_path, run_id="run-b")
    _run(tmp_path / "x", run_id="run-b")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(ckpt.RunExistsError, match="not empty"):
        ckpt.check_run_dir(tmp_path / "other", "run-c")
    ckpt.clear_run(tmp_path)
    assert not (tmp_path / "current.json").exists() and not (tmp_path / "checkpoints").exists()
    assert (tmp_path / "x").is_dir()


def test_load_rejects_mismatched_weights(tmp_path) -> None:
    _run(tmp_path)
    folder = ckpt.committed_dir(tmp_path)
    weights = ckpt.load_tensors(folder / "model.safetensors")
    weights.pop("classifier.weight")
    ckpt.save_tensors(folder / "model.safetensors", weights)
    recorded(folder / "model.safetensors")
    with pytest.raises(ValueError, match="classifier.weight"):
        ckpt.load_checkpoint(tmp_path)


def test_optimizer_state_round_trips_through_safetensors(tmp_path) -> None:
    p = torch.nn.Parameter(torch.randn(3, 2))
    opt = torch.optim.AdamW([p], lr=0.1)
    p.grad = torch.randn(3, 2)
    opt.step()
    tensors, rest = ckpt.optimizer_to_tensors(opt)
    ckpt.save_tensors(tmp_path / "opt.safetensors", tensors)
    tensors = ckpt.load_tensors(tmp_path / "opt.safetensors")
    q = torch.nn.Parameter(p.detach().clone())
    opt2 = torch.optim.AdamW([q], lr=0.5)
    ckpt.optimizer_from_tensors(opt2, tensors, rest)
    for g in (p, q):
        g.grad = torch.ones(3, 2)
    opt.step()
    opt2.step()
    assert torch.equal(p, q)


def test_attention_focus_is_the_share_on_the_positions() -> None:
    w = torch.tensor([[0.5, 0.25, 0.25, 0.0], [0.1, 0.1, 0.1, 0.7]])
    torch.testing.assert_close(attention_focus(w, [[0], [3, 9]]), torch.tensor([0.5, 0.7]))
