"""Memory checked before it is spent: the limit a run plans against, and the estimate every plan is made of.

:func:`limit_and_source` is the limit: ``--max-memory``, or by default the smaller of :data:`DEFAULT_CAP`
(4 GB) and :data:`DEFAULT_FRACTION` of the memory budget, and never more than the budget
(:func:`attnkit._memory.memory_budget`: the least of ``MemAvailable``, the room ``RLIMIT_AS`` leaves beside
the process's virtual size, and the room its memory cgroup leaves). A plan over it is refused with
:class:`MemoryLimitError`, which names the plan and the limit that bound: ``max_memory`` (written as
``--max-memory`` by a command that has the flag: :func:`attnkit.cli.messages.in_flags`), ``MemAvailable``,
``RLIMIT_AS`` or the cgroup's limit file. :class:`MemoryEstimate` is a plan's parts; :func:`module_bytes`
measures a model exactly without allocating it (built on torch's ``meta`` device).

The limit covers what the run allocates, not the interpreter and libraries (about 0.35 GB resident when
the plan is made); ``evals/memory_plan.py`` sets the plan plus that resident size against each kind's
measured peak. :func:`peak_rss_mib` is the peak a run reports in its metrics.

Each task plans itself in its folder: the classifiers (which shrink their n-gram half to fit) in
``train/tasks/classify/memory.py``, translation in ``train/tasks/translate/translation_memory.py``,
captioning in ``train/tasks/caption/caption_memory.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnkit._memory import MemoryBudget, available_memory, format_bytes, memory_budget, peak_rss_mib

__all__ = ["DEFAULT_FRACTION", "DEFAULT_CAP", "DEFAULT_HELP", "max_memory_help",
           "MemoryLimitError", "MemoryEstimate", "MemoryBudget",
           "parse_memory_size", "format_bytes", "available_memory", "memory_budget",
           "limit_and_source", "peak_rss_mib", "module_bytes"]

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



def max_memory_help(shrinks: str = "") -> str:
    """``--max-memory``'s help: the limit, and above it what the run does: ``shrinks`` (how a task's run shrinks
    to fit, said by the task), else it is refused before the model is trained."""
    above = (f"{shrinks}, or the run is refused before anything large is allocated." if shrinks else
             "the run is refused before the model is trained, naming its plan.")
    return (f"Memory the run may plan to use, e.g. 4GB or 800MB (default: {DEFAULT_HELP} at the start, whatever "
            f"the machine's size; never more than that memory). Above it {above}")

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


