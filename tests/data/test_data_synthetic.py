"""The keyword corpus: labels decided by key words at the stated positions."""

from __future__ import annotations

from collections import Counter

import pytest

from attnkit.data.synthetic import FILLER_WORDS, class_keywords, keyword_corpus


@pytest.mark.parametrize("num_classes", [2, 3, 8])
def test_key_words_decide_label_at_key_positions(num_classes: int) -> None:
    keywords = class_keywords(num_classes)
    owner = {w: label for label, words in keywords.items() for w in words}
    assert not set(owner) & set(FILLER_WORDS)
    corpus = keyword_corpus(300, seed=1, num_classes=num_classes, length=(10, 15))
    for ex in corpus:
        words = ex.text.split()
        assert 10 <= len(words) <= 15
        found = tuple(i for i, w in enumerate(words) if w in owner)
        assert found == ex.key_positions and 1 <= len(found) <= 3
        assert {owner[words[i]] for i in found} == {ex.label}
    counts = Counter(ex.label for ex in corpus)
    assert set(counts) == set(keywords) and max(counts.values()) - min(counts.values()) <= 1


def test_seeded() -> None:
    assert keyword_corpus(20, seed=3) == keyword_corpus(20, seed=3)
    assert keyword_corpus(20, seed=3) != keyword_corpus(20, seed=4)


def test_errors() -> None:
    with pytest.raises(ValueError, match=r"num_classes must be an int in \[2, 8\]"):
        keyword_corpus(5, num_classes=9)
    with pytest.raises(ValueError, match="length must be"):
        keyword_corpus(5, length=(10, 5))
