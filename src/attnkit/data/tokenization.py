"""Train, save and load tokenizers (HuggingFace ``tokenizers``), and encode batches.

Three kinds, all with the same special tokens at fixed ids::

    [PAD]=0  [UNK]=1  [CLS]=2  [SEP]=3  [MASK]=4

* ``"word"`` -- whole words (WordLevel); a word never seen in training is ``[UNK]``.
* ``"wordpiece"`` -- BERT's sub-words (Schuster & Nakajima, 2012; Wu et al., 2016):
  unseen words split into known pieces (``"un", "##seen"``).
* ``"bpe"`` -- byte-pair encoding (Sennrich et al., 2016).

Text is NFKC-normalised (and lower-cased by default), then split on white
space and punctuation before the model runs. Any Python ``str`` is accepted:
a lone surrogate (``"\\ud800"``, which JSON escapes and undecodable bytes of a
command-line argument produce, and which is no character UTF-8 can hold) is
read as U+FFFD, the replacement character (:func:`tokenizable`). Train on the **training split
only**: a vocabulary built from validation or test text leaks them into the model.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

__all__ = [
    "SPECIAL_TOKENS",
    "PAD_ID",
    "UNK_ID",
    "TOKENIZER_KINDS",
    "train_tokenizer",
    "save_tokenizer",
    "load_tokenizer",
    "encode_batch",
    "tokenizable",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""The special tokens of every trained tokenizer, with ids 0 to 4 in this order."""
PAD_ID = 0
UNK_ID = 1
TOKENIZER_KINDS = ("word", "wordpiece", "bpe")
TokenizerKind = Literal["word", "wordpiece", "bpe"]


_SURROGATE = re.compile("[\ud800-\udfff]")


def tokenizable(texts: Iterable[str]) -> list[str]:
    """``texts`` as the tokenizer library takes them: each lone surrogate (U+D800 to U+DFFF, no character
    of its own, which UTF-8 cannot encode) becomes U+FFFD, the replacement character; other text is
    returned as it is. Every text enters tokenization through here."""
    return [_SURROGATE.sub("\ufffd", t) if isinstance(t, str) and _SURROGATE.search(t) else t for t in texts]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def train_tokenizer(
    texts: Iterable[str],
    *,
    kind: TokenizerKind = "word",
    vocab_size: int = 20000,
    min_frequency: int = 1,
    lowercase: bool = True,
) -> Tokenizer:
    """Train a tokenizer of ``kind`` on ``texts`` (the training split only).

    Args:
        texts: training documents.
        kind: ``"word"``, ``"wordpiece"`` or ``"bpe"``.
        vocab_size: the most entries, special tokens included.
        min_frequency: a word (or merge) seen fewer times is left out.
        lowercase: lower-case before splitting.

    Returns:
        a ``tokenizers.Tokenizer`` with ``[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4``.
    """
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"kind must be one of {list(TOKENIZER_KINDS)}, got {kind!r}")
    _positive_int("vocab_size", vocab_size)
    _positive_int("min_frequency", min_frequency)
    if vocab_size < len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS)}, got {vocab_size}")
    texts = list(texts)
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a non-empty iterable of strings")

    specials = list(SPECIAL_TOKENS)
    trainer: trainers.Trainer
    if kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
        trainer = trainers.WordLevelTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            show_progress=False,
        )
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            show_progress=False,
        )
        tok.decoder = decoders.WordPiece()
    else:
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
            show_progress=False,
        )
    steps: list[normalizers.Normalizer] = [normalizers.NFKC()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(tokenizable(texts), trainer=trainer)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == i, f"{token} must have id {i}"
    return tok


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike[str]) -> None:
    """Write ``tokenizer`` as JSON to ``path`` atomically (temporary file, then rename)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        tokenizer.save(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a ``tokenizer.json`` and check that ``[PAD]`` is 0 and ``[UNK]`` is 1."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: no tokenizer file {str(p)!r}")
    try:
        tok = Tokenizer.from_file(str(p))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise ValueError(f"path: {str(p)!r} is not a valid tokenizer.json ({exc})") from None
    for i, token in enumerate(SPECIAL_TOKENS[:2]):
        if tok.token_to_id(token) != i:
            raise ValueError(
                f"path: {str(p)!r} maps {token} to {tok.token_to_id(token)}, expected {i}"
            )
    return tok


def encode_batch(tokenizer: Tokenizer, texts: Sequence[str], max_len: int) -> list[list[int]]:
    """Token ids of each text, truncated to ``max_len``, not padded, no special tokens added.

    A text with no token (empty, or only characters the normaliser removes)
    gives an empty list; :class:`attnkit.data.batching.TextClassificationDataset`
    turns it into a single ``[UNK]`` so that every document has a length >= 1.
    A lone surrogate is read as U+FFFD (:func:`tokenizable`).
    """
    _positive_int("max_len", max_len)
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single str")
    encodings = tokenizer.encode_batch(tokenizable(texts), add_special_tokens=False)
    return [list(e.ids[:max_len]) for e in encodings]
