"""The explanation a run's reports and ``predict --explain`` lead with, and the figures behind the choice.

After training, :func:`explanation_analysis` scores every applicable method's
faithfulness (:func:`attnkit.attribution.faithfulness.faithfulness`) on up
to :data:`REPORT_DOCUMENTS` documents of the validation part, and no more than
:data:`REPORT_TOKENS` tokens of them (:func:`faithfulness_documents`), and picks the
best (largest comprehensiveness minus sufficiency); the chosen method and raw
attention are then scored on the test part, beside the random control, and
the words that moved the decision most per class are ranked from the exact
contributions (or the chosen method where the model has none).
:func:`record_text` is what the run folder keeps of the choice, as
:data:`FAITHFULNESS_FILE`, where :func:`default_method` finds it for
``predict --explain``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from attnkit.attribution.faithfulness import decisive_words, faithfulness, token_label
from attnkit.attribution.methods import IG_STEPS, METHOD_NAMES, MethodNotApplicable, applicable_methods

__all__ = ["FAITHFULNESS_FILE", "PREFERRED", "REPORT_DOCUMENTS", "REPORT_TOKENS", "REPORT_WORK", "MIN_DOCUMENTS",
           "WORD_PASSES", "reading_work",
           "default_method", "explanation_analysis", "faithfulness_documents", "word_documents", "record_text",
           "read_record", "explanation_line"]

FAITHFULNESS_FILE = "faithfulness.json"
PREFERRED = ("contributions", "integrated_gradients", "chefer", "grad_input", "attention")
"""The method shown when a run has no faithfulness record: the first that applies."""
REPORT_DOCUMENTS = 200
"""Most documents of each part the faithfulness of the explanations is scored on."""
REPORT_TOKENS = 100_000
"""Most tokens of those documents: faithfulness reads each document about ten times a method (the erasure
curves), so its time grows with the tokens, not the documents. Sentences, news articles and reviews (MR,
AG News, IMDB: 20 to 300 tokens) keep their 200 documents; on documents of 300-3,000 words it is about 60
and a fifth of the time (a run on 20 topics spent 230 s on it, more than the n-gram fit and the weighing
together)."""
REPORT_WORK = 20_000_000_000
"""Most work of those documents, counted as the weights that read each token times the tokens they read
(:func:`reading_work`; a lookup table's weights read nothing): a fine-tuned MiniLM (10.7 million such weights,
its first 128 tokens) reads a sentence at the cost of a thousand sentences through the default model (8,600
weights). Models trained from scratch keep :data:`REPORT_DOCUMENTS` within :data:`REPORT_TOKENS` (IMDB's
reviews through the document Transformer: 1.6e10); a fine-tuned MiniLM is scored on about 70 MR sentences
or 20 IMDB reviews. With 200, the report of ``attnkit train --preset balanced`` on MR took 847 s after 116 s
of training; with this bound 320 s, the same method shown first (one thread, docs/results.md)."""
MIN_DOCUMENTS = 20
"""Fewest documents faithfulness is scored on when the part has them, however long they are."""
WORD_PASSES = 10_000
"""Most document passes the report's words per class take: ``contributions`` reads each test document once
and ranks over all of them; another method over the first test documents its passes allow (integrated
gradients: :data:`~attnkit.attribution.methods.IG_STEPS` forward and backward passes a document, so 500;
a gradient or attention method: 10,000). Over IMDB's 25,000 reviews a fine-tuned BERT's integrated
gradients would otherwise take hours after a training of minutes."""


def read_record(run: str | Path) -> dict[str, Any] | None:
    """The run's :data:`FAITHFULNESS_FILE`, or None when it has none (or an unreadable one)."""
    path = Path(run) / FAITHFULNESS_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def default_method(model: nn.Module, run: str | Path | None = None) -> str:
    """The method to explain ``model``'s predictions with: the run's recorded choice, else :data:`PREFERRED`'s first."""
    valid = applicable_methods(model)
    record = read_record(run) if run is not None else None
    chosen = ((record or {}).get("validation") or {}).get("shown_first")
    if chosen in valid:
        return str(chosen)
    for name in PREFERRED:
        if name in valid:
            return name
    raise MethodNotApplicable(f"no attribution method applies to {type(model).__name__}")


