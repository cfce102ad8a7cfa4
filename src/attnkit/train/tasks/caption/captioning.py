"""Image-captioning runs: train an :class:`~attnkit.models.captioning.ImageCaptioner`, caption images,
save and load runs.

:func:`train_caption_run` is a whole run (:class:`CaptionSettings` in, a committed run
directory out: the data of :mod:`attnkit.train.tasks.caption.caption_data`, resumable, one
generation per epoch), :func:`fit_captioner` the training loop (teacher forcing, the doubly
stochastic attention regulariser when the config asks for it),
:func:`generate` decodes many images, :func:`corpus_bleu` (that of
:mod:`attnkit.train.metrics`) scores captions against one or more references,
:func:`commit_caption_run` (through an open
:class:`~attnkit.train.runs.rundir.RunWriter`), :func:`save_caption_run` and
:func:`load_caption_run` write and read a run directory. It is a transaction
(:mod:`attnkit.train.runs.rundir`) whose committed generation ``RUN/checkpoints/NNNNNN/`` holds::

    config.json        run id, model config, vocabulary, training settings, status, progress, metrics
    model.safetensors  the weights (after the last finished epoch while training)
    history.jsonl      one JSON line per finished epoch (when training wrote it)
    metrics.json       held-out BLEU and losses (once training is done)
    neighbours.safetensors  the training images' pooled features and captions, for consensus
                       re-ranking (runs trained on cached features of a frozen encoder)

Training commits one generation per epoch (status ``training``) and a last
one (status ``done``); readers refuse an unfinished run unless asked.

``attnkit train --task caption`` and ``attnkit caption`` (:mod:`attnkit.train.tasks.caption.command`) read
their flags and call these.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnkit.train.metrics import corpus_bleu
from attnkit.train.runs.resume import RUN_FLAGS, RunOptions
from attnkit.train.tasks.caption import MODEL_NAME, TASK
from attnkit.train.tasks.caption.caption_settings import DECODING, GENERATE_BATCH, CaptionSettings

if TYPE_CHECKING:  # torch loads inside the functions, so that importing this module stays quick
    from torch import Tensor

    from attnkit.data.captions import CaptionVocab
    from attnkit.models.captioning import CaptionEnsemble, ImageCaptioner
    from attnkit.models.captioning.consensus import Consensus, NeighbourIndex
    from attnkit.train.loop.task import StepOutput
    from attnkit.train.runs.rundir import RunWriter

__all__ = ["MODEL_NAME", "CaptionRun", "CaptionSettings", "train_caption_run", "fit_captioner", "generate",
           "corpus_bleu", "commit_caption_run", "save_caption_run", "load_caption_run", "load_caption_ensemble",
           "load_caption_neighbours"]



DATA_FLAGS = {"images": "--images", "captions": "--captions", "pretrained": "--pretrained"}  # the files a run reads
# a Flickr8k folder's files, named by its flag: the images, the captions and the split lists (not its feature cache)
FLICKR8K_FLAGS = {**dict.fromkeys(("images", "captions", "train_split", "dev_split", "test_split"), "--data"),
                  "pretrained": "--pretrained"}


def _data_flags(source: dict[str, Any]) -> dict[str, str]:
    return FLICKR8K_FLAGS if "flickr8k" in source else DATA_FLAGS


def _data_record(source: dict[str, Any], out: Path) -> dict[str, Any]:
    """``source`` with its data files recorded (:func:`attnkit.train.runs.data_record.record_data`)."""
    from attnkit.train.runs.data_record import record_data

    return {**source, **record_data({key: source.get(key) for key in _data_flags(source)}, out)}


def _resumed(out: Path, settings: CaptionSettings) -> tuple[dict[str, Any], CaptionSettings]:
    """The committed config of the unfinished run ``out``, and ``settings`` (the run's, by the one rule of
    ``--resume``) with its data found and checked by every task's rule
    (:func:`~attnkit.train.runs.data_record.locate_data`): where the run recorded it, beside a moved run, or
    where a path flag points (a Flickr8k folder: its files at the same places under it)."""
    from attnkit.train.runs.data_record import locate_data
    from attnkit.train.runs.rundir import read_run_config

    saved = read_run_config(out)
    record, data = saved.get("data", {}), settings.data
    flags = _data_flags(record)
    given: dict[str, Any]
    if "flickr8k" in record:  # the folder's files, under the folder given if it is another
        root, folder = Path(record["flickr8k"]), Path(data.data or record["flickr8k"])
        given = {key: folder / Path(record[key]).relative_to(root) for key in flags
                 if folder.resolve() != root and record.get(key) and Path(record[key]).is_relative_to(root)}
    else:  # a path the run recorded stands for itself: the record's places are tried for it
        given = {key: getattr(data, key) for key in ("images", "captions")
                 if getattr(data, key) and Path(getattr(data, key)).resolve() != Path(record.get(key) or "")}
    located = locate_data(record, given, out, flags)
    if "flickr8k" in record:  # the split lists lie at the folder's root (older runs recorded none)
        split = located.get("train_split")
        data = dataclasses.replace(data, data=str(Path(split).parent) if split else data.data)
    else:
        data = dataclasses.replace(data, images=located.get("images") or data.images,
                                   captions=located.get("captions") or data.captions)
    return saved, dataclasses.replace(settings, data=data)


def _memory_check(batch_size: int, max_memory: int | None, log: Callable[[str], None]) -> Callable[..., None]:
    """The run's memory check (:data:`attnkit.train.tasks.caption.caption_data.MemoryCheck`): the plan of
    :func:`attnkit.train.tasks.caption.caption_memory.check_captioning` against ``max_memory``, logged in one line."""
    def check(model: Any, images: int, captions: int, held_out: int, features: bool) -> None:
        from attnkit.train.tasks.caption.caption_memory import check_captioning

        need = check_captioning(model, images=images, captions=captions, held_out=held_out,
                                batch_size=batch_size, features=features, limit=max_memory)
        log(f"memory: {need.describe()}")
    return check


def train_caption_run(settings: CaptionSettings, run: RunOptions) -> str:
    """Train a captioner with ``settings`` and commit the run to ``run.out``; returns the line saying so.

    One generation is committed per epoch (status ``training``, resumable) and
    a last one (status ``done``). With ``run.resume`` the unfinished run goes on (``settings`` are then the
    run's, as :meth:`attnkit.train.registry.Task.run` gives them) with the same data (checked by content
    hash). ``run.out`` is judged before anything is read: a folder
    holding something else is refused, another run only replaced with
    ``overwrite`` and only at the first commit; the lock is taken once every
    input has been read and checked. Before any image is read the
    run's memory plan (:func:`attnkit.train.tasks.caption.caption_memory.check_captioning`) is checked against
    ``run.max_memory`` (None: a share of the memory available) and logged; above it the run is refused.
    """
    import torch

    from attnkit.train.runs.run import start_run
    from attnkit.train.tasks.caption.caption_data import prepare_caption_data

    path, log = Path(run.out), run.log
    saved, settings = _resumed(path, settings) if run.resume else (None, settings)
    writer = start_run(path, run_id=saved["run_id"] if saved else None, overwrite=run.overwrite,
                       flags=RUN_FLAGS)  # refuses now
    torch.manual_seed(settings.training.seed)
    settings = settings.resolved()
    prep = prepare_caption_data(settings, saved_config=saved["model_config"] if saved else None,
                                check=_memory_check(settings.training.batch_size, run.max_memory, log))
    model, vocab = prep.model, prep.vocab
    if saved is not None and saved["vocab"] != vocab.to_dict():
        raise ValueError(f"the data no longer gives the vocabulary run {path} was trained with; "
                         "resuming needs the same data")
    val_inputs, val_refs, _ = prep.validation
    log(f"{MODEL_NAME}: {len(prep.ids)} training pairs, {len(val_refs)} held-out images, "
        f"{len(vocab)} words, grid {model.grid}" + (" (cached features)" if prep.features else ""))
    meta = {"data": _data_record(prep.source, path), "options": dataclasses.asdict(settings)}
    unwritten = [prep.neighbours]  # the index goes into this process's first commit; later ones carry it

    def neighbours() -> Any:
        return unwritten.pop() if unwritten else None

    def commit_epoch(state: dict[str, Any]) -> None:
        commit_caption_run(writer, model, vocab, status="training", meta=meta, history=state["progress"]["history"],
                           progress=state["summary"], train_state=state, neighbours=neighbours())

    flickr = bool(settings.data.data)
    with writer:  # the lock, from here to the last commit
        training = settings.training
        history = fit_captioner(model, prep.inputs, prep.ids, prep.lengths, epochs=training.epochs,
                                batch_size=training.batch_size, lr=training.lr, seed=training.seed, echo=run.epoch_log,
                                checkpoint=commit_epoch, out_dir=path, resume=saved is not None,
                                image_index=prep.image_index, features=prep.features,
                                validation=prep.validation if flickr else None, patience=training.patience,
                                bucket=flickr, per_image=settings.data.captions_per_image if flickr else 0,
                                time_budget_s=training.time_budget_s)
        metrics: dict[str, Any] = {"train_loss": history[-1]["train_loss"]}
        if val_refs:
            hyps = [" ".join(vocab.decode(g.ids)) for g in generate(model, val_inputs, features=prep.features)]
            metrics["val_bleu4"] = corpus_bleu(hyps, val_refs)
            metrics["val_examples"] = [{"reference": refs[0], "generated": h} for refs, h in
                                       list(zip(val_refs, hyps, strict=True))[:5]]
            log(f"held-out BLEU-4 {metrics['val_bleu4']:.2f} (greedy, n={len(val_refs)})")
            if training.explain_outputs:
                metrics["explain"] = _explain_methods(model, vocab, val_inputs[: training.explain_outputs],
                                                      prep.features, log)
        commit_caption_run(writer, model, vocab, status="done", meta=meta, history=history, metrics=metrics,
                           progress={"epoch": len(history), "epochs": training.epochs}, neighbours=neighbours())
    return f"saved {run.out}"


def _explain_methods(model: ImageCaptioner, vocab: CaptionVocab, inputs: Any, features: bool,
                     log: Callable[[str], None]) -> dict[str, Any] | None:
    """Every explanation method's faithfulness on the captions of held-out ``inputs`` (images, or region
    features with ``features``); the most faithful is the one the run's explanations show first."""
    import torch

    from attnkit.attribution.generation import measure_methods, measured_line

    with torch.no_grad():
        regions = (inputs if features else model.encode(inputs)).float()  # (N, R, C); a cache may hold halves
    outputs = [(regions[i : i + 1], _words(vocab, result.ids))
               for i, result in enumerate(generate(model, inputs, features=features))]
    measured = measure_methods(model, outputs)
    log(measured_line(measured, "held-out images"))
    return measured


