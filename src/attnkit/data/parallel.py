"""Parallel corpora for translation: line-aligned files, subword tokenizers, padded batches.

A parallel corpus is two text files (plain or gzipped UTF-8) where line ``i``
of the target file translates line ``i`` of the source file, as Multi30k's
``train.de.gz`` / ``train.en.gz``. Lines are split on ``"\\n"`` only (never on
the other characters ``str.splitlines`` treats as line breaks), so the two
sides cannot drift apart.

Subwords are byte-pair encoding (Sennrich et al., 2016) from the Hugging Face
``tokenizers`` library, with SentencePiece-style word boundaries: every word
starts with ``"▁"``, so decoding restores the spaces exactly and detokenised
output can be scored by sacreBLEU against raw references. One joint
vocabulary for both languages (``shared=True``, which lets the model tie all
embeddings) or one per side. Train them on the **training split only**.

Special tokens, the same ids in every vocabulary::

    [PAD]=0  [UNK]=1  [BOS]=2  [EOS]=3

A training example is ``src = x``, ``tgt_in = [BOS] y``, ``tgt_out = y [EOS]``.
"""

from __future__ import annotations

import gzip
import os
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from torch import Tensor

from attnkit.data.tokenization import tokenizable

__all__ = [
    "PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "SPECIAL_TOKENS",
    "ParallelCorpus", "read_lines", "read_parallel", "token_groups",
    "TranslationTokenizers", "train_subword_tokenizer", "train_translation_tokenizers",
    "TranslationBatch", "encode_pairs", "collate_pairs", "batches_by_tokens",
]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]", "[EOS]")
"""The special tokens of translation tokenizers, in id order."""
PAD_ID = 0
"""Padding id."""
UNK_ID = 1
"""Id of subwords outside the vocabulary."""
BOS_ID = 2
"""Start-of-sentence id, the decoder's first input."""
EOS_ID = 3
"""End-of-sentence id: decoding stops after it."""


