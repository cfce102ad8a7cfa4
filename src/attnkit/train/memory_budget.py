"""Memory checked before it is spent: a classifier's size estimated from the data, against a limit.

:func:`fit_to_memory` runs after the documents are encoded and before the model
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
(:func:`limit_and_source`): ``--max-memory``, or by default the smaller of
:data:`DEFAULT_CAP` (4 GB) and :data:`DEFAULT_FRACTION` of the memory budget, and never more than the budget
(:func:`attnkit._memory.memory_budget`: the least of ``MemAvailable``, the room
``RLIMIT_AS`` leaves beside the process's virtual size, and the room its memory
cgroup leaves). Above it, the n-gram half's bigram rows shrink to what fits,
and the run says so in one line; when even no bigram rows would fit (the
vocabulary times the classes alone is too large), or the model cannot shrink (a
resumed run, a model without the half), it is refused with
:class:`MemoryLimitError`, which names the plan and the limit that bound:
``max_memory`` (written as ``--max-memory`` by a command that has the flag:
:func:`attnkit.cli.messages.in_flags`), ``MemAvailable``, ``RLIMIT_AS`` or the
cgroup's limit file.

The limit covers what the run allocates, not the interpreter and libraries
(about 0.35 GB resident when the plan is made); ``evals/memory_plan.py`` sets
the plan plus that resident size against each kind's measured peak.
:func:`peak_rss_mib` is the peak a run reports in its metrics.

The runs that cannot shrink (translation, captioning) plan themselves in their task's folder
(``train/tasks/translate/translation_memory.py``, ``train/tasks/caption/caption_memory.py``) with
:class:`MemoryEstimate` against :func:`limit_and_source`'s limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnkit._memory import MemoryBudget, available_memory, format_bytes, memory_budget, peak_rss_mib

__all__ = ["DEFAULT_FRACTION", "DEFAULT_CAP", "DEFAULT_HELP", "MemoryLimitError", "MemoryEstimate", "MemoryBudget",
           "parse_memory_size",
           "format_bytes", "available_memory", "memory_budget", "default_limit", "limit_and_source",
           "peak_rss_mib", "model_bytes", "module_bytes", "activation_bytes", "ACTIVATIONS",
           "estimate_classifier", "fit_to_memory", "ROW_FIELDS"]

DEFAULT_FRACTION = 0.8
"""Share of the memory budget a run may plan to use when ``--max-memory`` is not given (at most
:data:`DEFAULT_CAP`)."""

DEFAULT_CAP = 4 * 10**9
"""The most a run plans to use when ``--max-memory`` is not given, however much memory the machine has: a
default that a bigger machine changed silently would be no default (the same data would train a larger
n-gram half on a larger machine). 4 GB: the default recipe's plans on the evaluated corpora (up to 100
classes, 10,000 documents of 300-3,000 words) stay within it; ``--max-memory`` raises or lowers it."""

DEFAULT_HELP = f"the smaller of {DEFAULT_CAP / 10**9:g} GB and {DEFAULT_FRACTION:.0%} of the memory available"
"""The default in words, for ``--help`` and the messages."""

ROW_FIELDS = ("ngram_rows",)
"""Model config fields that give an n-gram half's bigram rows (wide, han, bert)."""

MIN_ROWS = 1000
"""Fewer bigram rows than this is no n-gram half worth fitting: the run is refused instead."""

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class MemoryLimitError(ValueError):
    """A run whose estimated memory is above the limit and cannot shrink below it; names ``max_memory``."""


def parse_memory_size(text: str | int, *, name: str = "--max-memory") -> int:
    """Bytes of a size such as ``"4GB"``, ``"800MB"``, ``"1.5G"``, ``"512MiB"`` or ``"1000000"``; a bad one is a
    ValueError that names the setting as ``name`` (the command line's flag, or ``TextClassifier``'s
    ``max_memory``)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise ValueError(f"{name} must be a size such as 4GB, 800MB or 1.5GiB, got {text!r}")
        value = float(match.group(1)) * _UNITS[unit]
    if value < 1:
        raise ValueError(f"{name} must be above zero, got {text!r}")
    return int(value)


def default_limit() -> int | None:
    """The smaller of :data:`DEFAULT_CAP` and :data:`DEFAULT_FRACTION` of :func:`attnkit._memory.memory_budget`
    (None: the budget is unknown, no limit)."""
    return limit_and_source(None)[0]


def model_bytes(model_name: str, config: dict[str, Any]) -> tuple[int, int]:
    """Bytes of ``model_name``'s parameters and buffers for ``config``, measured without allocating them."""

    from attnkit.models import build_model

    return module_bytes(lambda: build_model(model_name, config))


_RANDOM_FILLS = frozenset({"normal_", "uniform_", "bernoulli_", "random_", "exponential_", "cauchy_",
                           "log_normal_", "geometric_"})
