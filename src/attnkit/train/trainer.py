"""One explicit training loop for text classifiers.

Each optimizer step: forward ``model(ids, lengths) -> logits (B, C)``,
cross-entropy loss, backward, global gradient-norm clipping, an AdamW step
(Loshchilov and Hutter, 2019) at the rate of a linear warmup then linear decay
schedule. After each epoch: validation (accuracy, macro-F1, loss), one line in
``history.jsonl``, early stopping on validation accuracy, and — when the
trainer has an output directory — the complete resumable state, so that a run
interrupted at any moment and resumed with ``fit(resume=True)`` ends with
exactly the weights an uninterrupted run would have.

Repeatability: the batch order of epoch ``e`` is a pure function of
``(seed, e)``; dropout draws from torch's global RNG, whose state is saved and
restored with the rest.
"""

from __future__ import annotations

import json
import math
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset
from tqdm import tqdm

from attnkit.train import checkpoint as ckpt
from attnkit.train.config import TrainConfig, warmup_linear_factor
from attnkit.train.distributed import DistInfo, all_reduce_sum, resolve_device
from attnkit.train.metrics import accuracy, confusion_matrix, macro_f1

__all__ = ["Trainer", "epoch_batches"]

Batch = dict[str, Tensor]
Collate = Callable[[list[Any]], Batch]
_POOL = 50  # batches per length-sorting pool when bucketing