def _words(vocab: CaptionVocab, ids: Sequence[int]) -> list[int]:
    """A generated caption's word ids, the markers left out."""
    return [i for i in ids if i not in (vocab.bos_id, vocab.eos_id, vocab.pad_id)]


class CaptionTask:
    """Teacher-forced captioning for :class:`~attnkit.train.Trainer`: shuffled batches of captions
    (the order of epoch ``e`` is a pure function of the seed and ``e``), the captioner's loss
    (negative log-likelihood plus the doubly stochastic attention regulariser).

    ``images`` are pixels ``(N, 3, S, S)``, or region features ``(N, R, C)`` of a
    frozen encoder with ``features=True``; ``image_index`` maps each caption to
    its image (default: caption ``i`` belongs to image ``i``). With
    ``validation`` (held-out images or features, their reference captions and
    the vocabulary) each epoch ends with the greedy corpus BLEU-4 of the
    held-out set, the score that early stopping and the kept best weights follow.
    ``bucket=True`` batches captions of similar length together (less padding);
    ``per_image > 0`` makes an epoch read only that many captions of each image,
    the next ones in the following epoch (shorter epochs, more often validated).
    """

    def __init__(self, images: Tensor, captions: Tensor, lengths: Tensor, *, batch_size: int, seed: int,
                 image_index: Tensor | None = None, features: bool = False,
                 validation: tuple[Tensor, Sequence[Sequence[str]], CaptionVocab] | None = None,
                 bucket: bool = False, per_image: int = 0) -> None:
        n = captions.shape[0]
        if lengths.shape != (n,) or (image_index is None and images.shape[0] != n) \
                or (image_index is not None and image_index.shape != (n,)):
            raise ValueError(f"captions, lengths and images (or image_index) must share N={n}, got images "
                             f"{tuple(images.shape)}, lengths {tuple(lengths.shape)}")
        self.images, self.captions, self.lengths = images, captions, lengths
        self.image_index, self.features, self.validation = image_index, features, validation
        self.batch_size, self.seed = batch_size, seed
        self.keep_best = validation is not None
        self.bucket, self.per_image = bucket, per_image

    def batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> list[Tensor]:
        import torch

        gen = torch.Generator().manual_seed(self.seed)
        n = self.captions.shape[0]
        for _ in range(epoch):  # one generator across epochs, replayed: the order never depends on a resume
            torch.randperm(n, generator=gen)
        order = torch.randperm(n, generator=gen)
        if self.per_image:
            order = order[self._epoch_rows(epoch)[order]]  # the epoch's captions, still shuffled
        if not self.bucket:
            return list(order.split(self.batch_size))
        # Buckets: within each window of 50 shuffled batches, batch captions of similar length (the
        # teacher-forced loop runs to the longest caption of a batch), then shuffle the batches.
        batches: list[Tensor] = []
        for window in order.split(self.batch_size * 50):
            ranked = window[torch.argsort(self.lengths[window], stable=True)]
            batches += list(ranked.split(self.batch_size))
        return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]

    def _epoch_rows(self, epoch: int) -> Tensor:
        """A mask of the caption rows epoch ``epoch`` uses: ``per_image`` of each image's captions, taken in turn
        from a seeded start per image (so that ``k`` epochs with ``per_image = n_captions / k`` see every
        caption once, and each epoch mixes the caption slots).

        Shape:
            returns ``(M,)`` bool over the caption rows.
        """
        import torch

        index = self.image_index if self.image_index is not None else torch.arange(self.captions.shape[0])
        order = torch.argsort(index, stable=True)  # caption rows grouped by image
        counts = torch.bincount(index)  # captions per image
        rank = torch.arange(len(index)) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        per = counts[index[order]]
        # each image starts at its own seeded caption: caption files often order an image's captions by
        # style (Flickr8k's fifth caption starts with "the" four times as often), so one slot per epoch
        # would swing the language from epoch to epoch
        offset = torch.randint(0, 1 << 30, (len(counts),), generator=torch.Generator().manual_seed(self.seed + 1))
        start = (epoch * self.per_image + offset[index[order]]) % per
        keep = torch.zeros(len(index), dtype=torch.bool)
        keep[order] = ((rank - start) % per) < torch.clamp(per, max=self.per_image)
        return keep

    def step(self, net: Any, idx: Tensor) -> StepOutput:
        from attnkit.train.loop.task import StepOutput

        t = int(self.lengths[idx].max())
        rows = self.image_index[idx] if self.image_index is not None else idx
        if self.features:
            loss, parts = net.loss_features(self.images[rows].float(), self.captions[idx, :t], self.lengths[idx])
        else:
            pixels = self.images[rows]
            pixels = pixels.float() / 255.0 if not pixels.dtype.is_floating_point else pixels  # uint8 kept compact
            loss, parts = net.loss(pixels, self.captions[idx, :t], self.lengths[idx])
        return StepOutput(loss, len(idx), {"nll": parts["nll"], "attention_reg": parts["attention_reg"]})

    def validate(self, model: Any) -> dict[str, float] | None:
        if self.validation is None:
            return None
        images, references, vocab = self.validation
        found = generate(model, images, features=self.features)
        return {"bleu4": corpus_bleu([" ".join(vocab.decode(g.ids)) for g in found], references)}

    def score(self, metrics: dict[str, float]) -> tuple[float, ...]:
        return (metrics["bleu4"],)


