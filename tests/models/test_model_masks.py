"""Masks once, at the model boundary; weights only where they are asked for.

A text classifier turns ``lengths`` into one :class:`~attnkit.core.masks.AttentionMask`
at its entry (:func:`attnkit.masks.from_lengths` and its rows with a key) and hands that
same object to every layer and pooling;
``return_weights="pooling"`` (what ``predict --explain`` asks for) computes no
attention maps in the layers below the pooling.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import attnkit.layers.bert as bert_layers
import attnkit.layers.multi_head as multi_head
from attnkit.blocks import TransformerLayerConfig
from attnkit.core import masks  # the core's module: a test patches its helpers
from attnkit.models import build_model
from attnkit.models.base import TextClassifier
from attnkit.models.bert import BertConfig, BertModel
from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig
from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
from attnkit.train.tasks.classify.inference import pooling_weights

V = 60


def _document(**extra: Any) -> DocumentClassifier:
    torch.manual_seed(0)
    layer = TransformerLayerConfig(16, 2, 32, activation="gelu", norm_first=True)
    config = dict(vocab_size=V, num_classes=3, layer=layer, num_layers=2)
    return DocumentClassifier(DocumentClassifierConfig(**{**config, **extra})).eval()


def _bert() -> BertClassifier:
    torch.manual_seed(0)
    arch = BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=32)
    config = BertClassifierConfig.from_bert(arch, num_classes=3, cls_token_id=2, sep_token_id=3, max_len=20)
    return BertClassifier(config).eval()


def _batch(b: int = 4, t: int = 12) -> tuple[Tensor, Tensor]:
    torch.manual_seed(1)
    lengths = torch.tensor([t, t - 5, 1, 7][:b])
    padding = torch.arange(t)[None, :] >= lengths[:, None]  # (B, T)
    return torch.randint(6, V, (b, t)).masked_fill(padding, 0), lengths


MODELS: dict[str, Callable[[], nn.Module]] = {
    "document": _document,
    "document-parameter-free": lambda: _document(num_layers=0, parameter_free_layers=2, pooling="mean"),
    "sentiment": lambda: build_model(
        "sentiment", {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "hidden_size": 8, "attention_dim": 8}
    ).eval(),
    "bert": _bert,
}


@pytest.fixture
def from_lengths_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Tensor]]:
    """Every mask that attnkit.masks.from_lengths builds during the test."""
    built: list[Tensor] = []
    original = masks.from_lengths

    def counting(*args: Any, **kwargs: Any) -> Tensor:
        built.append(original(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(masks, "from_lengths", counting)
    yield built


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("request_", [False, True, "pooling"])
def test_the_mask_is_built_once_per_forward(name: str, request_: Any, from_lengths_calls: list[Tensor]) -> None:
    model = MODELS[name]()
    ids, lengths = _batch()
    with torch.no_grad():
        model(ids, lengths, return_weights=request_)
    assert len(from_lengths_calls) == 1
    assert from_lengths_calls[0].shape == (4, 1, 1, 12)


@pytest.fixture
def attention_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of every attention() call made by MultiHeadAttention and BERT's layers."""
    calls: list[dict[str, Any]] = []

    def spy(original: Callable[..., Any]) -> Callable[..., Any]:
        def attention(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs)
            return original(*args, **kwargs)
        return attention

    monkeypatch.setattr(multi_head, "attention", spy(multi_head.attention))
    monkeypatch.setattr(bert_layers, "attention", spy(bert_layers.attention))
    yield calls


def test_every_layer_of_the_document_model_gets_the_same_mask_object(
    attention_calls: list[dict[str, Any]], from_lengths_calls: list[Tensor]
) -> None:
    model = _document()
    seen: list[Tensor] = []
    model.pooling.register_forward_pre_hook(lambda _m, _a, kw: seen.append(kw["mask"]), with_kwargs=True)
    with torch.no_grad():
        model(*_batch(), return_weights=True)
    (allowed,) = from_lengths_calls
    mask = attention_calls[0]["mask"]
    assert isinstance(mask, masks.AttentionMask) and mask.allowed is allowed
    assert len(attention_calls) == 2 and all(call["mask"] is mask for call in attention_calls)
    assert len(seen) == 1 and seen[0] is mask


