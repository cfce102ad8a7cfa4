"""Tokenizers: special ids, the three kinds, train-split-only vocabularies, save/load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnkit.data.tokenization import (
    SPECIAL_TOKENS,
    encode_batch,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

TRAIN = ["The cat sat on the mat.", "A dog sat on a log!", "the cat and the dog"] * 3
HELD_OUT = ["zebra quokka"]


@pytest.mark.parametrize("kind", ["word", "wordpiece", "bpe"])
def test_special_ids_and_round_trip(kind: str, tmp_path: Path) -> None:
    tok = train_tokenizer(TRAIN, kind=kind, vocab_size=200)  # type: ignore[arg-type]
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    ids = encode_batch(tok, ["the cat sat", "THE DOG"], max_len=50)
    assert all(ids) and all(i > 4 for row in ids for i in row)
    # lowercase=True makes upper case text map onto trained pieces
    assert ids[1] == encode_batch(tok, ["the dog"], max_len=50)[0]
    path = tmp_path / "tokenizer.json"
    save_tokenizer(tok, path)
    assert json.loads(path.read_text())["model"]
    assert encode_batch(load_tokenizer(path), ["the cat sat", "THE DOG"], 50) == ids
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_vocabulary_comes_from_training_texts_only() -> None:
    tok = train_tokenizer(TRAIN, kind="word")
    vocab = tok.get_vocab()
    assert "cat" in vocab and "zebra" not in vocab and "quokka" not in vocab
    assert encode_batch(tok, HELD_OUT, 10) == [[1, 1]]  # both words are [UNK]


def test_wordpiece_splits_unseen_words_into_pieces() -> None:
    tok = train_tokenizer(["cats", "dogs", "catdog", "dogcat"] * 5, kind="wordpiece", vocab_size=60)
    pieces = tok.encode("catsdog", add_special_tokens=False).tokens
    assert len(pieces) > 1 and "[UNK]" not in pieces and pieces[1].startswith("##")


def test_min_frequency_vocab_size_and_case() -> None:
    tok = train_tokenizer(["common common rare"], kind="word", min_frequency=2)
    assert "common" in tok.get_vocab() and "rare" not in tok.get_vocab()
    small = train_tokenizer(TRAIN, kind="word", vocab_size=8)
    assert small.get_vocab_size() == 8
    cased = train_tokenizer(["Cat cat"], kind="word", lowercase=False)
    assert cased.token_to_id("Cat") != cased.token_to_id("cat")


def test_truncation_and_empty_text() -> None:
    tok = train_tokenizer(TRAIN, kind="word")
    ids = encode_batch(tok, ["the cat sat on the mat", ""], max_len=3)
    assert len(ids[0]) == 3 and ids[1] == []


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"kind must be one of \['word', 'wordpiece', 'bpe'\], got 'char'"):
        train_tokenizer(TRAIN, kind="char")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vocab_size must be at least 5"):
        train_tokenizer(TRAIN, vocab_size=3)
    with pytest.raises(ValueError, match="non-empty iterable of strings"):
        train_tokenizer([])
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        encode_batch(train_tokenizer(TRAIN), ["a"], 0)
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        load_tokenizer(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        load_tokenizer(bad)
