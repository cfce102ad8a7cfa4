"""Prediction on a saved run batches long documents as training does: capped in padded tokens."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch

from attnkit.data.batching import LabelVocab, collate
from attnkit.data.readers import Example
from attnkit.data.tokenization import train_tokenizer
from attnkit.models import build_model
from attnkit.train.loop.task import in_input_order, sorted_batches
from attnkit.train.tasks.classify.inference import evaluate_examples, predict_texts
from attnkit.train.tasks.classify.task import ClassificationTask

WORDS = [f"w{i}" for i in range(30)]


def _texts() -> list[Example]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for i, n in enumerate([3, 25, 40, 5, 60, 7, 33, 2, 50, 9]):
        words = [WORDS[int(j)] for j in torch.randint(0, 30, (n,), generator=gen)]
        out.append(Example(" ".join(words), "a" if i % 2 else "b"))
    return out


def test_sorted_batches_group_like_lengths_within_the_cap_and_put_rows_back_in_order() -> None:
    lengths = [3, 10, 26, 5, 6, 7, 1, 1, 1]
    spans = sorted_batches(lengths, 4, 40)  # shortest first; past the first member at most 40 padded tokens
    assert spans == [[6, 7, 8, 0], [3, 4, 5, 1], [2]]
    assert sorted_batches([3, 25, 26, 2], 2) == [[3, 0], [1, 2]]
    rows = [torch.tensor([float(lengths[i]) for i in span]) for span in spans]
    assert in_input_order(spans, rows).tolist() == [float(n) for n in lengths]


def test_predict_and_evaluate_cap_the_padded_tokens_of_a_batch() -> None:
    examples = _texts()
    tok = train_tokenizer([e.text for e in examples], kind="word")
    labels = LabelVocab(["a", "b"])
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": tok.get_vocab_size(), "num_classes": 2, "embed_dim": 8,
                                 "attention_dim": 4, "hidden_size": 4, "ngram_rows": 16, "chunk_len": 8,
                                 "max_chunks": 4})  # reads up to 26 tokens of a document, 8 at a time
    sizes: list[tuple[int, int]] = []
    model.register_forward_pre_hook(lambda _m, args: sizes.append(tuple(args[0].shape)))
    texts = [e.text for e in examples]
    capped = predict_texts(model, tok, labels, texts, max_len=8, batch_size=4)
    assert sizes and all(b == 1 or b * t <= 4 * 8 for b, t in sizes)  # batch_size * max_len tokens at most
    assert len(sizes) > -(-len(texts) // 4)  # more batches than plain batches of 4
    single = [predict_texts(model, tok, labels, [t], max_len=8)[0] for t in texts]
    for got, alone in zip(capped, single, strict=True):
        assert got.label == alone.label and abs(got.probability - alone.probability) < 1e-5
    sizes.clear()
    report = evaluate_examples(model, tok, labels, examples, max_len=8, batch_size=4)
    assert sizes and all(b == 1 or b * t <= 4 * 8 for b, t in sizes) and report["n"] == len(examples)
    assert report["accuracy"] == sum(p.label == e.label for p, e in zip(single, examples, strict=True)) / 10


def test_the_halves_are_weighed_in_batches_capped_as_training_s() -> None:
    from attnkit.data.batching import TextClassificationDataset
    from attnkit.train.tasks.classify.objective import fit_decision

    examples = _texts()
    tok = train_tokenizer([e.text for e in examples], kind="word")
    labels = LabelVocab(["a", "b"])
    val = TextClassificationDataset(examples, tok, labels, max_len=64)
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": tok.get_vocab_size(), "num_classes": 2, "embed_dim": 8,
                                 "attention_dim": 4, "hidden_size": 4, "ngram_rows": 16})
    model.init_from_training_data(val.ids, val.labels)
    whole = model.each_half(val.ids)  # one batch of all ten
    sizes: list[tuple[int, int]] = []
    padded = model._padded

    def recording(documents):  # each batch the halves read, as padded ids (B, T)
        out = padded(documents)
        sizes.append(tuple(out[0].shape))
        return out

    model._padded = recording  # type: ignore[method-assign]
    parts = model.each_half(val.ids, batches=sorted_batches(val.lengths, 256, 64))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(whole, parts, strict=True))
    assert len(sizes) > 1 and all(b == 1 or b * t <= 64 for b, t in sizes), sizes
    task = ClassificationTask(val, val, max_tokens=64)
    read: list[tuple[int, int]] = []
    halves = model.halves

    def recording_halves(ids, lengths):  # each batch a prediction pass reads one half at a time
        read.append(tuple(ids.shape))
        return halves(ids, lengths)

    model.halves = recording_halves  # type: ignore[method-assign]
    fit_decision(model, functools.partial(task.predict, model), val, metric="accuracy", class_weight="none",
                 tune=False, names=labels.labels)
    assert len(read) > 1 and all(b == 1 or b * t <= 64 for b, t in read), read  # the weighing is capped too


def _weighed_model() -> tuple[Any, Any, Any, Any]:
    from attnkit.data.batching import TextClassificationDataset

    examples = _texts()
    tok = train_tokenizer([e.text for e in examples], kind="word")
    val, other = (TextClassificationDataset(part, tok, LabelVocab(["a", "b"]), max_len=64)
                  for part in (examples, examples[::-1]))
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": tok.get_vocab_size(), "num_classes": 2, "embed_dim": 8,
                                 "attention_dim": 4, "hidden_size": 4, "ngram_rows": 16})
    model.init_from_training_data(val.ids, val.labels)
    return model, val, other, ClassificationTask(val, val)


def test_the_halves_weighing_reuses_the_validation_pass_of_the_same_weights() -> None:
    """The validation pass keeps each half's logits: the weighing after it reads nothing again, weighs exactly
    what a fresh pass over the documents gives, and the pass's logits are the model's own."""
    from attnkit.train.tasks.classify.objective import fit_decision

    model, val, _, task = _weighed_model()
    fresh = copy.deepcopy(model)
    logits, _ = task.predict(model, val)
    batch = collate([val[i] for i in range(len(val))])
    with torch.no_grad():
        whole = copy.deepcopy(model).eval()(batch["ids"], batch["lengths"])  # the halves together, one batch
    assert torch.allclose(logits, whole, atol=1e-5)
    calls: list[int] = []
    halves = model.halves
    model.halves = lambda ids, lengths: (calls.append(1), halves(ids, lengths))[1]  # type: ignore[method-assign]
    got = fit_decision(model, functools.partial(task.predict, model), val, metric="accuracy", class_weight="none",
                       tune=False, names=["a", "b"])
    assert calls == []  # the kept halves were used
    assert got["halves"] == list(fresh.weigh_halves(val.ids, val.labels))
    assert torch.equal(model.classifier.weight, fresh.classifier.weight) and torch.equal(model.wide_scale,
                                                                                      fresh.wide_scale)


@pytest.mark.parametrize("change", ["weight", "data"])
def test_kept_halves_are_never_served_stale(change: str) -> None:
    """Weights changed in place after the pass (a step, a load), or other documents: a new pass, not the kept one."""
    model, val, other, task = _weighed_model()
    task.predict(model, val)
    data = val
    if change == "weight":
        with torch.no_grad():
            model.classifier.weight.add_(0.5)
    else:
        data = other  # the same documents in another order
    own, wide, labels = task.predict(model, data, halves=True)
    want_own, want_wide = model.each_half(data.ids)
    assert labels.tolist() == data.labels
    assert torch.allclose(own, want_own, atol=1e-6) and torch.allclose(wide, want_wide, atol=1e-6)


def test_a_texts_numbers_do_not_depend_on_the_texts_beside_it() -> None:
    """Batches hold equally long documents and never one short text alone, so a small model's numbers
    are the same to the last digit whichever texts are classified with it (what ``attnkit serve`` relies on)."""
    examples = _texts()
    tok = train_tokenizer([e.text for e in examples], kind="word")
    torch.manual_seed(0)
    model = build_model("document", {"vocab_size": tok.get_vocab_size(), "num_classes": 2,
                                     "layer": {"d_model": 16, "num_heads": 2, "dropout": 0.0}, "num_layers": 1})
    labels = LabelVocab(["a", "b"])
    texts = [e.text for e in examples] + [examples[3].text.replace("w", "w1"), ""]
    together = predict_texts(model, tok, labels, texts, max_len=64, batch_size=5)
    for text, got in zip(texts, together, strict=True):
        alone = predict_texts(model, tok, labels, [text], max_len=64)[0]
        assert got.text == text and got.probabilities == alone.probabilities
    reordered = predict_texts(model, tok, labels, texts[::-1], max_len=64)
    assert [p.probabilities for p in reordered] == [p.probabilities for p in together][::-1]


def test_the_test_pass_gives_the_reports_probabilities_and_weights_without_another_pass(monkeypatch) -> None:
    """Scoring the test part asks for the pooling weights in the same pass, with the same logits, so the
    reports read the run's test documents once (on IMDB's 25,000 reviews that second pass was most of the
    report's time); a result without them (a run loaded again) gets one pass, giving the same."""
    import dataclasses

    from attnkit.data.batching import TextClassificationDataset
    from attnkit.train.config import DataSettings, TrainConfig
    from attnkit.train.tasks.classify import reports
    from attnkit.train.tasks.classify.pipeline import fit_classifier
    from attnkit.train.tasks.classify.task import ClassificationTask

    examples = _texts()
    tok = train_tokenizer([e.text for e in examples], kind="word")
    labels = LabelVocab(["a", "b"])
    ds = TextClassificationDataset(examples, tok, labels, max_len=64)
    small = {"wide": {"embed_dim": 8, "attention_dim": 4, "hidden_size": 4, "ngram_rows": 16},
             "document": {"layer": {"d_model": 16, "num_heads": 2}, "num_layers": 1}}
    for name, options in small.items():
        torch.manual_seed(0)
        model = build_model(name, {"vocab_size": tok.get_vocab_size(), "num_classes": 2, **options})
        task = ClassificationTask(ds, batch_size=4)
        plain, targets = task.predict(model, ds, batch_size=4)
        logits, again, weights = task.predict(model, ds, batch_size=4, pooling=True)
        assert torch.equal(plain, logits) and torch.equal(targets, again), name  # the test measures unchanged
        assert [len(w) for w in weights] == list(ds.lengths), name  # in input order, over each one's tokens
        assert all(abs(sum(w) - 1) < 1e-4 for w in weights), name

    fit = {"model_name": "document", "model_options": small["document"], "data": DataSettings(max_len=64),
           "train_config": TrainConfig(epochs=1, batch_size=4, device="cpu", seed=0), "quiet": True}
    result = fit_classifier(examples[:6], examples[6:8], examples, reports=True, **fit)
    assert result.test is not None and result.test_scores is not None
    plain_fit = fit_classifier(examples[:6], examples[6:8], examples, **fit)  # cv's folds: no reports, no weights
    assert plain_fit.test_scores is None and plain_fit.test == result.test
    passes: list[int] = []
    predict = ClassificationTask.predict
    monkeypatch.setattr(ClassificationTask, "predict", lambda self, *a, **k: passes.append(1) or predict(self, *a, **k))
    kept = reports.results_analysis(result)
    assert passes == [] and kept["confusion_matrix"] == result.test["confusion_matrix"]
    fresh = reports.results_analysis(dataclasses.replace(result, test_scores=None))
    assert passes == [1] and fresh["confusion_matrix"] == kept["confusion_matrix"]
    for a, b in zip(kept["confidently_wrong"], fresh["confidently_wrong"], strict=True):
        assert a["text"] == b["text"] and abs(a["probability"] - b["probability"]) < 1e-5
    assert kept["most_attended"].keys() == fresh["most_attended"].keys()


def test_a_one_epoch_run_reads_its_validation_part_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The epoch's validation pass chose the weights the run keeps (nothing is put back over them), so the
    halves' weighing after it reads no document again: each validation and test document is read once."""
    from attnkit.models.ngram_half import NgramHalf
    from attnkit.train.config import DataSettings, TrainConfig
    from attnkit.train.tasks.classify.pipeline import fit_classifier

    examples = _texts() * 3
    read: list[int] = []
    halves = NgramHalf.halves
    monkeypatch.setattr(NgramHalf, "halves", lambda self, ids, lengths: read.append(len(ids)) or halves(self, ids,
                                                                                                      lengths))
    result = fit_classifier(examples[:18], examples[18:24], examples[24:], model_name="wide",
                            model_options={"embed_dim": 8, "attention_dim": 4, "hidden_size": 4, "ngram_rows": 16},
                            data=DataSettings(max_len=64), quiet=True,
                            train_config=TrainConfig(epochs=1, batch_size=4, device="cpu", seed=0))
    assert sum(read) == 6 + 6 and result.extra["decision"]["halves"]
