"""Labels, dataset, collation and length bucketing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import DataLoader

from attnkit.data.batching import (
    LabelVocab,
    TextClassificationDataset,
    bucket_batches,
    collate,
    padding_fraction,
)
from attnkit.data.readers import Example
from attnkit.data.tokenization import train_tokenizer

EXAMPLES = [
    Example("a fine film", "pos"),
    Example("dull", "neg"),
    Example("", "neg"),
    Example("a very very long and fine film indeed", "pos"),
]


def test_label_vocab_round_trip(tmp_path: Path) -> None:
    vocab = LabelVocab.from_examples(EXAMPLES)
    assert vocab.labels == ("neg", "pos") and len(vocab) == 2
    assert [vocab.encode(x) for x in ("neg", "pos")] == [0, 1] and vocab.decode(1) == "pos"
    path = tmp_path / "labels.json"
    vocab.save(path)
    assert LabelVocab.load(path) == vocab
    assert LabelVocab.from_dict(vocab.to_dict()) == vocab
    assert LabelVocab(["z", "a"]).encode("z") == 0  # explicit order is kept
    with pytest.raises(ValueError, match=r"label 'meh' is not one of \['neg', 'pos'\]"):
        vocab.encode("meh")
    with pytest.raises(ValueError, match="distinct"):
        LabelVocab(["a", "a"])
    with pytest.raises(ValueError, match="index must be in"):
        vocab.decode(2)


def test_dataset_and_collate() -> None:
    tok = train_tokenizer([e.text for e in EXAMPLES], kind="word")
    vocab = LabelVocab.from_examples(EXAMPLES)
    ds = TextClassificationDataset(EXAMPLES, tok, vocab, max_len=5)
    assert len(ds) == 4 and ds.lengths == [3, 1, 1, 5]  # empty -> [UNK], long -> truncated
    assert ds[2]["ids"].tolist() == [1]
    batch = next(iter(DataLoader(ds, batch_size=4, collate_fn=collate)))
    assert batch["ids"].shape == (4, 5) and batch["ids"].dtype.is_floating_point is False
    assert batch["lengths"].tolist() == [3, 1, 1, 5]
    assert batch["labels"].tolist() == [1, 0, 0, 1]
    for row, length in zip(batch["ids"], batch["lengths"], strict=True):
        assert (row[length:] == 0).all() and (row[:length] != 0).all()
    with pytest.raises(ValueError, match="empty"):
        collate([])


def test_bucketing_covers_and_keeps_padding_low() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 400, size=2000).tolist()
    batches = bucket_batches(lengths, 32, shuffle=True, seed=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(2000)) and max(len(b) for b in batches) == 32
    random_batches = [list(range(i, min(i + 32, 2000))) for i in range(0, 2000, 32)]
    bucketed, unbucketed = padding_fraction(lengths, batches), padding_fraction(lengths, random_batches)
    assert bucketed < 0.05 < 0.3 < unbucketed
    assert batches == bucket_batches(lengths, 32, shuffle=True, seed=0)
    assert batches != bucket_batches(lengths, 32, shuffle=True, seed=1)
    ordered = bucket_batches(lengths, 32, shuffle=False)
    assert [lengths[i] for b in ordered for i in b] == sorted(lengths)
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        bucket_batches(lengths, 0)


def test_texts_are_encoded_in_slices_bounded_in_texts_and_characters(monkeypatch) -> None:
    import attnkit.data.batching as batching

    texts = [" ".join(["word"] * n) for n in (3, 40, 2, 60, 1, 1, 1, 30)]
    tok = train_tokenizer(texts, kind="word")
    labels = batching.LabelVocab(["a"])
    whole = batching.TextClassificationDataset([Example(t, "a") for t in texts], tok, labels, max_len=100)
    handed: list[list[str]] = []
    real = batching.encode_batch
    monkeypatch.setattr(batching, "encode_batch", lambda tk, xs, n: handed.append(list(xs)) or real(tk, xs, n))
    monkeypatch.setattr(batching, "ENCODE_CHARS", 200)
    monkeypatch.setattr(batching, "ENCODE_CHUNK", 3)
    sliced = batching.TextClassificationDataset([Example(t, "a") for t in texts], tok, labels, max_len=100)
    assert [t for part in handed for t in part] == texts and len(handed) > 3
    assert all(len(part) <= 3 and (len(part) == 1 or sum(map(len, part)) <= 200) for part in handed), handed
    assert [list(x) for x in sliced.ids] == [list(x) for x in whole.ids]