# --- reading -------------------------------------------------------------------------------------


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """The lines of a UTF-8 text file, gzipped when its name ends in ``.gz``.

    Splits on ``"\\n"`` only, drops a trailing ``"\\r"`` and the empty string after
    a final newline, and strips a UTF-8 byte-order mark.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: no such file {str(p)!r}")
    raw = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"path: {str(p)!r} is not UTF-8 ({err})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


@dataclass(frozen=True)
class ParallelCorpus:
    """Aligned sentence pairs; ``sources[i]`` translates to ``targets[i]``.

    ``dropped`` counts the line pairs left out because a side was blank.
    """

    sources: list[str]
    targets: list[str]
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.sources)


def read_parallel(
    src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str], *, limit: int | None = None,
) -> ParallelCorpus:
    """Read two line-aligned files (plain or ``.gz``) into a :class:`ParallelCorpus`.

    Raises ValueError when the files have different numbers of lines (they
    would be misaligned) or hold no pair with both sides non-blank. Pairs with
    a blank side are dropped and counted. ``limit`` keeps the first pairs only.
    """
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"line counts differ: {str(src_path)!r} has {len(sources)} lines, {str(tgt_path)!r} has "
            f"{len(targets)}; a parallel corpus needs line i of one to translate line i of the other"
        )
    pairs = [(s.strip(), t.strip()) for s, t in zip(sources, targets, strict=True)]
    nonblank = [(s, t) for s, t in pairs if s and t]
    kept = nonblank
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        kept = nonblank[:limit]
    if not kept:
        raise ValueError(f"{str(src_path)!r} and {str(tgt_path)!r} hold no sentence pair with both sides non-blank")
    return ParallelCorpus([s for s, _ in kept], [t for _, t in kept], dropped=len(pairs) - len(nonblank))


# --- tokenizers ----------------------------------------------------------------------------------


def train_subword_tokenizer(texts: Sequence[str], *, vocab_size: int = 8000, lowercase: bool = False,
                            min_frequency: int = 2) -> Tokenizer:
    """Train a BPE tokenizer with ``"▁"`` word boundaries on ``texts`` (training split only).

    Returns a ``tokenizers.Tokenizer`` with ``[PAD]=0, [UNK]=1, [BOS]=2, [EOS]=3``
    whose ``decode`` restores the original spacing.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be an int > {len(SPECIAL_TOKENS)}, got {vocab_size!r}")
    if isinstance(texts, str) or not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("texts must be a non-empty sequence of strings")
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    steps: list[normalizers.Normalizer] = [normalizers.NFKC()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tok.train_from_iterator(tokenizable(texts), trainer=trainer)
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == i, f"{token} must have id {i}"
    return tok


@dataclass(frozen=True)
class TranslationTokenizers:
    """Source and target tokenizers; the same object when the vocabulary is shared."""

    source: Tokenizer
    target: Tokenizer

    @property
    def shared(self) -> bool:
        return self.source is self.target

    def encode_source(self, texts: Sequence[str], max_len: int) -> list[list[int]]:
        """Source ids per text, truncated to ``max_len`` (no special tokens)."""
        return [e.ids[:max_len] for e in self.source.encode_batch(tokenizable(texts), add_special_tokens=False)]

    def decode_target(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenised target texts (special tokens skipped)."""
        return [self.target.decode(list(seq), skip_special_tokens=True) for seq in ids]


def train_translation_tokenizers(corpus: ParallelCorpus, *, vocab_size: int = 8000, shared: bool = True,
                                 lowercase: bool = False) -> TranslationTokenizers:
    """Train the tokenizers of a translation model on the training ``corpus``.

    ``shared=True`` trains one joint vocabulary of ``vocab_size`` on both
    sides; otherwise each side gets its own vocabulary of ``vocab_size``.
    """
    if shared:
        joint = train_subword_tokenizer(corpus.sources + corpus.targets, vocab_size=vocab_size,
                                        lowercase=lowercase)
        return TranslationTokenizers(joint, joint)
    return TranslationTokenizers(
        train_subword_tokenizer(corpus.sources, vocab_size=vocab_size, lowercase=lowercase),
        train_subword_tokenizer(corpus.targets, vocab_size=vocab_size, lowercase=lowercase),
    )


# --- batches -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslationBatch:
    """A padded batch.

    Shape:
        src ``(B, Ts)``, src_lengths ``(B,)``, tgt_in ``(B, Tt)`` (``[BOS] y``),
        tgt_out ``(B, Tt)`` (``y [EOS]``); padding is ``PAD_ID``.
    """

    src: Tensor
    src_lengths: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    @property
    def num_target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())


def encode_pairs(tokenizers: TranslationTokenizers, corpus: ParallelCorpus, *,
                 max_len: int = 128) -> list[tuple[list[int], list[int]]]:
    """Token ids of every pair, each side truncated to ``max_len`` tokens (``[EOS]`` not counted).

    Pairs whose source or target encodes to nothing are dropped.
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    src = tokenizers.encode_source(corpus.sources, max_len)
    targets = tokenizers.target.encode_batch(tokenizable(corpus.targets), add_special_tokens=False)
    tgt = [e.ids[:max_len] for e in targets]
    return [(s, t) for s, t in zip(src, tgt, strict=True) if s and t]


def collate_pairs(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> TranslationBatch:
    """Pad a list of ``(source ids, target ids)`` into a :class:`TranslationBatch`."""
    if not pairs:
        raise ValueError("pairs must hold at least one (source, target) pair")
    b = len(pairs)
    ts = max(len(s) for s, _ in pairs)
    tt = max(len(t) for _, t in pairs) + 1
    if min(len(s) for s, _ in pairs) < 1:
        raise ValueError("every source must have at least one token")
    src = torch.full((b, ts), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((b, tt), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((b, tt), PAD_ID, dtype=torch.long)
    for i, (s, t) in enumerate(pairs):
        src[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
        tgt_in[i, : len(t) + 1] = torch.tensor([BOS_ID, *t], dtype=torch.long)
        tgt_out[i, : len(t) + 1] = torch.tensor([*t, EOS_ID], dtype=torch.long)
    lengths = torch.tensor([len(s) for s, _ in pairs], dtype=torch.long)
    return TranslationBatch(src, lengths, tgt_in, tgt_out)


def batches_by_tokens(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, *,
                      shuffle: bool = True, seed: int = 0) -> Iterator[TranslationBatch]:
    """Batches of pairs of similar length, each holding at most ``max_tokens`` padded tokens per side.

    Pairs are sorted by length (so little padding is wasted), cut into
    batches, and the batch order is shuffled with ``seed`` when ``shuffle``
    (:func:`token_groups`).
    """
    for group in token_groups(pairs, max_tokens, shuffle=shuffle, seed=seed):
        yield collate_pairs([pairs[i] for i in group])


def token_groups(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int, *,
                 shuffle: bool = True, seed: int = 0) -> list[list[int]]:
    """The indices into ``pairs`` of each of :func:`batches_by_tokens`' batches, in its order."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    if shuffle:
        rng.shuffle(order)  # ties in length end up in random order
    order.sort(key=lambda i: (len(pairs[i][1]), len(pairs[i][0])))
    groups: list[list[int]] = []
    current: list[int] = []
    width = 0
    for i in order:
        w = max(len(pairs[i][0]), len(pairs[i][1]) + 1)
        if current and max(width, w) * (len(current) + 1) > max_tokens:
            groups.append(current)
            current, width = [], 0
        current.append(i)
        width = max(width, w)
    if current:
        groups.append(current)
    if shuffle:
        rng.shuffle(groups)
    return groups
