"""Explanations: exact token contributions, attribution methods side by side, and their faithfulness."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from attnkit.cli import cli
from attnkit.models import build_model
from tests.support.cli import write_keyword_csv

V = 30


def _wide(**extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model("wide", {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "attention_dim": 4,
                                 "ngram_rows": 16, "dropout": 0.3, **extra})
    model.init_from_training_data([[5, 6, 7], [7, 8, 9, 5], [3, 4]], [0, 1, 2])  # type: ignore[operator]
    with torch.no_grad():
        model.wide_scale.fill_(0.7)  # type: ignore[union-attr]
        model.wide_bias.normal_()  # type: ignore[union-attr]
    return model


def _document(**extra: object) -> torch.nn.Module:
    torch.manual_seed(1)
    return build_model("document", {"vocab_size": V, "num_classes": 3,
                                    "layer": {"d_model": 16, "num_heads": 2, "d_ff": 32, "dropout": 0.2},
                                    "num_layers": 1, **extra})


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


# --- the attribution methods ------------------------------------------------------------------

from attnkit.attribution import (  # noqa: E402
    METHODS,
    MethodNotApplicable,
    aopc,
    applicable_methods,
    attribute,
    erasure_counts,
    faithfulness,
)
from attnkit.attribution.faithfulness import decisive_words, format_table  # noqa: E402


def _linear(**extra: object) -> torch.nn.Module:
    """Embeddings, mean pooling, a linear head: the logit is linear in each embedding."""
    torch.manual_seed(2)
    return build_model("document", {"vocab_size": V, "num_classes": 2, "layer": {"d_model": 4}, "num_layers": 0,
                                    "pooling": "mean", "positional": "none", **extra})


def _bert() -> torch.nn.Module:
    torch.manual_seed(3)
    return build_model("bert", {"vocab_size": V, "num_classes": 2, "hidden_size": 16, "num_hidden_layers": 2,
                                "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 16,
                                "cls_token_id": 2, "sep_token_id": 3, "ngram_rows": 0, "max_len": 14})


def test_each_model_names_the_methods_that_apply() -> None:
    assert applicable_methods(_wide()) == ("contributions", "attention", "attention_norm", "grad_input",
                                           "integrated_gradients")
    assert applicable_methods(_document()) == METHODS
    assert "contributions" not in applicable_methods(_bert()) and "chefer" in applicable_methods(_bert())
    lstm = build_model("sentiment", {"vocab_size": V, "num_classes": 2})
    with pytest.raises(MethodNotApplicable, match=r"'contributions' does not apply to SentimentClassifier.*"
                                                  r"the methods that do: attention, attention_norm, grad_input"):
        attribute(lstm, *BATCH, "contributions")
    with pytest.raises(ValueError, match="method must be one of"):
        attribute(_wide(), *BATCH, "saliency")


def test_on_a_linear_model_the_gradient_methods_equal_the_exact_contributions() -> None:
    model = _linear()
    ids, lengths = BATCH
    exact = attribute(model, ids, lengths, "contributions")
    assert torch.allclose(attribute(model, ids, lengths, "grad_input"), exact, atol=1e-6)
    assert torch.allclose(attribute(model, ids, lengths, "integrated_gradients", steps=3), exact, atol=1e-6)
    other = 1 - model(ids, lengths).argmax(-1)
    assert not torch.allclose(attribute(model, ids, lengths, "contributions", target=other), exact)


def test_integrated_gradients_add_up_to_the_change_from_the_zero_embeddings() -> None:
    model = _wide(dropout=0.0).eval()
    ids, lengths = BATCH
    target = torch.tensor([0, 1, 2])
    ig = attribute(model, ids, lengths, "integrated_gradients", target=target, steps=60)
    with torch.no_grad():
        full = model(ids, lengths).gather(1, target[:, None])[:, 0]
        handle = model.embedding.register_forward_hook(lambda _m, _a, out: out * 0)
        zero = model(ids, lengths).gather(1, target[:, None])[:, 0]
        handle.remove()
    assert torch.allclose(ig.sum(1), full - zero, atol=2e-3)  # completeness, up to the Riemann sum


@pytest.mark.parametrize("make", [
    _document, _bert, lambda: _document(num_layers=0, parameter_free_layers=2),
    lambda: build_model("sentiment", {"vocab_size": V, "num_classes": 2}),
    lambda: build_model("han", {"vocab_size": V, "num_classes": 2}),
])
def test_every_applicable_method_scores_the_real_tokens(make: object) -> None:
    from attnkit.core.dispatch import weights_kept_for_gradients

    model = make()  # type: ignore[operator]
    for method in applicable_methods(model):
        scores = attribute(model, *BATCH, method)
        assert scores.shape == (3, 5) and torch.isfinite(scores).all(), method
        assert scores[2, 1:].abs().max() == 0, method  # padding scores nothing
        assert scores[:2].abs().sum() > 0, method
    assert not weights_kept_for_gradients()  # the gradient-relevance path puts the fast path back


@pytest.mark.parametrize("make", [_document, _bert])
def test_plain_inference_in_another_thread_keeps_the_fused_path_while_one_explains(make: object) -> None:
    """One thread computes gradient relevance; midway through its forward, another runs the same model."""
    from attnkit.core import last_backend
    from tests.support.threads import beside

    model = make().eval()  # type: ignore[operator]
    ids, lengths = BATCH
    with torch.no_grad():
        expected_logits = model(ids, lengths)
    target = expected_logits.argmax(-1)  # given, so the explainer's one forward is the relevance pass
    expected_scores = attribute(model, ids, lengths, "chefer", target=target)

    def infer() -> tuple[torch.Tensor, str]:
        with torch.no_grad():
            logits, _ = model(ids, lengths, return_weights=True)
        return logits, last_backend().name  # type: ignore[union-attr]

    scores, (logits, backend) = beside(list(model.modules())[-1],
                                       lambda: attribute(model, ids, lengths, "chefer", target=target), infer)
    assert torch.allclose(scores, expected_scores, atol=1e-6)
    assert backend == "fused"  # the explainer's readable path did not leak into this thread
    assert torch.allclose(logits, expected_logits, atol=1e-6)


def test_chefer_relevance_by_hand_on_one_parameter_free_layer() -> None:
    """One parameter-free layer, mean pooling: R = I + mean_h (grad A . A)^+, read through the mean's row."""
    model = _linear(parameter_free_layers=1).eval()
    ids, lengths = BATCH[0][:1, :4], BATCH[1][:1]
    x = model.embedding(ids)[0].detach()  # (T, D)
    a = torch.softmax(x @ x.T / 2.0, -1).requires_grad_(True)  # (T, T), scale 1/sqrt(4)
    alpha = torch.full((4,), 0.25)  # mean pooling: a fixed row, no attention to weigh by its gradient
    logits = model.classifier(alpha @ (a @ x))
    c = int(logits.argmax())
    (ga,) = torch.autograd.grad(logits[c], [a])
    relevance = torch.eye(4) + (ga * a).clamp_min(0)
    expected = alpha @ relevance
    assert torch.allclose(attribute(model, ids, lengths, "chefer")[0], expected.detach(), atol=1e-5)


