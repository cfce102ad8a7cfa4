"""The training configuration: one frozen dataclass, saved with every run."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from attnkit._checks import dataclass_kwargs, positive_int
from attnkit._finite import check_on_nan
from attnkit.reference.trainer import lr_factor as warmup_linear_factor
from attnkit.train.metrics import check_metric
from attnkit.train.objective import CLASS_WEIGHTS

__all__ = ["TrainConfig", "warmup_linear_factor"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything the training loop needs besides the model and the data.

    Args:
        epochs: passes over the training set (at most; early stopping may end sooner).
        batch_size: examples per optimizer step on each process.
        lr: peak learning rate of AdamW (Loshchilov and Hutter, 2019).
        weight_decay: decoupled weight decay, applied to parameters with two or
            more dimensions only (biases and norm scales are not decayed).
        warmup_ratio: share of all steps over which the rate rises linearly from
            0 to ``lr``; it then falls linearly to ``lr * min_lr_ratio``.
        min_lr_ratio: the final rate as a share of ``lr``.
        clip_norm: clip the global gradient norm to this value; ``0`` turns clipping off.
        patience: stop after this many epochs without a better validation
            accuracy and restore the best weights; ``0`` turns early stopping off.
        seed: seeds the weights' initialisation (by the caller), dropout and the batch order.
        bucket: group examples of similar length into batches (less padding), still shuffled.
        label_smoothing: cross-entropy label smoothing.
        pack: ``0`` (off) or the tokens per row: pack each training batch's
            documents into rows of this many tokens (:mod:`attnkit.data.packing`);
            it must be at least the longest document (the data's ``max_len``).
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        on_nan: what a step with a non-finite loss or gradient norm does:
            ``"stop"`` training with an error naming the epoch and step, or
            ``"skip-step"`` (leave the weights as they were, count the skip,
            stop after too many in a row); see :mod:`attnkit._finite`.
        metric: the measure the run is trained for (:data:`attnkit.train.metrics.METRICS` or
            ``f1:<class>``): early stopping, the best epoch, the weighing of an n-gram half and the
            tuned class offsets follow it (:mod:`attnkit.train.objective`).
        class_weight: ``"none"`` or ``"balanced"`` (each class weighs alike in the losses).
        tune_thresholds: tune per-class offsets on the validation part for ``metric``
            (None: when ``metric`` is not accuracy).
    """

    epochs: int = 10
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    min_lr_ratio: float = 0.0
    clip_norm: float = 1.0
    patience: int = 3
    seed: int = 0
    bucket: bool = True
    label_smoothing: float = 0.0
    device: str = "auto"
    pack: int = 0
    on_nan: str = "stop"
    metric: str = "accuracy"
    class_weight: str = "none"
    tune_thresholds: bool | None = None

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size"):
            positive_int(name, getattr(self, name))
        for name in ("patience", "seed", "pack"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        checks = {
            "lr": lambda v: v > 0,
            "weight_decay": lambda v: v >= 0,
            "warmup_ratio": lambda v: 0 <= v < 1,
            "min_lr_ratio": lambda v: 0 <= v <= 1,
            "clip_norm": lambda v: v >= 0,
            "label_smoothing": lambda v: 0 <= v < 1,
        }
        ranges = {"lr": "> 0", "weight_decay": ">= 0", "warmup_ratio": "in [0, 1)",
                  "min_lr_ratio": "in [0, 1]", "clip_norm": ">= 0", "label_smoothing": "in [0, 1)"}
        for name, ok in checks.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise ValueError(f"{name} must be a number {ranges[name]}, got {value!r}")
        check_on_nan(self.on_nan)
        check_metric(self.metric)
        if self.class_weight not in CLASS_WEIGHTS:
            raise ValueError(f"class_weight must be one of {list(CLASS_WEIGHTS)}, got {self.class_weight!r}")
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Build from a dict: unknown keys raise a ValueError listing the valid ones, a value of the wrong type
        a TypeError naming the field (:func:`attnkit._checks.dataclass_kwargs`), a bad range a ValueError."""
        return cls(**dataclass_kwargs(cls, d))