def fit_captioner(model: ImageCaptioner, images: Tensor, captions: Tensor, lengths: Tensor, *,
                  epochs: int, batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
                  echo: Callable[[str], None] | None = None,
                  checkpoint: Callable[[dict[str, Any]], None] | None = None,
                  out_dir: str | Path | None = None, resume: bool = False, image_index: Tensor | None = None,
                  features: bool = False,
                  validation: tuple[Tensor, Sequence[Sequence[str]], CaptionVocab] | None = None,
                  patience: int = 0, bucket: bool = False, per_image: int = 0,
                  time_budget_s: float | None = None) -> list[dict[str, Any]]:
    """Train with teacher forcing through :class:`~attnkit.train.Trainer`: Adam, a cosine decay of
    the rate to 5% of ``lr``, gradient clipping at 5.

    Returns one record per epoch (``epoch``, ``train_loss``, ``train_nll``,
    ``train_attention_reg``, ``lr``, ``seconds``, and ``val_bleu4`` with
    ``validation``). ``checkpoint`` gets the resumable state after each epoch
    (the trainer's callback: commit it with :func:`commit_caption_run`);
    ``resume=True`` continues the state committed in ``out_dir``, ending with
    the weights an uninterrupted run would have. ``images``, ``image_index``,
    ``features`` and ``validation`` are those of :class:`CaptionTask`; with
    ``validation`` the model ends with its best held-out weights, and
    ``patience > 0`` stops after that many epochs without a better BLEU-4;
    ``bucket`` and ``per_image`` are those of :class:`CaptionTask`; ``time_budget_s``
    ends training after the batch that spends it (across resumes).

    Shape:
        images ``(N, 3, S, S)`` (or features ``(N, R, C)``); captions ``(M, T)``; lengths ``(M,)``.
    """
    import torch

    from attnkit._checks import positive_int
    from attnkit.train.config import TrainConfig
    from attnkit.train.loop import schedules
    from attnkit.train.loop.trainer import Trainer

    positive_int("epochs", epochs)
    task = CaptionTask(images, captions, lengths, batch_size=batch_size, seed=seed, image_index=image_index,
                       features=features, validation=validation, bucket=bucket, per_image=per_image)
    trainable = [p for p in model.parameters() if p.requires_grad]
    trainer = Trainer(
        model, TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, clip_norm=5.0, patience=patience,
                           seed=seed, device="cpu"),
        task=task, out_dir=out_dir, checkpoint=checkpoint, reseed=False, quiet=True, time_budget_s=time_budget_s,
        log=(lambda line: echo(line)) if echo is not None else None,
        optimizer=lambda m: torch.optim.Adam(trainable, lr=lr, foreach=True),
        schedule=lambda step, total: schedules.cosine(step, total, floor=0.05))
    history = trainer.fit(resume=resume)
    model.eval()
    return history