# --- faithfulness ------------------------------------------------------------------------------


def test_erasure_counts_take_the_ceiling_and_at_least_one_token() -> None:
    assert erasure_counts(4) == [1, 1, 1, 1, 2]
    assert erasure_counts(30) == [1, 2, 3, 6, 15]
    with pytest.raises(ValueError, match="n must be"):
        erasure_counts(0)


def test_comprehensiveness_and_sufficiency_match_a_hand_computation() -> None:
    """ERASER's formulas written out on a mean-of-embeddings model, every perturbed document by hand."""
    model = _linear().eval()
    docs = [[5, 6, 7, 8], [9, 10, 11], [12]]
    emb, w, b = model.embedding.weight.detach(), model.classifier.weight.detach(), model.classifier.bias.detach()

    def prob(doc: list[int], c: int) -> float:
        return float(torch.softmax(w @ emb[doc].mean(0) + b, -1)[c])

    comp, suff = [], []
    for doc in docs:
        c = int(torch.argmax(w @ emb[doc].mean(0) + b))
        push = [float(w[c] @ emb[t]) for t in doc]  # each token's contribution, times n
        order = sorted(range(len(doc)), key=lambda i: -push[i])
        for k in erasure_counts(len(doc)):
            top = set(order[:k])
            rest = [t for i, t in enumerate(doc) if i not in top] or [1]
            comp.append(prob(doc, c) - prob(rest, c))
            suff.append(prob(doc, c) - prob([t for i, t in enumerate(doc) if i in top], c))
    result = faithfulness(model, docs, methods=["contributions", "attention"])
    got = result["methods"]["contributions"]
    assert got["comprehensiveness"] == pytest.approx(sum(comp) / len(comp), abs=1e-6)
    assert got["sufficiency"] == pytest.approx(sum(suff) / len(suff), abs=1e-6)
    assert result["shown_first"] == "contributions"  # mean pooling's attention is uniform: no ranking at all
    assert set(result["random"]) == {"comprehensiveness", "sufficiency"} and result["n"] == 3
    lines = format_table(result)
    assert any(line.startswith("contributions") and "shown first" in line for line in lines)
    assert any(line.startswith("random order") for line in lines)


