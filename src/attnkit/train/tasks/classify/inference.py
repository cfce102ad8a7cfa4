"""Using a trained classifier: predictions with their most attended tokens, and attention focus.

Every attnkit text classifier returns, on request, ``weights["pooling"]``: for
each document a distribution over its token positions (zero on padding) that
says how much each token contributed to the pooled document vector. The most
attended tokens are the ``k`` positions with the largest pooling weight;
the *attention focus* on a set of positions is the share of that weight they
hold (1.0 = all attention on them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from attnkit._progress import progress
from attnkit.data.batching import LabelVocab
from attnkit.data.readers import Example
from attnkit.data.tokenization import encode_batch
from attnkit.models.config import reading_length
from attnkit.models.wide import chunked_documents
from attnkit.train.loop.task import sorted_batches
from attnkit.train.tasks.classify.prediction import Prediction

__all__ = ["Prediction", "predict_texts", "pooling_weights", "attention_focus", "evaluate_examples",
           "ngram_text", "format_ngrams"]


def _batch(ids: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor]:
    lengths = torch.tensor([max(len(x), 1) for x in ids], dtype=torch.long)  # (B,)
    out = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)  # (B, T), [PAD] = 0
    for row, seq in enumerate(ids):
        out[row, : len(seq)] = torch.tensor(list(seq) or [1], dtype=torch.long)  # empty -> [UNK]
    return out, lengths


@torch.no_grad()
def pooling_weights(model: nn.Module, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Logits ``(B, C)`` and pooling weights ``(B, T)`` of ``model`` in eval mode.

    Only the pooling weights are asked for (``return_weights="pooling"``), so
    the layers below run on their fast path and compute no attention maps.
    Raises ValueError when the model's weights lack ``"pooling"`` (e.g. mean pooling).
    """
    model.eval()
    out = model(ids, lengths, return_weights="pooling")
    logits, weights = out
    if not isinstance(weights, dict) or "pooling" not in weights:
        raise ValueError("this model returns no 'pooling' attention weights (is its pooling 'mean'?)")
    return logits, weights["pooling"]


