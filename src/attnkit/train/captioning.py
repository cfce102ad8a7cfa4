"""Image-captioning runs: train an :class:`~attnkit.models.captioner.ImageCaptioner`, caption images, save and load runs.

:func:`fit_captioner` is the training loop (teacher forcing, the doubly
stochastic attention regulariser when the config asks for it),
:func:`generate` decodes many images, :func:`corpus_bleu` scores captions
against one or more references, :func:`commit_caption_run` (through an open
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
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch loads inside the functions, so that importing this module stays quick
    from torch import Tensor

    from attnkit.data.captions import CaptionVocab
    from attnkit.models.captioner import ImageCaptioner
    from attnkit.train.rundir import RunWriter

__all__ = ["MODEL_NAME", "fit_captioner", "generate", "corpus_bleu", "commit_caption_run", "save_caption_run",
           "load_caption_run"]

MODEL_NAME = "captioner"


def fit_captioner(model: ImageCaptioner, images: Tensor, captions: Tensor, lengths: Tensor, *,
                  epochs: int, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
                  echo: Callable[[str], None] | None = None,
                  on_epoch: Callable[[list[dict[str, float]]], None] | None = None) -> list[dict[str, float]]:
    """Train with teacher forcing: Adam, cosine learning-rate decay, gradient clipping at 5.

    Returns one dict per epoch (``epoch``, ``loss``, ``nll``, ``attention_reg``, ``seconds``);
    ``on_epoch`` gets the history so far after each epoch (to commit the run, say).

    Shape:
        images ``(N, 3, S, S)``; captions ``(N, T)``; lengths ``(N,)``.
    """
    import torch

    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    n = images.shape[0]
    if captions.shape[0] != n or lengths.shape != (n,):
        raise ValueError(f"images, captions and lengths must share N={n}, got {tuple(captions.shape)} "
                         f"and {tuple(lengths.shape)}")
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = epochs * math.ceil(n / batch_size)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    history = []
    for epoch in range(1, epochs + 1):
        model.train()
        start, sums, count = time.perf_counter(), {"loss": 0.0, "nll": 0.0, "attention_reg": 0.0}, 0
        for idx in torch.randperm(n, generator=gen).split(batch_size):
            t = int(lengths[idx].max())
            loss, parts = model.loss(images[idx], captions[idx, :t], lengths[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            schedule.step()
            sums["loss"] += float(loss.detach()) * len(idx)
            sums["nll"] += parts["nll"] * len(idx)
            sums["attention_reg"] += parts["attention_reg"] * len(idx)
            count += len(idx)
        row = {"epoch": float(epoch), **{k: v / count for k, v in sums.items()},
               "seconds": time.perf_counter() - start}
        history.append(row)
        if echo is not None:
            echo(f"epoch {epoch}/{epochs}: loss {row['loss']:.4f} (nll {row['nll']:.4f}, "
                 f"attention {row['attention_reg']:.4f}) {row['seconds']:.1f}s")
        if on_epoch is not None:
            on_epoch(history)
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


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU-4 on a 0–100 scale (sacrebleu; each hypothesis may have several references)."""
    import sacrebleu

    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"hypotheses and references must be equally long and not empty, got "
                         f"{len(hypotheses)} and {len(references)}")
    most = max(len(r) for r in references)
    streams = [[r[i] if i < len(r) else r[0] for r in references] for i in range(most)]
    return float(sacrebleu.corpus_bleu(list(hypotheses), streams).score)


def commit_caption_run(writer: RunWriter, model: ImageCaptioner, vocab: CaptionVocab, *, status: str,
                       meta: dict[str, Any] | None = None, history: Sequence[dict[str, Any]] | None = None,
                       metrics: dict[str, Any] | None = None, progress: dict[str, Any] | None = None) -> Path:
    """Commit one generation through the open ``writer``: the weights, config.json (config,
    vocabulary, ``meta``, ``status``, ``progress``, ``metrics``), and history.jsonl / metrics.json when given."""
    from attnkit.train import checkpoint as ckpt

    staging = writer.stage()
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
        f"train it again with attnkit train --task caption --out {path} --overwrite"))
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
