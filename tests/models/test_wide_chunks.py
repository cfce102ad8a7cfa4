"""The wide model reads a document longer than its chunk length in overlapping chunks pooled by attention."""

from __future__ import annotations

import pytest
import torch

from attnkit.models import build_model
from attnkit.models.config import reading_length
from attnkit.models.wide import WideDeepClassifier, chunk_counts, chunked_documents

V = 40


def _model(**extra: object) -> WideDeepClassifier:
    torch.manual_seed(0)
    config = {"vocab_size": V, "num_classes": 3, "embed_dim": 8, "attention_dim": 4, "hidden_size": 4,
              "ngram_rows": 16, "dropout": 0.0, "word_dropout": 0.0, "chunk_len": 8, "max_chunks": 4, **extra}
    model = build_model("wide", config)
    assert isinstance(model, WideDeepClassifier)
    return model.eval()


def test_the_chunk_count_and_the_span_read() -> None:
    config = _model().config
    assert config.chunk_stride == 6 and config.reading_length(8) == 8 + 3 * 6  # a quarter of 8 read twice
    counts = chunk_counts(torch.tensor([1, 8, 9, 14, 15, 100]), 8, 6, 4)
    assert counts.tolist() == [1, 1, 2, 2, 3, 4]  # 1 + ceil((T - 8) / 6), at most 4
    assert reading_length(config, 8) == 26 and reading_length(_model(chunk_len=0), 8) == 8
    assert chunked_documents(config, [3, 8, 9, 30]) == 2 and chunked_documents(_model(chunk_len=0), [30]) is None
    with pytest.raises(ValueError, match="chunk_overlap"):
        _model(chunk_overlap=1.0)


@pytest.mark.parametrize("encoder", ["none", "lstm"])
def test_padding_chunks_get_no_weight_and_a_document_does_not_depend_on_its_batch(encoder: str) -> None:
    model = _model(encoder=encoder)
    torch.manual_seed(1)
    ids = torch.randint(2, V, (3, 26))
    lengths = torch.tensor([26, 5, 13])  # 4 chunks, 1 (three padding chunks beside the long one), 2
    with torch.no_grad():
        logits, weights = model(ids, lengths, return_weights="pooling")
        pooling = weights["pooling"]  # (B, T)
        torch.testing.assert_close(pooling.sum(-1), torch.ones(3))
        for b, n in enumerate(lengths.tolist()):
            assert pooling[b, n:].abs().sum() == 0  # nothing on padding tokens or padding chunks
            alone = model(ids[b:b + 1, :n], lengths[b:b + 1])
            torch.testing.assert_close(alone, logits[b:b + 1], atol=1e-5, rtol=1e-5)
        # the short document in the batch is the document read whole, with no chunk pooling at all
        whole = _model(encoder=encoder, chunk_len=0)
        whole.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("chunk_pooling")})
        torch.testing.assert_close(whole(ids[1:2, :5], lengths[1:2]), logits[1:2], atol=1e-5, rtol=1e-5)


def test_the_chunk_weights_decide_and_the_tokens_past_the_span_are_not_read() -> None:
    model = _model()
    ids = torch.randint(2, V, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(ids, torch.tensor([30]))
        changed = ids.clone()
        changed[0, 20] = 1  # inside the fourth chunk: changes the answer
        assert not torch.allclose(model(changed, torch.tensor([30])), logits)
        past = ids.clone()
        past[0, 26:] = 1  # past 8 + 3 * 6 tokens: the network never reads them (the n-gram half is unfitted)
        torch.testing.assert_close(model(past, torch.tensor([30])), logits)
        assert model.chunk_pooling is not None
        model.chunk_pooling.score.weight.mul_(0)  # equal chunk weights: the deep half averages the chunk vectors
        _, w = model(ids[:, :14], torch.tensor([14]), return_weights="pooling")
    assert float(w["pooling"][0, 6:8].sum()) > float(w["pooling"][0, 8:10].sum()) * 1.5  # tokens 6, 7 read twice


@pytest.mark.parametrize("encoder", ["none", "lstm"])
def test_token_contributions_stay_exact_over_overlapping_chunks(encoder: str) -> None:
    model = _model(encoder=encoder)
    model.init_from_training_data([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14]], [1])
    ids = torch.randint(2, V, (2, 22), generator=torch.Generator().manual_seed(3))
    lengths = torch.tensor([22, 7])
    per, bias = model.token_contributions(ids, lengths)
    with torch.no_grad():
        logits = model(ids, lengths)
    torch.testing.assert_close(per.sum(1) + bias, logits, atol=1e-4, rtol=1e-4)
    assert per[1, 7:].abs().sum() == 0


def test_a_saved_config_without_chunk_fields_reads_documents_whole() -> None:
    saved = {"vocab_size": V, "num_classes": 2, "ngram_rows": 16}
    old = build_model("wide", saved)
    assert isinstance(old, WideDeepClassifier)
    assert old.config.chunk_len == 0 and old.chunk_pooling is None
    assert not any(k.startswith("chunk_pooling") for k in old.state_dict())


def test_every_explanation_method_scores_the_tokens_of_a_chunked_document() -> None:
    from attnkit.attribution.methods import applicable_methods, attribute

    model = _model()
    ids = torch.randint(2, V, (2, 22), generator=torch.Generator().manual_seed(4))
    lengths = torch.tensor([22, 7])
    methods = applicable_methods(model)
    assert {"contributions", "attention_norm", "grad_input"} <= set(methods)
    for method in methods:
        scores = attribute(model, ids, lengths, method, steps=4)
        assert scores.shape == (2, 22) and scores[1, 7:].abs().sum() == 0, method
        assert scores[0, 8:].abs().sum() > 0, method  # the tokens past the first chunk are scored too
