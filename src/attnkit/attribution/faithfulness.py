"""How faithful an explanation is: comprehensiveness and sufficiency (DeYoung et al., 2020, ERASER).

For a document ``x`` with predicted class ``y`` and an attribution that
ranks its tokens, let ``r_q`` be its top ``q`` percent of tokens
(``ceil(q n / 100)`` of ``n``, at least one; ties keep the earlier token)::

    comprehensiveness_q = p(y | x) - p(y | x without r_q)      high: the ranked tokens were needed
    sufficiency_q       = p(y | x) - p(y | r_q alone)          low: they were enough

Each is aggregated as the AOPC, the mean over the bins ``q`` in
:data:`PERCENTS` (1, 5, 10, 20 and 50 percent) and over the documents.
Tokens are deleted, the rest keep their order; a document left with no token
becomes one ``[UNK]``. The same figures for a random order of the tokens
(seeded) are the control: an explanation is worth reading when its
comprehensiveness is well above the random order's and its sufficiency below.

:func:`faithfulness` scores every method of :mod:`attnkit.attribution.methods`
that applies to a model and names the one to show first: the largest
comprehensiveness minus sufficiency. :func:`decisive_words` lists the words
that moved the decision most per class.

Shape legend: N documents, K bins, T tokens, C classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.attribution.hf import as_classifier
from attnkit.attribution.methods import IG_STEPS, METHOD_NAMES, attribute, method_list

__all__ = ["PERCENTS", "UNK_ID", "erasure_counts", "aopc", "faithfulness", "text_faithfulness", "decisive_words",
           "token_label", "format_table"]

PERCENTS = (1, 5, 10, 20, 50)
UNK_ID = 1  # attnkit's tokenizers: [PAD] 0, [UNK] 1


def erasure_counts(n: int, percents: Sequence[float] = PERCENTS) -> list[int]:
    """How many top-ranked tokens of an ``n``-token document each bin removes or keeps: ``ceil(q n / 100)``, >= 1."""
    if n < 1:
        raise ValueError(f"n must be a positive token count, got {n!r}")
    return [max(1, math.ceil(q * n / 100 - 1e-9)) for q in percents]


def aopc(full: Any, perturbed: Any) -> float:
    """AOPC: the mean over documents and bins of ``full - perturbed``.

    Shape:
        full ``(N,)`` the predicted class's probability on the whole document,
        perturbed ``(N, K)`` the same with each bin's tokens removed (comprehensiveness)
        or kept alone (sufficiency).
    """
    f = np.asarray(full, dtype=np.float64).reshape(-1)
    p = np.asarray(perturbed, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != f.shape[0] or f.size == 0:
        raise ValueError(f"perturbed must be (N, K) with N = len(full) = {f.shape[0]} > 0, got {p.shape}")
    return float((f[:, None] - p).mean())


def _batches(documents: Sequence[Sequence[int]], size: int) -> Any:
    for start in range(0, len(documents), size):
        chunk = [list(d) for d in documents[start : start + size]]
        lengths = torch.tensor([len(d) for d in chunk], dtype=torch.long)
        ids = torch.zeros(len(chunk), int(lengths.max()), dtype=torch.long)
        for row, d in enumerate(chunk):
            ids[row, : len(d)] = torch.tensor(d, dtype=torch.long)
        yield start, ids, lengths


@torch.no_grad()
def _probabilities(model: nn.Module, documents: Sequence[Sequence[int]], batch_size: int) -> Tensor:
    """Class probabilities ``(N, C)`` of each document."""
    out = [model(ids, lengths).float().softmax(-1) for _, ids, lengths in _batches(documents, batch_size)]
    return torch.cat(out)


def _scores(model: nn.Module, documents: Sequence[Sequence[int]], method: str, target: Tensor,
            batch_size: int, steps: int) -> list[np.ndarray]:
    """Each document's token scores by ``method`` for its ``target`` class."""
    found: list[np.ndarray] = []
    for start, ids, lengths in _batches(documents, batch_size):
        s = attribute(model, ids, lengths, method, target=target[start : start + len(ids)], steps=steps)
        found += [s[row, : int(n)].cpu().numpy() for row, n in enumerate(lengths)]
    return found