def test_the_random_control_follows_its_seed() -> None:
    model = _linear().eval()
    docs = [[5, 6, 7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18], [19, 20, 21, 22, 23, 24, 25]]

    def control(seed: int) -> dict[str, float]:
        return faithfulness(model, docs, methods=["contributions"], seed=seed)["random"]

    first = control(0)
    assert control(0) == first  # the same seed repeats the random orders exactly
    others = [control(seed) for seed in (1, 2, 3)]
    assert all(other != first for other in others)  # another seed draws other orders
    assert len({o["comprehensiveness"] for o in others}) == 3


def test_aopc_is_the_mean_drop_and_checks_its_shapes() -> None:
    assert aopc([0.9, 0.8], [[0.5, 0.7], [0.8, 0.4]]) == pytest.approx((0.4 + 0.2 + 0.0 + 0.4) / 4)
    with pytest.raises(ValueError, match="perturbed must be"):
        aopc([0.9], [0.5, 0.7])


def test_decisive_words_rank_each_words_push_toward_the_predicted_class() -> None:
    model = _linear().eval()
    docs = [[5, 6, 7], [5, 8], [9, 9, 10], [11, 5], [6, 5, 6]]
    total: dict[tuple[int, int], float] = {}
    seen: dict[tuple[int, int], int] = {}
    for doc in docs:
        contrib, _ = model.token_contributions(torch.tensor([doc]), torch.tensor([len(doc)]))  # (1, T, C)
        c = int(contrib[0].sum(0).argmax())  # the bias is shared by every document
        margin = contrib[0, :, c] - contrib[0].mean(-1)  # (T,): the push toward c over the mean class
        for tok in set(doc):
            push = sum(m for t, m in zip(doc, margin.tolist(), strict=True) if t == tok)
            total[c, tok] = total.get((c, tok), 0.0) + push
            seen[c, tok] = seen.get((c, tok), 0) + 1
    summed = {(c, t): x for c, rows in enumerate(decisive_words(model, docs, top=10, aggregate="sum"))
              for t, x in rows}
    assert summed.keys() == total.keys()
    assert all(summed[k] == pytest.approx(v, abs=1e-6) for k, v in total.items())
    mean = {(c, t): x for c, rows in enumerate(decisive_words(model, docs, top=10, min_documents=2))
            for t, x in rows}
    assert mean.keys() == {k for k, n in seen.items() if n >= 2}  # words in fewer documents are not ranked
    assert all(mean[k] == pytest.approx(total[k] / seen[k], abs=1e-6) for k in mean)
    for rows in decisive_words(model, docs, top=10, min_documents=1):
        assert [x for _, x in rows] == sorted((x for _, x in rows), reverse=True)
    with pytest.raises(ValueError, match="aggregate must be"):
        decisive_words(model, docs, aggregate="max")


