"""Explanations: exact token contributions, attribution methods side by side, and their faithfulness."""

from __future__ import annotations

import pytest
import torch

from attnkit.models import build_model

V = 30


def _wide(**extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "attention_dim": 4,
                                 "ngram_buckets": 16, "dropout": 0.3, **extra})
    model.init_from_training_data([[5, 6, 7], [7, 8, 9, 5], [3, 4]], [0, 1, 2])  # type: ignore[operator]
    with torch.no_grad():
        model.wide_scale.fill_(0.7)  # type: ignore[union-attr]
        model.wide_bias.normal_()  # type: ignore[union-attr]
    return model


def _document(**extra: object) -> torch.nn.Module:
    torch.manual_seed(1)
    return build_model("document", {"vocab_size": V, "num_classes": 3, "d_model": 16, "num_heads": 2,
                                    "num_layers": 1, "d_ff": 32, "dropout": 0.2, **extra})


BATCH = (torch.tensor([[5, 6, 7, 8, 0], [7, 8, 9, 5, 3], [4, 0, 0, 0, 0]]), torch.tensor([4, 5, 1]))


@pytest.mark.parametrize("make", [
    _wide, lambda: _wide(encoder="lstm", hidden_size=6),
    _document, lambda: _document(pooling="mean"), lambda: _document(num_layers=0, parameter_free_layers=1),
])
def test_contributions_and_bias_add_up_to_every_class_logit(make: object) -> None:
    model = make()  # type: ignore[operator]
    model.train()  # the contributions are the eval-mode logits' in whatever mode the model is in
    ids, lengths = BATCH
    per, bias = model.token_contributions(ids, lengths)
    assert model.training
    logits = model.eval()(ids, lengths)
    assert per.shape == (3, 5, 3) and bias.shape == (3, 3)
    assert torch.allclose(per.sum(1) + bias, logits, atol=1e-5, rtol=0)
    assert per[2, 1:].abs().max() == 0  # padding adds nothing
    assert per.abs().sum() > 0


def test_the_wide_contributions_hold_both_halves() -> None:
    model = _wide().eval()
    ids, lengths = BATCH
    per, bias = model.token_contributions(ids, lengths)
    mask = model.prepare(ids, lengths)[2]
    ngram_tokens, ngram_bias = model.token_ngram_contributions(ids, mask)
    wide = model.wide_scale * model.wide_logits(ids, mask)
    assert torch.allclose(ngram_tokens.sum(1) + ngram_bias, wide, atol=1e-5)  # the n-gram half alone is exact
    assert ngram_tokens.abs().sum() > 0
    own = model.own_logits(ids, lengths, mask)
    assert torch.allclose((per - ngram_tokens).sum(1) + bias - ngram_bias, own, atol=1e-5)
    # a bigram's share goes half to each of its tokens: token 5 of "5 6 7 8" gets "5" and half of "5 6"
    _, _, terms = model.ngram_contributions(ids, mask)
    assert torch.allclose(ngram_tokens[0, 0], terms[0, 0] + terms[0, 5] / 2, atol=1e-6)
