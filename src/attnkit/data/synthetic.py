"""A generated keyword corpus: the label is decided by a few key words in neutral filler.

Each document is ``length`` words drawn from a neutral filler vocabulary, with
one to three **key words** of its class put at random positions. No filler word
is a key word and no document holds a key word of another class, so the label
is a function of the key words alone, and a classifier that attends well puts
its pooling weight on exactly the positions in ``key_positions``. That makes
the corpus a check on attention, not only on accuracy: ``attnkit demo`` trains
on it and measures how much attention lands on the key words.

Two classes are sentiment (``negative``/``positive``); three to eight classes
are topics (``sports``, ``music``, ...).

:func:`topic_corpus` is the same idea at scale, for memory and many-class
evaluations: long documents (hundreds to thousands of words) of generated
common words, any number of classes, each marked by a few of its own topic
words, some of them borrowed from the neighbouring class so that the classes
overlap as real topics do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KeywordExample", "keyword_corpus", "FILLER_WORDS", "class_keywords", "topic_corpus",
           "generated_words"]

FILLER_WORDS = (
    "the a an this that it they we one some movie film story plot scene actor "
    "director cast script picture screen time day night year people place thing way "
    "part moment show series character scenes minutes hour week city house room road "
    "is was has had does did goes went makes made takes took seems looks feels comes "
    "and or but then also still just only again almost rather quite very about around "
    "through after before during with without under over into onto from between"
).split()

_SENTIMENT = {
    "negative": ("awful", "terrible", "boring", "dreadful", "dull", "worst"),
    "positive": ("excellent", "wonderful", "brilliant", "superb", "delightful", "best"),
}
_TOPICS = {
    "sports": ("football", "goal", "referee", "tennis", "stadium"),
    "music": ("guitar", "melody", "concert", "drummer", "album"),
    "food": ("pasta", "recipe", "chef", "dessert", "spices"),
    "travel": ("airport", "passport", "luggage", "hotel", "itinerary"),
    "science": ("molecule", "experiment", "telescope", "physics", "laboratory"),
    "weather": ("rain", "thunder", "forecast", "snowfall", "humidity"),
    "finance": ("stocks", "dividend", "inflation", "banker", "mortgage"),
    "health": ("doctor", "vaccine", "diagnosis", "hospital", "symptoms"),
}
MAX_CLASSES = len(_TOPICS)


@dataclass(frozen=True)
class KeywordExample:
    """A generated document; ``key_positions`` are the word indices (in ``text.split()``)
    of the key words that decide ``label``."""

    text: str
    label: str
    key_positions: tuple[int, ...]


def class_keywords(num_classes: int) -> dict[str, tuple[str, ...]]:
    """The label names and their key words for a corpus of ``num_classes`` classes."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not (
        2 <= num_classes <= MAX_CLASSES
    ):
        raise ValueError(f"num_classes must be an int in [2, {MAX_CLASSES}], got {num_classes!r}")
    if num_classes == 2:
        return dict(_SENTIMENT)
    return dict(list(_TOPICS.items())[:num_classes])