# --- the command line and the reports ---------------------------------------------------------



def _invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def wide_run(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The default model (wide) trained briefly on keyword reviews: (run folder, data file)."""
    folder = tmp_path_factory.mktemp("explain")
    data = write_keyword_csv(folder / "reviews.csv", 240)
    result = _invoke("train", "--data", str(data), "--out", str(folder / "run"), "--epochs", "2", "-q")
    assert result.exit_code == 0, result.output
    return folder / "run", data


def test_evaluate_prints_and_returns_the_faithfulness_table(wide_run) -> None:  # type: ignore[no-untyped-def]
    run, data = wide_run
    result = _invoke("evaluate", str(run), "--data", str(data), "--faithfulness")
    assert result.exit_code == 0, result.output
    table = result.output.split("faithfulness on 240 documents")[1].splitlines()
    rows = {line.split()[0]: line for line in table[3:]}
    assert set(rows) == {"contributions", "attention", "attention_norm", "grad_input", "integrated_gradients",
                         "random"}
    assert "shown first" in rows["contributions"] and "(control)" in rows["random"]
    scores = json.loads(_invoke("evaluate", str(run), "--data", str(data), "--faithfulness", "--json").output)
    faith = scores["faithfulness"]
    assert scores["n"] == 240 and faith["shown_first"] == "contributions"
    assert set(faith["methods"]["attention"]) >= {"comprehensiveness", "sufficiency"}
    ours, rand = faith["methods"]["contributions"], faith["random"]
    assert ours["comprehensiveness"] > 2 * rand["comprehensiveness"] and ours["sufficiency"] < rand["sufficiency"]


def test_predict_explains_with_exact_contributions_that_add_up(wide_run) -> None:  # type: ignore[no-untyped-def]
    run, _ = wide_run
    row = json.loads(_invoke("predict", str(run), "an excellent and wonderful xyzzy film", "--explain",
                             "--json").output)
    shown = row["explanation"]
    assert shown["method"] == "contributions" and "[UNK]" in shown["tokens"]
    assert len(shown["scores"]) == len(shown["tokens"]) == 6
    assert sum(shown["scores"]) + shown["bias"] == pytest.approx(shown["logit"], abs=1e-5)
    probs = torch.tensor(list(row["probabilities"].values()))
    assert shown["logit"] != 0 and float(probs.max()) == pytest.approx(row["probability"])
    text = _invoke("predict", str(run), "a dull xyzzy film", "--explain", "--top", "6").output.splitlines()
    assert text[1].strip().startswith("moved (exact contributions") and "bias" in text[1]
    assert "[UNK] (out-of-vocabulary word)" in text[1] and text[2].strip().startswith("attended:")


def test_the_report_leads_with_the_method_chosen_on_the_validation_part(wide_run) -> None:  # type: ignore[no-untyped-def]
    run, _ = wide_run
    record = json.loads((run / "faithfulness.json").read_text(encoding="utf-8"))
    assert record["chosen_on"] == "validation" and record["shown_first"] == record["validation"]["shown_first"]
    assert set(record["test"]["methods"]) == {record["shown_first"], "attention"}
    report = (run / "report.txt").read_text(encoding="utf-8")
    first = report.index("explanation shown first: exact contributions (chosen on the validation part")
    assert first < report.index("words that moved the decision most per class") < report.index(
        "raw attention: most attended words per class")
    words = report.split("words that moved the decision most per class")[1].splitlines()[1:3]
    assert words[0].split(":")[0].strip() == "negative" and words[1].split(":")[0].strip() == "positive"
    assert any(w in words[1] for w in ("excellent", "wonderful", "brilliant", "superb", "delightful", "best"))
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.index("Explanation shown first: exact contributions") < page.index(
        "Raw attention: most attended words per class")


def test_faithfulness_of_a_numpy_run_is_refused_by_name(wide_run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, data = wide_run
    out = tmp_path / "numpy"
    trained = _invoke("train", "--data", str(data), "--backend", "numpy", "--out", str(out), "-q", "--epochs", "1",
                      "--model-opt", "layer.d_model=8", "--model-opt", "layer.d_ff=16")
    assert trained.exit_code == 0, trained.output
    result = CliRunner().invoke(cli, ["evaluate", str(out), "--data", str(data), "--faithfulness"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--faithfulness needs a torch run" in result.output and "--backend numpy" in result.output


def test_faithfulness_in_a_report_reads_a_bounded_number_of_tokens() -> None:
    """Long documents: the report's faithfulness reads the first documents within ``tokens`` (but never fewer
    than MIN_DOCUMENTS); short ones: up to ``documents`` of them, as before."""
    from attnkit.attribution import report

    model = _linear().eval()
    gen = torch.Generator().manual_seed(0)
    long = [torch.randint(4, V, (50,), generator=gen).tolist() for _ in range(40)]
    short = [torch.randint(4, V, (5,), generator=gen).tolist() for _ in range(40)]
    assert len(report.faithfulness_documents(long, 30, 1000)) == report.MIN_DOCUMENTS
    assert len(report.faithfulness_documents(long, 30, 1100)) == 22  # 22 x 50 tokens
    assert len(report.faithfulness_documents(short, 30, 1000)) == 30
    assert len(report.faithfulness_documents(short[:3], 30, 1)) == 3  # fewer documents than the minimum: all
    tokenizer = type("T", (), {"id_to_token": staticmethod(lambda i: f"w{i}")})()
    found = report.explanation_analysis(model, tokenizer, ["a", "b"], long, long, documents=30, tokens=1100)
    assert found is not None
    assert found["validation"]["n"] == found["test"]["n"] == 22
    assert sum(len(rows) for rows in found["words"].values()) > 0  # the words: over all test documents


def test_faithfulness_in_a_report_is_bounded_by_the_work_of_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """A costly model (a fine-tuned BERT) is scored on the first documents within REPORT_WORK, counted as the
    weights that read each token times the tokens they read (an encoder its max_len at most; a lookup table
    none); never fewer than MIN_DOCUMENTS. Its words per class: each pass the work of a faithfulness document."""
    from attnkit.attribution import report
    from attnkit.models.bert import BertConfig
    from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig

    docs = [[5] * 10 for _ in range(50)]

    def work(doc: list[int]) -> int:
        return 100 * len(doc)  # 1,000 a document

    assert len(report.faithfulness_documents(docs, 50, 10**6, work, budget=30_000)) == 30  # the exact value: kept
    assert len(report.faithfulness_documents(docs, 50, 10**6, work, budget=29_999)) == 29
    assert len(report.faithfulness_documents(docs, 50, 10**6, work, budget=1)) == report.MIN_DOCUMENTS
    assert len(report.faithfulness_documents(docs, 50, 10**6)) == 50  # no work given: tokens and documents only
    bert = BertClassifier(BertClassifierConfig.from_bert(
        BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                   max_position_embeddings=8), num_classes=2, cls_token_id=2, sep_token_id=3, max_len=6)).eval()
    tables = {id(p) for m in bert.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    weights = sum(p.numel() for p in bert.parameters() if id(p) not in tables)
    assert 0 < weights < sum(p.numel() for p in bert.parameters())
    read = report.reading_work(bert)
    assert read([4] * 3) == 3 * weights and read([4] * 50) == 6 * weights  # the encoder reads max_len at most
    assert report.reading_work(_linear())([4] * 50) == 50 * sum(
        p.numel() for m in _linear().modules() if not isinstance(m, nn.Embedding) for p in m.parameters(recurse=False))
    pairs = [[4 + i % 7, 5 + i % 3] for i in range(30)]

    def heavy(doc: list[int]) -> int:
        return 1_000 * len(doc)  # 2,000 a pair

    monkeypatch.setattr(report, "REPORT_WORK", 10_000)  # a pass of the words gets 10,000 / REPORT_DOCUMENTS = 50
    assert report.word_documents(pairs, "grad_input", passes=120, work=heavy) == pairs[:3]  # 6,000: the exact value
    assert report.word_documents(pairs, "grad_input", passes=119, work=heavy) == pairs[:2]
    assert report.word_documents(pairs, "integrated_gradients", passes=120, work=heavy) == pairs[:1]  # one at least
    assert report.word_documents(pairs, "contributions", passes=1, work=heavy) == pairs
    long = [[4 + i % 7, 5 + i % 3] * 3 for i in range(60)]
    monkeypatch.setattr(report, "REPORT_WORK", 25 * 6 * weights)
    tokenizer = type("T", (), {"id_to_token": staticmethod(lambda i: f"w{i}")})()
    found = report.explanation_analysis(bert, tokenizer, ["a", "b"], long, long, documents=50)
    assert found is not None
    assert found["validation"]["n"] == found["test"]["n"] == 25


def test_the_reports_words_read_a_bounded_number_of_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    """The words per class: over every test document with contributions (one pass each); with integrated
    gradients (IG_STEPS passes a document) or another method, over the first ones WORD_PASSES allows."""
    from attnkit.attribution import report
    from attnkit.attribution.methods import IG_STEPS
    from attnkit.models.bert import BertConfig
    from attnkit.models.bert_classifier import BertClassifier, BertClassifierConfig

    docs = [[4 + i % 7, 5 + i % 3] for i in range(30)]
    assert report.word_documents(docs, "contributions", passes=40) == docs
    assert report.word_documents(docs, "integrated_gradients", passes=40) == docs[: 40 // IG_STEPS]
    assert report.word_documents(docs, "integrated_gradients", passes=IG_STEPS * 3 - 1) == docs[:2]
    assert report.word_documents(docs, "attention", passes=10) == docs[:10]
    assert report.word_documents(docs, "attention", passes=30) == docs  # the limit's exact value: all
    assert report.word_documents(docs, "grad_input", passes=0) == docs[:1]
    read: list[int] = []
    real = report.decisive_words
    monkeypatch.setattr(report, "decisive_words",
                        lambda model, documents, **kw: read.append(len(documents)) or real(model, documents, **kw))
    monkeypatch.setattr(report, "WORD_PASSES", IG_STEPS * 4)
    bert = BertClassifier(BertClassifierConfig.from_bert(
        BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                   max_position_embeddings=8), num_classes=2, cls_token_id=2, sep_token_id=3, max_len=6,
        ngram_rows=0)).eval()
    tokenizer = type("T", (), {"id_to_token": staticmethod(lambda i: f"w{i}")})()
    found = report.explanation_analysis(bert, tokenizer, ["a", "b"], docs[:3], docs)
    assert found is not None and found["words_method"] == found["shown_first"] != "contributions"
    assert read == [len(report.word_documents(docs, found["words_method"]))] and read[0] < len(docs)
    read.clear()
    report.explanation_analysis(_linear().eval(), tokenizer, ["a", "b"], docs[:3], docs)
    assert read == [len(docs)]  # contributions: every test document