def explanation_analysis(model: nn.Module, tokenizer: Any, labels: Sequence[str],
                         validation: Sequence[Sequence[int]] | None, test: Sequence[Sequence[int]], *,
                         documents: int = REPORT_DOCUMENTS, tokens: int = REPORT_TOKENS, words: int = 8
                         ) -> dict[str, Any] | None:
    """The explanation a report shows first, chosen on ``validation``, scored on ``test``; None if no method applies.

    Faithfulness is scored on the first documents of each part, ``documents`` at most, within ``tokens`` and
    within :data:`REPORT_WORK` of the model's reading (:func:`faithfulness_documents`); the words per class
    are ranked over ``test``, all of it with ``contributions``, else its first documents within
    :data:`WORD_PASSES` (:func:`word_documents`).

    Returns ``{"shown_first", "title", "chosen_on", "validation" (every method's
    figures there, or None), "test" (the chosen method's and raw attention's,
    with the random control), "words_method", "words" ({label: [(word, total)]})}``.
    Without a validation part the method is :data:`PREFERRED`'s first.
    """
    valid = applicable_methods(model)
    if not valid or not test:
        return None
    work = reading_work(model)
    chosen = faithfulness(model, faithfulness_documents(validation, documents, tokens, work)) if validation else None
    best = chosen["shown_first"] if chosen is not None else default_method(model)
    shown = [best] + (["attention"] if best != "attention" and "attention" in valid else [])
    scored = faithfulness(model, faithfulness_documents(test, documents, tokens, work), methods=shown)
    scored["shown_first"] = best
    words_method = "contributions" if "contributions" in valid else best
    per_class = decisive_words(model, word_documents(test, words_method, work=work), method=words_method, top=words)
    named = {labels[c]: [(token_label(tokenizer, t), total) for t, total in rows]
             for c, rows in enumerate(per_class) if c < len(labels)}
    return {"shown_first": best, "title": METHOD_NAMES[best], "chosen_on": "validation" if chosen else None,
            "validation": chosen, "test": scored, "words_method": words_method, "words": named}


def reading_work(model: nn.Module) -> Callable[[Sequence[int]], int]:
    """The work of reading a document with ``model``: the weights that read each token (every parameter but an
    embedding table's) times the tokens they read (its config's ``max_len`` at most: an encoder that reads the
    first ``max_len`` tokens, while a half that costs little reads more)."""
    tables = {id(p) for m in model.modules() if isinstance(m, nn.Embedding | nn.EmbeddingBag)
              for p in m.parameters(recurse=False)}
    weights = sum(p.numel() for p in model.parameters() if id(p) not in tables)
    cap = getattr(getattr(model, "config", None), "max_len", None)
    return lambda doc: weights * (min(len(doc), cap) if isinstance(cap, int) else len(doc))


def faithfulness_documents(part: Sequence[Sequence[int]], documents: int = REPORT_DOCUMENTS,
                           tokens: int = REPORT_TOKENS, work: Callable[[Sequence[int]], int] | None = None,
                           budget: int | None = None) -> Sequence[Sequence[int]]:
    """The first documents of ``part`` that faithfulness is scored on: at most ``documents``, and no more
    than fit within ``tokens`` tokens and, with ``work`` (:func:`reading_work`), within ``budget`` of it (None:
    :data:`REPORT_WORK`), but :data:`MIN_DOCUMENTS` (or all there are) whatever their length."""
    budget = REPORT_WORK if budget is None else budget
    count, total, spent = 0, 0, 0
    for doc in part[:documents]:
        total += len(doc)
        spent += work(doc) if work is not None else 0
        if (total > tokens or spent > budget) and count >= MIN_DOCUMENTS:
            break
        count += 1
    return part[:count]


def word_documents(part: Sequence[Sequence[int]], method: str, passes: int | None = None,
                   work: Callable[[Sequence[int]], int] | None = None) -> Sequence[Sequence[int]]:
    """The first documents of ``part`` the words per class are ranked over with ``method``: all of them
    for ``contributions`` (one pass each), else as many as ``passes`` allows (None: :data:`WORD_PASSES`) and,
    with ``work`` (:func:`reading_work`), as each pass is given the work of a faithfulness document
    (``passes * REPORT_WORK / REPORT_DOCUMENTS`` in all); one at least."""
    if method == "contributions":
        return part
    passes = WORD_PASSES if passes is None else passes
    each = IG_STEPS if method == "integrated_gradients" else 1
    budget = passes * REPORT_WORK // REPORT_DOCUMENTS
    count, spent = 0, 0
    for doc in part[: passes // each]:
        spent += each * work(doc) if work is not None else 0
        if spent > budget:
            break
        count += 1
    return part[: max(1, count)]


def record_text(analysis: dict[str, Any]) -> str:
    """The JSON text of the run's :data:`FAITHFULNESS_FILE`: ``analysis`` without its word lists."""
    return json.dumps({k: v for k, v in analysis.items() if k != "words"}, indent=2) + "\n"


def explanation_line(explanation: dict[str, Any], top: int, run: str | Path | None = None) -> str:
    """One line for ``predict --explain``: the method, its test-part faithfulness if recorded, the ``top`` tokens.

    ``[UNK]`` is named as the out-of-vocabulary words it stands for.
    """
    method = str(explanation["method"])
    tokens, scores = list(explanation["tokens"]), list(explanation["scores"])
    order = sorted(range(len(tokens)), key=lambda i: (-scores[i], i))[:top]
    shown = ", ".join(f"{'[UNK] (out-of-vocabulary word)' if tokens[i] == '[UNK]' else tokens[i]} "
                      f"({scores[i]:+.2f})" for i in order)
    record = read_record(run) if run is not None else None
    figures = ((record or {}).get("test") or {}).get("methods", {}).get(method)
    how = ""
    if figures:
        how = (f", comprehensiveness {figures['comprehensiveness']:.2f} vs random "
               f"{record['test']['random']['comprehensiveness']:.2f} on the test part")  # type: ignore[index]
    total = ""
    if "logit" in explanation:
        total = f"; bias {explanation['bias']:+.2f} + scores = logit {explanation['logit']:+.2f}"
    return f"moved ({METHOD_NAMES[method]}{how}{total}): {shown}"
