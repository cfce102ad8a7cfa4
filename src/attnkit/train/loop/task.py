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
end) and ``weights_kind``. :class:`ClassificationTask` is the text classifiers'
task; :mod:`attnkit.train.tasks.translate.translation` and :mod:`attnkit.train.tasks.caption.captioning`
define theirs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from attnkit._checks import positive_int
from attnkit._modes import eval_mode
from attnkit.train.metrics import classification_report, metric_score

__all__ = ["ordered_batches", "StepOutput", "TrainTask", "ClassificationTask", "epoch_batches"]

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


def ordered_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[range]:
    """Consecutive spans of ``range(len(lengths))``, in order, of at most ``batch_size`` members and, with
    ``max_tokens``, past the first member at most that many padded tokens (members times the longest of
    ``lengths``): the batches of prediction."""
    n = len(lengths)
    if max_tokens is None:
        return [range(start, min(n, start + batch_size)) for start in range(0, n, batch_size)]
    return [range(b[0], b[-1] + 1) for b in _token_batches(range(n), lengths, batch_size, max_tokens)]


class ClassificationTask:
    """Text classification: ``model(ids, lengths) -> logits (B, C)`` with cross-entropy.

    Args:
        train_data: a dataset whose items ``collate`` turns into batch dicts
            with ``ids``, ``lengths`` and ``labels``.
        val_data: the validation dataset, in the same form.
        collate: default :func:`attnkit.data.batching.collate`.
        lengths: token counts of ``train_data``'s items, for length bucketing
            (None: plain shuffled batches).
        batch_size: examples per batch.
        seed: the batches of epoch ``e`` are a pure function of ``(seed, e)``
            (:func:`epoch_batches`).
        label_smoothing: cross-entropy label smoothing.
        device: where batches go.
        pack: pack each training batch into rows of this many tokens
            (:class:`attnkit.data.packing.PackedCollator`; ``collate`` must then
            be None); the model gets ``segment_ids`` and ``positions`` and returns
            one row of logits per document. Validation and prediction stay padded.
        metric: the measure the best epoch is chosen by (:data:`attnkit.train.metrics.METRICS`
            or ``f1:<class>``, the class named as in ``train_data.label_vocab``).
        class_weight: ``"none"`` or ``"balanced"``: the cross-entropy weighs each class by
            :func:`attnkit.train.tasks.classify.objective.class_weights` of ``train_data.labels``.
        max_tokens: most padded tokens in a training batch, with ``lengths`` (:func:`epoch_batches`;
            None: ``batch_size`` documents whatever their length), and in a batch :meth:`predict` reads.

    Validation metrics: ``loss``, ``accuracy``, ``macro_f1`` and ``metric``; the best epoch
    has the highest ``metric``, ties broken by the lower loss.

    Shape:
        batch ``ids`` ``(B, T)`` (or ``(B, S, T)`` for hierarchical models),
        ``lengths`` ``(B,)``, ``labels`` ``(B,)``; logits ``(B, C)``.
    """

    keep_best = True

    def __init__(self, train_data: Dataset, val_data: Dataset | None = None, *, collate: Collate | None = None,
                 lengths: Sequence[int] | None = None, batch_size: int = 32, seed: int = 0,
                 label_smoothing: float = 0.0, device: torch.device | str = "cpu", pack: int | None = None,
                 metric: str = "accuracy", class_weight: str = "none", max_tokens: int | None = None) -> None:
        n = len(train_data)  # type: ignore[arg-type]
        if n == 0:
            raise ValueError("train_data is empty")
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"lengths must have one entry per training example ({n}), got {len(lengths)}")
        if max_tokens is not None:
            positive_int("max_tokens", max_tokens)
        if pack is not None and collate is not None:
            raise ValueError("pack replaces the collate function: pass one or the other, not both")
        if collate is None:
            from attnkit.data.batching import collate
        self.train_data, self.val_data = train_data, val_data
        self.collate: Collate = collate  # type: ignore[assignment]
        self.train_collate: Collate = self.collate
        if pack is not None:
            from attnkit.data.packing import PackedCollator

            self.train_collate = PackedCollator(pack)
        self.lengths, self.batch_size, self.seed, self.max_tokens = lengths, batch_size, seed, max_tokens
        self.label_smoothing = label_smoothing
        self.device = torch.device(device)
        self.metric, self.class_weight = metric, class_weight
        vocab = getattr(train_data, "label_vocab", None)
        self.label_names: list[str] | None = list(vocab.labels) if vocab is not None else None
        self.loss_weights: Tensor | None = None
        if class_weight != "none":
            from attnkit.train.tasks.classify.objective import class_weights

            if self.label_names is None or not hasattr(train_data, "labels"):
                raise ValueError("class_weight 'balanced' needs a training dataset with labels and label_vocab "
                                 "(a TextClassificationDataset)")
            weights = class_weights(train_data.labels, len(self.label_names), class_weight, self.label_names)
            self.loss_weights = torch.tensor(weights, dtype=torch.float32, device=self.device)

    def batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> list[list[int]]:
        return epoch_batches(len(self.train_data), self.batch_size, self.seed, epoch,  # type: ignore[arg-type]
                             lengths=self.lengths, rank=rank, world_size=world_size,
                             max_tokens=self.max_tokens)

    def _to_device(self, batch: Batch) -> Batch:
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, Tensor) else v
                for k, v in batch.items()}

    def step(self, net: nn.Module, batch: list[int]) -> StepOutput:
        data = self._to_device(self.train_collate([self.train_data[i] for i in batch]))
        if "segment_ids" in data:  # packed rows: one row of logits per document
            logits = net(data["ids"], segment_ids=data["segment_ids"], positions=data["positions"])
        else:
            logits = net(data["ids"], data["lengths"])
        loss = F.cross_entropy(logits, data["labels"], weight=self._weights(logits),
                               label_smoothing=self.label_smoothing)
        correct = float((logits.detach().argmax(-1) == data["labels"]).float().mean())
        return StepOutput(loss, data["labels"].shape[0], {"accuracy": correct})

    def _weights(self, logits: Tensor) -> Tensor | None:
        if self.loss_weights is None:
            return None
        return self.loss_weights.to(device=logits.device, dtype=logits.dtype)

    @torch.no_grad()
    def predict(self, model: nn.Module, data: Dataset, *, batch_size: int = 64) -> tuple[Tensor, Tensor]:
        """Logits ``(N, C)`` and labels ``(N,)`` of every item of ``data``, in order (eval mode).

        With ``max_tokens`` and a ``data.lengths``, a batch also stops short of that many padded tokens."""
        n = len(data)  # type: ignore[arg-type]
        lengths = getattr(data, "lengths", None)
        spans = ordered_batches(lengths if lengths is not None else [0] * n, batch_size,
                                self.max_tokens if lengths is not None else None)
        logits, labels = [], []
        with eval_mode(model):
            for span in spans:
                batch = self._to_device(self.collate([data[i] for i in span]))
                logits.append(model(batch["ids"], batch["lengths"]).float().cpu())
                labels.append(batch["labels"].cpu())
        if not logits:
            return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
        return torch.cat(logits), torch.cat(labels)

    def evaluate(self, model: nn.Module, data: Dataset) -> dict[str, Any]:
        """Loss and every measure of :func:`attnkit.train.metrics.classification_report` of ``model`` on ``data``.

        With a ``metric`` other than those, its value too (``f1:<class>``: the class's F1).
        """
        logits, labels = self.predict(model, data, batch_size=max(self.batch_size, 64))
        if labels.numel() == 0:
            raise ValueError("cannot evaluate on an empty dataset")
        pred = logits.argmax(-1)
        c = logits.shape[-1]
        names = self.label_names if self.label_names is not None and len(self.label_names) == c else None
        report = classification_report(labels, pred, c, names)
        out: dict[str, Any] = {"loss": float(F.cross_entropy(logits, labels)), **report, "n": int(labels.numel())}
        if self.metric not in out:
            out[self.metric] = metric_score(self.metric, labels, pred, c, names)
        return out

    def validate(self, model: nn.Module) -> dict[str, float] | None:
        if self.val_data is None or len(self.val_data) == 0:  # type: ignore[arg-type]
            return None
        metrics = self.evaluate(model, self.val_data)
        keys = dict.fromkeys(("loss", "accuracy", "macro_f1", self.metric))
        return {k: metrics[k] for k in keys}

    def score(self, metrics: dict[str, float]) -> tuple[float, ...]:
        return (metrics[self.metric], -metrics["loss"])
