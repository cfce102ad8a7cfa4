"""The text classifiers' task (:mod:`attnkit.train.loop.task` describes the interface it gives the trainer)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset

from attnkit._checks import positive_int
from attnkit._modes import eval_mode
from attnkit.train.loop.task import Batch, Collate, StepOutput, epoch_batches, in_input_order, sorted_batches
from attnkit.train.metrics import classification_report, metric_score
from attnkit.train.runs.tensors import unwrap, weights_version

__all__ = ["ClassificationTask"]


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
        self._halves: tuple[Any, ...] | None = None  # predict's last halves: data, weights' versions, own, wide, labels
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
    def predict(self, model: nn.Module, data: Dataset, *, batch_size: int = 64, pooling: bool = False,
                halves: bool = False) -> Any:
        """Logits ``(N, C)`` and labels ``(N,)`` of every item of ``data``, in order (eval mode); with ``pooling``
        a third item from the same pass: each item's pooling weights over its tokens, in order (None for a model
        that pools without attention; :func:`~attnkit.train.tasks.classify.inference.pooling_weights`).

        With a ``data.lengths``, documents of like length share a batch
        (:func:`~attnkit.train.loop.task.sorted_batches`) and, with ``max_tokens``, a batch also stops short of
        that many padded tokens.

        A model with an n-gram half is read one half at a time
        (:meth:`~attnkit.models.ngram_half.NgramHalf.halves`, the same logits), and the last such pass keeps
        both halves' logits with the version counters of the weights it read. ``halves`` returns them instead,
        ``own (N, C)``, ``wide (N, C)`` and labels: the kept ones when that pass read ``data`` with the same
        weights (the validation pass that chose them: no second pass for the halves' weighing), otherwise
        from a new pass; an in-place change to any weight or buffer (a step, a load) moves its counter."""
        from attnkit.train.tasks.classify.inference import pooling_weights

        net: Any = unwrap(model)
        split = bool(getattr(net, "has_ngram_half", False)) and not pooling
        if halves:
            if not split:
                raise ValueError(f"{type(net).__name__} has no n-gram half to read apart")
            kept = self._halves
            if kept is None or kept[0] is not data or kept[1] != weights_version(net):
                self.predict(model, data, batch_size=batch_size)
                kept = self._halves
            assert kept is not None
            return kept[2:]
        n = len(data)  # type: ignore[arg-type]
        lengths = getattr(data, "lengths", None)
        spans = sorted_batches(lengths if lengths is not None else [0] * n, batch_size,
                               self.max_tokens if lengths is not None else None)
        logits, labels, weights = [], [], ([None] * n if pooling else None)
        seen: list[tuple[Tensor, Tensor]] = []
        with eval_mode(model):
            for span in spans:
                batch = self._to_device(self.collate([data[i] for i in span]))
                out = None
                if weights is not None:
                    try:
                        out, w = pooling_weights(model, batch["ids"], batch["lengths"])  # (B, C), (B, T)
                        for i, row, length in zip(span, w, batch["lengths"], strict=True):
                            weights[i] = row[: int(length)].float().tolist()
                    except ValueError:  # a model without pooling attention (mean pooling)
                        weights = None
                if split:
                    own, wide = net.halves(batch["ids"], batch["lengths"])
                    seen.append((own.float().cpu(), wide.float().cpu()))
                    out = own + net.wide_scale * wide  # classify's own sum
                if out is None:
                    out = model(batch["ids"], batch["lengths"])
                logits.append(out.float().cpu())
                labels.append(batch["labels"].cpu())
        if not logits:
            found = torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
        else:
            found = in_input_order(spans, logits), in_input_order(spans, labels)
            if split:
                self._halves = (data, weights_version(net), in_input_order(spans, [o for o, _ in seen]),
                                in_input_order(spans, [w for _, w in seen]), found[1])
        return (*found, weights) if pooling else found

    def evaluate(self, model: nn.Module, data: Dataset) -> dict[str, Any]:
        """Loss and every measure of :func:`attnkit.train.metrics.classification_report` of ``model`` on ``data``
        (:meth:`measure`)."""
        return self.measure(*self.predict(model, data, batch_size=max(self.batch_size, 64)))

    def measure(self, logits: Tensor, labels: Tensor) -> dict[str, Any]:
        """Loss and every measure of :func:`attnkit.train.metrics.classification_report` of ``logits`` ``(N, C)``
        against ``labels`` ``(N,)``; with a ``metric`` other than those, its value too (``f1:<class>``: the
        class's F1)."""
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
