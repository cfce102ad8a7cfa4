"""The one corpus BLEU (train.metrics): multiple references, hand-computed values, one helper under three names."""

from __future__ import annotations

import math

import pytest

from attnkit.train.metrics import bleu_scores, corpus_bleu
from attnkit.train.tasks.caption import captioning
from attnkit.train.tasks.translate import translation


def test_every_reference_counts_not_only_the_first() -> None:
    refs = [["a blue square above the circle", "a red circle on the left"]]
    assert corpus_bleu(["a red circle on the left"], refs) == pytest.approx(100.0)
    assert corpus_bleu(["a blue square above the circle"], refs) == pytest.approx(100.0)


def test_hypotheses_may_have_different_numbers_of_references() -> None:
    hyps = ["a red circle on the left", "two green squares in a row", "the small blue triangle is here"]
    refs = [["a red circle on the left"],
            ["one yellow star", "a purple square", "two green squares in a row"],
            ["x y z", "the small blue triangle is here"]]
    assert corpus_bleu(hyps, refs) == pytest.approx(100.0)
    # A plain list of strings is one reference per hypothesis.
    assert corpus_bleu(hyps[:1], ["a red circle on the left"]) == pytest.approx(100.0)


def test_bleu_1_to_4_by_hand() -> None:
    # Tokens a b c d against a b c e: n-gram precisions 3/4, 2/3, 1/2, 0/1; equal lengths, so no brevity penalty.
    scores = bleu_scores(["a b c d"], [["a b c e"]])
    assert scores["bleu1"] == pytest.approx(75.0)
    assert scores["bleu2"] == pytest.approx(100 * math.sqrt(3 / 4 * 2 / 3))
    assert scores["bleu3"] == pytest.approx(100 * (3 / 4 * 2 / 3 * 1 / 2) ** (1 / 3))
    assert scores["bleu4"] == pytest.approx(corpus_bleu(["a b c d"], [["a b c e"]]))
    assert scores["bleu4"] < scores["bleu3"]
    assert corpus_bleu(["a b c d"], ["a b c e"], max_order=2) == pytest.approx(scores["bleu2"])


def test_brevity_penalty_uses_the_closest_reference_length() -> None:
    # 3 words against references of 6 and 4 words: r = 4 (closest), BP = exp(1 - 4/3).
    bleu1 = corpus_bleu(["a b c"], [["a b c x y z", "a b c d"]], max_order=1)
    assert bleu1 == pytest.approx(100 * math.exp(1 - 4 / 3))


def test_lowercase_and_errors() -> None:
    hyp, ref = ["A Red Circle on the Left"], ["a red circle on the left"]
    assert corpus_bleu(hyp, ref, lowercase=True) == pytest.approx(100.0)
    assert corpus_bleu(hyp, ref) < 50.0
    with pytest.raises(ValueError, match="equally long and not empty"):
        corpus_bleu(["a"], [])
    with pytest.raises(ValueError, match="equally long and not empty"):
        corpus_bleu([], [])
    with pytest.raises(ValueError, match=r"references\[0\] must be a string or a non-empty list"):
        corpus_bleu(["a"], [[]])
    with pytest.raises(TypeError, match="not a single str"):
        corpus_bleu("a red circle", ["a red circle"])
    with pytest.raises(ValueError, match="max_order must be a positive int"):
        corpus_bleu(["a"], ["a"], max_order=0)


def test_translation_and_captioning_use_the_same_helper() -> None:
    assert translation.corpus_bleu is corpus_bleu
    assert captioning.corpus_bleu is corpus_bleu