def _erasure_curves(model: nn.Module, documents: Sequence[Sequence[int]], orders: Sequence[np.ndarray],
                    target: Tensor, percents: Sequence[float], batch_size: int,
                    unk: int = UNK_ID) -> tuple[np.ndarray, np.ndarray]:
    """The target's probability with each bin's top tokens removed, and with them kept alone: two ``(N, K)``."""
    removed, kept = [], []
    for doc, order in zip(documents, orders, strict=True):
        for count in erasure_counts(len(doc), percents):
            top = set(order[:count].tolist())
            removed.append([tok for i, tok in enumerate(doc) if i not in top] or [unk])
            kept.append([tok for i, tok in enumerate(doc) if i in top])
    k = len(percents)
    rows = target.repeat_interleave(k)[:, None]  # (N K, 1)
    p_removed = _probabilities(model, removed, batch_size).gather(1, rows).view(-1, k).numpy()
    p_kept = _probabilities(model, kept, batch_size).gather(1, rows).view(-1, k).numpy()
    return p_removed, p_kept


def _unk(model: nn.Module) -> int:
    """The id a document left with no token becomes: the wrapped tokenizer's ``[UNK]``, else attnkit's."""
    found = getattr(model, "unk_token_id", None)
    return UNK_ID if found is None else int(found)


def _order(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="stable")


