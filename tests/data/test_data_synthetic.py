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


def test_topic_corpus_is_long_balanced_and_marked_by_each_class_s_topic_words() -> None:
    from attnkit.data.synthetic import generated_words, topic_corpus

    docs = topic_corpus(200, num_classes=50, seed=3, length=(300, 400), keywords=(3, 8))
    assert docs == topic_corpus(200, num_classes=50, seed=3, length=(300, 400), keywords=(3, 8))
    assert sorted({d.label for d in docs}) == sorted(f"topic{c}" for c in range(50))
    assert all(sum(d.label == f"topic{c}" for d in docs) == 4 for c in range(50))
    words = generated_words(3000 + 50 * 40)
    assert len(set(words)) == len(words)
    topic = {w: i // 40 for i, w in enumerate(words[3000:])}
    own = borrowed = 0
    for d in docs:
        tokens = d.text.split()
        assert 300 <= len(tokens) <= 400 and 3 <= len(d.key_positions) <= 8
        c = int(d.label.removeprefix("topic"))
        assert {i for i, t in enumerate(tokens) if t in topic} == set(d.key_positions)
        owners = [topic[tokens[i]] for i in d.key_positions]
        assert set(owners) <= {c, (c + 1) % 50}
        own += owners.count(c)
        borrowed += len(owners) - owners.count(c)
    assert 0.1 < borrowed / (own + borrowed) < 0.3  # a fifth borrowed from the neighbouring class