def generate(model: ImageCaptioner | CaptionEnsemble, images: Tensor, *, beam_size: int = DECODING.beam_size,
             batch_size: int = GENERATE_BATCH, features: bool = False,
             length_penalty: float = DECODING.length_penalty, consensus: Consensus | None = None,
             **constraints: Any) -> list[Any]:
    """Captions for many images (or, with ``features=True``, cached region features ``(N, R, C)``):
    batched greedy decoding for ``beam_size == 1`` without ``constraints``, beam search with the GNMT
    ``length_penalty`` and the ``constraints`` (``length_bonus``, ``min_len``, ``block_repeats`` of
    :func:`attnkit.decoding.beam_search_over_steps`) otherwise; with ``consensus``, the beam's
    ``beam_size`` best captions of each image are re-ranked by consensus with the captions of the nearest
    training images (:meth:`~attnkit.models.captioning.generation.CaptionGenerator.generate_consensus`)."""
    import torch

    model.eval()
    out: list[Any] = []
    limit = model.config.max_len
    for chunk in images.split(batch_size):
        with torch.no_grad():
            regions = model.check_features(chunk) if features else model.encode(chunk)  # (B, R, C)
        if consensus is not None:
            out += model.generate_consensus(regions, limit, beam_size, length_penalty, consensus, **constraints)
        elif beam_size == 1 and not any(constraints.values()):
            out += model.generate_greedy(regions, limit)
        else:
            out += model.generate_beam(regions, limit, beam_size, length_penalty, **constraints)
    return out


