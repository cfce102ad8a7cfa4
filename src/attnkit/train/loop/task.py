"""What differs between training tasks: the small interface :class:`~attnkit.train.Trainer` drives.

A task knows its data and its loss; the trainer owns everything else (the
optimizer step, the schedule, clipping, validation bookkeeping, early stopping,
checkpoints, exact resume, data-parallel processes). A task provides:

``batches(epoch, rank, world_size)``
    the training batches of one epoch (0-based), a pure function of the epoch
    so that a resumed run sees the same batches;
``step(net, batch) -> StepOutput``
    the loss of one batch (and per-item metrics such as accuracy);
``validate(model) -> dict | None``
    validation metrics after an epoch (None: the task has no validation data);
``score(metrics) -> tuple``
    the ordering of validation results (bigger is better) for the best weights
    and early stopping.

and two attributes: ``keep_best`` (restore the best validation weights at the
end) and ``weights_kind``. Each task lives in its own folder under ``train/tasks/``
(the text classifiers' ``ClassificationTask`` in ``tasks/classify/task.py``); this module names none.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn

__all__ = ["sorted_batches", "in_input_order", "StepOutput", "TrainTask", "epoch_batches", "Batch", "Collate"]

Batch = dict[str, Tensor]
Collate = Callable[[list[Any]], Batch]
_POOL = 50  # batches per length-sorting pool when bucketing


@dataclass
class StepOutput:
    """The loss of one batch, the number of items it averages over, and per-item mean metrics."""

    loss: Tensor
    weight: float
    metrics: dict[str, float] = field(default_factory=dict)


class TrainTask(Protocol):
    """The interface :class:`~attnkit.train.Trainer` drives (see the module docstring)."""

    keep_best: bool

    def batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> Iterable[Any]: ...

    def step(self, net: nn.Module, batch: Any) -> StepOutput: ...

    def validate(self, model: nn.Module) -> dict[str, float] | None: ...

    def score(self, metrics: dict[str, float]) -> tuple[float, ...]: ...


def epoch_batches(
    n: int, batch_size: int, seed: int, epoch: int, *, lengths: Sequence[int] | None = None,
    rank: int = 0, world_size: int = 1, max_tokens: int | None = None,
) -> list[list[int]]:
    """The batches (lists of example indices) of one epoch for one process.

    A seeded permutation of ``range(n)``; with several processes each takes
    every ``world_size``-th index (the permutation wrapped around so all get the
    same count, as ``DistributedSampler`` does). With ``lengths``, indices are
    sorted by length within pools of ``50 * batch_size`` before batching and the
    batches are shuffled again, which cuts padding without fixing the order.
    ``max_tokens`` (with ``lengths``, on one process) also ends a batch before its
    padded size, its member count times its longest length, would pass that many
    tokens: long documents come in smaller batches, so a batch's activations stay
    bounded (a document longer than ``max_tokens`` is a batch of its own).
    Several processes need the same batch count each, so there it is not applied.
    """
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    perm = torch.randperm(n, generator=g).tolist()
    if world_size > 1:
        per_rank = math.ceil(n / world_size)
        perm = (perm * world_size)[: per_rank * world_size] if n else perm
        perm = perm[rank::world_size]
    if lengths is None:
        return [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
    batches: list[list[int]] = []
    pool = batch_size * _POOL
    for start in range(0, len(perm), pool):
        chunk = sorted(perm[start : start + pool], key=lambda i: lengths[i])
        if max_tokens is None or world_size > 1:
            batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
        else:
            batches.extend(_token_batches(chunk, lengths, batch_size, max_tokens))
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


def _token_batches(ordered: Sequence[int], lengths: Sequence[int], batch_size: int, max_tokens: int
                   ) -> list[list[int]]:
    """``ordered`` cut, in its order, into batches of at most ``batch_size`` members and, past the first
    member, at most ``max_tokens`` padded tokens (members times the longest)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in ordered:
        wider = max(longest, lengths[i])
        if current and (len(current) == batch_size or (len(current) + 1) * wider > max_tokens):
            batches.append(current)
            current, wider = [], lengths[i]
        current.append(i)
        longest = wider
    if current:
        batches.append(current)
    return batches


def sorted_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """The batches of prediction: every index of ``lengths`` once, shortest documents first (ties in order),
    cut into batches of at most ``batch_size`` members and, with ``max_tokens``, past the first member at most
    that many padded tokens (members times the longest). Neighbours in length pad little, so a pass over a
    validation or test part costs about its tokens, not its batches times its longest documents; put the
    results back in order with :func:`in_input_order`."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return _token_batches(order, lengths, batch_size, max_tokens if max_tokens is not None else sys.maxsize)


def in_input_order(batches: Sequence[Sequence[int]], rows: Sequence[Tensor]) -> Tensor:
    """The rows computed batch by batch over ``batches`` (:func:`sorted_batches`), as one tensor in the order
    of the indices.

    Shape:
        rows: one ``(len(batch), ...)`` tensor a batch; returns ``(N, ...)``.
    """
    return torch.cat(list(rows))[torch.tensor([i for batch in batches for i in batch], dtype=torch.long).argsort()]
