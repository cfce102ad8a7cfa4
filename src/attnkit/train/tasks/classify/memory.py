"""A classifier's plan: :func:`fit_to_memory` runs after the documents are encoded and before the model
is built. It measures the model exactly without allocating it (built on
torch's ``meta`` device: parameters count four times, for their gradients and
two AdamW moments; buffers once), adds the encoded documents, and the larger of
what fitting an n-gram half (:mod:`attnkit.models.ngram_half`) allocates
(:func:`attnkit.models.ngram_half.fit_bytes`, per training token read: a model
reading long documents in chunks reads up to its ``reading_length``, not
``--max-len``) and what the largest training batch's step holds
(:func:`activation_bytes`, one estimate per model kind in :data:`ACTIVATIONS`,
from the batch's padded tokens and its longest document: the document model's
attention maps grow with the square of it; the batches of long documents are
capped in tokens, see :func:`attnkit.train.loop.task.epoch_batches`): the fit lets
go of its memory before the first step. It compares that plan with the limit
(:func:`~attnkit.train.memory_budget.limit_and_source`). Above it, the n-gram half's bigram rows shrink to
what fits, and the run says so in one line; when even no bigram rows would fit (the vocabulary times the
classes alone is too large), or the model cannot shrink (a resumed run, a model without the half), it is
refused with :class:`~attnkit.train.memory_budget.MemoryLimitError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnkit.train import memory_budget as plans
from attnkit.train.memory_budget import MemoryBudget, MemoryEstimate, MemoryLimitError, format_bytes, module_bytes

__all__ = ["model_bytes", "activation_bytes", "ACTIVATIONS", "estimate_classifier", "fit_to_memory", "ROW_FIELDS",
           "MIN_ROWS"]

ROW_FIELDS = ("ngram_rows",)
"""Model config fields that give an n-gram half's bigram rows (wide, han, bert)."""

MIN_ROWS = 1000
"""Fewer bigram rows than this is no n-gram half worth fitting: the run is refused instead."""


def model_bytes(model_name: str, config: dict[str, Any]) -> tuple[int, int]:
    """Bytes of ``model_name``'s parameters and buffers for ``config``, measured without allocating them."""

    from attnkit.models import build_model

    return module_bytes(lambda: build_model(model_name, config))


def _rows(model_name: str, config: dict[str, Any]) -> tuple[str | None, int]:
    """The config field of the n-gram half's bigram rows (None: no half) and its value, defaults included."""
    import dataclasses

    from attnkit.models import MODELS

    defaults = {f.name: f.default for f in dataclasses.fields(MODELS[model_name][1])}
    for name in ROW_FIELDS:
        if name in defaults:
            rows = int(config.get(name, defaults[name]) or 0)
            return (name, rows) if rows > 0 else (None, 0)
    return None, 0


def _document_bytes(c: Any, tokens: int, longest: int) -> int:
    """A :class:`~attnkit.models.DocumentClassifier` step: per token, the embeddings (4 D floats) and each
    encoder layer's (14 D + 3 d_ff floats; a parameter-free layer's 4 D); with attention dropout, torch
    reads the attention in full: ``B H T^2`` floats per map, 3.4 maps a layer held for the backward pass
    and 1.3 more in flight (without it the fused kernel's memory is linear in T)."""
    from attnkit.blocks.config import resolve_dropouts

    layer, layers = c.layer, c.num_layers
    per_token = 4 * (4 * layer.d_model + layers * (14 * layer.d_model + 3 * layer.d_ff)
                     + c.parameter_free_layers * 4 * layer.d_model)
    maps = 0
    if layers and resolve_dropouts(layer.dropout, layer.attention_dropout, layer.activation_dropout)[1] > 0:
        maps = (34 * layers + 13) * layer.num_heads * tokens * longest * 4 // 10  # tokens * longest: B T^2
    return per_token * tokens + maps


