"""``eval_mode``: a model in eval mode for a block, every submodule's own mode put back after, also on an exception;
and the places that predict, explain or probe leave a model's modes as they found them."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from attnkit._modes import eval_mode
from attnkit.blocks import TransformerLayerConfig
from attnkit.models import build_model
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.models.wide import WideDeepClassifier
from attnkit.reference.layers import Linear as NumpyLinear
from attnkit.reference.models import NUMPY_LAYER, ClassifierConfig, TransformerClassifier
from attnkit.reference.trainer import predict as numpy_predict
from attnkit.train.tasks.classify.task import ClassificationTask
from attnkit.train.tasks.translate.translation import TranslationTask

V = 40
SMALL = replace(NUMPY_LAYER, d_model=8, num_heads=2)


def _modes(model: nn.Module) -> dict[str, bool]:
    return {name: m.training for name, m in model.named_modules()}


def _wide() -> WideDeepClassifier:
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "attention_dim": 4,
                                 "hidden_size": 4, "ngram_rows": 16, "dropout": 0.0, "word_dropout": 0.0})
    assert isinstance(model, WideDeepClassifier)
    model.train()
    model.classifier.eval()  # mixed modes: a part kept in eval inside a model in training
    return model


def test_the_block_runs_in_eval_and_every_mode_comes_back_also_after_an_exception() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.Dropout(0.1)))
    model[2].eval()
    before = _modes(model)
    assert before == {"": True, "0": True, "1": True, "2": False, "2.0": False}
    with eval_mode(model) as inside:
        assert inside is model and not any(_modes(model).values())
    assert _modes(model) == before
    with pytest.raises(RuntimeError, match="inside"), eval_mode(model):
        raise RuntimeError("inside")
    assert _modes(model) == before


def test_the_numpy_twin_uses_the_same_switch() -> None:
    model = TransformerClassifier(ClassifierConfig(vocab_size=10, layer=SMALL))
    head = next(m for _, m in model.named_modules() if isinstance(m, NumpyLinear))
    head.eval()
    before = {name: m.training for name, m in model.named_modules()}
    assert True in before.values() and False in before.values()
    with pytest.raises(ValueError, match="x"), eval_mode(model):
        assert not any(m.training for _, m in model.named_modules())
        raise ValueError("x")
    assert {name: m.training for name, m in model.named_modules()} == before
    assert numpy_predict(model, [[1, 2, 3], [4, 5]]).shape == (2,)
    model.predict(np.array([[1, 2, 3]]))
    assert {name: m.training for name, m in model.named_modules()} == before


def test_token_contributions_and_each_half_leave_the_modes_as_they_were() -> None:
    model = _wide()
    before = _modes(model)
    ids, lengths = torch.randint(2, V, (2, 7)), torch.tensor([7, 4])
    model.token_contributions(ids, lengths)
    assert _modes(model) == before  # not flattened to the top module's mode
    model.each_half([[2, 3, 4], [5, 6]])
    assert _modes(model) == before


def test_each_half_puts_the_mode_back_when_a_half_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _wide()
    before = _modes(model)

    def broken(*args: object) -> torch.Tensor:
        assert not model.training
        raise RuntimeError("half failed")

    monkeypatch.setattr(model, "wide_logits", broken)
    with pytest.raises(RuntimeError, match="half failed"):
        model.each_half([[2, 3, 4]])
    assert _modes(model) == before


class _Items:
    def __init__(self, n: int) -> None:
        self.items = [{"ids": torch.tensor([2, 3, 4][: 1 + i % 3]), "label": torch.tensor(i % 3)} for i in range(n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return self.items[i]


def test_task_predict_leaves_the_modes_as_they_were_and_puts_them_back_on_an_exception() -> None:
    model, data = _wide(), _Items(5)
    task = ClassificationTask(data, batch_size=2)
    before = _modes(model)
    logits, labels = task.predict(model, data, batch_size=2)
    assert logits.shape == (5, 3) and labels.tolist() == [0, 1, 2, 0, 1]
    assert _modes(model) == before

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("forward failed")

    broken = Broken().train()
    model.classifier.eval()
    with pytest.raises(RuntimeError, match="forward failed"):
        task.predict(broken, data)
    assert broken.training and _modes(model) == before


def test_translation_validation_leaves_a_model_in_eval_in_eval() -> None:
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(src_vocab_size=12, tgt_vocab_size=12, encoder_layers=1,
                                             decoder_layers=1, layer=TransformerLayerConfig(8, 2, 16)))
    pairs = [([4, 5, 6], [1, 7, 8, 2]), ([5, 6], [1, 9, 2])]
    task = TranslationTask(pairs, pairs, max_tokens=64, seed=0)
    model.eval()  # as after training, when the averaged snapshots are validated
    metrics = task.validate(model)
    assert metrics is not None and metrics["loss"] > 0
    assert not any(_modes(model).values())
    model.train()
    task.validate(model)
    assert all(_modes(model).values())
