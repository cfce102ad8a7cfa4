"""Translation runs: train a :class:`~attnkit.models.seq2seq.Seq2SeqTransformer`, save it, translate with it.

:func:`fit_translation` trains the tokenizers and the model (resumable, with
weight averaging), :func:`save_translation_run` and :func:`load_translation_run`
write and read a run directory, :class:`Translator` turns text into text (these
three live in :mod:`attnkit.train.tasks.translate.translation_run`), and :func:`corpus_bleu` (that of
:mod:`attnkit.train.metrics`) scores it. The command line trains through
:func:`train_translation_run`. A translation run directory is a transaction
(:mod:`attnkit.train.runs.rundir`); its committed generation ``RUN/checkpoints/NNNNNN/`` holds::

    config.json          run id, model config, training settings, history, status, progress, metrics
    model.safetensors    the weights (tied tensors stored once): after the last finished epoch while
                         training, the final (perhaps averaged) ones once done
    tokenizer.json       the joint BPE tokenizer  -- or src_tokenizer.json + tgt_tokenizer.json
    train_state/         last weights, optimizer, RNG, and the epoch-N.safetensors snapshots to average

Each finished epoch commits one generation (status ``training``), the end of
training one more (status ``done``); an unchanged file is linked from the
previous generation, not written again. A directory holding a different run
is replaced only with ``overwrite``, and only at the first commit.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attnkit._checks import setting_fields
from attnkit._modes import eval_mode
from attnkit.data.parallel import (
    ParallelCorpus,
    TranslationTokenizers,
    batches_by_tokens,
    encode_pairs,
    train_translation_tokenizers,
)
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.train.config import TranslationTrainConfig
from attnkit.train.loop import schedules
from attnkit.train.loop.task import StepOutput
from attnkit.train.metrics import corpus_bleu
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.runs.resume import RUN_FLAGS, RunOptions, resumed_settings
from attnkit.train.runs.run import start_run
from attnkit.train.runs.rundir import RunFileError
from attnkit.train.tasks.translate import TASK
from attnkit.train.tasks.translate.settings import TranslationSettings
from attnkit.train.tasks.translate.translation_memory import check_translation
from attnkit.train.tasks.translate.translation_run import (
    Translation,
    Translator,
    commit_translation_run,
    load_translation_run,
    save_translation_run,
    snapshot_name,
)

__all__ = [
    "TranslationTrainConfig", "Translation", "Translator", "fit_translation", "save_translation_run",
    "load_translation_run", "corpus_bleu", "train_translation_run", "warmup_notice",
]


# --- training ------------------------------------------------------------------------------------


def _validation_loss(model: Seq2SeqTransformer, pairs: list[tuple[list[int], list[int]]], max_tokens: int) -> float:
    total, count = 0.0, 0
    with torch.no_grad(), eval_mode(model):
        for batch in batches_by_tokens(pairs, max_tokens, shuffle=False):
            logits = model(batch.src, batch.src_lengths, batch.tgt_in)
            n = batch.num_target_tokens
            total += float(model.loss(logits, batch.tgt_out)) * n
            count += n
    return total / max(count, 1)


def _average_snapshots(model: Seq2SeqTransformer, snapshots: list[dict[str, torch.Tensor]],
                       val_pairs: list[tuple[list[int], list[int]]], train_config: TranslationTrainConfig,
                       history: list[dict[str, Any]], extra: dict[str, Any], say: Callable[[str], None]) -> None:
    """Load the mean of ``snapshots`` into ``model``; put the last one back if validation says it is worse."""
    last = snapshots[-1]
    averaged = {k: torch.stack([s[k] for s in snapshots]).mean(0) if v.is_floating_point() else v
                for k, v in last.items()}
    model.load_saved_tensors(averaged)
    if not val_pairs:
        extra["averaged_epochs"] = len(snapshots)
        say(f"averaged the weights of the last {len(snapshots)} epochs")
        return
    loss = _validation_loss(model, val_pairs, train_config.max_tokens)
    last_loss = history[-1]["val_loss"]
    if loss <= last_loss:
        extra["averaged_epochs"] = len(snapshots)
        extra["averaged_val_loss"] = loss
        say(f"averaged the weights of the last {len(snapshots)} epochs: val loss {loss:.3f} "
            f"(last epoch {last_loss:.3f})")
    else:
        model.load_saved_tensors(last)
        say(f"kept the last epoch's weights: the average of {len(snapshots)} has val loss {loss:.3f} > {last_loss:.3f}")


@dataclass
class _Start:
    """Where training starts: a fresh run, or the committed state of an unfinished one."""

    run_id: str
    tokenizers: TranslationTokenizers
    model: Seq2SeqTransformer
    epoch: int = 0
    step: int = 0
    seconds: float = 0.0
    history: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    state: dict[str, Any] | None = None
    snapshots: list[dict[str, torch.Tensor]] = dataclasses.field(default_factory=list)


def _resume_state(out: Path, keep: int) -> _Start:
    """The committed state of the unfinished run in ``out``, read whole before anything is written."""
    meta = TASK.resumed_config(out)
    if ckpt.run_status(meta) == "done":
        raise ValueError(f"{out} finished training already; nothing to resume (it was left as it is)")
    translator = load_translation_run(out, allow_unfinished=True)
    state = ckpt.load_train_state(out)
    folder = ckpt.committed_dir(out)
    if state is None:
        raise RunFileError(f"cannot resume: {folder / ckpt.STATE_DIR / 'state.json'} is missing "
                           "(the run was not saved by a resumable training)")
    progress = state["progress"]
    model = translator.model
    try:
        model.load_saved_tensors(state["model"])
        last = int(progress["epoch"])
        start = _Start(meta["run_id"], translator.tokenizers, model, last, int(progress["step"]),
                       float(progress["seconds"]), list(progress["history"]), state)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise RunFileError(f"{folder / ckpt.STATE_DIR} does not hold a translation train state: {err}") from None
    for epoch in range(max(1, last + 1 - keep), last + 1):  # the snapshots kept for averaging
        if keep > 1 and (folder / snapshot_name(epoch)).is_file():
            start.snapshots.append(ckpt.load_tensors(folder / snapshot_name(epoch)))
    return start


class TranslationTask:
    """Teacher-forced translation for :class:`~attnkit.train.Trainer`: token-budget batches of similar
    length (a new shuffle each epoch), cross-entropy per target token, validation loss."""

    keep_best = False

    def __init__(self, train_pairs: list[tuple[list[int], list[int]]],
                 val_pairs: list[tuple[list[int], list[int]]], *, max_tokens: int, seed: int) -> None:
        self.train_pairs, self.val_pairs = train_pairs, val_pairs
        self.max_tokens, self.seed = max_tokens, seed

    def batches(self, epoch: int, rank: int = 0, world_size: int = 1) -> list[Any]:
        return list(batches_by_tokens(self.train_pairs, self.max_tokens, seed=self.seed + epoch + 1))

    def step(self, net: torch.nn.Module, batch: Any) -> StepOutput:
        model: Any = getattr(net, "module", net)
        logits = net(batch.src, batch.src_lengths, batch.tgt_in)
        return StepOutput(model.loss(logits, batch.tgt_out), batch.num_target_tokens)

    def validate(self, model: torch.nn.Module) -> dict[str, float] | None:
        if not self.val_pairs:
            return None
        return {"loss": _validation_loss(model, self.val_pairs, self.max_tokens)}  # type: ignore[arg-type]

    def score(self, metrics: dict[str, float]) -> tuple[float, ...]:
        return (-metrics["loss"],)


def fit_translation(
    train: ParallelCorpus, val: ParallelCorpus | None, settings: TranslationSettings, *,
    out_dir: str | os.PathLike[str], overwrite: bool = False, log: Callable[[str], None] | None = None,
    resume: bool = False, flags: Mapping[str, str] | None = None, max_memory: int | None = None,
    data: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Train tokenizers (on ``train`` only) and a Seq2SeqTransformer with ``settings`` (its ``data`` paths are
    only recorded), save the run, return its summary.

    The loop is :class:`~attnkit.train.Trainer`'s with :class:`TranslationTask`:
    Adam (0.9, 0.98) at the inverse square-root schedule. It commits the run
    after every epoch (status ``training``: the last weights and the resumable
    state) and once more at the end (status ``done``: the final, perhaps
    averaged, weights and the metrics); stops early when ``time_budget_s`` is
    spent (time before an interruption counts). With ``resume=True`` the
    unfinished run in ``out_dir`` goes on after its last committed epoch with
    the saved tokenizers, weights, optimizer and RNG state, so the result
    equals an uninterrupted run; ``settings`` must then be the run's, by the one rule
    (:func:`~attnkit.train.runs.resume.resumed_settings`: a changed setting is refused by name, a changed
    ``epochs`` applied and said). Every input is checked before the directory is touched, and
    ``overwrite`` replaces the old run only at the first commit (``flags``: for ``check_run_dir``).
    Before the folder is touched the run's memory plan
    (:func:`~attnkit.train.tasks.translate.translation_memory.check_translation`:
    the model with Adam, the pairs and the largest batch's step) is checked against ``max_memory`` (bytes;
    None: a share of the memory available) and the memory budget; a
    :class:`~attnkit.train.memory_budget.MemoryLimitError` refuses a run over it.
    ``data``: the record of the files ``train`` and ``val`` were read from
    (:func:`attnkit.train.runs.data_record.record_data`), stored in the run's config as every task's is.
    Returns ``{"run_id", "history", "val_bleu" (when val is given), "steps", "seconds"}``.
    """
    if resume and overwrite:
        raise ValueError("resume continues the run in out_dir and overwrite replaces it; give one")
    if resume:
        names = [f.name for f, _ in setting_fields(TranslationSettings)]
        settings = resumed_settings(TranslationSettings.from_run(TASK.resumed_config(out_dir)), settings, names,
                                    run=str(out_dir), grows=TASK.grows, log=log or (lambda _line: None))
    return _fit(train, val, settings, Path(out_dir), overwrite=overwrite, log=log, resume=resume, flags=flags,
                max_memory=max_memory, data=data)