@torch.no_grad()
def predict_texts(model: nn.Module, tokenizer: object, labels: LabelVocab, texts: Sequence[str], *,
                  max_len: int, top_k: int = 0, batch_size: int = 64, method: str | None = None
                  ) -> list[Prediction]:
    """Classify ``texts``; with ``top_k > 0`` also explain each: its ``top_k`` most attended tokens and
    every token's score by ``method`` (default: :func:`attnkit.attribution.report.default_method`)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single str")
    model.eval()
    results: list[Prediction | None] = [None] * len(texts)
    for where, encoded in _same_length(tokenizer, texts, reading_length(model, max_len), batch_size, max_len):
        chunk = [texts[i] for i in where]
        ids, lengths = _batch(encoded)
        if top_k > 0:
            logits, weights = pooling_weights(model, ids, lengths)
        else:
            logits, weights = model(ids, lengths), None
        probs = logits.float().softmax(-1)  # (B, C)
        ngrams = _ngram_parts(model, ids, lengths, logits) if weights is not None else None
        explained = _explanations(model, tokenizer, ids, lengths, logits, method) if top_k > 0 else None
        for row, text in enumerate(chunk):
            best = int(probs[row].argmax())
            top: tuple[tuple[str, float], ...] = ()
            if weights is not None:
                n = int(lengths[row])
                w = weights[row, :n].float()
                order = torch.argsort(w, descending=True, stable=True)[:top_k].tolist()
                token = tokenizer.id_to_token  # type: ignore[attr-defined]
                top = tuple((str(token(int(ids[row, i]))), float(w[i])) for i in order)
            top_ngrams, halves = _ngram_explanation(model, tokenizer, ngrams, logits[row].float(), row, best, top_k)
            results[where[row]] = Prediction(
                text, labels.decode(best), float(probs[row, best]),
                {labels.decode(c): float(p) for c, p in enumerate(probs[row].tolist())}, top, top_ngrams, halves,
                explained[row] if explained is not None else {})
    return [r for r in results if r is not None]


def _same_length(tokenizer: object, texts: Sequence[str], read_len: int, batch_size: int, max_len: int
                 ) -> Iterator[tuple[list[int], list[list[int]]]]:
    """The positions of ``texts`` and their token ids in batches of equally long documents: at most
    ``batch_size`` texts and ``batch_size * max_len`` tokens a batch; a lone text runs beside a copy of
    itself unless two of that length pass the cap (then every text of that length runs alone).

    Padding and a batch of one are where a text's last digits most often depend on the texts classified
    with it; without them a small model's numbers are the same to the last digit in any batch (what a
    batching server relies on). Larger models can still differ in the last bit with the row a text takes
    in a batch (the CPU's matrix kernels), which no batching rule removes. Texts are encoded
    ``batch_size * 16`` at a time and grouped within that window."""
    window = batch_size * 16
    for start in range(0, len(texts), window):
        encoded = encode_batch(tokenizer, list(texts[start : start + window]), read_len)  # type: ignore[arg-type]
        groups: dict[int, list[int]] = {}
        for i, ids in enumerate(encoded):
            groups.setdefault(max(len(ids), 1), []).append(i)
        for length, members in sorted(groups.items()):
            rows = max(1, min(batch_size, batch_size * max_len // length))
            for first in range(0, len(members), rows):
                part = members[first : first + rows]
                docs = [encoded[i] for i in part]
                yield [start + i for i in part], docs if len(docs) > 1 or rows == 1 else docs * 2


def _explanations(model: nn.Module, tokenizer: object, ids: Tensor, lengths: Tensor, logits: Tensor,
                  method: str | None) -> list[dict[str, object]]:
    """Each document's ``explanation`` (see :class:`Prediction`) for its predicted class."""
    from attnkit.attribution.methods import attribute, is_exact
    from attnkit.attribution.report import default_method

    name = method or default_method(model)
    target = logits.argmax(-1)  # (B,)
    scores = attribute(model, ids, lengths, name, target=target)  # (B, T)
    bias = model.token_contributions(ids, lengths)[1] if is_exact(name) else None  # type: ignore[operator]
    token = tokenizer.id_to_token  # type: ignore[attr-defined]
    out: list[dict[str, object]] = []
    for row, n in enumerate(lengths.tolist()):
        found: dict[str, object] = {"method": name, "tokens": [str(token(int(i))) for i in ids[row, :n]],
                                    "scores": scores[row, :n].tolist()}
        if bias is not None:
            c = int(target[row])
            found["logit"], found["bias"] = float(logits[row, c]), float(bias[row, c])
        out.append(found)
    return out


def _ngram_parts(model: nn.Module, ids: Tensor, lengths: Tensor, logits: Tensor
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """The n-gram half's features, their contributions and the half's logits of a batch, if the model has one."""
    if not getattr(model, "has_ngram_half", False):
        return None
    mask = model.prepare(ids, lengths)[2]  # type: ignore[operator]
    feats, real, contrib = model.ngram_contributions(ids, mask)  # type: ignore[operator]
    wide = model.with_ngram_half(torch.zeros_like(logits), ids, mask)  # type: ignore[operator]  # (B, C)
    return feats, real, contrib, wide


def _ngram_explanation(model: nn.Module, tokenizer: object, parts: tuple[Tensor, Tensor, Tensor, Tensor] | None,
                       logits: Tensor, row: int, best: int, top_k: int
                       ) -> tuple[tuple[tuple[str, float], ...], dict[str, float]]:
    """``top_ngrams`` and ``halves`` of one explained prediction (empty without an n-gram half)."""
    if parts is None:
        return (), {}
    feats, real, contrib, wide = parts
    lift = contrib[row, :, best] - contrib[row].mean(-1)  # (F,): what each n-gram adds to the class's margin
    totals: dict[int, float] = {}
    for f, x in zip(feats[row][real[row]].tolist(), lift[real[row]].tolist(), strict=True):
        totals[f] = totals.get(f, 0.0) + x  # a repeated n-gram counts once, with its sum
    token = tokenizer.id_to_token  # type: ignore[attr-defined]
    named = []
    for f, x in sorted(totals.items(), key=lambda item: -item[1]):
        ids = model.ngram_tokens(f)  # type: ignore[operator]
        if ids is not None:
            named.append((ngram_text(token, ids), x))
        if len(named) == top_k:
            break
    ngram_margin = float(wide[row, best] - wide[row].mean())
    margin = float(logits[best] - logits.mean())  # (C,) logits of this document
    return tuple(named), {"network": margin - ngram_margin, "ngrams": ngram_margin}


def ngram_text(id_to_token: Callable[[int], object], ids: Sequence[int]) -> str:
    """An n-gram's token ids as text: its tokens joined by spaces."""
    return " ".join(str(id_to_token(i)) for i in ids)


def format_ngrams(rows: Sequence[tuple[str, float]]) -> str:
    """``[(n-gram, weight), ...]`` as one line: ``'a b' (+0.42), 'c' (+0.31)``."""
    return ", ".join(f"'{g}' ({w:+.2f})" for g, w in rows)


def attention_focus(weights: Tensor, positions: Sequence[Sequence[int]]) -> Tensor:
    """Share of each document's pooling weight on the given positions.

    Shape:
        weights ``(B, T)``, ``positions`` B lists of token indices; returns ``(B,)``.
    """
    if weights.dim() != 2 or weights.shape[0] != len(positions):
        raise ValueError(f"weights must be (B, T) with B = len(positions) = {len(positions)}, "
                         f"got {tuple(weights.shape)}")
    pick = torch.zeros_like(weights, dtype=torch.bool)  # (B, T)
    for row, pos in enumerate(positions):
        keep = [p for p in pos if 0 <= p < weights.shape[1]]
        pick[row, keep] = True
    total = weights.sum(-1).clamp_min(torch.finfo(weights.dtype).tiny)
    return (weights * pick).sum(-1) / total


@torch.no_grad()
def evaluate_examples(model: nn.Module, tokenizer: object, labels: LabelVocab, examples: Sequence[Example],
                      *, max_len: int, batch_size: int = 128, show_progress: bool = False) -> dict[str, object]:
    """Every measure of :func:`attnkit.train.metrics.classification_report` (accuracy, macro-F1, weighted-F1,
    macro-recall, per-class precision/recall/F1, confusion matrix) of ``model`` on labelled ``examples``.

    Every label must be one the model knows; an unknown one raises ValueError naming it. With
    ``show_progress``, long work reports its progress on stderr (:func:`attnkit._progress.progress`).
    """
    from attnkit.data.batching import TextClassificationDataset, collate
    from attnkit.train.metrics import classification_report

    if not examples:
        raise ValueError("no examples to evaluate")
    unknown = sorted({e.label for e in examples} - set(labels.labels))
    if unknown:
        raise ValueError(f"label(s) {unknown} are unknown to this model; it knows {list(labels.labels)}")
    data = TextClassificationDataset(list(examples), tokenizer, labels, reading_length(model, max_len))
    model.eval()
    preds, targets = [], []
    spans = sorted_batches(data.lengths, batch_size, batch_size * max_len)  # capped as in training
    with progress(len(spans), "evaluating", enabled=show_progress, unit="batches") as bar:
        for span in spans:
            batch = collate([data[i] for i in span])
            preds.append(model(batch["ids"], batch["lengths"]).argmax(-1))
            targets.append(batch["labels"])
            bar.update(1)
    report = classification_report(torch.cat(targets), torch.cat(preds), len(labels), list(labels.labels))
    report["n"] = len(data)
    report["labels"] = list(labels.labels)
    chunked = chunked_documents(model, data.lengths)
    if chunked is not None:
        report["chunked_documents"] = chunked
    return report
