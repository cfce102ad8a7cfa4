"""Comprehensiveness and sufficiency equal ferret-xai's for the same attributions (the ``explain-parity`` extra).

ferret (Attanasio et al., 2023) re-tokenizes each perturbed text and takes
its bins as a fraction of the tokens; given attnkit's bins as top-k counts
per document (documents long enough that no two bins keep the same tokens,
which ferret would count once), both compute ERASER's AOPC (DeYoung et al.,
2020) of the same perturbed documents. ferret ranks only positive scores by
default and fails on ``only_pos=False`` with numpy 2 (it compares an array
with ``[]``), so the scores are shifted to be positive: the same order, so
the same bins.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnkit.attribution import HFClassifier, attribute, erasure_counts, faithfulness

ferret_measures = pytest.importorskip("ferret.evaluators.faithfulness_measures",
                                      reason="ferret-xai is not installed: pip install 'attnkit[explain-parity]'")
ferret_explanation = pytest.importorskip("ferret.explainers.explanation")
transformers = pytest.importorskip("transformers")

WORDS = [f"w{chr(97 + i // 26)}{chr(97 + i % 26)}" for i in range(60)]  # waa, wab, ...: one token each


def _tokenizer(tmp_path):  # type: ignore[no-untyped-def]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
    return transformers.BertTokenizer(str(vocab))  # transformers 5: the vocabulary file comes first


@pytest.mark.parametrize("method", ["grad_input", "attention"])
def test_comprehensiveness_and_sufficiency_equal_ferrets(tmp_path, method: str) -> None:  # type: ignore[no-untyped-def]
    tokenizer = _tokenizer(tmp_path)
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(WORDS) + 5, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, num_labels=2,
                                     initializer_range=0.5)  # large weights: a model whose output moves
    bert = transformers.BertForSequenceClassification._from_config(config, attn_implementation="sdpa").eval()
    model = HFClassifier(bert, tokenizer)
    generator = np.random.default_rng(0)
    docs = [generator.integers(5, len(WORDS) + 5, size=n).tolist() for n in (40, 47, 52, 61)]
    ours = faithfulness(model, docs, methods=[method])["methods"][method]

    comprehensiveness = ferret_measures.AOPC_Comprehensiveness_Evaluation(bert, tokenizer)
    sufficiency = ferret_measures.AOPC_Sufficiency_Evaluation(bert, tokenizer)
    theirs: dict[str, list[float]] = {"comprehensiveness": [], "sufficiency": []}
    for doc in docs:
        ids, lengths = torch.tensor([doc]), torch.tensor([len(doc)])
        target = int(model(ids, lengths).argmax())
        scores = attribute(model, ids, lengths, method, target=torch.tensor([target]))[0].numpy()
        text = tokenizer.decode(doc)
        assert tokenizer(text)["input_ids"] == [2, *doc, 3]  # the text reads back as the same tokens
        ranked = scores - scores.min() + 1.0  # the same order, all positive (see the module docstring)
        explanation = ferret_explanation.Explanation(
            text, tokenizer.convert_ids_to_tokens([2, *doc, 3]), np.r_[0.0, ranked, 0.0], method, target)
        counts = erasure_counts(len(doc))
        assert len(set(counts)) == len(counts)  # every bin keeps other tokens: ferret counts each once
        args = {"remove_first_last": True, "only_pos": True,
                "removal_args": {"remove_tokens": True, "based_on": "k", "thresholds": counts}}
        theirs["comprehensiveness"].append(comprehensiveness.compute_evaluation(explanation, target, **args).score)
        theirs["sufficiency"].append(sufficiency.compute_evaluation(explanation, target, **args).score)
    for measure, values in theirs.items():
        assert ours[measure] == pytest.approx(float(np.mean(values)), abs=1e-3), measure
    assert abs(ours["comprehensiveness"]) > 0.01  # the figures compared are not all zero