def test_the_explain_path_computes_no_encoder_weights_and_keeps_logits_and_pooling(
    attention_calls: list[dict[str, Any]],
) -> None:
    model = _document()
    ids, lengths = _batch()
    logits, pooling = pooling_weights(model, ids, lengths)
    assert [call["return_weights"] for call in attention_calls] == [False, False]

    # As before: every layer's weights requested, the pooling read from the (B, T) positions.
    with torch.no_grad():
        full_logits, weights = model(ids, lengths, return_weights=True)
        valid = torch.arange(ids.shape[1])[None, :] < lengths[:, None]  # (B, T)
        x = model.encoder(model.positional(model.embedding(ids)), mask=valid[:, None, None, :])
        doc, old_pooling = model.pooling(x, mask=valid, return_weights=True)
        old_logits = model.classifier(doc)
    assert sorted(weights) == ["encoder.0", "encoder.1", "pooling"]
    assert torch.equal(logits, full_logits) and torch.equal(pooling, weights["pooling"])
    torch.testing.assert_close(logits, old_logits)
    torch.testing.assert_close(pooling, old_pooling)
    assert (pooling[2, 1:] == 0).all() and torch.allclose(pooling.sum(-1), torch.ones(4))


def test_the_bert_explain_path_computes_the_last_layers_weights_only(
    attention_calls: list[dict[str, Any]],
) -> None:
    model = _bert()
    ids, lengths = _batch()
    logits, pooling = pooling_weights(model, ids, lengths)
    assert [call["return_weights"] for call in attention_calls] == [False, False, True]
    with torch.no_grad():
        full_logits, weights = model(ids, lengths, return_weights=True)
    assert sorted(weights) == ["layers", "pooling"] and weights["layers"].shape == (4, 3, 2, 14, 14)
    assert torch.equal(logits, full_logits) and torch.equal(pooling, weights["pooling"])
    # The key mask over [CLS] tokens [SEP] is the token mask shifted by two: [SEP] sits at lengths + 1.
    # BertModel wraps it once in an AttentionMask, the same object for every layer.
    mask = attention_calls[0]["mask"]
    assert isinstance(mask, masks.AttentionMask) and all(call["mask"] is mask for call in attention_calls[:3])
    keys = mask.allowed
    assert keys.dtype == torch.bool and torch.equal(keys[:, 0, 0], masks.from_lengths(lengths + 2)[:, 0, 0])


def test_bert_model_takes_a_boolean_mask_or_the_hf_attention_mask() -> None:
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=V, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32)).eval()
    ids, lengths = _batch()
    key_mask = masks.from_lengths(lengths, ids.shape[1])
    with torch.no_grad():
        a = model(ids, key_mask[:, 0, 0].long(), return_weights=True)
        b = model(ids, mask=key_mask, return_weights=[-1])
    assert torch.equal(a.last_hidden_state, b.last_hidden_state)
    assert a.attentions is not None and b.attentions is not None and len(b.attentions) == 1
    assert torch.equal(a.attentions[-1], b.attentions[0])
    with pytest.raises(ValueError, match="not both"):
        model(ids, key_mask[:, 0, 0].long(), mask=key_mask)
    with pytest.raises(TypeError, match="boolean"):
        model(ids, mask=key_mask.float())
    with pytest.raises(ValueError, match=r"layer indices in \[-2, 2\)"):
        model(ids, return_weights=[2])


def test_weight_requests_select_by_name_and_group() -> None:
    model = _document(parameter_free_layers=1)
    ids, lengths = _batch()
    with torch.no_grad():
        _, everything = model(ids, lengths, return_weights=True)
        _, one = model(ids, lengths, return_weights=("encoder.1", "pooling"))
        _, group = model(ids, lengths, return_weights=["encoder"])
    assert sorted(everything) == ["encoder.0", "encoder.1", "parameter_free.0", "pooling"]
    assert sorted(one) == ["encoder.1", "pooling"] and torch.equal(one["encoder.1"], everything["encoder.1"])
    assert sorted(group) == ["encoder.0", "encoder.1"]
    with pytest.raises(ValueError, match=r"unknown weight name\(s\) \['layers'\]; this model returns "
                                         r"\['pooling', 'encoder', 'parameter_free'\]"):
        model(ids, lengths, return_weights="layers")
    with pytest.raises(TypeError, match="return_weights must be a bool"):
        model(ids, lengths, return_weights=1)  # type: ignore[call-overload]


@pytest.mark.parametrize("name", ["document", "sentiment", "han", "bert", "wide"])
def test_every_registered_text_classifier_shares_the_call(name: str) -> None:
    from attnkit.models import MODELS as REGISTRY

    assert issubclass(REGISTRY[name][0], TextClassifier)
    assert "pooling" in REGISTRY[name][0].WEIGHTS


def test_pooling_takes_the_models_mask_as_it_is() -> None:
    from attnkit.layers.pooling import AttentionPooling

    pool = AttentionPooling(8, num_queries=2)
    x = torch.randn(3, 5, 8)
    lengths = torch.tensor([5, 2, 1])
    key_mask = masks.from_lengths(lengths, 5)  # (B, 1, 1, T)
    out4, w4 = pool(x, mask=key_mask, return_weights=True)
    out2, w2 = pool(x, mask=key_mask[:, 0, 0], return_weights=True)  # (B, T) positions
    assert torch.equal(out4, out2) and torch.equal(w4, w2)
    assert (w4[1, :, 2:] == 0).all()
    with pytest.raises(ValueError, match=r"does not broadcast to \(B, H, Tq, Tk\) = \(3, 1, 2, 5\)"):
        pool(x, mask=key_mask[:, :, :, :4])