def _fit(train: ParallelCorpus, val: ParallelCorpus | None, settings: TranslationSettings, out: Path, *,
         overwrite: bool, log: Callable[[str], None] | None, resume: bool, flags: Mapping[str, str] | None,
         max_memory: int | None, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """:func:`fit_translation` once a resume's settings are the run's."""
    say, train_config = log or (lambda _line: None), settings.training
    if out.is_dir():
        ckpt.check_unlocked(out)
    keep = max(1, train_config.average_last)
    if resume:
        start = _resume_state(out, keep)
        say(f"resuming {out} after epoch {start.epoch} (step {start.step}, {start.seconds:.0f} s of training)")
    writer = start_run(out, run_id=start.run_id if resume else None, overwrite=overwrite, flags=flags)  # refuses now
    if not resume:
        start = _fresh_start(writer.run_id, train, settings)
    tokenizers, model = start.tokenizers, start.model
    task = TranslationTask(encode_pairs(tokenizers, train, max_len=train_config.max_len),
                           encode_pairs(tokenizers, val, max_len=train_config.max_len) if val is not None else [],
                           max_tokens=train_config.max_tokens, seed=train_config.seed)
    config = model.config
    say(f"{len(task.train_pairs)} training pairs, {len(task.val_pairs)} validation pairs; vocab "
        f"{config.src_vocab_size}/{config.tgt_vocab_size}; {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M "
        "parameters")
    need = check_translation(config, task.train_pairs, train_config.max_tokens, limit=max_memory)
    say(f"memory: {need.describe()}")
    epochs = train_config.epochs
    snapshots: collections.deque[dict[str, torch.Tensor]] = collections.deque(start.snapshots, maxlen=keep)
    meta: dict[str, Any] = {"settings": dataclasses.asdict(settings), "history": start.history,
                            "progress": {"epoch": start.epoch, "epochs": epochs}, "data": dict(data or {})}

    def commit_epoch(state: dict[str, Any]) -> None:
        epoch = int(state["progress"]["epoch"])
        snapshots.append({k: v.detach().clone() for k, v in state["model"].items()})
        meta.update(history=state["progress"]["history"], progress={"epoch": epoch, "epochs": epochs})
        commit_translation_run(writer, model, tokenizers, meta, status="training", epoch=epoch,
                               state={"optimizer": state["optimizer"], "progress": state["progress"]},
                               snapshots=range(max(1, epoch + 1 - keep), epoch + 1) if keep > 1 else ())

    trainer = _trainer(model, task, train_config, out, say, commit_epoch)
    with writer:  # the lock, from here to the last commit
        history = trainer.fit(resume=resume)
        meta["history"] = history
        if len(snapshots) > 1:
            _average_snapshots(model, list(snapshots), task.val_pairs, train_config, history, meta, say)
        model.eval()
        summary: dict[str, Any] = {"run_id": writer.run_id, "history": history, "steps": trainer.step,
                                   "seconds": round(trainer.seconds, 1)}
        if val is not None:
            meta["metrics"] = _validation_metrics(model, tokenizers, val, train_config, say)
            summary["val_bleu"] = meta["metrics"]["val_bleu"]
        last = history[-1]["epoch"] if history else None
        commit_translation_run(writer, model, tokenizers, meta, status="done", epoch=last)
    return summary


def train_translation_run(settings: TranslationSettings, run: RunOptions) -> str:
    """``attnkit train --task translate``: read the corpus of ``settings.data``, record it, train (or resume:
    ``settings`` are then the run's, as :meth:`attnkit.train.registry.Task.run` gives them) the run ``run.out``,
    and return the line that says where it is."""
    from attnkit.data.parallel import read_parallel
    from attnkit.train.runs.data_record import locate_data, record_data

    paths = {key: getattr(settings.data, key) for key in DATA_FLAGS}
    saved = ckpt.read_run_config(run.out).get("data") if run.resume else None
    known = locate_data(saved, paths, run.out, DATA_FLAGS) if saved else None  # found by the run's record
    paths = {key: (known or {}).get(key) or path for key, path in paths.items()}
    if not paths["src"] or not paths["tgt"]:
        raise ValueError("give the training corpus: --src and --tgt")
    data = record_data(paths, run.out, known=known)
    train = read_parallel(paths["src"], paths["tgt"])
    val = read_parallel(paths["val_src"], paths["val_tgt"]) if paths["val_src"] and paths["val_tgt"] else None
    training = settings.training
    if not run.resume and (notice := warmup_notice(train.sources, train.targets, training.max_tokens,
                                                   training.epochs, training.warmup_steps)) is not None:
        run.warn(notice)
    settings = dataclasses.replace(settings, data=dataclasses.replace(settings.data, **paths))
    summary = _fit(train, val, settings, Path(run.out), overwrite=run.overwrite, log=run.epoch_log,
                   resume=run.resume, flags=RUN_FLAGS, max_memory=run.max_memory, data=data)
    return f"saved run to {run.out} ({summary['steps']} steps, {summary['seconds']:.0f} s)"


DATA_FLAGS = {"src": "--src", "tgt": "--tgt", "val_src": "--val-src", "val_tgt": "--val-tgt"}
WARMUP_SHARE = 0.5  # of all steps: a longer warm-up leaves the rate rising for most of the run


def estimated_steps(sources: list[str], targets: list[str], max_tokens: int) -> int:
    """At least how many optimizer steps one epoch of these pairs takes with ``--max-tokens``, from their
    lengths in words (a subword tokenizer splits a word into one or more tokens, so it is a lower bound)."""
    width = sum(max(len(s.split()), len(t.split()) + 1) for s, t in zip(sources, targets, strict=True))
    return max(1, -(-width // max_tokens))


def warmup_notice(sources: list[str], targets: list[str], max_tokens: int, epochs: int,
                  warmup_steps: int) -> str | None:
    """A warning when ``--warmup-steps`` exceeds :data:`WARMUP_SHARE` of the run's estimated steps (a small
    corpus under the default warm-up of 1000 steps), naming a warm-up that fits; None when it fits."""
    per_epoch = estimated_steps(sources, targets, max_tokens)
    total = per_epoch * epochs
    if warmup_steps <= WARMUP_SHARE * total:
        return None
    fits = max(1, total // 10)
    return (f"warning: --warmup-steps {warmup_steps} is more than half of this run's about {total} steps "
            f"({epochs} epochs of about {per_epoch} on {len(sources)} pairs): the learning rate would still "
            f"be rising when training ends; pass --warmup-steps {fits} (a tenth of the steps), more --epochs, "
            "or a smaller --max-tokens")


def _trainer(model: Any, task: TranslationTask, train_config: TranslationTrainConfig, out: Path,
             say: Callable[[str], None], commit_epoch: Callable[[dict[str, Any]], None]) -> Any:
    """The :class:`~attnkit.train.Trainer` of a translation run: Adam (0.9, 0.98) at the inverse square-root
    schedule, ``commit_epoch`` after every epoch, the time budget."""
    from attnkit.train.config import TrainConfig
    from attnkit.train.loop.trainer import Trainer

    lr, warmup_steps = train_config.lr, train_config.warmup_steps
    return Trainer(
        model, TrainConfig(epochs=train_config.epochs, lr=lr, clip_norm=train_config.clip_norm, patience=0,
                           seed=train_config.seed, device="cpu"),
        task=task, out_dir=out, log=say, checkpoint=commit_epoch, reseed=False, quiet=True, extendable=True,
        optimizer=lambda m: torch.optim.Adam(m.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9, foreach=True),
        schedule=lambda step, _total: schedules.inverse_sqrt(step, warmup_steps),
        time_budget_s=train_config.time_budget_s, log_every=train_config.log_every)


def _fresh_start(run_id: str, train: ParallelCorpus, settings: TranslationSettings) -> _Start:
    """A new run: the seed, tokenizers trained on ``train`` only, a freshly initialised model."""
    train_config, shared_vocab = settings.training, not settings.tokenizer.separate_vocab
    torch.manual_seed(train_config.seed)
    tokenizers = train_translation_tokenizers(train, vocab_size=train_config.vocab_size, shared=shared_vocab,
                                              lowercase=train_config.lowercase)
    model = Seq2SeqTransformer(Seq2SeqConfig.from_dict({
        "src_vocab_size": tokenizers.source.get_vocab_size(), "tgt_vocab_size": tokenizers.target.get_vocab_size(),
        "shared_vocab": shared_vocab, **settings.model.model_options()}))
    return _Start(run_id, tokenizers, model)


def _validation_metrics(model: Seq2SeqTransformer, tokenizers: TranslationTokenizers, val: ParallelCorpus,
                        train_config: TranslationTrainConfig, say: Callable[[str], None]) -> dict[str, Any]:
    """The corpus BLEU of the model's translations of (the first ``eval_sentences`` of) ``val``, and (with
    ``explain_outputs``) every explanation method's faithfulness on its first ``explain_outputs`` sentences:
    the most faithful is the one the run's explanations show first."""
    from attnkit.attribution.generation import measured_line

    translator = Translator(model, tokenizers, max_src_len=train_config.max_len)
    n = len(val) if train_config.eval_sentences is None else min(len(val), train_config.eval_sentences)
    hyps = [t.text for t in translator.translate(val.sources[:n], beam_size=train_config.eval_beam_size)]
    metrics: dict[str, Any] = {"val_bleu": corpus_bleu(hyps, val.targets[:n])}
    say(f"validation BLEU {metrics['val_bleu']:.2f} (beam {train_config.eval_beam_size}, {n} sentences)")
    if train_config.explain_outputs:
        metrics["explain"] = translator.measure_methods(val.sources[: train_config.explain_outputs])
        say(measured_line(metrics["explain"], "validation sentences"))
    return metrics