def keyword_corpus(
    n: int, *, seed: int = 0, num_classes: int = 2, length: tuple[int, int] = (20, 40),
    max_keywords: int = 3,
) -> list[KeywordExample]:
    """``n`` documents of ``length[0]..length[1]`` words (inclusive), classes balanced.

    Args:
        n: number of documents.
        seed: the same seed gives the same corpus.
        num_classes: 2 (sentiment) to 8 (topics).
        length: inclusive range of document lengths in words.
        max_keywords: each document holds 1..max_keywords key words of its class.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    keywords = class_keywords(num_classes)
    lo, hi = length
    if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
        raise ValueError(f"length must be (min, max) ints with 1 <= min <= max, got {length!r}")
    if not 1 <= max_keywords <= lo:
        raise ValueError(f"max_keywords must be in [1, min length={lo}], got {max_keywords}")
    rng = np.random.default_rng(seed)
    names = list(keywords)
    labels = rng.permutation(np.arange(n) % num_classes)
    out = []
    for label_id in labels.tolist():
        label = names[label_id]
        size = int(rng.integers(lo, hi + 1))
        words = [FILLER_WORDS[i] for i in rng.integers(0, len(FILLER_WORDS), size)]
        count = int(rng.integers(1, max_keywords + 1))
        positions = sorted(rng.choice(size, size=count, replace=False).tolist())
        for p in positions:
            words[p] = keywords[label][int(rng.integers(len(keywords[label])))]
        out.append(KeywordExample(" ".join(words), label, tuple(positions)))
    return out


_ONSETS = ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")


def generated_words(n: int, *, syllables: int = 3, offset: int = 0) -> list[str]:
    """``n`` distinct made-up words of ``syllables`` consonant-vowel syllables (``bakosu``...), the same
    for the same arguments; ``offset`` skips the first words (disjoint lists from one numbering)."""
    base = len(_ONSETS) * len(_VOWELS)
    if n < 0 or offset < 0 or n + offset > base**syllables:
        raise ValueError(f"need 0 <= n + offset <= {base**syllables} words of {syllables} syllables, got n={n}, "
                         f"offset={offset}")
    out = []
    for i in range(offset, offset + n):
        parts = []
        for _ in range(syllables):
            i, k = divmod(i, base)
            parts.append(_ONSETS[k % len(_ONSETS)] + _VOWELS[k // len(_ONSETS)])
        out.append("".join(parts))
    return out


def topic_corpus(n: int, *, num_classes: int = 50, seed: int = 0, length: tuple[int, int] = (300, 1500),
                 common: int = 3000, topic_words: int = 40, keywords: tuple[int, int] = (3, 8),
                 borrowed: float = 0.2) -> list[KeywordExample]:
    """``n`` long documents in ``num_classes`` balanced classes: common words, a few topic words.

    Each document is ``length[0]..length[1]`` words drawn from ``common`` made-up common words
    (:func:`generated_words`, Zipf-distributed as a language's are), with ``keywords[0]..keywords[1]``
    topic words at random positions: each from its own class's ``topic_words`` words, or, with
    probability ``borrowed``, from the neighbouring class's (class ``c + 1``, cyclically). Labels are
    ``topic0``... The corpus of issue 42 is ``topic_corpus(5000)``; ``key_positions`` holds the
    positions of all topic words.
    """
    lo, hi = length
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not (isinstance(num_classes, int) and num_classes >= 2):
        raise ValueError(f"num_classes must be an int of at least 2, got {num_classes!r}")
    if not (1 <= keywords[0] <= keywords[1] <= lo <= hi):
        raise ValueError(f"need 1 <= keywords[0] <= keywords[1] <= length[0] <= length[1], got keywords="
                         f"{keywords!r}, length={length!r}")
    if not 0.0 <= borrowed <= 1.0:
        raise ValueError(f"borrowed must be in [0, 1], got {borrowed!r}")
    words = np.array(generated_words(common + num_classes * topic_words))
    rank = np.arange(1, common + 1, dtype=np.float64)
    zipf = (1.0 / rank) / (1.0 / rank).sum()
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % num_classes)
    out = []
    for label in labels.tolist():
        size = int(rng.integers(lo, hi + 1))
        doc = words[rng.choice(common, size=size, p=zipf)]
        count = int(rng.integers(keywords[0], keywords[1] + 1))
        positions = np.sort(rng.choice(size, size=count, replace=False))
        owner = np.where(rng.random(count) < borrowed, (label + 1) % num_classes, label)
        doc[positions] = words[common + owner * topic_words + rng.integers(0, topic_words, count)]
        out.append(KeywordExample(" ".join(doc.tolist()), f"topic{label}", tuple(positions.tolist())))
    return out
