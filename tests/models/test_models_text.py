"""Text classifiers: gradients, learning, padding invariance, weights, configs, registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset, collate
from attnkit.data.readers import Example
from attnkit.data.synthetic import keyword_corpus
from attnkit.data.tokenization import train_tokenizer
from attnkit.models import MODELS, build_model, config_from_dict, config_to_dict, model_name
from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
from attnkit.models.hierarchical import sentence_end_ids, split_sentences

V = 60
SMALL: dict[str, tuple[str, dict[str, Any]]] = {
    "document": ("document", dict(layer=dict(d_model=16, num_heads=2, d_ff=32, dropout=0.0), num_layers=2)),
    "document-learned-mean": (
        "document",
        dict(layer=dict(d_model=16, num_heads=2, d_ff=32, dropout=0.0, norm_first=False), num_layers=1,
             positional="learned", max_len=64, pooling="mean", pooling_hidden=None),
    ),
    "document-parameter-free": (
        "document",
        dict(layer=dict(d_model=16, dropout=0.0), num_layers=0, parameter_free_layers=1, pooling="mean",
             positional="none"),
    ),
    "document-attention-hidden": (
        "document", dict(layer=dict(d_model=16, num_heads=4, d_ff=16, dropout=0.0), num_layers=1, pooling_hidden=8),
    ),
    "sentiment": ("sentiment", dict(embed_dim=16, hidden_size=8, attention_dim=8, dropout=0.0)),
    "sentiment-2layer": (
        "sentiment", dict(embed_dim=16, hidden_size=8, attention_dim=8, num_layers=2, dropout=0.0),
    ),
    "han": (
        "han",
        dict(embed_dim=16, word_hidden=8, sentence_hidden=8, attention_dim=8, dropout=0.0,
             sentence_end_ids=(5,), sentence_len=6),
    ),
    "wide": ("wide", dict(embed_dim=16, attention_dim=8, ngram_rows=64, dropout=0.0)),
    "wide-lstm": ("wide", dict(embed_dim=16, encoder="lstm", hidden_size=8, attention_dim=8, ngram_rows=64,
                               dropout=0.0)),
}


def make(key: str, vocab_size: int = V, num_classes: int = 3) -> nn.Module:
    name, extra = SMALL[key]
    return build_model(name, {"vocab_size": vocab_size, "num_classes": num_classes, **extra})


def batch(b: int = 3, t: int = 14) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(6, V, (b, t))
    ids[:, 4] = 5  # a sentence end for the HAN
    lengths = torch.tensor([t, t - 5, 2][:b])
    ids[valid_mask(lengths, t).logical_not()] = 0
    return ids, lengths


def valid_mask(lengths: torch.Tensor, t: int) -> torch.Tensor:
    return torch.arange(t)[None] < lengths[:, None]


@pytest.mark.parametrize("key", list(SMALL))
def test_every_parameter_gets_a_gradient(key: str) -> None:
    model = make(key)
    ids, lengths = batch()
    model(ids, lengths).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"{key}: {name} got no gradient"


@pytest.mark.parametrize("key", list(SMALL))
def test_padding_does_not_change_predictions(key: str) -> None:
    model = make(key).eval()
    ids, lengths = batch()
    logits, weights = model(ids, lengths, return_weights=True)
    padded = torch.cat([ids, torch.zeros(3, 9, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(padded, lengths), logits, atol=1e-5, rtol=0)
    # the same document alone, without batch-mates and their padding
    alone = model(ids[1:2, : int(lengths[1])], lengths[1:2])
    torch.testing.assert_close(alone, logits[1:2], atol=1e-5, rtol=0)
    # garbage in the padded positions changes nothing either
    noisy = ids.masked_fill(~valid_mask(lengths, ids.shape[1]), 7)
    torch.testing.assert_close(model(noisy, lengths), logits, atol=1e-5, rtol=0)
    pool = weights["pooling"]
    assert pool.shape == ids.shape
    assert (pool[~valid_mask(lengths, ids.shape[1])] == 0).all()
    torch.testing.assert_close(pool.sum(-1), torch.ones(3))
    assert (pool >= 0).all()
    torch.testing.assert_close(model(ids, lengths), logits)  # weights never change the output


def _keyword_batch(n: int = 16) -> tuple[dict[str, torch.Tensor], list[tuple[int, ...]], int]:
    corpus = keyword_corpus(n, seed=0, length=(8, 14))
    examples = [Example(e.text, e.label) for e in corpus]
    tok = train_tokenizer([e.text for e in examples], kind="word")
    ds = TextClassificationDataset(examples, tok, LabelVocab.from_examples(examples), max_len=64)
    return collate([ds[i] for i in range(n)]), [e.key_positions for e in corpus], tok.get_vocab_size()


@pytest.mark.parametrize("key", ["document", "document-parameter-free", "sentiment", "han", "wide"])
def test_loss_falls_on_keyword_batch(key: str) -> None:
    data, _, vocab_size = _keyword_batch()
    model = make(key, vocab_size=vocab_size, num_classes=2)
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(15):
        loss = nn.functional.cross_entropy(model(data["ids"], data["lengths"]), data["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], f"{key}: loss {losses[0]:.3f} -> {losses[-1]:.3f}"


def test_trained_attention_pooling_focuses_on_key_words() -> None:
    data, keys, vocab_size = _keyword_batch(128)
    config = dict(layer=dict(d_model=16, dropout=0.0), num_layers=0, positional="none")
    model = build_model("document", {"vocab_size": vocab_size, "num_classes": 2, **config})
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(40):
        loss = nn.functional.cross_entropy(model(data["ids"], data["lengths"]), data["labels"])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        _, weights = model.eval()(data["ids"], data["lengths"], return_weights=True)
    on_keys = torch.tensor([float(weights["pooling"][i, list(k)].sum()) for i, k in enumerate(keys)])
    share_of_positions = torch.tensor([len(k) / int(n) for k, n in zip(keys, data["lengths"], strict=True)])
    # key words are ~20% of the positions; after training they take well over twice that
    assert on_keys.mean() > 2 * share_of_positions.mean()


@pytest.mark.parametrize("key", list(SMALL))
def test_config_round_trip_and_save_load(key: str, tmp_path: Path) -> None:
    model = make(key).eval()
    name = model_name(model)
    config = model.config  # type: ignore[attr-defined]
    data = json.loads(json.dumps(config_to_dict(config)))
    assert config_from_dict(name, data) == config
    save_file(model.state_dict(), tmp_path / "model.safetensors")
    again = build_model(name, data).eval()
    again.load_state_dict(load_file(tmp_path / "model.safetensors"))
    ids, lengths = batch()
    torch.testing.assert_close(again(ids, lengths), model(ids, lengths), atol=0, rtol=0)


def test_document_parameter_names() -> None:
    names = [n for n, _ in make("document").named_parameters()]
    assert names[0] == "embedding.weight"
    assert any(n.startswith("encoder.layers.1.self_attn.") for n in names)
    assert any(n.startswith("encoder.layers.0.ff.linear1.") for n in names)
    assert any(n.startswith("pooling.") for n in names)
    assert names[-2:] == ["classifier.weight", "classifier.bias"]
    free = [n for n, _ in make("document-parameter-free").named_parameters()]
    assert free == ["embedding.weight", "classifier.weight", "classifier.bias"]


def test_parameter_free_layer_is_softmax_xxt_x() -> None:
    model = make("document-parameter-free").eval()
    assert isinstance(model, DocumentClassifier)
    ids, lengths = torch.randint(1, V, (1, 5)), torch.tensor([5])
    logits, weights = model(ids, lengths, return_weights=True)
    x = model.embedding(ids)[0]  # (T, D)
    attn = torch.softmax(x @ x.T / 4.0, dim=-1)  # sqrt(16) = 4
    torch.testing.assert_close(weights["parameter_free.0"][0, 0], attn)
    expected = model.classifier((attn @ x).mean(0))
    torch.testing.assert_close(logits[0], expected)


def test_document_encoder_weights_returned() -> None:
    ids, lengths = batch()
    _, weights = make("document").eval()(ids, lengths, return_weights=True)
    assert set(weights) == {"encoder.0", "encoder.1", "pooling"}
    assert weights["encoder.0"].shape == (3, 2, 14, 14)
    assert (weights["encoder.1"][2, :, :, 2:] == 0).all()  # padded keys get no weight


def test_split_sentences() -> None:
    ids = torch.tensor([[7, 5, 8, 9, 10, 11, 5, 0], [5, 7, 7, 0, 0, 0, 0, 0]])
    lengths = torch.tensor([7, 3])
    sent, lens, pos = split_sentences(ids, lengths, end_ids=[5], sentence_len=3)
    assert lens.tolist() == [[2, 3, 2], [1, 2, 0]]
    assert sent[0].tolist() == [[7, 5, 0], [8, 9, 10], [11, 5, 0]]
    assert pos[1].tolist() == [[0, -1, -1], [1, 2, -1], [-1, -1, -1]]
    again = split_sentences(torch.cat([ids, ids], 1), lengths, [5], 3)
    assert all(torch.equal(a, b) for a, b in zip(again, (sent, lens, pos), strict=True))


def test_han_pre_split_input_and_sentence_end_ids() -> None:
    model = make("han").eval()
    ids = torch.tensor([[7, 5, 8, 9, 10, 11, 5]])
    sent, lens, _ = split_sentences(ids, torch.tensor([7]), [5], 6)
    flat_logits, flat_w = model(ids, torch.tensor([7]), return_weights=True)
    logits, weights = model(sent, lens, return_weights=True)
    torch.testing.assert_close(logits, flat_logits)
    assert weights["pooling"].shape == (1, sent.shape[1] * sent.shape[2])
    torch.testing.assert_close(weights["pooling"][weights["pooling"] > 0], flat_w["pooling"][0])
    torch.testing.assert_close(weights["sentences"].sum(), torch.tensor(1.0))
    with pytest.raises(ValueError, match="empty sentences only at the end"):
        model(sent, torch.tensor([[0, 5]]))
    tok = train_tokenizer(["One. Two! Three?"], kind="word")
    assert sentence_end_ids(tok) == tuple(sorted(tok.token_to_id(m) for m in ".!?"))


def test_a_han_with_an_ngram_half_adds_it_to_predict_split_or_not() -> None:
    model = build_model("han", {"vocab_size": 60, "num_classes": 2, "embed_dim": 8, "word_hidden": 4,
                                "sentence_hidden": 4, "attention_dim": 6, "dropout": 0.0, "ngram_rows": 32,
                                "sentence_end_ids": (5,), "sentence_len": 6})
    model.init_from_training_data([[7, 8, 5, 9], [10, 11, 5, 12], [7, 13], [10, 14]], [0, 1, 0, 1])
    ids, lengths = torch.tensor([[7, 5, 8, 9, 10, 11, 5]]), torch.tensor([7])
    mask = model.prepare(ids, lengths)[2]
    own, wide = model.own_logits(ids, lengths, mask), model.wide_logits(ids, mask)
    assert float(wide.abs().sum()) > 0
    model.wide_scale.fill_(2.0)
    with torch.no_grad():
        torch.testing.assert_close(model.eval()(ids, lengths), own + 2.0 * wide)
        torch.testing.assert_close(model.train()(ids, lengths), own)  # the network alone while training
        sent, lens, _ = split_sentences(ids, lengths, [5], 6)  # the bigram across the sentence end has no row
        torch.testing.assert_close(model.eval()(sent, lens), model(ids, lengths))
    assert make("han").has_ngram_half  # by default
    assert not build_model("han", {"vocab_size": 60, "num_classes": 2, "ngram_rows": 0}).has_ngram_half


def test_registry_and_config_errors() -> None:
    assert set(MODELS) == {"document", "sentiment", "han", "bert", "wide"}
    with pytest.raises(ValueError, match=r"unknown model 'cnn'; valid names are \['bert', 'document', 'han', "
                                         r"'sentiment', 'wide'\]"):
        build_model("cnn", {"vocab_size": 10, "num_classes": 2})
    with pytest.raises(ValueError, match=r"unknown DocumentClassifierConfig field\(s\) \['d_modle'\]; "
                                         r"valid fields are \['vocab_size'"):
        build_model("document", {"vocab_size": 10, "num_classes": 2, "d_modle": 8})
    with pytest.raises(ValueError, match=r"missing required field\(s\) \['num_classes'\]"):
        config_from_dict("sentiment", {"vocab_size": 10})
    with pytest.raises(ValueError, match=r"pooling must be one of \['attention', 'mean'\], got 'max'"):
        DocumentClassifierConfig(vocab_size=10, num_classes=2, pooling="max")
    with pytest.raises(ValueError, match="field layer: d_model=10 must be divisible by num_heads=4"):
        config_from_dict("document", {"vocab_size": 10, "num_classes": 2, "layer": {"d_model": 10}})
    with pytest.raises(TypeError, match="layer must be a TransformerLayerConfig, got dict"):
        DocumentClassifierConfig(vocab_size=10, num_classes=2, layer={"d_model": 16})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dropout must be a float in"):
        config_from_dict("han", {"vocab_size": 10, "num_classes": 2, "dropout": 1.5})
    with pytest.raises(ValueError, match="sentence_end_ids must be a tuple of token ids"):
        config_from_dict("han", {"vocab_size": 10, "num_classes": 2, "sentence_end_ids": [12]})


def test_input_errors() -> None:
    model = make("document")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, vocab_size=60\)"):
        model(torch.tensor([[1, 99]]), torch.tensor([2]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, T=2\]"):
        model(torch.tensor([[1, 2]]), torch.tensor([3]))
    with pytest.raises(ValueError, match=r"lengths must be an integer \(B,\) = \(1,\)"):
        model(torch.tensor([[1, 2]]), torch.tensor([2, 2]))
    with pytest.raises(ValueError, match=r"ids must be an integer \(B, T\) tensor"):
        model(torch.rand(1, 2), torch.tensor([2]))
    learned = make("document-learned-mean")
    with pytest.raises(ValueError, match="max_len=64"):
        learned(torch.ones(1, 65, dtype=torch.long), torch.tensor([65]))


def test_training_a_han_reads_its_sentence_ends_off_the_tokenizer() -> None:
    from attnkit.data.readers import Example
    from attnkit.train.config import TrainConfig
    from attnkit.train.tasks.classify.pipeline import fit_classifier

    train = [Example("good fine . great ! yes", "pos"), Example("bad awful ? poor . no", "neg")] * 4
    options = {"embed_dim": 4, "word_hidden": 3, "sentence_hidden": 3, "attention_dim": 4}
    config = TrainConfig(epochs=1, device="cpu")
    result = fit_classifier(train, train[:2], [], model_name="han", model_options=options, train_config=config,
                            quiet=True)
    tok = result.tokenizer
    assert result.model_config["sentence_end_ids"] == tuple(sorted(tok.token_to_id(m) for m in ".!?"))
    # given ends are kept
    given = fit_classifier(train, train[:2], [], model_name="han", model_options={**options, "sentence_end_ids": ()},
                           train_config=config, quiet=True, tokenizer=tok)
    assert given.model_config["sentence_end_ids"] == ()