def _small(name: str, **options: Any) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, {"vocab_size": V, "num_classes": 3, **options}).eval()


TEXT_CLASSIFIERS: dict[str, Callable[[], nn.Module]] = {
    **MODELS,
    "document-mean": lambda: _document(pooling="mean"),
    "wide": lambda: _small("wide", embed_dim=8, attention_dim=8, ngram_rows=16, dropout=0.0),
    "wide-lstm": lambda: _small("wide", embed_dim=8, attention_dim=8, ngram_rows=16, dropout=0.0,
                                encoder="lstm", hidden_size=8),
    "han": lambda: _small("han", embed_dim=8, word_hidden=4, sentence_hidden=4, attention_dim=6, dropout=0.0,
                          sentence_end_ids=(7,), sentence_len=5),
}


def _masks_seen(model: nn.Module, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], list[Any]]:
    """The masks ``model.prepare`` makes, and those its poolings and attention calls receive, during the test."""
    import attnkit.models.document as document

    made: list[Any] = []
    prepare = model.prepare

    def recording(*args: Any, **kwargs: Any) -> Any:
        out = prepare(*args, **kwargs)
        made.append(out[2])
        return out

    monkeypatch.setattr(model, "prepare", recording)
    pooled: list[Any] = []
    for module in model.modules():
        if module.__class__.__name__ == "AttentionPooling":
            module.register_forward_pre_hook(lambda _m, _a, kw: pooled.append(kw["mask"]), with_kwargs=True)
    attended: list[Any] = []
    for owner in (multi_head, bert_layers, document):
        original = owner.attention

        def spy(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            attended.append(kwargs["mask"])
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, "attention", spy)
    return made, pooled, attended


@pytest.mark.parametrize("name", sorted(TEXT_CLASSIFIERS))
def test_the_entry_mask_reaches_every_layer_unchanged(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One AttentionMask, made by ``prepare``; the layers below read that object, never a rebuilt tensor."""
    model = TEXT_CLASSIFIERS[name]()
    made, pooled, attended = _masks_seen(model, monkeypatch)
    with torch.no_grad():
        model(*_batch(), return_weights=True)
    (mask,) = made
    assert isinstance(mask, masks.AttentionMask) and mask.allowed.shape == (4, 1, 1, 12)
    assert pooled or attended
    if name == "han":  # words and sentences: one mask per level, each made where that level's batch is formed
        assert len(pooled) == 2 and all(isinstance(m, masks.AttentionMask) for m in pooled)
    elif name == "bert":  # BERT's own layout, [CLS] tokens [SEP]: made once from the entry mask, read by every layer
        keys = attended[0]
        assert isinstance(keys, masks.AttentionMask) and all(m is keys for m in attended)
        assert torch.equal(keys.allowed[..., 2:], mask.allowed)
    else:
        assert all(m is mask for m in pooled + attended)


@pytest.mark.parametrize("name", sorted(TEXT_CLASSIFIERS))
def test_a_padded_batch_equals_each_example_alone(name: str) -> None:
    model = TEXT_CLASSIFIERS[name]()
    ids, lengths = _batch()
    with torch.no_grad():
        logits, weights = model(ids, lengths, return_weights="pooling")
        for i, n in enumerate(lengths.tolist()):
            alone, alone_w = model(ids[i : i + 1, :n], lengths[i : i + 1], return_weights="pooling")
            torch.testing.assert_close(alone, logits[i : i + 1], atol=1e-6, rtol=1e-6)
            torch.testing.assert_close(alone_w["pooling"], weights["pooling"][i : i + 1, :n], atol=1e-6, rtol=1e-6)
            assert (weights["pooling"][i, n:] == 0).all()


def test_a_row_with_no_key_gives_zeros_in_pooling_and_attention() -> None:
    """What the design promises for a query with no key, given the model's mask object: zeros, never NaN."""
    from attnkit.layers.pooling import AttentionPooling

    torch.manual_seed(0)
    mask = masks.AttentionMask.from_lengths(torch.tensor([3, 0]), 4)
    x = torch.randn(2, 4, 8, requires_grad=True)
    pooled, weights = AttentionPooling(8, hidden_dim=4)(x, mask=mask, return_weights=True)
    assert torch.equal(pooled[1], torch.zeros(8)) and torch.equal(weights[1], torch.zeros(4))
    assert torch.allclose(weights[0].sum(), torch.tensor(1.0)) and (weights[0, 3:] == 0).all()
    out = multi_head.MultiHeadAttention(8, 2)(x, mask=mask)
    assert torch.equal(out[1], torch.zeros(4, 8))
    (pooled.sum() + out.sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