def faithfulness(model: nn.Module, documents: Sequence[Sequence[int]], *, methods: Sequence[str] | None = None,
                 percents: Sequence[float] = PERCENTS, steps: int = IG_STEPS, batch_size: int = 64,
                 seed: int = 0, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Comprehensiveness and sufficiency (AOPC) of each method on ``documents``, and the random control.

    ``methods`` defaults to every method that applies to ``model``; an
    inapplicable one raises :class:`~attnkit.attribution.methods.MethodNotApplicable`.
    Returns ``{"methods": {name: {"comprehensiveness", "sufficiency", "title"}},
    "random": {"comprehensiveness", "sufficiency"}, "shown_first": name, "n": N,
    "percents": [...]}``; ``shown_first`` has the largest comprehensiveness
    minus sufficiency. The model is left in eval mode.

    Shape:
        documents: N token-id lists (ids in ``[0, vocab_size)``, no padding).
    """
    model = as_classifier(model)
    chosen = method_list(methods, model)
    if not chosen:
        raise ValueError(f"no attribution method applies to {type(model).__name__}")
    unk = _unk(model)
    docs = [list(map(int, d)) or [unk] for d in documents]
    if not docs:
        raise ValueError("documents is empty: faithfulness needs at least one document")
    model.eval()
    probs = _probabilities(model, docs, batch_size)  # (N, C)
    target = probs.argmax(-1)  # (N,)
    full = probs.gather(1, target[:, None])[:, 0].numpy()  # (N,)
    rng = np.random.default_rng(seed)
    random_orders = [rng.permutation(len(d)) for d in docs]
    p_removed, p_kept = _erasure_curves(model, docs, random_orders, target, percents, batch_size, unk)
    result: dict[str, Any] = {
        "random": {"comprehensiveness": aopc(full, p_removed), "sufficiency": aopc(full, p_kept)},
        "methods": {}, "n": len(docs), "percents": list(percents)}
    for name in chosen:
        if progress is not None:
            progress(name)
        orders = [_order(s) for s in _scores(model, docs, name, target, batch_size, steps)]
        p_removed, p_kept = _erasure_curves(model, docs, orders, target, percents, batch_size, unk)
        result["methods"][name] = {"comprehensiveness": aopc(full, p_removed), "sufficiency": aopc(full, p_kept),
                                   "title": METHOD_NAMES[name]}
    scored = result["methods"]
    result["shown_first"] = max(scored, key=lambda m: scored[m]["comprehensiveness"] - scored[m]["sufficiency"])
    return result


def text_faithfulness(model: nn.Module, tokenizer: Any, texts: Sequence[str], *, max_len: int,
                      methods: Sequence[str] | None = None, **options: Any) -> dict[str, Any]:
    """:func:`faithfulness` of ``texts``, encoded as the model reads them (the first ``max_len`` tokens,
    or the span a model reading long documents in chunks reads: :func:`attnkit.models.config.reading_length`)."""
    from attnkit.data.tokenization import encode_batch
    from attnkit.models.config import reading_length

    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single str")
    return faithfulness(model, encode_batch(tokenizer, list(texts), reading_length(model, max_len)),
                        methods=methods, **options)


def format_table(result: dict[str, Any]) -> list[str]:
    """:func:`faithfulness`'s figures as table lines: method, comprehensiveness, sufficiency, and the random row."""
    width = max(len("random order"), *(len(m) for m in result["methods"])) + 2
    lines = [f"faithfulness on {result['n']} documents (AOPC over the top "
             f"{', '.join(f'{q:g}' for q in result['percents'])}% of tokens; ERASER, DeYoung et al. 2020)",
             f"{'method':<{width}}{'comprehensiveness':>19}{'sufficiency':>13}",
             "  higher comprehensiveness and lower sufficiency are more faithful"]
    first = result.get("shown_first")
    for name, row in result["methods"].items():
        mark = "  <- shown first" if name == first else ""
        lines.append(f"{name:<{width}}{row['comprehensiveness']:>19.4f}{row['sufficiency']:>13.4f}{mark}")
    r = result["random"]
    lines.append(f"{'random order':<{width}}{r['comprehensiveness']:>19.4f}{r['sufficiency']:>13.4f}  (control)")
    return lines


def token_label(tokenizer: Any, token_id: int) -> str:
    """A token's text for a report; ``[UNK]`` and ``[PAD]`` say what they are."""
    text = str(tokenizer.id_to_token(int(token_id)))
    if int(token_id) == UNK_ID or text == "[UNK]":
        return "[UNK] (out-of-vocabulary words)"
    if int(token_id) == 0 or text == "[PAD]":
        return "[PAD] (padding)"
    return text


def decisive_words(model: nn.Module, documents: Sequence[Sequence[int]], *, method: str = "contributions",
                   top: int = 5, batch_size: int = 64, steps: int = IG_STEPS, aggregate: str = "mean",
                   min_documents: int | None = None) -> list[list[tuple[int, float]]]:
    """Per class, the ``top`` token ids that moved the decision toward it most, and by how much.

    A token's push in one document: with ``contributions``, what its
    occurrences add to the class's logit minus the mean of the classes' (its
    push toward this class rather than the others); with another method, its
    scores for the class. Over the documents predicted as the class,
    ``aggregate="mean"`` ranks by the mean push per document the token is in,
    among the tokens found in at least ``min_documents`` of them (default:
    1% of them, at least 2): how much a word moves the decision where it
    appears, once it appears often enough to say. ``"sum"`` ranks by the
    total push (every token counts), which favours frequent words.

    Shape:
        documents: N token-id lists; returns C lists of ``(token_id, push)``, largest first.
    """
    if aggregate not in ("mean", "sum"):
        raise ValueError(f"aggregate must be 'mean' or 'sum', got {aggregate!r}")
    model = as_classifier(model)
    docs = [list(map(int, d)) or [_unk(model)] for d in documents]
    method_list([method], model)
    model.eval()
    totals: list[dict[int, float]] = []
    counts: list[dict[int, int]] = []
    per_class_docs: list[int] = []
    for _, ids, lengths in _batches(docs, batch_size):
        with torch.no_grad():
            logits = model(ids, lengths)
        target = logits.argmax(-1)  # (B,)
        while len(totals) < logits.shape[1]:
            totals.append({})
            counts.append({})
            per_class_docs.append(0)
        if method == "contributions":
            with torch.no_grad():
                per, _ = model.token_contributions(ids, lengths)  # type: ignore[operator]  # (B, T, C)
            margin = per - per.mean(-1, keepdim=True)  # (B, T, C)
            scores = margin.gather(2, target[:, None, None].expand(-1, per.shape[1], 1))[..., 0]  # (B, T)
        else:
            scores = attribute(model, ids, lengths, method, target=target, steps=steps)
        for row, n in enumerate(lengths.tolist()):
            c = int(target[row])
            per_class_docs[c] += 1
            pushes: dict[int, float] = {}
            for tok, x in zip(ids[row, :n].tolist(), scores[row, :n].tolist(), strict=True):
                pushes[tok] = pushes.get(tok, 0.0) + float(x)
            for tok, x in pushes.items():
                totals[c][tok] = totals[c].get(tok, 0.0) + x
                counts[c][tok] = counts[c].get(tok, 0) + 1
    out = []
    for c, total in enumerate(totals):
        if aggregate == "sum":
            ranked = total
        else:
            least = min_documents if min_documents is not None else max(2, math.ceil(0.01 * per_class_docs[c]))
            ranked = {t: x / counts[c][t] for t, x in total.items() if counts[c][t] >= least}
        out.append(sorted(ranked.items(), key=lambda kv: (-kv[1], kv[0]))[:top])
    return out
