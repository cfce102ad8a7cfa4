"""A plain training loop for the NumPy classifiers.

Each epoch shuffles the training set with a seeded generator, cuts it into
mini-batches (each padded to its own longest sequence), and for each batch
runs forward, softmax cross-entropy, backward, optional gradient clipping and
one optimizer step. After each epoch it records the mean training loss and,
with validation data, the validation accuracy; early stopping keeps the
parameters of the best epoch and stops after ``patience`` epochs without a
better one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from attnkit._finite import StepGuard, refuse_non_finite, refuse_non_finite_metrics
from attnkit._modes import eval_mode
from attnkit.reference.analysis import accuracy
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.module import Module
from attnkit.reference.optim import Optimizer, clip_grad_norm
from attnkit.reference.text import pad_batch

__all__ = ["History", "Trainer", "lr_factor", "predict"]

Sequences = Sequence[Sequence[int]]


@dataclass
class History:
    """Per-epoch figures of one :meth:`Trainer.fit` run."""

    train_loss: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    best_epoch: int = -1
    stopped_early: bool = False
    skipped_steps: list[int] = field(default_factory=list)


def predict(model: Module, sequences: Sequences, batch_size: int = 256, max_len: int | None = None) -> np.ndarray:
    """Class predictions in eval mode, batch by batch.

    Shape:
        ``N`` id sequences in; returns ``(N,)`` ints.
    """
    out = []
    with eval_mode(model):
        for i in range(0, len(sequences), batch_size):
            logits = model.forward(pad_batch(sequences[i : i + batch_size], max_len))  # type: ignore[attr-defined]
            out.append(logits.argmax(axis=-1))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def lr_factor(step: int, total_steps: int, warmup_steps: int, min_ratio: float = 0.0) -> float:
    """Learning-rate multiplier at optimizer step ``step`` (0-based).

    Rises linearly over ``warmup_steps`` steps (``(step + 1) / warmup_steps``),
    then falls linearly from 1 to ``min_ratio`` at ``total_steps`` — the
    schedule of BERT (Devlin et al., 2019). A pure function of the step, so
    resuming only needs the step count. The torch trainer uses the same
    function (``attnkit.train.config.warmup_linear_factor``).
    """
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    remaining = max(total_steps - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / remaining, 1.0)
    return 1.0 - (1.0 - min_ratio) * progress


class Trainer:
    """Mini-batch training with shuffling, clipping, validation and early stopping.

    Args:
        model: a classifier with ``forward(ids) -> logits`` and ``backward(dlogits)``.
        optimizer: built on ``model.parameters()`` and ``model.gradients()``.
        batch_size: examples per step.
        clip_norm: clip the global gradient norm to this (``None``: no clipping).
        patience: stop after this many epochs without a better validation accuracy.
        seed: seed of the shuffling generator.
        max_len: truncate sequences to this many tokens.
        warmup_ratio: ``None`` keeps the optimizer's rate constant; a share
            ``r`` in ``[0, 1)`` raises it linearly over the first ``r`` of all
            steps of :meth:`fit` and then lowers it linearly to 0 at the last
            step (the torch trainer's schedule, :func:`lr_factor`).
        on_nan: what a step with a non-finite loss or gradient norm does:
            ``"stop"`` training with an error, or ``"skip-step"``, as in the
            torch trainer (:mod:`attnkit._finite`).

    Shape:
        ``train_step``: ids ``(B, T)``, labels ``(B,)``; ``fit``: ``N`` id
        sequences and labels ``(N,)``.
    """

    def __init__(self, model: Module, optimizer: Optimizer, *, batch_size: int = 32,
                 clip_norm: float | None = 1.0, patience: int | None = None, seed: int = 0,
                 max_len: int | None = None, warmup_ratio: float | None = None, on_nan: str = "stop") -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if warmup_ratio is not None and (isinstance(warmup_ratio, bool) or not 0.0 <= warmup_ratio < 1.0):
            raise ValueError(f"warmup_ratio must be None or a number in [0, 1), got {warmup_ratio!r}")
        self.warmup_ratio = warmup_ratio
        self.model, self.optimizer = model, optimizer
        self.batch_size, self.clip_norm, self.patience = batch_size, clip_norm, patience
        self.max_len = max_len
        self.rng = np.random.default_rng(seed)
        self.loss = SoftmaxCrossEntropy()
        self.guard = StepGuard(on_nan)
        self.epoch = 0  # the epoch under way (1-based) and the steps taken, for the guard's messages
        self.step = 0

    def train_step(self, ids: np.ndarray, labels: np.ndarray) -> float:
        """One forward/backward/update on a padded batch; returns the loss."""
        self.model.train()
        self.model.zero_grad()
        # A diverging step is told by the guard below, in one line, not by NumPy's overflow warnings.
        with np.errstate(over="ignore", invalid="ignore"):
            logits = self.model.forward(ids)  # type: ignore[attr-defined]
            loss = self.loss.forward(logits, labels)
            self.model.backward(self.loss.backward().astype(logits.dtype))  # type: ignore[attr-defined]
            # Without clipping the norm is still measured (an infinite bound scales nothing).
            norm = clip_grad_norm(self.optimizer.grads, self.clip_norm or float("inf"))
        self.step += 1
        if self.guard.allow(float(loss), norm, epoch=self.epoch, step=self.step):
            self.optimizer.step()
        return loss

    def fit(self, train_x: Sequences, train_y: np.ndarray, *, epochs: int,
            val_x: Sequences | None = None, val_y: np.ndarray | None = None,
            log: Callable[[str], None] | None = None) -> History:
        """Train for up to ``epochs`` epochs; returns the :class:`History`."""
        if len(train_x) != len(train_y):
            raise ValueError(f"train_x has {len(train_x)} examples, train_y {len(train_y)}")
        history = History()
        best_acc, best_params, waited = -1.0, None, 0
        labels = np.asarray(train_y)
        base_lr, step = self.optimizer.lr, 0
        total = epochs * -(-len(train_x) // self.batch_size)
        warmup = int((self.warmup_ratio or 0.0) * total)
        for epoch in range(epochs):
            start = time.perf_counter()
            order = self.rng.permutation(len(train_x))
            losses = []
            self.epoch, skipped = epoch + 1, self.guard.skipped
            for i in range(0, len(order), self.batch_size):
                idx = order[i : i + self.batch_size]
                ids = pad_batch([train_x[j] for j in idx], self.max_len)
                if self.warmup_ratio is not None:
                    self.optimizer.lr = base_lr * lr_factor(step, total, warmup)
                losses.append(self.train_step(ids, labels[idx]))
                step += 1
            params = self.model.parameters()
            refuse_non_finite([k for k, v in params.items() if not np.isfinite(v).all()], epoch=epoch + 1,
                              step=self.step)
            history.skipped_steps.append(self.guard.skipped - skipped)
            finite = [x for x in losses if np.isfinite(x)]  # the steps taken
            # an epoch whose every step was skipped trained nothing: its weights give NaN
            refuse_non_finite_metrics({"train_loss": float(np.mean(finite)) if finite else float("nan")},
                                      epoch=epoch + 1, step=self.step)
            history.train_loss.append(float(np.mean(finite)))
            history.epoch_seconds.append(time.perf_counter() - start)
            line = f"epoch {epoch + 1:2d}  train loss {history.train_loss[-1]:.4f}"
            if val_x is not None and val_y is not None:
                with np.errstate(over="ignore", invalid="ignore"):
                    acc = accuracy(predict(self.model, val_x, max_len=self.max_len), np.asarray(val_y))
                history.val_accuracy.append(acc)
                line += f"  val acc {acc:.4f}"
                if acc > best_acc:
                    best_acc, waited, history.best_epoch = acc, 0, epoch
                    best_params = {k: v.copy() for k, v in self.model.parameters().items()}
                else:
                    waited += 1
            line += f"  ({history.epoch_seconds[-1]:.1f}s)"
            if log is not None:
                log(line)
            if self.patience is not None and best_params is not None and waited >= self.patience:
                history.stopped_early = True
                break
        if best_params is not None:
            for k, v in self.model.parameters().items():
                v[...] = best_params[k]
        self.optimizer.lr = base_lr
        return history
