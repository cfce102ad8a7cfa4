"""The wide-and-deep classifier: its n-gram features, its linear half, its regularisers, its config."""

from __future__ import annotations

import math

import pytest
import torch

from attnkit.models import build_model
from attnkit.models.ngram_half import STACKING_BOUNDS, fit_stacking_weights
from attnkit.models.wide import WideDeepClassifier, WideDeepClassifierConfig, ngram_features

V, BUCKETS = 30, 16


def _model(**extra: object) -> WideDeepClassifier:
    torch.manual_seed(0)
    config = {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "attention_dim": 4, "ngram_rows": BUCKETS,
              "dropout": 0.0, **extra}
    model = build_model("wide", config)
    assert isinstance(model, WideDeepClassifier)
    return model


def test_ngram_features_are_the_words_then_their_hashed_bigrams() -> None:
    ids = torch.tensor([[7, 8, 9, 0], [5, 6, 0, 0]])
    real = torch.tensor([[True, True, True, False], [True, True, False, False]])
    feats, ok = ngram_features(ids, real, V, BUCKETS)
    assert feats.shape == ok.shape == (2, 7)  # T unigrams + T-1 bigrams
    assert feats[0, :4].tolist() == [7, 8, 9, 0]
    assert feats[0, 4:6].tolist() == [V + (7 * 1_000_003 + 8) % BUCKETS, V + (8 * 1_000_003 + 9) % BUCKETS]
    assert ok[0].tolist() == [True, True, True, False, True, True, False]
    assert ok[1].tolist() == [True, True, False, False, True, False, False]
    assert int(feats.max()) < V + BUCKETS
    # word order matters for the bigrams: "8 7" is another feature than "7 8" (unless the hash collides)
    swapped, _ = ngram_features(torch.tensor([[8, 7]]), torch.tensor([[True, True]]), V, BUCKETS)
    assert swapped[0, 2] == V + (8 * 1_000_003 + 7) % BUCKETS


def test_exact_bigrams_have_a_row_each_and_unseen_ones_count_nothing() -> None:
    keys = torch.tensor([7 * V + 8, 8 * V + 7, 9 * V + 9, torch.iinfo(torch.int64).max])  # sorted, one free place
    ids = torch.tensor([[7, 8, 7, 0], [9, 9, 5, 6]])
    real = torch.tensor([[True, True, True, False], [True, True, True, True]])
    feats, ok = ngram_features(ids, real, V, 4, keys)
    assert feats[:, :4].tolist() == ids.tolist()
    assert feats[0, 4:6].tolist() == [V + 0, V + 1] and ok[0, 4:].tolist() == [True, True, False]  # "7 8", "8 7"
    assert feats[1, 4] == V + 2 and ok[1, 4:].tolist() == [True, False, False]  # "9 9"; "9 5", "5 6" unseen
    assert int(feats.max()) < V + 4


def test_the_wide_half_is_a_normalised_sum_added_to_predict_and_left_out_in_training() -> None:
    model = _model(word_dropout=0.0).eval()
    model.init_from_training_data([[7, 8, 9]], [0])  # gives "7 8" and "8 9" their rows
    ids, lengths = torch.tensor([[7, 8, 9, 0]]), torch.tensor([3])
    mask = torch.arange(4)[None, :] < lengths[:, None]  # (B, T)
    deep_only = model(ids, lengths) - model.wide_logits(ids, model.prepare(ids, lengths)[2])
    model.wide.normal_()
    assert model.bigram_keys is not None
    feats, real = ngram_features(ids, mask, V, BUCKETS, model.bigram_keys)
    assert int(real.sum()) == 5
    assert model.wide_bias is not None
    expected = model.wide[feats[real]].sum(0) / math.sqrt(5) + model.wide_bias  # 3 words + 2 bigrams
    torch.testing.assert_close(model(ids, lengths), deep_only + expected)
    torch.testing.assert_close(model.train()(ids, lengths), deep_only)  # dropout is 0: the deep half alone
    model.eval().wide_scale.fill_(4.0)
    torch.testing.assert_close(model(ids, lengths), deep_only + 4 * expected)
    assert {"wide", "wide_scale", "bigram_keys", "wide_bias"} <= set(model.state_dict())
    assert all(not name.startswith("wide") for name, _ in model.named_parameters())


