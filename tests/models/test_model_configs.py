"""Model configs are composed, not copied; the flat dicts of runs saved earlier still load."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from attnkit.models import (
    MODELS,
    BertClassifier,
    BertClassifierConfig,
    DocumentClassifierConfig,
    HierarchicalAttentionNetworkConfig,
    SentimentClassifierConfig,
    build_model,
    config_from_dict,
    config_to_dict,
)
from attnkit.models.bert import BertConfig, BertModel
from attnkit.models.config import TextClassifierConfig
from attnkit.train.tasks.classify.finetune import bert_model_options
from attnkit.train.tasks.classify.pipeline import model_config_dict

# The "model_config" of a fine-tuned BERT run's config.json as written before the
# classifier config derived from BertConfig: one flat mapping, num_classes first.
OLD_BERT_RUN_CONFIG: dict[str, Any] = {
    "num_classes": 2, "vocab_size": 120, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40,
    "type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0, "cls_token_id": 2,
    "sep_token_id": 3, "pooling": "cls", "classifier_dropout": 0.1, "max_len": 16,
}
OLD_RUN_CONFIGS: dict[str, dict[str, Any]] = {
    "document": {
        "vocab_size": 50, "num_classes": 3, "num_layers": 1, "pooling": "attention", "pooling_hidden": None,
        "positional": "sinusoidal", "max_len": 64, "parameter_free_layers": 0,
        "layer": {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.1, "activation": "gelu",
                  "norm_first": True, "layer_norm_eps": 1e-5, "kv_heads": None, "bias": True,
                  "attention_dropout": None, "activation_dropout": None},
    },
    "sentiment": {
        "vocab_size": 50, "num_classes": 2, "embed_dim": 8, "hidden_size": 8, "num_layers": 1,
        "attention_dim": 8, "dropout": 0.3,
    },
    "han": {
        "vocab_size": 50, "num_classes": 2, "embed_dim": 8, "word_hidden": 4, "sentence_hidden": 4,
        "attention_dim": 6, "dropout": 0.1, "sentence_end_ids": [5, 6], "sentence_len": 10,
    },
    "bert": OLD_BERT_RUN_CONFIG,
}


@pytest.mark.parametrize("name", sorted(OLD_RUN_CONFIGS))
def test_saved_configs_load_and_round_trip(name: str) -> None:
    saved = json.loads(json.dumps(OLD_RUN_CONFIGS[name]))  # as read back from config.json
    config = config_from_dict(name, saved)
    data = json.loads(json.dumps(config_to_dict(config)))
    assert {key: data[key] for key in saved} == saved  # the given fields as they were, the rest their defaults
    defaults = {f.name: f.default for f in dataclasses.fields(MODELS[name][1])}
    assert all(data[key] == defaults[key] for key in set(data) - set(saved) if not isinstance(data[key], dict))
    assert config_from_dict(name, data) == config
    model = build_model(name, data)
    assert isinstance(model, MODELS[name][0])


def test_no_table_of_old_defaults_remains() -> None:
    import attnkit.models as models
    from attnkit.models.config import ModelConfig

    assert not hasattr(models, "saved_config")
    for name in ("SAVED_BEFORE", "saved", "recorded_defaults"):
        assert not hasattr(ModelConfig, name)


def test_the_bert_classifier_config_is_a_bert_config_plus_the_head() -> None:
    config = BertClassifierConfig.from_dict(OLD_BERT_RUN_CONFIG)
    assert isinstance(config, BertConfig)
    bert_fields = [f.name for f in dataclasses.fields(BertConfig)]
    own = [f.name for f in dataclasses.fields(BertClassifierConfig) if f.name not in bert_fields]
    assert own == ["num_classes", "cls_token_id", "sep_token_id", "pooling", "classifier_dropout", "max_len",
                   "ngram_rows", "ngram_len", "frozen_layers", "tail_share", "frozen_word_embeddings"]
    assert config.ngram_rows == 200_000  # a missing field takes its default
    assert config.bert_config() == BertConfig(**{k: OLD_BERT_RUN_CONFIG[k] for k in bert_fields})
    assert type(config.bert_config()) is BertConfig
    assert BertClassifierConfig.from_bert(config.bert_config(), num_classes=2, cls_token_id=2,
                                          sep_token_id=3, max_len=16) == config


def test_bert_classifier_config_keeps_the_strict_reader_and_the_architecture_checks() -> None:
    with pytest.raises(ValueError, match=r"unknown BertClassifierConfig field\(s\) \['model_type'\]"):
        BertClassifierConfig.from_dict({**OLD_BERT_RUN_CONFIG, "model_type": "bert"})
    with pytest.raises(ValueError, match=r"missing required field\(s\) \['num_classes'\]"):
        BertClassifierConfig.from_dict({"vocab_size": 120})
    with pytest.raises(ValueError, match="hidden_size=30 must be divisible by num_attention_heads=4"):
        BertClassifierConfig.from_dict({**OLD_BERT_RUN_CONFIG, "hidden_size": 30})
    with pytest.raises(ValueError, match="hidden_act 'swish' is not supported"):
        BertClassifierConfig(num_classes=2, hidden_act="swish")


def test_text_classifier_configs_share_the_two_sizes() -> None:
    for config_cls in (DocumentClassifierConfig, SentimentClassifierConfig, HierarchicalAttentionNetworkConfig):
        assert issubclass(config_cls, TextClassifierConfig)
        assert config_cls.field_names()[:2] == ["vocab_size", "num_classes"]
        with pytest.raises(ValueError, match="vocab_size must be a positive int, got 0"):
            config_cls(vocab_size=0, num_classes=2)
        with pytest.raises(ValueError, match="num_classes must be a positive int, got -1"):
            config_cls(vocab_size=10, num_classes=-1)


class _Vocab:
    def token_to_id(self, token: str) -> int | None:
        return {"[CLS]": 2, "[SEP]": 3}.get(token)


def test_model_opt_overrides_of_a_bert_folder_still_build(tmp_path: Path) -> None:
    """``attnkit train --init-from DIR --model-opt hidden_dropout_prob=0.2``: flat options all the way."""
    arch = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=40)
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(arch)), encoding="utf-8")
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n", encoding="utf-8")
    state = BertModel(arch).state_dict()
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "model.safetensors"))
    options = bert_model_options(tmp_path, _Vocab(), {"hidden_dropout_prob": 0.2, "pooling": "mean"})
    config = model_config_dict("bert", options, vocab_size=120, num_classes=2, max_len=16)
    model = build_model("bert", config)
    assert isinstance(model, BertClassifier)
    assert model.config.hidden_dropout_prob == 0.2 and model.config.pooling == "mean"
    assert model.bert.config == dataclasses.replace(arch, hidden_dropout_prob=0.2)
    with pytest.raises(ValueError, match="unknown bert model option"):
        model_config_dict("bert", {**options, "hidden_size_typo": 3}, vocab_size=120, num_classes=2, max_len=16)
    logits = model(torch.randint(4, 120, (2, 5)), torch.tensor([5, 3]))
    assert logits.shape == (2, 2)