"""The in-place random fills that initialise parameters; on the ``meta`` device torch runs them through
Python references that import ``torch._dynamo`` (about 75 MB of address space and 2 s, enough to fail under
a tight ``RLIMIT_AS``), so :func:`module_bytes` skips them: a meta tensor holds no values to fill."""


def module_bytes(build: Callable[[], Any]) -> tuple[int, int]:
    """Bytes of the parameters and buffers of the module ``build()`` makes, built without allocating them:
    on torch's ``meta`` device (shapes without storage), its random initialisation skipped."""
    import torch
    from torch.overrides import TorchFunctionMode

    class SkipRandomFills(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if name in _RANDOM_FILLS:  # torch.nn.init's take the tensor by name
                target = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
                if isinstance(target, torch.Tensor):
                    return target
            return func(*args, **kwargs)

    with torch.device("meta"), SkipRandomFills():
        model = build()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params, buffers


@dataclass(frozen=True)
class MemoryEstimate:
    """What a classifier run allocates, in bytes: model (parameters x 4 and buffers), n-gram fit, documents,
    and one training batch's activations; :attr:`total` is the most held at once."""

    params: int
    buffers: int
    ngram_fit: int
    documents: int
    activations: int = 0
    data_name: str = "documents"

    @property
    def total(self) -> int:
        """The peak: the model and the documents, and the larger of the n-gram fit and a batch's activations
        (the fit runs, and lets go of what it held, before the first training step)."""
        return 4 * self.params + self.buffers + self.documents + max(self.ngram_fit, self.activations)

    def describe(self) -> str:
        """The plan in words: ``about 5.1 GB (model 12 MB, n-gram fit 30 MB, documents 4 MB, one
        training batch's activations 5.05 GB)``, the parts that hold anything."""
        parts = (("model", 4 * self.params + self.buffers), ("n-gram fit", self.ngram_fit),
                 (self.data_name, self.documents), ("one training batch's activations", self.activations))
        named = ", ".join(f"{name} {format_bytes(n)}" for name, n in parts if n)
        return f"about {format_bytes(self.total)} at most at once" + (f" ({named})" if named else "")


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


def limit_and_source(limit: int | None = None, budget: MemoryBudget | None = None) -> tuple[int | None, str]:
    """The bytes a run may plan to allocate and what sets them: ``limit`` (``max_memory``) where given,
    lowered to the ``budget`` (:func:`attnkit._memory.memory_budget`: the least of the memory available,
    the address-space limit's room and the cgroup's) when that is smaller; without ``limit``, the smaller
    of :data:`DEFAULT_CAP` and :data:`DEFAULT_FRACTION` of the budget (the one place the default is
    decided). None: no limit known."""
    budget = budget if budget is not None else memory_budget()
    if limit is None:
        if budget.bytes is None:
            return None, ""
        share = int(budget.bytes * DEFAULT_FRACTION)
        if share > DEFAULT_CAP:
            return DEFAULT_CAP, (f"the default of {format_bytes(DEFAULT_CAP)}, below {DEFAULT_FRACTION:.0%} of "
                                 f"the {format_bytes(budget.bytes)} {budget.source}")
        return share, f"{DEFAULT_FRACTION:.0%} of the {format_bytes(budget.bytes)} {budget.source}"
    if budget.bytes is not None and budget.bytes < limit:
        return budget.bytes, f"the memory {budget.source}, below `max_memory` {format_bytes(limit)}"
    return limit, "`max_memory`"


def _raise_what(required: int, source: str, budget: MemoryBudget) -> str:
    """What to raise for a plan of ``required`` bytes over a limit set by ``source``: ``max_memory`` cannot
    lift the plan past the budget."""
    over = source != "`max_memory`" and (source.startswith("the memory") or (
        budget.bytes is not None and required > budget.bytes))
    return "that limit" if over else "`max_memory`"


def fit_to_memory(model_name: str, config: dict[str, Any], *, tokens: int, documents: int = 0,
                  batch_tokens: int = 0, train_documents: int | None = None, limit: int | None = None,
                  can_shrink: bool = True, log: Callable[[str], None] | None = None, longest: int = 0,
                  budget: MemoryBudget | None = None) -> dict[str, Any]:
    """``config``, with fewer n-gram bigram rows when the run would not fit in ``limit`` bytes.

    The limit is :func:`limit_and_source` of ``limit`` (``max_memory``, None: a share of the memory) and
    ``budget`` (None: :func:`attnkit._memory.memory_budget` now). Raises :class:`MemoryLimitError`,
    naming the limit that bound and the plan, when it cannot fit.
    """
    budget = budget if budget is not None else memory_budget()
    limit, source = limit_and_source(limit, budget)
    if limit is None:
        return config

    def raise_what(required: int) -> str:
        return _raise_what(required, source, budget)

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