def test_the_most_frequent_bigrams_get_the_rows() -> None:
    model = _model(num_classes=2, ngram_rows=4)
    docs = [[5, 6, 6], [5, 7], [8, 9], [8, 6], [5, 6], [5, 6, 5, 6]]  # "5 6" twice in the last: one document
    model.init_from_training_data(docs, [0, 0, 1, 1, 0, 0])
    assert model.bigram_keys is not None
    rows = [(k // V, k % V) for k in model.bigram_keys.tolist()]
    # "5 6" (3 documents) and "6 5" (1); of the single ones the smaller keys; "8 9" is left out
    assert rows == sorted([(5, 6), (5, 7), (6, 5), (6, 6)])
    assert not (model.wide[V:] == 0).all(dim=1).any()  # every row was seen


def test_the_validation_part_weighs_the_two_halves() -> None:
    model = _model(num_classes=2, word_dropout=0.0)
    docs, labels = [[5, 6], [7, 8], [5, 9], [7, 9]], [0, 1, 0, 1]
    model.init_from_training_data(docs + docs, labels + labels)  # words 5 and 7 decide, each in 4 documents
    ids, lengths = torch.tensor([[5, 6], [7, 8], [5, 9], [7, 9]]), torch.tensor([2, 2, 2, 2])
    mask = model.prepare(ids, lengths)[2]
    nb = model.wide_logits(ids, mask)  # (4, 2)
    margin = (nb[:, 0] - nb[:, 1]).abs()
    assert float(margin.min()) > float(margin.max()) / 4
    with torch.no_grad():  # a deep half that always says class 1, by twice naive Bayes' largest margin
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 2 * float(margin.max())]))
    deep_before = model.eval()._deep_logits(ids, lengths, mask)[0]
    model.train()
    a, b = model.weigh_halves(docs, labels)
    assert b > 2 * a  # naive Bayes must outvote the deep half
    assert float(model.wide_scale) == pytest.approx(b) and model.training  # the mode is left as it was
    # a is folded into the deep half's classifier: the model now predicts a * deep + b * wide
    torch.testing.assert_close(model.eval()(ids, lengths), a * deep_before + b * nb)
    assert model(ids, lengths).argmax(-1).tolist() == labels
    with pytest.raises(ValueError, match="same, non-zero number of documents and labels, got 4 and 2"):
        model.weigh_halves(docs, labels[:2])


def test_stacking_weights_minimise_the_held_out_cross_entropy() -> None:
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (200,), generator=gen)
    signal = torch.nn.functional.one_hot(labels, 3).double()
    deep = 6.0 * signal + 4.0 * torch.randn(200, 3, generator=gen, dtype=torch.float64)  # overconfident, noisy
    wide = 0.5 * signal + 0.3 * torch.randn(200, 3, generator=gen, dtype=torch.float64)  # timid, cleaner
    a, b = fit_stacking_weights(deep, wide, labels.tolist())
    assert a < 1 < b  # the deep half is cooled, the wide half trusted more
    log_w = torch.tensor([math.log(a), math.log(b)], dtype=torch.float64, requires_grad=True)
    value = torch.nn.functional.cross_entropy(log_w[0].exp() * deep + log_w[1].exp() * wide, labels)
    (value + (log_w * log_w).sum() / 400).backward()
    assert log_w.grad is not None and float(log_w.grad.abs().max()) < 1e-5  # a minimum of the stated objective
    sep = 10.0 * torch.nn.functional.one_hot(labels, 3).double()  # separable: the prior keeps the weights finite
    assert all(lo < w < hi for w in fit_stacking_weights(sep, sep, labels.tolist()) for lo, hi in [STACKING_BOUNDS])
    with pytest.raises(ValueError, match=r"need \(N, C\) logits of both halves.*got \(200, 3\), \(200, 2\)"):
        fit_stacking_weights(deep, wide[:, :2], labels.tolist())


def test_word_dropout_acts_in_training_only() -> None:
    model = _model(word_dropout=0.5)
    ids = torch.randint(5, V, (4, 12))
    lengths = torch.full((4,), 12)
    model.eval()
    assert torch.equal(model(ids, lengths), model(ids, lengths))
    model.train()
    torch.manual_seed(1)
    assert not torch.allclose(model(ids, lengths), model(ids, lengths))
    quiet = _model(word_dropout=0.0).train()
    quiet.load_state_dict(model.state_dict())
    assert torch.equal(quiet(ids, lengths), quiet(ids, lengths))  # no dropout left: deterministic