def _sentiment_bytes(c: Any, tokens: int, longest: int) -> int:
    """A :class:`~attnkit.models.SentimentClassifier` step: per token, 3 E + 24 H + 3 A floats a layer of
    the bidirectional LSTM (its gates and states, kept a step at a time), and about 20 kB a time step a
    layer for the records of the steps themselves (T steps: the longest document)."""
    per_token = 4 * (3 * c.embed_dim + 24 * c.hidden_size * c.num_layers + 3 * c.attention_dim)
    return per_token * tokens + 20_000 * c.num_layers * longest


def _han_bytes(c: Any, tokens: int, longest: int) -> int:
    """A :class:`~attnkit.models.HierarchicalAttentionNetwork` step: per token, 4 E + 36 Hw + 5 A floats
    (the word GRU's steps, the word pooling, the sentence split); the sentence level is per sentence,
    small beside it."""
    return 4 * (4 * c.embed_dim + 36 * c.word_hidden + 5 * c.attention_dim) * tokens


def _wide_bytes(c: Any, tokens: int, longest: int) -> int:
    return int(c.activation_bytes(tokens))


def _bert_bytes(c: Any, tokens: int, longest: int) -> int:
    """A :class:`~attnkit.models.BertClassifier` step: each document gains ``[CLS]`` and ``[SEP]``; per
    token, the embeddings (4 D floats) and each encoder layer's (14 D + 3 intermediate floats: the
    projections, the feed-forward width before and after GELU, the dropouts and LayerNorms); with
    attention dropout, the ``B H T^2`` maps are read in full, as the document model's are (3.4 maps a
    layer held for the backward pass and 1.3 more in flight)."""
    longest = min(longest, c.max_len)  # the encoder's part; an n-gram half reading past it holds little
    documents = max(1, tokens // max(longest, 1))
    tokens, longest = tokens + 2 * documents, longest + 2
    d, layers = c.hidden_size, c.num_hidden_layers
    per_token = 4 * (4 * d + layers * (14 * d + 3 * c.intermediate_size))
    maps = 0
    if layers and c.attention_probs_dropout_prob > 0:
        maps = (34 * layers + 13) * c.num_attention_heads * tokens * longest * 4 // 10
    return per_token * tokens + maps


ACTIVATIONS: dict[str, Callable[[Any, int, int], int]] = {
    "document": _document_bytes, "sentiment": _sentiment_bytes, "han": _han_bytes, "wide": _wide_bytes,
    "bert": _bert_bytes}
"""Bytes one training step holds, per model kind: ``f(config, tokens, longest)`` for a batch of ``tokens``
padded tokens whose longest document has ``longest`` (a batch of B documents: B x longest tokens).
Measured as the rise of a fresh process's peak over one forward, backward and AdamW step
(``evals/memory_plan.py`` checks the whole run)."""


def activation_bytes(model_name: str, config: dict[str, Any], tokens: int, longest: int = 0) -> int:
    """Bytes a training step of ``model_name`` holds for a batch of ``tokens`` padded tokens whose longest
    document has ``longest`` tokens (0: unknown, taken as ``tokens``: one document); 0 for a kind without
    an estimate in :data:`ACTIVATIONS`."""
    from attnkit.models import config_from_dict

    per_kind = ACTIVATIONS.get(model_name)
    if per_kind is None or tokens <= 0:
        return 0
    return int(per_kind(config_from_dict(model_name, config), tokens, min(longest or tokens, tokens)))


def estimate_classifier(model_name: str, config: dict[str, Any], *, tokens: int, documents: int = 0,
                        batch_tokens: int = 0, train_documents: int | None = None, longest: int = 0
                        ) -> MemoryEstimate:
    """:class:`MemoryEstimate` of training ``model_name`` with ``config`` on ``tokens`` training tokens
    (``documents``: the bytes the encoded documents hold; ``batch_tokens``: the padded tokens of the
    largest training batch and ``longest`` its longest document, for :func:`activation_bytes`;
    ``train_documents``: how many training documents hold the tokens, None: as many as tokens)."""
    from attnkit.models.ngram_half import fit_bytes

    params, buffers = model_bytes(model_name, config)
    field, rows = _rows(model_name, config)
    fit = 0
    if field is not None:
        fit = fit_bytes(int(config["vocab_size"]) + rows, int(config["num_classes"]), tokens, train_documents)
    activations = activation_bytes(model_name, config, batch_tokens, longest)
    return MemoryEstimate(params, buffers, fit, documents, activations)


def _levers(need: MemoryEstimate) -> str:
    """The settings that lower ``need``: the vocabulary and classes, and the batch when it holds activations."""
    if need.activations:
        return (f"`vocab_size`, the number of classes, `max_len` or `batch_size` (one batch's activations: "
                f"about {format_bytes(need.activations)})")
    return "`vocab_size` or the number of classes"


def _most_rows(model_name: str, config: dict[str, Any], field: str, most: int, limit: int,
               sizes: dict[str, Any]) -> int:
    """The most bigram rows, at most ``most``, whose estimate is within ``limit`` (0: not even one); the
    estimate grows with the rows, so a bisection finds them."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_classifier(model_name, {**config, field: mid}, **sizes).total <= limit:
            low = mid
        else:
            high = mid - 1
    return low


def fit_to_memory(model_name: str, config: dict[str, Any], *, tokens: int, documents: int = 0,
                  batch_tokens: int = 0, train_documents: int | None = None, limit: int | None = None,
                  can_shrink: bool = True, log: Callable[[str], None] | None = None, longest: int = 0,
                  budget: MemoryBudget | None = None) -> dict[str, Any]:
    """``config``, with fewer n-gram bigram rows when the run would not fit in ``limit`` bytes.

    The limit is :func:`~attnkit.train.memory_budget.limit_and_source` of ``limit`` (``max_memory``, None: a
    share of the memory) and ``budget`` (None: :func:`attnkit._memory.memory_budget` now). Raises
    :class:`~attnkit.train.memory_budget.MemoryLimitError`, naming the limit that bound and the plan, when it
    cannot fit.
    """
    budget = budget if budget is not None else plans.memory_budget()  # looked up now: tests replace it
    limit, source = plans.limit_and_source(limit, budget)
    if limit is None:
        return config

    def raise_what(required: int) -> str:
        return plans._raise_what(required, source, budget)

    sizes: dict[str, Any] = {"tokens": tokens, "documents": documents, "batch_tokens": batch_tokens,
                             "train_documents": train_documents, "longest": longest}
    need = estimate_classifier(model_name, config, **sizes)
    if need.total <= limit:
        return config
    field, rows = _rows(model_name, config)
    what = (f"{model_name} with {config.get('vocab_size')} words and {config.get('num_classes')} classes "
            f"needs {need.describe()}")
    if field is None or not can_shrink:
        why = "" if field is None else " (a resumed run keeps its n-gram rows)"
        raise MemoryLimitError(f"{what}, over the limit of {format_bytes(limit)} ({source}){why}; raise "
                               f"{raise_what(need.total)}, or lower {_levers(need)}")
    fit = _most_rows(model_name, config, field, rows - 1, limit, sizes)
    if fit < MIN_ROWS:
        smallest = estimate_classifier(model_name, {**config, field: MIN_ROWS}, **sizes)
        raise MemoryLimitError(f"{what}, over the limit of {format_bytes(limit)} ({source}), and about "
                               f"{format_bytes(smallest.total)} even with {MIN_ROWS} n-gram rows; raise "
                               f"{raise_what(smallest.total)} to at least that, or lower {_levers(need)}")
    shrunk = {**config, field: int(fit)}
    if log is not None:
        after = estimate_classifier(model_name, shrunk, **sizes)
        log(f"memory: {rows} n-gram rows would need about {format_bytes(need.total)}, over the limit of "
            f"{format_bytes(limit)} ({source}); using the {fit} most frequent bigrams "
            f"(about {format_bytes(after.total)}; `max_memory` to change)")
    return shrunk