def epoch_batches(
    n: int, batch_size: int, seed: int, epoch: int, *, lengths: Sequence[int] | None = None,
    rank: int = 0, world_size: int = 1,
) -> list[list[int]]:
    """The batches (lists of example indices) of one epoch for one process.

    A seeded permutation of ``range(n)``; with several processes each takes
    every ``world_size``-th index (the permutation wrapped around so all get the
    same count, as ``DistributedSampler`` does). With ``lengths``, indices are
    sorted by length within pools of ``50 * batch_size`` before batching and the
    batches are shuffled again, which cuts padding without fixing the order.
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
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    order = torch.randperm(len(batches), generator=g).tolist()
    return [batches[i] for i in order]


def _progress(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(total=total, desc=desc, leave=False, dynamic_ncols=True, disable=not enabled)


class Trainer:
    """Train and evaluate a classifier ``model(ids, lengths) -> logits``.

    Args:
        model: any ``nn.Module`` with that forward signature.
        config: a :class:`TrainConfig`.
        train_data: a ``Dataset`` whose items ``collate_fn`` turns into a batch
            dict with ``ids``, ``lengths`` and ``labels``.
        val_data: validation set for early stopping (optional).
        collate_fn: default :func:`attnkit.data.batching.collate`.
        lengths: token counts of ``train_data``'s items, for length bucketing.
        out_dir: the run directory: ``fit(resume=True)`` continues from its
            committed train state, and without ``checkpoint`` each epoch is
            committed there (``history.jsonl`` and ``train_state/`` only).
        checkpoint: called on the main process after each epoch with the
            resumable state (``model``, ``best``, ``optimizer``, ``progress``,
            ``summary``); :meth:`attnkit.train.checkpoint.RunCheckpointer.epoch_hook`
            commits a whole generation with it.
        quiet: no progress bar (it is also off when stderr is not a terminal).
        dist: this process's place in a data-parallel run.
        log: called with one line of text per epoch (rank 0 only).

    Shape:
        batch ``ids`` ``(B, T)`` (or ``(B, S, T)`` for hierarchical models),
        ``lengths`` ``(B,)``, ``labels`` ``(B,)``; logits ``(B, C)``.
    """

    def __init__(
        self, model: nn.Module, config: TrainConfig, train_data: Dataset, val_data: Dataset | None = None,
        *, collate_fn: Collate | None = None, lengths: Sequence[int] | None = None,
        out_dir: str | Path | None = None, quiet: bool = False, dist: DistInfo | None = None,
        log: Callable[[str], None] | None = None, checkpoint: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        n = len(train_data)  # type: ignore[arg-type]
        if n == 0:
            raise ValueError("train_data is empty")
        if lengths is not None and len(lengths) != n:
            raise ValueError(f"lengths must have one entry per training example ({n}), got {len(lengths)}")
        if collate_fn is None:
            from attnkit.data.batching import collate as collate_fn
        self.config, self.train_data, self.val_data = config, train_data, val_data
        self.collate: Collate = collate_fn  # type: ignore[assignment]
        self.lengths = lengths if config.bucket else None
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.checkpoint = checkpoint
        self.dist = dist or DistInfo()
        self.device = resolve_device(config.device, self.dist)
        self.show_progress = not quiet and self.dist.is_main and sys.stderr.isatty()
        self.log = log if (log is not None and self.dist.is_main) else (lambda _line: None)
        self.model = model.to(self.device)
        self.net: nn.Module = self.model
        if self.dist.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = DDP(self.model, device_ids=ids)
        self.optimizer = torch.optim.AdamW(self._param_groups(), lr=config.lr)
        self.steps_per_epoch = len(self._batches(0))
        self.total_steps = self.steps_per_epoch * config.epochs
        self.warmup_steps = int(config.warmup_ratio * self.total_steps)
        self.step = 0
        self.epoch = 0  # finished epochs
        self.best_score: tuple[float, float] | None = None
        self.best_state: dict[str, Tensor] | None = None
        self.bad_epochs = 0
        self.history: list[dict[str, Any]] = []

    # --- set-up ------------------------------------------------------------------------------

    def _param_groups(self) -> list[dict[str, Any]]:
        decay = [p for p in self.model.parameters() if p.requires_grad and p.dim() >= 2]
        rest = [p for p in self.model.parameters() if p.requires_grad and p.dim() < 2]
        return [{"params": decay, "weight_decay": self.config.weight_decay},
                {"params": rest, "weight_decay": 0.0}]

    def _batches(self, epoch: int) -> list[list[int]]:
        return epoch_batches(len(self.train_data), self.config.batch_size, self.config.seed, epoch,  # type: ignore[arg-type]
                             lengths=self.lengths, rank=self.dist.rank, world_size=self.dist.world_size)

    def _to_device(self, batch: Batch) -> Batch:
        return {k: v.to(self.device, non_blocking=True) if isinstance(v, Tensor) else v
                for k, v in batch.items()}

    # --- one epoch -----------------------------------------------------------------------------

    def _train_epoch(self, epoch: int) -> tuple[float, float]:
        self.net.train()
        batches = self._batches(epoch)
        loss_sum, correct, seen = 0.0, 0.0, 0.0
        bar = _progress(len(batches), f"epoch {epoch + 1}/{self.config.epochs}", self.show_progress)
        for index_list in batches:
            batch = self._to_device(self.collate([self.train_data[i] for i in index_list]))
            lr = self.config.lr * warmup_linear_factor(
                self.step, self.total_steps, self.warmup_steps, self.config.min_lr_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            logits = self.net(batch["ids"], batch["lengths"])
            loss = F.cross_entropy(logits, batch["labels"], label_smoothing=self.config.label_smoothing)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.config.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_norm)
            self.optimizer.step()
            self.step += 1
            b = batch["labels"].shape[0]
            loss_sum += float(loss.detach()) * b
            correct += float((logits.detach().argmax(-1) == batch["labels"]).sum())
            seen += b
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum / seen:.4f}", acc=f"{correct / seen:.3f}")
        bar.close()
        loss_sum, correct, seen = all_reduce_sum([loss_sum, correct, seen], self.dist, self.device)
        return loss_sum / max(seen, 1), correct / max(seen, 1)

    @torch.no_grad()
    def predict(self, data: Dataset, *, batch_size: int | None = None) -> tuple[Tensor, Tensor]:
        """Logits ``(N, C)`` and labels ``(N,)`` of every item of ``data``, in order (eval mode)."""
        was_training = self.model.training
        self.model.eval()
        n = len(data)  # type: ignore[arg-type]
        size = batch_size or max(self.config.batch_size, 64)
        logits, labels = [], []
        for start in range(0, n, size):
            batch = self._to_device(self.collate([data[i] for i in range(start, min(n, start + size))]))
            logits.append(self.model(batch["ids"], batch["lengths"]).float().cpu())
            labels.append(batch["labels"].cpu())
        self.model.train(was_training)
        if not logits:
            return torch.zeros(0, 0), torch.zeros(0, dtype=torch.long)
        return torch.cat(logits), torch.cat(labels)

    def evaluate(self, data: Dataset) -> dict[str, Any]:
        """Loss, accuracy, macro-F1 and confusion matrix of the model on ``data``."""
        logits, labels = self.predict(data)
        if labels.numel() == 0:
            raise ValueError("cannot evaluate on an empty dataset")
        pred = logits.argmax(-1)
        c = logits.shape[-1]
        return {
            "loss": float(F.cross_entropy(logits, labels)),
            "accuracy": accuracy(labels, pred),
            "macro_f1": macro_f1(labels, pred, c),
            "confusion_matrix": confusion_matrix(labels, pred, c).tolist(),
            "n": int(labels.numel()),
        }

    # --- state -----------------------------------------------------------------------------------

    def _progress_state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "step": self.step, "bad_epochs": self.bad_epochs,
                "best_score": list(self.best_score) if self.best_score else None,
                "history": self.history, "total_steps": self.total_steps,
                "train_config": self.config.to_dict()}

    def _summary(self) -> dict[str, Any]:
        best = [h["epoch"] for h in self.history if h.get("best")]
        return {"epoch": self.epoch, "epochs": self.config.epochs, "step": self.step,
                "best_epoch": best[-1] if best else None}

    def _save_state(self) -> None:
        if not self.dist.is_main or self.checkpoint is None:
            return
        self.checkpoint({"model": self.model.state_dict(), "best": self.best_state, "optimizer": self.optimizer,
                         "progress": self._progress_state(), "summary": self._summary()})

    def _bare_run(self) -> Any:
        """Without a ``checkpoint`` callback: commit history and train state to ``out_dir`` each epoch."""
        from attnkit.train.rundir import RunWriter, read_manifest

        assert self.out_dir is not None
        manifest = read_manifest(self.out_dir) if (self.out_dir / "current.json").is_file() else None
        run_id = manifest["run_id"] if manifest else uuid.uuid4().hex
        writer = RunWriter(self.out_dir, run_id)

        def commit(state: dict[str, Any]) -> None:
            staging = writer.stage()
            ckpt.save_train_state(staging, state)
            lines = "".join(json.dumps(h, sort_keys=True) + "\n" for h in self.history)
            ckpt.atomic_write_text(staging / "history.jsonl", lines)
            ckpt.atomic_write_json(staging / "config.json", {"run_id": run_id, "status": "training",
                                                             "progress": state["summary"]})
            writer.commit(staging, status="training", epoch=self.epoch)

        self.checkpoint = commit
        return writer

    def _load_state(self) -> bool:
        if self.out_dir is None:
            raise ValueError("resume=True needs an out_dir holding a train_state/ folder")
        state = ckpt.load_train_state(self.out_dir)
        if state is None:
            return False
        progress = state["progress"]
        if progress.get("total_steps") != self.total_steps:
            raise ValueError(
                f"cannot resume from {self.out_dir}: it planned {progress.get('total_steps')} steps, "
                f"this run plans {self.total_steps} (different data, batch size or epochs)")
        source = ckpt.committed_dir(self.out_dir) / ckpt.STATE_DIR
        ckpt.load_weights_into(self.model, state["model"], source / "last.safetensors")
        try:
            ckpt.optimizer_from_tensors(self.optimizer, *state["optimizer"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise ckpt.RunFileError(f"{source / 'optimizer.safetensors'} does not fit this model's optimizer: "
                                    f"{err}") from None
        ckpt.restore_rng(*state["rng"])
        self.best_state = state["best"]
        self.epoch, self.step = int(progress["epoch"]), int(progress["step"])
        self.bad_epochs = int(progress["bad_epochs"])
        best = progress.get("best_score")
        self.best_score = (float(best[0]), float(best[1])) if best else None
        self.history = list(progress["history"])
        return True

    # --- the loop --------------------------------------------------------------------------------

    def fit(self, *, resume: bool = False) -> list[dict[str, Any]]:
        """Train for ``config.epochs`` epochs (or until early stopping); returns the history.

        With ``resume=True`` the loop continues from the state saved in
        ``out_dir`` (after the last finished epoch); without a saved state it
        starts afresh. At the end the best validation weights are restored
        when there is validation data.
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
        if not resumed:
            # Dropout streams differ per process; the batch order does not need the global RNG.
            torch.manual_seed(self.config.seed + 7919 * self.dist.rank)
        use_val = self.val_data is not None and len(self.val_data) > 0  # type: ignore[arg-type]
        stopped = self.config.patience > 0 and use_val and self.bad_epochs >= self.config.patience
        while self.epoch < self.config.epochs and not stopped:
            start = time.perf_counter()
            train_loss, train_acc = self._train_epoch(self.epoch)
            record: dict[str, Any] = {
                "epoch": self.epoch + 1, "step": self.step, "train_loss": train_loss,
                "train_accuracy": train_acc,
                "lr": self.optimizer.param_groups[0]["lr"]}
            if use_val:
                assert self.val_data is not None
                val = self.evaluate(self.val_data)
                record.update(val_loss=val["loss"], val_accuracy=val["accuracy"], val_macro_f1=val["macro_f1"])
                score = (val["accuracy"], -val["loss"])
                improved = self.best_score is None or score > self.best_score
                if improved:
                    self.best_score = score
                    self.best_state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
                    self.bad_epochs = 0
                else:
                    self.bad_epochs += 1
                record["best"] = improved
                stopped = self.config.patience > 0 and self.bad_epochs >= self.config.patience
            record["seconds"] = round(time.perf_counter() - start, 3)
            self.epoch += 1
            self.history.append(record)
            self._save_state()
            self.log(self._format(record))
        if use_val and self.best_state is not None:
            self.model.load_state_dict(self.best_state)
        return self.history

    def _format(self, r: dict[str, Any]) -> str:
        line = (f"epoch {r['epoch']:>3}/{self.config.epochs}  loss {r['train_loss']:.4f}  "
                f"acc {r['train_accuracy']:.4f}")
        if "val_accuracy" in r:
            line += f"  val_loss {r['val_loss']:.4f}  val_acc {r['val_accuracy']:.4f}  val_f1 {r['val_macro_f1']:.4f}"
            line += " *" if r.get("best") else ""
        return line + f"  ({r['seconds']:.1f}s)"