def test_the_lstm_encoder_adds_its_parameters_and_keeps_the_pooling_weights() -> None:
    plain, lstm = _model(), _model(encoder="lstm", hidden_size=5)
    assert not any(n.startswith("lstm.") for n, _ in plain.named_parameters())
    assert any(n.startswith("lstm.") for n, _ in lstm.named_parameters())
    assert lstm.classifier.in_features == 10 and plain.classifier.in_features == 8
    ids, lengths = torch.randint(5, V, (2, 6)), torch.tensor([6, 3])
    _, weights = lstm.eval()(ids, lengths, return_weights="pooling")
    assert weights["pooling"].shape == (2, 6) and (weights["pooling"][1, 3:] == 0).all()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("encoder", "gru", r"encoder must be one of \['none', 'lstm'\], got 'gru'"),
    ("ngram_rows", 0, "ngram_rows must be a positive int, got 0"),
    ("word_dropout", 1.0, "word_dropout"),
    ("bigrams", "hash", r"bigrams must be one of \['exact', 'hashed'\], got 'hash'"),
    ("dropout", -0.1, "dropout"),
])
def test_bad_config_values_are_named(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WideDeepClassifierConfig(vocab_size=V, num_classes=2, **{field: value})  # type: ignore[arg-type]


def test_naive_bayes_start_is_half_the_log_count_ratio() -> None:
    model = _model(num_classes=2, ngram_rows=4096)
    docs, labels = [[5, 6, 6], [5, 7], [8, 9], [8, 6]], [0, 0, 1, 1]
    model.init_from_training_data(docs, labels)  # sets the bigram rows
    w = model.naive_bayes_table(docs, labels)  # (V + buckets, 2)
    torch.testing.assert_close(w[:, 0], -w[:, 1])  # two classes: opposite signs
    assert model.bigram_keys is not None
    row = {int(k): V + i for i, k in enumerate(model.bigram_keys.tolist()) if k < V * V}
    # the ratio by hand: binarised counts per class (word 6 twice in one document counts once),
    # smoothed over the n-grams seen in training
    p = torch.zeros(2, V + 4096, dtype=torch.float64)
    for cls, doc_list in ((0, docs[:2]), (1, docs[2:])):
        for d in doc_list:
            for f in set(d) | {row[a * V + b] for a, b in zip(d, d[1:], strict=False)}:
                p[cls, f] += 1
    seen = p.sum(0) > 0
    assert int(seen.sum()) == 5 + 5  # words 5-9; bigrams "5 6", "6 6", "5 7", "8 9", "8 6"
    logp = ((p + 1) / (p + seen).sum(1, keepdim=True)).log()
    r = (logp[0] - logp[1]) * seen  # n-grams never seen stay zero
    torch.testing.assert_close(w[:, 0].double(), r / 2, atol=1e-6, rtol=0)  # float32 ratios (FIT_DTYPE)
    assert w[5, 0] > 0 > w[8, 0]  # in two class-0 documents; in two class-1 documents
    assert abs(float(w[6, 0])) < float(w[7, 0])  # word 6 is in one document of each class, 7 in one of class 0
    with pytest.raises(ValueError, match="documents and labels must have the same length, got 4 and 3"):
        model.init_from_training_data(docs, labels[:3])


def test_the_wide_half_is_the_regression_on_naive_bayes_scaled_features() -> None:
    from attnkit.models.wide import WIDE_C

    model = _model(num_classes=3, ngram_rows=64)
    docs = [[5, 6, 7], [5, 6], [8, 9, 8], [8, 10], [11, 12], [11, 6, 12], [5, 12], [8, 6]]
    labels = [0, 0, 1, 1, 2, 2, 0, 1]
    model.init_from_training_data(docs, labels)
    ratios = model.naive_bayes_table(docs, labels)
    assert model.wide_bias is not None
    table, bias = model.wide.double(), model.wide_bias.double()
    assert (table[ratios == 0] == 0).all() and (table[20:V] == 0).all()  # unseen n-grams weigh nothing
    # optimality: the gradient of the regression's objective in U (table = ratios * U) vanishes
    u = torch.where(ratios != 0, table / ratios, torch.zeros_like(table)).requires_grad_(True)
    b = bias.clone().requires_grad_(True)
    ids, lengths = torch.tensor([d + [0] * (3 - len(d)) for d in docs]), torch.tensor([len(d) for d in docs])
    feats, real = ngram_features(ids, torch.arange(3)[None, :] < lengths[:, None], V, 64, model.bigram_keys)
    x = torch.zeros(len(docs), V + 64, dtype=torch.float64)
    for i in range(len(docs)):
        x[i].index_add_(0, feats[i][real[i]], torch.ones(int(real[i].sum()), dtype=torch.float64))
    x = x / x.sum(1, keepdim=True).sqrt()
    loss = torch.nn.functional.cross_entropy(x @ (ratios * u) + b, torch.tensor(labels))
    (loss + (u * u).sum() / (2 * WIDE_C * len(docs))).backward()
    assert u.grad is not None and b.grad is not None
    assert float(u.grad.abs().max()) < 1e-4 and float(b.grad.abs().max()) < 1e-4
    nb = model.wide_logits(ids, model.prepare(ids, lengths)[2])
    assert nb.argmax(-1).tolist() == labels  # it separates its training documents


def test_hashed_bigrams_are_asked_for_and_a_config_without_the_field_gets_exact_rows() -> None:
    saved = {"vocab_size": V, "num_classes": 2, "ngram_rows": BUCKETS}
    old = build_model("wide", {**saved, "bigrams": "hashed"})
    assert isinstance(old, WideDeepClassifier) and old.config.bigrams == "hashed" and old.bigram_keys is None
    assert old.wide_bias is None and set(old.state_dict()) >= {"wide", "wide_scale"}
    docs, labels = [[5, 6], [7, 8], [5, 9]], [0, 1, 0]
    old.init_from_training_data(docs, labels)  # hashed rows: the table is naive Bayes itself
    torch.testing.assert_close(old.wide, old.naive_bayes_table(docs, labels).float())
    assert build_model("wide", saved).config.bigrams == "exact"  # a missing field takes the default


def test_fit_classifier_starts_the_wide_model_from_its_training_part() -> None:
    from attnkit.data.readers import Example
    from attnkit.train.config import TrainConfig
    from attnkit.train.tasks.classify.pipeline import fit_classifier

    train = [Example("good fine great", "pos"), Example("bad awful poor", "neg")] * 6
    seen: list[int] = []
    result = fit_classifier(train, train[:2], train[:2], model_name="wide",
                            model_options={"embed_dim": 4, "attention_dim": 4, "ngram_rows": 32},
                            train_config=TrainConfig(epochs=1, lr=1e-9, warmup_ratio=0.0, device="cpu"),
                            quiet=True, log=lambda line: seen.append(1))
    assert result.test is not None and result.test["accuracy"] == 1.0  # naive Bayes alone separates them
    wide = result.model.wide  # type: ignore[union-attr]
    assert wide.abs().sum() > 0 and seen


def test_an_explained_prediction_splits_the_margin_between_the_halves() -> None:
    from attnkit.data.batching import LabelVocab
    from attnkit.data.tokenization import encode_batch, train_tokenizer
    from attnkit.train.tasks.classify.inference import predict_texts

    texts = ["a great film", "a great cast", "a dull film", "a dull plot"]
    tok = train_tokenizer(texts, kind="word")
    model = _model(num_classes=2, vocab_size=tok.get_vocab_size(), word_dropout=0.0)
    model.init_from_training_data(encode_batch(tok, texts, 16), [1, 1, 0, 0])
    assert model.wide_scale is not None and model.wide_bias is not None
    model.wide_scale.fill_(2.0)
    (p,) = predict_texts(model, tok, LabelVocab(["neg", "pos"]), ["a great great film"], max_len=16, top_k=50)
    assert p.label == "pos" and set(p.halves) == {"network", "ngrams"}
    ids = torch.tensor([encode_batch(tok, ["a great great film"], 16)[0]])
    with torch.no_grad():
        logits = model.eval()(ids, torch.tensor([ids.shape[1]]))[0]  # (C,)
    assert p.halves["network"] + p.halves["ngrams"] == pytest.approx(float(logits[1] - logits.mean()), abs=1e-5)
    values = [w for _, w in p.top_ngrams]
    assert values == sorted(values, reverse=True) and p.top_ngrams[0][0] == "great"
    names = {g for g, _ in p.top_ngrams}
    assert {"a", "great", "film", "a great", "great great", "great film"} >= names >= {"great", "a great"}
    bias = float(2.0 * (model.wide_bias[1] - model.wide_bias.mean()))  # every distinct n-gram is listed: they add up
    assert sum(values) + bias == pytest.approx(p.halves["ngrams"], abs=1e-5)
