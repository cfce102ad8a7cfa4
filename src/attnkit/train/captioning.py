"""Image-captioning runs: train an :class:`~attnkit.models.captioner.ImageCaptioner`, caption images, save and load runs.

:func:`fit_captioner` is the training loop (teacher forcing, the doubly
stochastic attention regulariser when the config asks for it),
:func:`generate` decodes many images, :func:`corpus_bleu` (that of
:mod:`attnkit.train.metrics`) scores captions against one or more references,
:func:`commit_caption_run` (through an open
:class:`~attnkit.train.rundir.RunWriter`), :func:`save_caption_run` and
:func:`load_caption_run` write and read a run directory. It is a transaction
(:mod:`attnkit.train.rundir`) whose committed generation ``RUN/checkpoints/NNNNNN/`` holds::

    config.json        run id, model config, vocabulary, training settings, status, progress, metrics
    model.safetensors  the weights (after the last finished epoch while training)
    history.jsonl      one JSON line per finished epoch (when training wrote it)
    metrics.json       held-out BLEU and losses (once training is done)

Training commits one generation per epoch (status ``training``) and a last
one (status ``done``); readers refuse an unfinished run unless asked.

The commands in :mod:`attnkit.cli.caption` are built on these.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.train.metrics import corpus_bleu

if TYPE_CHECKING:  # torch loads inside the functions, so that importing this module stays quick
    from torch import Tensor

    from attnkit.data.captions import CaptionVocab
    from attnkit.models.captioner import ImageCaptioner
    from attnkit.train.rundir import RunWriter
    from attnkit.train.tasks import StepOutput

__all__ = ["MODEL_NAME", "fit_captioner", "generate", "corpus_bleu", "commit_caption_run", "save_caption_run",
           "load_caption_run"]

MODEL_NAME = "captioner"


class CaptionTask:
    """Teacher-forced captioning for :class:`~attnkit.train.Trainer`: shuffled batches of images
    (the order of epoch ``e`` is a pure function of the seed and ``e``), the captioner's loss
    (negative log-likelihood plus the doubly stochastic attention regulariser)."""

    keep_best = False

    def __init__(self, images: Tensor, captions: Tensor, lengths: Tensor, *, batch_size: int, seed: int) -> None:
        n = images.shape[0]
        if captions.shape[0] != n or lengths.shape != (n,):
            raise ValueError(f"images, captions and lengths must share N={n}, got {tuple(captions.shape)} "
                             f"and {tuple(lengths.shape)}")
        self.images, self.captions, self.lengths = images, captions, lengths
        self.batch_size, self.seed = batch_size, seed

    def batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> list[Tensor]:
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        n = self.images.shape[0]
        for _ in range(epoch):  # one generator across epochs, replayed: the order never depends on a resume
            torch.randperm(n, generator=gen)
        return list(torch.randperm(n, generator=gen).split(self.batch_size))

    def step(self, net: Any, idx: Tensor) -> StepOutput:
        from attnkit.train.tasks import StepOutput

        t = int(self.lengths[idx].max())
        loss, parts = net.loss(self.images[idx], self.captions[idx, :t], self.lengths[idx])
        return StepOutput(loss, len(idx), {"nll": parts["nll"], "attention_reg": parts["attention_reg"]})

    def validate(self, model: Any) -> dict[str, float] | None:
        return None

    def score(self, metrics: dict[str, float]) -> tuple[float, ...]:
        return ()


def fit_captioner(model: ImageCaptioner, images: Tensor, captions: Tensor, lengths: Tensor, *,
                  epochs: int, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
                  echo: Callable[[str], None] | None = None,
                  checkpoint: Callable[[dict[str, Any]], None] | None = None,
                  out_dir: str | Path | None = None, resume: bool = False) -> list[dict[str, Any]]:
    """Train with teacher forcing through :class:`~attnkit.train.Trainer`: Adam, a cosine decay of
    the rate to 5% of ``lr``, gradient clipping at 5.

    Returns one record per epoch (``epoch``, ``train_loss``, ``train_nll``,
    ``train_attention_reg``, ``lr``, ``seconds``). ``checkpoint`` gets the
    resumable state after each epoch (the trainer's callback: commit it with
    :func:`commit_caption_run`); ``resume=True`` continues the state committed
    in ``out_dir``, ending with the weights an uninterrupted run would have.

    Shape:
        images ``(N, 3, S, S)``; captions ``(N, T)``; lengths ``(N,)``.
    """
    import torch

    from attnkit._checks import positive_int
    from attnkit.train import schedules
    from attnkit.train.config import TrainConfig
    from attnkit.train.trainer import Trainer

    positive_int("epochs", epochs)
    task = CaptionTask(images, captions, lengths, batch_size=batch_size, seed=seed)
    trainer = Trainer(
        model, TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, clip_norm=5.0, patience=0, seed=seed,
                           device="cpu"),
        task=task, out_dir=out_dir, checkpoint=checkpoint, reseed=False, quiet=True,
        log=(lambda line: echo(line)) if echo is not None else None,
        optimizer=lambda m: torch.optim.Adam(m.parameters(), lr=lr),
        schedule=lambda step, total: schedules.cosine(step, total, floor=0.05))
    history = trainer.fit(resume=resume)
    model.eval()
    return history


def generate(model: ImageCaptioner, images: Tensor, *, beam: int = 1,
             batch_size: int = 128) -> list[Any]:
    """Captions for many images: batched greedy decoding for ``beam == 1``, beam search otherwise."""
    model.eval()
    out: list[Any] = []
    for chunk in images.split(batch_size):
        out += model.greedy(chunk) if beam == 1 else model.beam_search(chunk, beam_size=beam)
    return out


def commit_caption_run(writer: RunWriter, model: ImageCaptioner, vocab: CaptionVocab, *, status: str,
                       meta: dict[str, Any] | None = None, history: Sequence[dict[str, Any]] | None = None,
                       metrics: dict[str, Any] | None = None, progress: dict[str, Any] | None = None,
                       train_state: dict[str, Any] | None = None) -> Path:
    """Commit one generation through the open ``writer``: the weights, config.json (config,
    vocabulary, ``meta``, ``status``, ``progress``, ``metrics``), history.jsonl / metrics.json
    when given, and the trainer's resumable ``train_state`` (else the previous generation's)."""
    from attnkit.train import checkpoint as ckpt

    carry = [] if train_state is not None else [f"{ckpt.STATE_DIR}/{n}" for n in ckpt.STATE_FILES]
    staging = writer.stage(carry=carry)
    if train_state is not None:
        ckpt.save_train_state(staging, train_state)
    ckpt.save_tensors(staging / "model.safetensors", model.state_dict(), metadata={"format": "pt"})
    if history is not None:
        ckpt.atomic_write_text(staging / "history.jsonl", "".join(json.dumps(h) + "\n" for h in history))
    if metrics is not None:
        ckpt.atomic_write_json(staging / "metrics.json", metrics)
    config = {"run_id": writer.run_id, "model_name": MODEL_NAME, "model_config": model.config.to_dict(),
              "vocab": vocab.to_dict(), **(meta or {}), "status": status}
    if progress is not None:
        config["progress"] = progress
    if metrics is not None:
        config["metrics"] = metrics
    ckpt.atomic_write_json(staging / "config.json", config)
    return writer.commit(staging, status=status, epoch=(progress or {}).get("epoch"))


def save_caption_run(directory: str | Path, model: ImageCaptioner, vocab: CaptionVocab, *, run_id: str,
                     overwrite: bool = False, extra: dict[str, Any] | None = None) -> Path:
    """Commit ``model``, its vocabulary and ``extra`` (``status``: ``"done"`` unless given) as one generation."""
    from attnkit.train.rundir import RunWriter

    meta = dict(extra or {})
    status = str(meta.pop("status", "done"))
    with RunWriter(directory, run_id, overwrite=overwrite, resumable=False) as writer:
        return commit_caption_run(writer, model, vocab, status=status, meta=meta)


def load_caption_run(directory: str | Path, *, allow_unfinished: bool = False
                     ) -> tuple[ImageCaptioner, CaptionVocab, dict[str, Any]]:
    """Rebuild ``(model in eval mode, vocabulary, config.json contents)`` from a run's committed generation.

    A run whose training did not finish raises :class:`~attnkit.train.rundir.UnfinishedRunError`
    unless ``allow_unfinished`` (then ``meta["notice"]`` says which weights are served); a
    missing, damaged or foreign file raises :class:`~attnkit.train.rundir.RunFileError` naming it.
    """
    from attnkit.data.captions import CaptionVocab
    from attnkit.models.captioner import CaptionerConfig, ImageCaptioner
    from attnkit.train import checkpoint as ckpt

    path = Path(directory)
    folder, meta = ckpt.committed_dir(path), ckpt.read_run_config(path)
    if meta.get("model_name") != MODEL_NAME:
        raise ckpt.RunFileError(f"{path} holds a {meta.get('model_name')!r} run, not an image captioner")
    notice = ckpt.require_finished(path, meta, allow_unfinished=allow_unfinished, hint=(
        f"continue it with attnkit train --task caption --out {path} --resume"))
    if notice:
        meta["notice"] = notice
    weights = folder / "model.safetensors"
    try:
        model = ImageCaptioner(CaptionerConfig.from_dict(meta["model_config"]))
        vocab = CaptionVocab.from_dict(meta["vocab"])
    except (KeyError, TypeError, ValueError) as err:
        raise ckpt.RunFileError(f"{folder / 'config.json'} holds a config that does not build: {err}") from None
    ckpt.load_weights_into(model, ckpt.load_tensors(weights), weights, "the captioner of its config.json")
    return model.eval(), vocab, meta