def commit_caption_run(writer: RunWriter, model: ImageCaptioner, vocab: CaptionVocab, *, status: str,
                       meta: dict[str, Any] | None = None, history: Sequence[dict[str, Any]] | None = None,
                       metrics: dict[str, Any] | None = None, progress: dict[str, Any] | None = None,
                       train_state: dict[str, Any] | None = None, neighbours: NeighbourIndex | None = None) -> Path:
    """Commit one generation through the open ``writer``: the weights, config.json (config,
    vocabulary, ``meta``, ``status``, ``progress``, ``metrics``), history.jsonl / metrics.json
    when given, the trainer's resumable ``train_state`` (else the previous generation's) and the
    ``neighbours`` index of the training images (else the previous generation's, if any)."""
    from attnkit.models.captioning.consensus import NEIGHBOURS_FILE
    from attnkit.train.runs import checkpoint as ckpt
    from attnkit.train.runs.run import commit_generation

    files: dict[str, Any] = {**({NEIGHBOURS_FILE: neighbours.save} if neighbours is not None else {}),
                             **ckpt.state_files(train_state),
                             "model.safetensors": ckpt.weights_file(model.state_dict())}
    if history is not None:
        files["history.jsonl"] = "".join(json.dumps(h) + "\n" for h in history)
    if metrics is not None:
        files["metrics.json"] = metrics
    fields = {"model_name": MODEL_NAME, "model_config": model.config.to_dict(), "vocab": vocab.to_dict(),
              **(meta or {}), **({"metrics": metrics} if metrics is not None else {})}
    return commit_generation(writer, fields, status=status, files=files, progress=progress,
                             carry=[*([] if train_state is not None else [f"{ckpt.STATE_DIR}/"]),
                                    *([] if neighbours is not None else [NEIGHBOURS_FILE])])


