"""Memory checked before it is spent: a classifier's size estimated from the data, against a limit.

:func:`fit_to_memory` runs after the documents are encoded and before the model
is built. It measures the model exactly without allocating it (built on
torch's ``meta`` device: parameters count four times, for their gradients and
two AdamW moments; buffers once), adds what fitting an n-gram half
(:mod:`attnkit.models.ngram_half`) allocates (:func:`attnkit.models.ngram_half.fit_bytes`,
per training token read: a model reading long documents in chunks reads up to
its ``reading_length``, not ``--max-len``), the encoded documents, and the
activations of the largest training batch (for a model whose config has
``activation_bytes(tokens)``, as :class:`attnkit.models.WideDeepClassifierConfig`
does; the batches of long documents are capped in tokens, see
:func:`attnkit.train.tasks.epoch_batches`), and compares the sum with the limit: ``--max-memory``,
or by default :data:`DEFAULT_FRACTION` of the memory available now
(``MemAvailable`` of ``/proc/meminfo``). Above it, the n-gram half's bigram rows
shrink to what fits, and the run says so in one line; when even no bigram rows
would fit (the vocabulary times the classes alone is too large), or the model
cannot shrink (a resumed run), it is refused with :class:`MemoryLimitError`,
which names ``max_memory`` (written as ``--max-memory`` by a command that has the flag:
:func:`attnkit.cli.messages.in_flags`).

The limit covers what the run allocates, not the interpreter and libraries
(about 0.3 GB). :func:`peak_rss_mib` is the peak a run reports in its metrics.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnkit._memory import available_memory, peak_rss_mib

__all__ = ["DEFAULT_FRACTION", "MemoryLimitError", "MemoryEstimate", "parse_memory_size", "format_bytes",
           "available_memory", "default_limit", "peak_rss_mib", "model_bytes", "estimate_classifier",
           "fit_to_memory", "ROW_FIELDS"]

DEFAULT_FRACTION = 0.8
"""Share of the available memory a run may plan to use when ``--max-memory`` is not given."""

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


def format_bytes(n: float) -> str:
    """``1.23 GB``, ``456 MB`` or ``789 kB`` (powers of 1000, as :func:`parse_memory_size` reads them)."""
    for unit, size in (("GB", 10**9), ("MB", 10**6)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n / 10**3:.3g} kB"


def default_limit() -> int | None:
    """:data:`DEFAULT_FRACTION` of :func:`available_memory` (None: unknown, no limit)."""
    free = available_memory()
    return None if free is None else int(free * DEFAULT_FRACTION)


def model_bytes(model_name: str, config: dict[str, Any]) -> tuple[int, int]:
    """Bytes of ``model_name``'s parameters and buffers for ``config``, measured without allocating them."""
    import torch

    from attnkit.models import build_model

    with torch.device("meta"):
        model = build_model(model_name, config)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return params, buffers


@dataclass(frozen=True)
class MemoryEstimate:
    """What a classifier run allocates, in bytes: model (parameters x 4 and buffers), n-gram fit, documents,
    and one training batch's activations."""

    params: int
    buffers: int
    ngram_fit: int
    documents: int
    activations: int = 0

    @property
    def total(self) -> int:
        return 4 * self.params + self.buffers + self.ngram_fit + self.documents + self.activations


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


def estimate_classifier(model_name: str, config: dict[str, Any], *, tokens: int, documents: int = 0,
                        batch_tokens: int = 0, train_documents: int | None = None) -> MemoryEstimate:
    """:class:`MemoryEstimate` of training ``model_name`` with ``config`` on ``tokens`` training tokens
    (``documents``: the bytes the encoded documents hold; ``batch_tokens``: the padded tokens of the
    largest training batch, counted for a config with ``activation_bytes``; ``train_documents``: how many
    training documents hold the tokens, None: as many as tokens)."""
    from attnkit.models import config_from_dict
    from attnkit.models.ngram_half import fit_bytes

    params, buffers = model_bytes(model_name, config)
    field, rows = _rows(model_name, config)
    fit = 0
    if field is not None:
        fit = fit_bytes(int(config["vocab_size"]) + rows, int(config["num_classes"]), tokens, train_documents)
    per_batch = getattr(config_from_dict(model_name, config), "activation_bytes", None)
    activations = int(per_batch(batch_tokens)) if per_batch is not None and batch_tokens > 0 else 0
    return MemoryEstimate(params, buffers, fit, documents, activations)


def _levers(need: MemoryEstimate) -> str:
    """The settings that lower ``need``: the vocabulary and classes, and the batch when it holds activations."""
    if need.activations:
        return (f"`vocab_size`, the number of classes, or `batch_size` (one batch's activations: about "
                f"{format_bytes(need.activations)})")
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
                  can_shrink: bool = True, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``config``, with fewer n-gram bigram rows when the run would not fit in ``limit`` bytes.

    ``limit`` None is :func:`default_limit`. Raises :class:`MemoryLimitError` when it cannot fit.
    """
    if limit is None:
        limit = default_limit()
        if limit is None:
            return config
        source = f"{DEFAULT_FRACTION:.0%} of the {format_bytes(limit / DEFAULT_FRACTION)} available"
    else:
        source = "`max_memory`"
    sizes: dict[str, Any] = {"tokens": tokens, "documents": documents, "batch_tokens": batch_tokens,
                             "train_documents": train_documents}
    need = estimate_classifier(model_name, config, **sizes)
    if need.total <= limit:
        return config
    field, rows = _rows(model_name, config)
    what = (f"{model_name} with {config.get('vocab_size')} words and {config.get('num_classes')} classes "
            f"needs about {format_bytes(need.total)}")
    if field is None or not can_shrink:
        why = "" if field is None else " (a resumed run keeps its n-gram rows)"
        raise MemoryLimitError(f"{what}, over the limit of {format_bytes(limit)} ({source}){why}; raise "
                               f"`max_memory`, or lower {_levers(need)}")
    fit = _most_rows(model_name, config, field, rows - 1, limit, sizes)
    if fit < MIN_ROWS:
        smallest = estimate_classifier(model_name, {**config, field: MIN_ROWS}, **sizes)
        raise MemoryLimitError(f"{what}, over the limit of {format_bytes(limit)} ({source}), and about "
                               f"{format_bytes(smallest.total)} even with {MIN_ROWS} n-gram rows; raise "
                               f"`max_memory` to at least that, or lower {_levers(need)}")
    shrunk = {**config, field: int(fit)}
    if log is not None:
        after = estimate_classifier(model_name, shrunk, **sizes)
        log(f"memory: {rows} n-gram rows would need about {format_bytes(need.total)}, over the limit of "
            f"{format_bytes(limit)} ({source}); using the {fit} most frequent bigrams "
            f"(about {format_bytes(after.total)}; `max_memory` to change)")
    return shrunk
