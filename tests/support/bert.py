"""A tiny BERT folder for the fine-tuning tests, and the 'pretrained' extra's module standing in for MiniLM."""

from __future__ import annotations

import importlib.machinery
import json
import sys
import types
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch


def write_tiny_bert(folder: Path, words: Iterable[str], layers: int = 1) -> Path:
    """A randomly initialised BERT of ``layers`` layers saved as Hugging Face does (config.json,
    model.safetensors, vocab.txt) in ``folder``, its vocabulary the special tokens and ``words``."""
    from safetensors.torch import save_file

    from attnkit.models.bert import BertConfig, BertModel

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(set(words))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = {"vocab_size": len(vocab), "hidden_size": 16, "num_hidden_layers": layers, "num_attention_heads": 2,
              "intermediate_size": 32, "max_position_embeddings": 140, "model_type": "bert"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_dict(config))
    save_file({f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    return folder


def install_fake_pretrained(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """The 'pretrained' extra's module, installed for the test as a stand-in whose folder is ``folder``
    (written with 3 layers, so that the presets' ``frozen_layers`` leave one to train)."""
    from attnkit.train.tasks.classify.recipe import PRETRAINED_PACKAGE

    module = types.ModuleType(PRETRAINED_PACKAGE)
    module.__spec__ = importlib.machinery.ModuleSpec(PRETRAINED_PACKAGE, None)  # found, as an installed one is
    module.get_model_path = lambda: str(folder)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, PRETRAINED_PACKAGE, module)
