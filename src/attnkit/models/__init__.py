"""Task models, one file each, each built from one frozen config dataclass.

Text classifiers share one call: ``model(ids (B, T), lengths (B,),
return_weights=False)`` returns logits ``(B, C)``, or ``(logits, weights)``
where ``weights["pooling"]`` is ``(B, T)``: how much each token position
counts for the answer.

========== ===================================== =====================================
name       model                                 config
========== ===================================== =====================================
document   :class:`DocumentClassifier`           :class:`DocumentClassifierConfig`
sentiment  :class:`SentimentClassifier`          :class:`SentimentClassifierConfig`
han        :class:`HierarchicalAttentionNetwork` :class:`HierarchicalAttentionNetworkConfig`
bert       :class:`BertClassifier`               :class:`BertClassifierConfig`
========== ===================================== =====================================

``build_model("document", {"vocab_size": 20000, "num_classes": 2})`` builds one
by name; the config dict is what a checkpoint's ``config.json`` stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig
from attnkit.models.config import ModelConfig
from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
from attnkit.models.hierarchical import (
    HierarchicalAttentionNetwork,
    HierarchicalAttentionNetworkConfig,
)
from attnkit.models.sentiment import SentimentClassifier, SentimentClassifierConfig

__all__ = [
    "MODELS",
    "build_model",
    "config_to_dict",
    "config_from_dict",
    "model_name",
    "ModelConfig",
    "DocumentClassifier",
    "DocumentClassifierConfig",
    "SentimentClassifier",
    "SentimentClassifierConfig",
    "HierarchicalAttentionNetwork",
    "HierarchicalAttentionNetworkConfig",
    "BertClassifier",
    "BertClassifierConfig",
]

MODELS: dict[str, tuple[type[nn.Module], type[ModelConfig]]] = {
    "document": (DocumentClassifier, DocumentClassifierConfig),
    "sentiment": (SentimentClassifier, SentimentClassifierConfig),
    "han": (HierarchicalAttentionNetwork, HierarchicalAttentionNetworkConfig),
    "bert": (BertClassifier, BertClassifierConfig),
}
"""Registered models: name -> (model class, config class), as :func:`build_model` reads them."""


def _entry(name: str) -> tuple[type[nn.Module], type[ModelConfig]]:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; valid names are {sorted(MODELS)}") from None


def config_from_dict(name: str, data: Mapping[str, Any]) -> ModelConfig:
    """The validated config of model ``name`` (unknown name or field -> ValueError listing the valid ones)."""
    return _entry(name)[1].from_dict(data)


def config_to_dict(config: ModelConfig) -> dict[str, Any]:
    """A config as a JSON-ready dict (the inverse of :func:`config_from_dict`)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a model config dataclass, got {type(config).__name__}")
    return config.to_dict()


def build_model(name: str, config_dict: Mapping[str, Any]) -> nn.Module:
    """Build model ``name`` from a config dict."""
    model_cls, _ = _entry(name)
    return model_cls(config_from_dict(name, config_dict))


def model_name(model: nn.Module) -> str:
    """The registered name of ``model``'s class (for checkpoints)."""
    for name, (model_cls, _) in MODELS.items():
        if type(model) is model_cls:
            return name
    raise ValueError(f"{type(model).__name__} is not a registered model; valid names are {sorted(MODELS)}")
