"""The one training loop, for every task: classification, translation, captioning.

Each optimizer step: the task's loss of one batch (:mod:`attnkit.train.loop.task`),
backward, global gradient-norm clipping, an optimizer step at the rate of a
schedule (:mod:`attnkit.train.loop.schedules`). After each epoch: the task's
validation, one history record, the best weights and early stopping, and —
through the ``checkpoint`` callback or ``out_dir`` — a commit of the complete
resumable state, so that a run interrupted at any moment and resumed with
``fit(resume=True)`` ends with exactly the weights an uninterrupted run would
have. An optional time budget ends training early (time before an interruption
counts).

Defaults are the text classifiers': AdamW (Loshchilov and Hutter, 2019) with
decay on matrices only, linear warm-up then linear decay. Translation passes
Adam and the inverse square-root schedule, captioning Adam and a cosine.

Repeatability: the batches of epoch ``e`` are a pure function of the task's
seed and ``e``; dropout draws from torch's global RNG, whose state is saved and
restored with the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset

from attnkit._finite import StepGuard, refuse_non_finite, refuse_non_finite_metrics
from attnkit._progress import progress
from attnkit.train.config import TrainConfig
from attnkit.train.loop import schedules
from attnkit.train.loop.distributed import DistInfo, all_reduce_sum, resolve_device, resolve_precision
from attnkit.train.loop.task import StepOutput, TrainTask, epoch_batches
from attnkit.train.runs import checkpoint as ckpt

__all__ = ["Trainer", "epoch_batches", "StepOutput", "TrainTask"]


def _progress(total: int, desc: str, enabled: bool) -> Any:
    # a bar on a terminal, a plain line every ATTNKIT_PROGRESS_SECONDS elsewhere (a log file, nohup)
    return progress(total, desc, enabled=enabled, unit="steps")


def _weights(model: nn.Module) -> dict[str, Tensor]:
    """The tensors that describe ``model`` (a model with tied weights stores each tensor once)."""
    saver = getattr(model, "tensors_to_save", None)
    return dict(saver()) if callable(saver) else model.state_dict()


def _load_weights(model: nn.Module, tensors: dict[str, Tensor], source: Path) -> None:
    loader = getattr(model, "load_saved_tensors", None)
    if not callable(loader):
        ckpt.load_weights_into(model, tensors, source)
        return
    try:
        loader(tensors)
    except (KeyError, RuntimeError, ValueError) as err:
        raise ckpt.RunFileError(f"{source} does not fit the model: {err}") from None


class Trainer:
    """Train ``model`` on a task; classification by default.

    Args:
        model: the ``nn.Module`` to train.
        config: a :class:`TrainConfig` (epochs, lr, clipping, patience, seed,
            device...; the classification task also reads batch size, label
            smoothing and bucketing from it).
        train_data: for the default classification task: a dataset whose
            items ``collate_fn`` turns into batches with ``ids``, ``lengths``
            and ``labels`` (``model(ids, lengths) -> logits``).
        val_data: the validation dataset, in the same form.
        task: any :class:`~attnkit.train.loop.task.TrainTask` instead of the data.
        collate_fn: default :func:`attnkit.data.batching.collate`.
        lengths: token counts of ``train_data``'s items, for length bucketing.
        batch_tokens: with bucketing, the most padded tokens in a training batch
            (:func:`attnkit.train.loop.task.epoch_batches`; None: ``batch_size`` items whatever their length).
        out_dir: the run directory: ``fit(resume=True)`` continues from its
            committed train state, and without ``checkpoint`` each epoch is
            committed there (``history.jsonl`` and ``train_state/`` only).
        checkpoint: called on the main process after each epoch with the
            resumable state (``model``, ``best``, ``optimizer``, ``progress``,
            ``summary``); :meth:`attnkit.train.runs.checkpoint.RunCheckpointer.epoch_hook`
            commits a whole generation with it.
        optimizer: builds the optimizer from the model (default: AdamW, weight
            decay on parameters with two or more dimensions).
        schedule: ``schedule(step, total_steps) -> factor`` of ``config.lr``
            (default: warm-up then linear decay, :func:`schedules.for_config`).
        reseed: seed torch's RNG with ``config.seed`` (plus the rank) when
            training starts afresh; False keeps the caller's stream.
        time_budget_s: stop after this much training time (across resumes).
        extendable: a resumed run may change ``config.epochs`` (for schedules
            that do not depend on the total number of steps); otherwise the
            resumed plan must have the same total.
        log_every: also log the running loss every this many steps (0: never).
        quiet: no progress (a bar on a terminal, else a plain line every ``ATTNKIT_PROGRESS_SECONDS``, 30 s).
        dist: this process's place in a data-parallel run.
        log: called with one line of text per epoch (rank 0 only).

    Shape:
        classification batches: ``ids`` ``(B, T)`` (or ``(B, S, T)`` for
        hierarchical models), ``lengths`` ``(B,)``, ``labels`` ``(B,)``; logits ``(B, C)``.
    """

    def __init__(
        self, model: nn.Module, config: TrainConfig, train_data: Dataset | None = None,
        val_data: Dataset | None = None, *, task: TrainTask | None = None, collate_fn: Any = None,
        lengths: Sequence[int] | None = None, out_dir: str | Path | None = None, quiet: bool = False,
        dist: DistInfo | None = None, log: Callable[[str], None] | None = None,
        checkpoint: Callable[[dict[str, Any]], None] | None = None,
        optimizer: Callable[[nn.Module], torch.optim.Optimizer] | None = None,
        schedule: schedules.Schedule | None = None, reseed: bool = True, time_budget_s: float | None = None,
        log_every: int = 0, extendable: bool = False, batch_tokens: int | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        self.config = config
        self.dist = dist or DistInfo()
        self.device = resolve_device(config.device, self.dist)
        self.precision = resolve_precision(config.precision, self.device)
        if task is None:
            if train_data is None:
                raise ValueError("give train_data (classification) or a task")
            from attnkit.train.tasks import default_task

            task = default_task(train_data, val_data, collate=collate_fn,
                                lengths=lengths if config.bucket else None, batch_size=config.batch_size,
                                seed=config.seed, label_smoothing=config.label_smoothing,
                                device=self.device, pack=config.pack or None, metric=config.metric,
                                class_weight=config.class_weight,
                                max_tokens=batch_tokens if config.bucket else None)
        self.task = task
        self.train_data, self.val_data = train_data, val_data
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.checkpoint = checkpoint
        self.show_progress = not quiet and self.dist.is_main
        self.log = log if (log is not None and self.dist.is_main) else (lambda _line: None)
        self.model = model.to(self.device)
        self.net: nn.Module = self.model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DDP(self.model, device_ids=ids)
        self.optimizer = optimizer(self.model) if optimizer is not None else torch.optim.AdamW(
            self._param_groups(), lr=config.lr, foreach=config.optimizer_kernel == "foreach",
            fused=config.optimizer_kernel == "fused")
        self.schedule = schedule or schedules.for_config(config)
        self.reseed, self.time_budget_s, self.log_every = reseed, time_budget_s, log_every
        self.extendable = extendable
        self.steps_per_epoch = sum(1 for _ in self._batches(0))
        self.total_steps = self.steps_per_epoch * config.epochs
        self.warmup_steps = int(config.warmup_ratio * self.total_steps)
        self.step = 0
        self.epoch = 0  # finished epochs
        self.seconds = 0.0  # training time so far, across resumes
        self.best_score: tuple[float, ...] | None = None
        self.best_state: dict[str, Tensor] | None = None
        self.bad_epochs = 0
        self.history: list[dict[str, Any]] = []
        self.out_of_time = False
        self.guard = StepGuard(config.on_nan)

    def _param_groups(self) -> list[dict[str, Any]]:
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": self.config.weight_decay},
                {"params": rest, "weight_decay": 0.0}]

    def _batches(self, epoch: int) -> Any:
        return self.task.batches(epoch, rank=self.dist.rank, world_size=self.dist.world_size)

    # --- evaluation (classification) -----------------------------------------------------------

    def predict(self, data: Dataset, *, batch_size: int | None = None, pooling: bool = False,
                halves: bool = False) -> Any:
        """Logits ``(N, C)`` and labels ``(N,)`` of every item of ``data`` (classification task; ``pooling``: also
        the pooling weights of the same pass; ``halves``: each half's logits instead,
        :meth:`~attnkit.train.tasks.classify.task.ClassificationTask.predict`)."""
        return self._classification().predict(self.model, data, pooling=pooling, halves=halves,
                                              batch_size=batch_size or max(self.config.batch_size, 64))

    def evaluate(self, data: Dataset) -> dict[str, Any]:
        """Loss, accuracy, macro-F1 and confusion matrix on ``data`` (classification task)."""
        return self._classification().evaluate(self.model, data)

    def measure(self, logits: Tensor, labels: Tensor) -> dict[str, Any]:
        """:meth:`evaluate`'s measures of logits :meth:`predict` gave (classification task)."""
        return dict(self._classification().measure(logits, labels))

    def _classification(self) -> Any:
        if not (callable(getattr(self.task, "predict", None)) and callable(getattr(self.task, "evaluate", None))):
            raise TypeError(f"predict/evaluate belong to the classification task, not {type(self.task).__name__}")
        return self.task

    # --- one epoch -------------------------------------------------------------------------------

    def _train_epoch(self, epoch: int) -> dict[str, float]:
        """One pass over the task's batches; the weighted mean loss and metrics."""
        self.net.train()
        batches = list(self._batches(epoch))
        sums: dict[str, float] = {"loss": 0.0}
        seen = 0.0
        skipped_before = self.guard.skipped
        clock = time.monotonic() - self.seconds
        bar = _progress(len(batches), f"epoch {epoch + 1}/{self.config.epochs}", self.show_progress)
        for batch in batches:
            lr = self.config.lr * self.schedule(self.step, self.total_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"):
                out = self.task.step(self.net, batch)
            self.optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            # Without clipping the norm is still measured (an infinite bound scales nothing).
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm or float("inf"),
                                                  foreach=True)
            loss = float(out.loss.detach())
            # The gradients (hence their norm) are the same on every process; the loss is each one's own.
            if self.guard.allow(loss if not self.dist.enabled else 0.0, float(norm),
                                epoch=epoch + 1, step=self.step + 1):
                self.optimizer.step()
                sums["loss"] += loss * out.weight
                for key, value in out.metrics.items():
                    sums[key] = sums.get(key, 0.0) + value * out.weight
                seen += out.weight
            self.step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{sums['loss'] / max(seen, 1e-12):.4f}")
            self.seconds = time.monotonic() - clock
            if self.log_every and (self.step == 1 or self.step % self.log_every == 0):
                self.log(f"  step {self.step}: mean loss this epoch {sums['loss'] / max(seen, 1e-12):.3f}, "
                         f"last batch {loss:.3f} ({self.seconds:.0f} s)")
            if self.time_budget_s is not None and self.seconds > self.time_budget_s:
                self.out_of_time = True
                break
        bar.close()
        keys = sorted(sums)
        totals = all_reduce_sum([sums[k] for k in keys] + [seen], self.dist, self.device)
        means = {k: v / max(totals[-1], 1) for k, v in zip(keys, totals[:-1], strict=True)}
        if self.config.on_nan == "skip-step":  # the same count on every process (see above)
            means["skipped_steps"] = self.guard.skipped - skipped_before
        return means

    # --- state -----------------------------------------------------------------------------------

    def _progress_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "bad_epochs": self.bad_epochs, "seconds": self.seconds,
                "best_score": list(self.best_score) if self.best_score else None,
                "history": self.history, "total_steps": self.total_steps, "steps_per_epoch": self.steps_per_epoch,
                "train_config": self.config.to_dict()}

    def _summary(self) -> dict[str, Any]:
        best = [h["epoch"] for h in self.history if h.get("best")]
        return {"epoch": self.epoch, "epochs": self.config.epochs, "step": self.step,
                "best_epoch": best[-1] if best else None}

    def _save_state(self) -> None:
        if not self.dist.is_main or self.checkpoint is None:
            return
        self.checkpoint({"model": _weights(self.model), "best": self.best_state, "optimizer": self.optimizer,
                         "progress": self._progress_state(), "summary": self._summary()})

    def _bare_run(self) -> Any:
        """Without a ``checkpoint`` callback: commit history and train state to ``out_dir`` each epoch."""
        from attnkit.train.runs.run import commit_generation, committed_run_id, start_run

        assert self.out_dir is not None
        writer = start_run(self.out_dir, run_id=committed_run_id(self.out_dir))  # the run there, or a new one

        def commit(state: dict[str, Any]) -> None:
            lines = "".join(json.dumps(h, sort_keys=True) + "\n" for h in self.history)
            commit_generation(writer, {}, status="training", progress=state["summary"],
                              files={**ckpt.state_files(state), "history.jsonl": lines})

        self.checkpoint = commit
        return writer

    def _load_state(self) -> bool:
        if self.out_dir is None:
            raise ValueError("resume=True needs an out_dir holding a committed train state")
        state = ckpt.load_train_state(self.out_dir)
        if state is None:
            return False
        progress = state["progress"]
        if self.extendable and progress.get("steps_per_epoch") != self.steps_per_epoch:
            raise ValueError(
                f"cannot resume from {self.out_dir}: its epochs had {progress.get('steps_per_epoch')} steps, "
                f"this run's have {self.steps_per_epoch} (different data or batch size)")
        if not self.extendable and progress.get("total_steps") != self.total_steps:
            raise ValueError(
                f"cannot resume from {self.out_dir}: it planned {progress.get('total_steps')} steps, "
                f"this run plans {self.total_steps} (different data, batch size or epochs)")
        source = ckpt.committed_dir(self.out_dir) / ckpt.STATE_DIR
        _load_weights(self.model, state["model"], source / "last.safetensors")
        try:
            ckpt.optimizer_from_tensors(self.optimizer, *state["optimizer"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise ckpt.RunFileError(f"{source / 'optimizer.safetensors'} does not fit this model's optimizer: "
                                    f"{err}") from None
        ckpt.restore_rng(*state["rng"])
        self.best_state = state["best"]
        self.epoch, self.step = int(progress["epoch"]), int(progress["step"])
        self.bad_epochs = int(progress["bad_epochs"])
        self.seconds = float(progress.get("seconds", 0.0))
        best = progress.get("best_score")
        self.best_score = tuple(float(b) for b in best) if best else None
        self.history = list(progress["history"])
        return True

    # --- the loop --------------------------------------------------------------------------------

    def fit(self, *, resume: bool = False) -> list[dict[str, Any]]:
        """Train for ``config.epochs`` epochs (or until early stopping or the time budget); the history.

        With ``resume=True`` the loop continues from the state committed in
        ``out_dir`` (after the last finished epoch); without a committed state
        it starts afresh. At the end the best validation weights are restored
        when the task keeps them.
        """
        writer = None
        if self.checkpoint is None and self.out_dir is not None and self.dist.is_main:
            writer = self._bare_run().open()
        try:
            return self._fit(resume)
        finally:
            if writer is not None:
                writer.close()

    def _fit(self, resume: bool) -> list[dict[str, Any]]:
        resumed = resume and self._load_state()
        if not resumed and self.reseed:
            # Dropout streams differ per process; the batch order does not need the global RNG.
            torch.manual_seed(self.config.seed + 7919 * self.dist.rank)
        if self.config.precision == "auto":
            self.log(f"precision auto: {self.precision} on {self.device.type} "
                     f"({'it multiplies bfloat16 natively' if self.precision == 'bf16' else 'no native bfloat16'})")
        keep_best = getattr(self.task, "keep_best", False)
        stopped = self._patience_spent()
        self.out_of_time = self.time_budget_s is not None and self.seconds > self.time_budget_s
        best_is_last = False  # the weights now are the best ones, copied this epoch: nothing to put back
        while self.epoch < self.config.epochs and not stopped and not self.out_of_time:
            start = time.perf_counter()
            best_is_last = False
            train = self._train_epoch(self.epoch)
            self._check_finite(self.epoch + 1)
            record: dict[str, Any] = {"epoch": self.epoch + 1, "step": self.step,
                                      **{f"train_{k}": v for k, v in train.items()},
                                      "lr": self.optimizer.param_groups[0]["lr"]}
            val = self.task.validate(self.model)
            if val is not None:
                refuse_non_finite_metrics(val, epoch=self.epoch + 1, step=self.step)
                record.update({f"val_{k}": v for k, v in val.items()})
                score = self.task.score(val)
                improved = self.best_score is None or score > self.best_score
                if improved:
                    self.best_score = score
                    if keep_best:
                        self.best_state = {k: v.detach().clone() for k, v in _weights(self.model).items()}
                        best_is_last = True
                    self.bad_epochs = 0
                else:
                    self.bad_epochs += 1
                record["best"] = improved
                stopped = self._patience_spent()
            record["seconds"] = round(time.perf_counter() - start, 3)
            self.epoch += 1
            self.history.append(record)
            self._save_state()
            self.log(self._format(record))
        if stopped and self.epoch < self.config.epochs:
            self.log(self._early_stop_line(keep_best))
        if keep_best and self.best_state is not None and not best_is_last:
            _load_weights(self.model, self.best_state, Path("the best weights"))
        return self.history

    def _check_finite(self, epoch: int) -> None:
        """Refuse to go on (and so to commit) with non-finite weights."""
        refuse_non_finite(ckpt.non_finite_names(self.model.state_dict()), epoch=epoch, step=self.step)

    def _patience_spent(self) -> bool:
        return self.config.patience > 0 and self.best_score is not None and self.bad_epochs >= self.config.patience

    def _early_stop_line(self, keep_best: bool) -> str:
        """Why training ended before ``epochs``: the validation score, on which measure, did not improve for
        ``patience`` epochs; the best epoch and its value."""
        metric = getattr(self.task, "metric", None)
        what = f"validation {metric} (at an equal one, the loss)" if metric else "validation score"
        line = (f"early stop after epoch {self.epoch} of {self.config.epochs}: the {what} did not improve for "
                f"{self.bad_epochs} epoch(s) (`patience` {self.config.patience})")
        best = next((r for r in reversed(self.history) if r.get("best")), None)
        if best is not None:
            value = best.get(f"val_{metric}")
            line += f"; best epoch {best['epoch']}" + (f", {metric} {value:.4f}" if isinstance(value, float) else "")
            line += ", whose weights are kept" if keep_best else ""
        return line

    def _format(self, r: dict[str, Any]) -> str:
        line = f"epoch {r['epoch']:>3}/{self.config.epochs}  loss {r['train_loss']:.4f}"
        if "train_accuracy" in r:
            line += f"  acc {r['train_accuracy']:.4f}"
        for key in sorted(k for k in r if k.startswith("train_") and k not in ("train_loss", "train_accuracy")):
            line += f"  {key.removeprefix('train_')} {r[key]:.4f}"
        if "val_accuracy" in r:
            line += f"  val_loss {r['val_loss']:.4f}  val_acc {r['val_accuracy']:.4f}  val_f1 {r['val_macro_f1']:.4f}"
        elif "val_loss" in r:
            line += f"  val_loss {r['val_loss']:.4f}"
        line += " *" if r.get("best") else ""
        return line + f"  ({r['seconds']:.1f}s)" + ("  — time budget spent" if self.out_of_time else "")
