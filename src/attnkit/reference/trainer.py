"""A plain training loop for the NumPy classifiers.

Each epoch shuffles the training set with a seeded generator, cuts it into
mini-batches (each padded to its own longest sequence), and for each batch
runs forward, softmax cross-entropy, backward, optional gradient clipping and
one optimizer step. After each epoch it records the mean training loss and,
with validation data, the validation accuracy; early stopping keeps the
parameters of the best epoch and stops after ``patience`` epochs without a
better one. :meth:`Trainer.state` is what going on exactly after an epoch needs.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnkit._finite import StepGuard, refuse_non_finite, refuse_non_finite_metrics
from attnkit._modes import eval_mode
from attnkit.reference.analysis import accuracy
from attnkit.reference.losses import SoftmaxCrossEntropy
from attnkit.reference.module import Module, load_arrays
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
        self.history = History()  # the epochs run: fit goes on after them
        self.best: dict[str, np.ndarray] | None = None  # the best epoch's weights (with validation data)

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
            log: Callable[[str], None] | None = None, on_epoch: Callable[[], None] | None = None) -> History:
        """Train up to epoch ``epochs``, after those :attr:`history` holds (a trainer given a saved
        :meth:`state` goes on as if never stopped), calling ``on_epoch()`` after each; returns :attr:`history`."""
        if len(train_x) != len(train_y):
            raise ValueError(f"train_x has {len(train_x)} examples, train_y {len(train_y)}")
        history, labels = self.history, np.asarray(train_y)
        base_lr, per_epoch = self.optimizer.lr, -(-len(train_x) // self.batch_size)
        total = epochs * per_epoch
        warmup = int((self.warmup_ratio or 0.0) * total)
        while len(history.train_loss) < epochs and not history.stopped_early:
            epoch = len(history.train_loss)
            step, start = epoch * per_epoch, time.perf_counter()
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
                if self.best is None or acc > history.val_accuracy[history.best_epoch]:
                    history.best_epoch, self.best = epoch, {k: v.copy() for k, v in params.items()}
                waited = len(history.val_accuracy) - 1 - history.best_epoch
                history.stopped_early = self.patience is not None and waited >= self.patience
            line += f"  ({history.epoch_seconds[-1]:.1f}s)"
            if log is not None:
                log(line)
            if on_epoch is not None:
                on_epoch()
        if self.best is not None:
            load_arrays(self.model.parameters(), self.best, "the best weights")
        self.optimizer.lr = base_lr
        return history

    def state(self) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
        """What :meth:`fit` needs to go on exactly (:meth:`load_state`): arrays by group (the ``last`` weights,
        the ``optimizer``'s state, the ``best`` weights when kept) and the JSON-ready rest (the history, the step
        and skip counters, the state of every generator training draws from: the shuffling and the dropout)."""
        arrays = {"last": self.model.parameters(), "optimizer": self.optimizer.state_dict(),
                  **({"best": self.best} if self.best is not None else {})}
        return arrays, {"history": dataclasses.asdict(self.history), "step": self.step,
                        "skipped": [self.guard.skipped, self.guard.in_a_row],
                        "rng": {name: g.bit_generator.state for name, g in self._generators().items()}}

    def load_state(self, arrays: dict[str, dict[str, np.ndarray]], rest: dict[str, Any]) -> None:
        """Restore :meth:`state`; a part that does not fit this trainer is a KeyError, TypeError or ValueError."""
        load_arrays(self.model.parameters(), arrays["last"], "the last weights")
        self.optimizer.load_state_dict(arrays["optimizer"])
        if "best" in arrays:
            self.best = {k: v.copy() for k, v in self.model.parameters().items()}
            load_arrays(self.best, arrays["best"], "the best weights")
        self.history = History(**rest["history"])
        self.step = int(rest["step"])
        self.guard.skipped, self.guard.in_a_row = (int(n) for n in rest["skipped"])
        for name, generator in self._generators().items():
            generator.bit_generator.state = rest["rng"][name]

    def _generators(self) -> dict[str, np.random.Generator]:
        """Every NumPy generator training draws from, by the first attribute that holds it: ``rng`` (the
        shuffling) and the model's (``model.dropout.rng``...)."""
        found = {"rng": self.rng}
        for path, module in self.model.named_modules("model."):
            for attr, value in vars(module).items():
                if isinstance(value, np.random.Generator) and all(value is not g for g in found.values()):
                    found[path + attr] = value
        return found