def save_caption_run(directory: str | Path, model: ImageCaptioner, vocab: CaptionVocab, *, run_id: str,
                     overwrite: bool = False, extra: dict[str, Any] | None = None) -> Path:
    """Commit ``model``, its vocabulary and ``extra`` (``status``: ``"done"`` unless given) as one generation."""
    from attnkit.train.runs.run import save_run

    meta = dict(extra or {})
    status = str(meta.pop("status", "done"))
    return save_run(directory, lambda writer: commit_caption_run(writer, model, vocab, status=status, meta=meta),
                    run_id=run_id, overwrite=overwrite, resumable=False)


def load_caption_run(directory: str | Path, *, allow_unfinished: bool = False
                     ) -> tuple[ImageCaptioner, CaptionVocab, dict[str, Any]]:
    """Rebuild ``(model in eval mode, vocabulary, config.json contents)`` from a run's committed generation.

    A run whose training did not finish raises :class:`~attnkit.train.runs.rundir.UnfinishedRunError`
    unless ``allow_unfinished`` (then ``meta["notice"]`` says which weights are served); a
    missing, damaged or foreign file raises :class:`~attnkit.train.runs.rundir.RunFileError` naming it.
    """
    from attnkit.data.captions import CaptionVocab
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
    from attnkit.train.runs import checkpoint as ckpt

    folder, meta = TASK.committed(Path(directory), allow_unfinished=allow_unfinished)
    weights = folder / "model.safetensors"
    try:
        model = ImageCaptioner(CaptionerConfig.from_dict(meta["model_config"]))
        vocab = CaptionVocab.from_dict(meta["vocab"])
    except (KeyError, TypeError, ValueError) as err:
        raise ckpt.RunFileError(f"{folder / 'config.json'} holds a config that does not build: {err}") from None
    what = "the captioner of its config.json"
    ckpt.load_weights_into(model, ckpt.load_finite_tensors(weights, model.state_dict(), what), weights, what)
    return model.eval(), vocab, meta


@dataclass
class CaptionRun:
    """A captioning run served: its model (eval mode), vocabulary and ``config.json``."""

    path: Path
    model: Any
    vocab: Any
    config: dict[str, Any]

    @property
    def notice(self) -> str | None:
        """For an unfinished run loaded with ``allow_unfinished``, which weights are served."""
        return self.config.get("notice")

    def caption(self, images: Any, *, beam_size: int = DECODING.beam_size) -> list[str]:
        """One caption per image of ``images`` ``(N, 3, S, S)`` (floats in [0, 1], the run's image size)."""
        return [" ".join(self.vocab.decode(result.ids)) for result in generate(self.model, images,
                                                                                beam_size=beam_size)]

    def explain(self, image: Any, *, method: str | None = None, beam_size: int = DECODING.beam_size
                ) -> dict[str, Any]:
        """``image`` ``(3, S, S)`` captioned (as :meth:`caption`), and each generated word explained by a score
        per image region (``grid``: the regions' rows and columns, row-major), with every method's faithfulness
        measured on this caption (regions removed by zeroing their features;
        :func:`attnkit.attribution.generation.explain_generation`); the method shown first is the most faithful
        on the run's held-out images when it measured them, else on this caption (``chosen`` says which)."""
        import torch

        from attnkit.attribution.generation import explain_generation

        images = image[None] if image.dim() == 3 else image
        (result,) = generate(self.model, images, beam_size=beam_size)
        words = _words(self.vocab, result.ids)
        if not words:
            raise ValueError("the caption is empty: there is no generated word to explain")
        with torch.no_grad():
            features = self.model.encode(images)  # (1, R, C)
        rows, cols = self.model.grid
        return {"caption": " ".join(self.vocab.decode(words)), "target_tokens": self.vocab.decode(words),
                "grid": [rows, cols], "source_tokens": [f"({r},{c})" for r in range(rows) for c in range(cols)],
                **explain_generation(self.model, features, words, method=method,
                                     measured=self.config.get("metrics", {}).get("explain"))}

    @classmethod
    def load(cls, path: Path, *, allow_unfinished: bool = False, device: str = "cpu") -> CaptionRun:
        """The run in ``path`` served (``attnkit.load_run``), as :func:`load_caption_run` loads it."""
        model, vocab, config = load_caption_run(path, allow_unfinished=allow_unfinished)
        return cls(path, model.to(device), vocab, config)


def load_caption_neighbours(directory: str | Path) -> NeighbourIndex:
    """The neighbour index a captioning run keeps for consensus re-ranking (runs trained with ``--data``
    on a frozen encoder have one); a run without one is a RunFileError that says so."""
    from attnkit.models.captioning.consensus import NEIGHBOURS_FILE, NeighbourIndex
    from attnkit.train.runs import checkpoint as ckpt

    path = ckpt.committed_dir(Path(directory)) / NEIGHBOURS_FILE
    if not path.is_file():
        raise ckpt.RunFileError(f"{directory} keeps no neighbour index ({path} is missing): consensus re-ranking "
                                "needs a run trained on a Flickr8k folder (attnkit train --task caption --data) with a "
                                "frozen encoder by this version of attnkit")
    try:
        return NeighbourIndex.load(path)
    except ValueError as err:
        raise ckpt.RunFileError(str(err)) from None


def load_caption_ensemble(directories: Sequence[str | Path], *, allow_unfinished: bool = False
                          ) -> tuple[ImageCaptioner | CaptionEnsemble, CaptionVocab, list[dict[str, Any]]]:
    """Load several captioning runs as one :class:`~attnkit.models.captioning.ensemble.CaptionEnsemble`
    (one run: that captioner itself), with the shared vocabulary and each run's config.json contents.

    Every run loads as :func:`load_caption_run` loads it; runs whose vocabularies or
    encoders differ raise ``ValueError`` naming the run.
    """
    from attnkit.models.captioning import CaptionEnsemble

    if isinstance(directories, str | Path) or not directories:
        raise ValueError(f"give one or more run directories, got {directories!r}")
    loaded = [load_caption_run(d, allow_unfinished=allow_unfinished) for d in directories]
    models, vocab, metas = [m for m, _, _ in loaded], loaded[0][1], [meta for _, _, meta in loaded]
    for directory, (_, other, _) in zip(directories[1:], loaded[1:], strict=True):
        if other.to_dict() != vocab.to_dict():
            raise ValueError(f"{directory} has another vocabulary than {directories[0]}: an ensemble's runs must "
                             "be trained on the same data")
    if len(models) == 1:
        return models[0], vocab, metas
    try:
        return CaptionEnsemble(models).eval(), vocab, metas
    except ValueError as err:
        names = ", ".join(f"member {i} = {d}" for i, d in enumerate(directories))
        raise ValueError(f"{err} ({names})") from None
