"""Translation: train a :class:`~attnkit.models.seq2seq.Seq2SeqTransformer`, save it, translate with it.

Library functions (:func:`fit_translation`, :func:`save_translation_run`,
:func:`load_translation_run`, :class:`Translator`, :func:`corpus_bleu`) and two
click commands built on them::

    train_translate --src train.de.gz --tgt train.en.gz --val-src val.de.gz --val-tgt val.en.gz --out runs/de-en
    translate runs/de-en "Ein Mann fährt Fahrrad." --beam 4 --alignment align.png

A translation run directory holds::

    config.json          run id, model config, training settings, history, metrics (written last)
    model.safetensors    the weights (tied tensors stored once)
    tokenizer.json       the joint BPE tokenizer  -- or src_tokenizer.json + tgt_tokenizer.json

Every file is written atomically (temporary file + rename), and a directory
holding a different run is never written into without ``--overwrite``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import torch
from tokenizers import Tokenizer

from attnkit.cli.commands import friendly_errors
from attnkit.data.parallel import (
    ParallelCorpus,
    TranslationTokenizers,
    batches_by_tokens,
    collate_pairs,
    encode_pairs,
    read_parallel,
    train_translation_tokenizers,
)
from attnkit.decoding import beam_search, greedy_decode
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.train import checkpoint as ckpt

__all__ = [
    "TranslationTrainConfig", "Translation", "Translator", "fit_translation", "save_translation_run",
    "load_translation_run", "corpus_bleu", "train_translate", "translate",
]

MODEL_NAME = "seq2seq"
TOKENIZER_FILES = ("tokenizer.json", "src_tokenizer.json", "tgt_tokenizer.json")


# --- run directory -------------------------------------------------------------------------------


def save_translation_run(directory: str | os.PathLike[str], model: Seq2SeqTransformer,
                         tokenizers: TranslationTokenizers, *, run_id: str, overwrite: bool = False,
                         extra: dict[str, Any] | None = None) -> Path:
    """Write model weights, tokenizers and config.json (last) into ``directory``.

    Raises :class:`attnkit.train.checkpoint.RunExistsError` when the directory
    holds a different run and ``overwrite`` is false.
    """
    path = Path(directory)
    ckpt.check_run_dir(path, run_id, overwrite=overwrite)
    path.mkdir(parents=True, exist_ok=True)
    ckpt.save_tensors(path / "model.safetensors", model.tensors_to_save(), metadata={"format": "pt"})
    if tokenizers.shared:
        ckpt.atomic_write_text(path / "tokenizer.json", tokenizers.source.to_str())
    else:
        ckpt.atomic_write_text(path / "src_tokenizer.json", tokenizers.source.to_str())
        ckpt.atomic_write_text(path / "tgt_tokenizer.json", tokenizers.target.to_str())
    config = {"run_id": run_id, "model_name": MODEL_NAME, "model_config": model.config.to_dict(),
              "shared_tokenizer": tokenizers.shared, **(extra or {})}
    ckpt.atomic_write_json(path / "config.json", config)
    return path


def _clear_translation_run(directory: Path) -> None:
    for name in ("config.json", "model.safetensors", *TOKENIZER_FILES):
        (directory / name).unlink(missing_ok=True)


def _load_tokenizer(path: Path) -> Tokenizer:
    if not path.is_file():
        raise ValueError(f"run directory {path.parent} is incomplete: {path.name} is missing")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise ValueError(f"{path} is not a valid tokenizer file ({exc})") from None


@dataclass(frozen=True)
class Translation:
    """One translated text, with its subword tokens and (on request) the alignment ``(Tt, Ts)``."""

    source: str
    text: str
    source_tokens: list[str]
    target_tokens: list[str]
    score: float
    alignment: torch.Tensor | None = None


def _token_strings(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    return [tokenizer.id_to_token(i) or "[UNK]" for i in ids]


class Translator:
    """A trained model with its tokenizers: text in, text out."""

    def __init__(self, model: Seq2SeqTransformer, tokenizers: TranslationTokenizers, *,
                 max_src_len: int = 256, meta: dict[str, Any] | None = None) -> None:
        self.model, self.tokenizers, self.max_src_len = model, tokenizers, max_src_len
        self.meta = meta or {}

    def translate(self, texts: Sequence[str], *, beam: int = 1, length_penalty: float = 0.6, batch_size: int = 64,
                  return_alignment: bool = False) -> list[Translation]:
        """Translate ``texts`` (greedy for ``beam=1``); output length is at most ``1.5 * Ts + 10``."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, got a single str")
        ids = self.tokenizers.encode_source(texts, self.max_src_len)
        for i, seq in enumerate(ids):
            if not texts[i].strip() or not seq:
                raise ValueError(f"text {i} ({texts[i]!r}) is empty after tokenization; nothing to translate")
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: dict[int, Translation] = {}
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                batch = collate_pairs([(ids[i], [0]) for i in chunk])
                max_len = int(1.5 * batch.src.shape[1]) + 10
                if beam == 1:
                    out = greedy_decode(self.model, batch.src, batch.src_lengths, max_len=max_len,
                                        return_alignment=return_alignment)
                else:
                    out = beam_search(self.model, batch.src, batch.src_lengths, beam_size=beam, length_penalty=length_penalty,
                                      max_len=max_len, return_alignment=return_alignment)
                texts_out = self.tokenizers.decode_target(out.tokens)
                for j, i in enumerate(chunk):
                    results[i] = Translation(
                        texts[i], texts_out[j], _token_strings(self.tokenizers.source, ids[i]),
                        _token_strings(self.tokenizers.target, out.tokens[j]), out.scores[j],
                        None if out.alignments is None else out.alignments[j])
        finally:
            self.model.train(was_training)
        return [results[i] for i in range(len(ids))]


def load_translation_run(directory: str | os.PathLike[str], *, device: str = "cpu") -> Translator:
    """Load a run written by :func:`save_translation_run` (ValueError for anything else)."""
    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"checkpoint {str(path)!r} is not a directory")
    meta = ckpt.read_run_config(path)
    if meta.get("model_name") != MODEL_NAME:
        raise ValueError(f"{path} holds a {meta.get('model_name')!r} run, not a translation ({MODEL_NAME!r}) run")
    if not (path / "model.safetensors").is_file():
        raise ValueError(f"run directory {path} is incomplete: model.safetensors is missing")
    config = Seq2SeqConfig.from_dict(meta["model_config"])
    model = Seq2SeqTransformer(config)
    model.load_saved_tensors(ckpt.load_tensors(path / "model.safetensors"))
    model.to(device).eval()
    if meta.get("shared_tokenizer", True):
        joint = _load_tokenizer(path / "tokenizer.json")
        tokenizers = TranslationTokenizers(joint, joint)
    else:
        tokenizers = TranslationTokenizers(_load_tokenizer(path / "src_tokenizer.json"),
                                           _load_tokenizer(path / "tgt_tokenizer.json"))
    max_src = int(meta.get("train_config", {}).get("max_len", 256))
    return Translator(model, tokenizers, max_src_len=max_src, meta=meta)


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], *, lowercase: bool = False) -> float:
    """Corpus BLEU (Papineni et al., 2002) with sacreBLEU's standard ``13a`` tokenization."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"got {len(hypotheses)} hypotheses for {len(references)} references")
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)], lowercase=lowercase).score)


# --- training ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TranslationTrainConfig:
    """Training settings: Adam (0.9, 0.98), linear warm-up then inverse square-root decay
    (Vaswani et al., 2017, eq. 3, with ``lr`` as the peak).

    ``average_last`` > 1 averages the weights saved at the end of the last
    that many epochs (Vaswani et al., 2017, section 6.1) and keeps the average
    when its validation loss is no worse than the last epoch's."""

    epochs: int = 10
    max_tokens: int = 4096
    lr: float = 5e-4
    warmup: int = 1000
    seed: int = 0
    max_len: int = 100
    vocab_size: int = 8000
    lowercase: bool = False
    clip_norm: float = 1.0
    time_budget_s: float | None = None
    eval_beam: int = 1
    eval_sentences: int | None = None
    log_every: int = 100
    average_last: int = 1


def _lr_factor(step: int, warmup: int) -> float:
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step)) if warmup > 0 else 1.0


def _validation_loss(model: Seq2SeqTransformer, pairs: list[tuple[list[int], list[int]]], max_tokens: int) -> float:
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches_by_tokens(pairs, max_tokens, shuffle=False):
            logits = model(batch.src, batch.src_lengths, batch.tgt_in)
            n = batch.num_target_tokens
            total += float(model.loss(logits, batch.tgt_out)) * n
            count += n
    model.train()
    return total / max(count, 1)


# Settings that must not change when a run is resumed (the rest may: epochs, time budget, logging).
RESUME_FIXED = ("max_tokens", "lr", "warmup", "seed", "max_len", "vocab_size", "lowercase", "clip_norm")


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
        say(f"averaged the weights of the last {len(snapshots)} epochs: val loss {loss:.3f} (last epoch {last_loss:.3f})")
    else:
        model.load_saved_tensors(last)
        say(f"kept the last epoch's weights: the average of {len(snapshots)} has val loss {loss:.3f} > {last_loss:.3f}")


def _snapshot_path(out: Path, epoch: int) -> Path:
    return out / ckpt.STATE_DIR / f"epoch-{epoch}.safetensors"


def _save_progress(out: Path, model: Seq2SeqTransformer, optimizer: torch.optim.Optimizer,
                   progress: dict[str, Any], keep: int) -> None:
    """Resumable state after a finished epoch: last weights, optimizer, RNG, and the snapshots to average."""
    epoch = int(progress["epoch"])
    weights = model.tensors_to_save()
    (out / ckpt.STATE_DIR).mkdir(parents=True, exist_ok=True)
    if keep > 1:
        ckpt.save_tensors(_snapshot_path(out, epoch), weights)
    ckpt.save_train_state(out, {"model": weights, "best": None, "optimizer": optimizer,
                                "progress": dict(progress, snapshots=list(range(max(1, epoch - keep + 1), epoch + 1))
                                                 if keep > 1 else [])})
    for old in (out / ckpt.STATE_DIR).glob("epoch-*.safetensors"):
        number = old.stem.removeprefix("epoch-")
        if not number.isdigit() or int(number) <= epoch - keep:
            old.unlink(missing_ok=True)


def _resume_state(out: Path, train_config: TranslationTrainConfig) -> dict[str, Any]:
    """Everything :func:`fit_translation` needs to go on with the run in ``out`` (ValueError when it cannot)."""
    if not (out / "config.json").is_file():
        raise ValueError(f"cannot resume: {out} holds no translation run (config.json is missing)")
    translator = load_translation_run(out)
    state = ckpt.load_train_state(out)
    if state is None:
        raise ValueError(f"cannot resume: {out} has no {ckpt.STATE_DIR}/ folder (it was not saved by a resumable run)")
    saved = translator.meta.get("train_config", {})
    changed = [f"{k} ({saved.get(k)!r} -> {getattr(train_config, k)!r})" for k in RESUME_FIXED
               if saved.get(k) != getattr(train_config, k)]
    if changed:
        raise ValueError(f"cannot resume {out} with different settings: {', '.join(changed)}")
    return {"translator": translator, "state": state, "run_id": translator.meta["run_id"]}


def fit_translation(
    train: ParallelCorpus, val: ParallelCorpus | None, *, model_options: dict[str, Any],
    train_config: TranslationTrainConfig, out_dir: str | os.PathLike[str], overwrite: bool = False,
    shared_vocab: bool = True, log: Callable[[str], None] | None = None, resume: bool = False,
) -> dict[str, Any]:
    """Train tokenizers (on ``train`` only) and a Seq2SeqTransformer, save the run, return its summary.

    Saves the run and a resumable ``train_state/`` after every epoch; stops
    early when ``time_budget_s`` is spent (time before an interruption counts).
    With ``resume=True`` an interrupted run in ``out_dir`` goes on after its
    last finished epoch with the saved tokenizers, weights, optimizer and RNG
    state, so the result equals an uninterrupted run; ``model_options`` and
    ``shared_vocab`` are then taken from the run. Returns ``{"run_id",
    "history", "val_bleu" (when val is given), "steps", "seconds"}``.
    """
    import uuid

    say = log or (lambda _line: None)
    out = Path(out_dir)
    keep = max(1, train_config.average_last)
    snapshots: collections.deque[dict[str, torch.Tensor]] = collections.deque(maxlen=keep)
    if resume:
        resumed = _resume_state(out, train_config)
        run_id, tokenizers = resumed["run_id"], resumed["translator"].tokenizers
        model = resumed["translator"].model
        model.load_saved_tensors(resumed["state"]["model"])
        progress = resumed["state"]["progress"]
        first_epoch, step, elapsed = int(progress["epoch"]) + 1, int(progress["step"]), float(progress["seconds"])
        history: list[dict[str, Any]] = list(progress["history"])
        for epoch in progress.get("snapshots", []):
            if _snapshot_path(out, int(epoch)).is_file():
                snapshots.append(ckpt.load_tensors(_snapshot_path(out, int(epoch))))
        say(f"resuming {out} after epoch {first_epoch - 1} (step {step}, {elapsed:.0f} s of training)")
    else:
        run_id = uuid.uuid4().hex
        ckpt.check_run_dir(out, run_id, overwrite=overwrite)
        if overwrite and out.is_dir():
            _clear_translation_run(out)
            shutil.rmtree(out / ckpt.STATE_DIR, ignore_errors=True)
        torch.manual_seed(train_config.seed)
        tokenizers = train_translation_tokenizers(train, vocab_size=train_config.vocab_size, shared=shared_vocab,
                                                  lowercase=train_config.lowercase)
        first_epoch, step, elapsed, history = 1, 0, 0.0, []
    train_pairs = encode_pairs(tokenizers, train, max_len=train_config.max_len)
    val_pairs = encode_pairs(tokenizers, val, max_len=train_config.max_len) if val is not None else []
    if not resume:
        config = Seq2SeqConfig.from_dict({
            "src_vocab_size": tokenizers.source.get_vocab_size(), "tgt_vocab_size": tokenizers.target.get_vocab_size(),
            "shared_vocab": shared_vocab, **model_options})
        model = Seq2SeqTransformer(config)
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    say(f"{len(train_pairs)} training pairs, {len(val_pairs)} validation pairs; vocab "
        f"{config.src_vocab_size}/{config.tgt_vocab_size}; {params / 1e6:.2f}M parameters")
    optimizer = torch.optim.Adam(model.parameters(), lr=train_config.lr, betas=(0.9, 0.98), eps=1e-9)
    if resume:
        ckpt.optimizer_from_tensors(optimizer, *resumed["state"]["optimizer"])
        ckpt.restore_rng(*resumed["state"]["rng"])
    extra: dict[str, Any] = {"train_config": dataclasses.asdict(train_config), "history": history}
    start, out_of_time = time.monotonic() - elapsed, False
    budget = train_config.time_budget_s
    if budget is not None and elapsed > budget:
        out_of_time = True
    model.train()
    for epoch in range(first_epoch, train_config.epochs + 1):
        if out_of_time:
            break
        total, count = 0.0, 0
        for batch in batches_by_tokens(train_pairs, train_config.max_tokens, seed=train_config.seed + epoch):
            step += 1
            for group in optimizer.param_groups:
                group["lr"] = train_config.lr * _lr_factor(step, train_config.warmup)
            logits = model(batch.src, batch.src_lengths, batch.tgt_in)
            loss = model.loss(logits, batch.tgt_out)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.clip_norm)
            optimizer.step()
            n = batch.num_target_tokens
            total, count = total + loss.item() * n, count + n
            if step == 1 or step % train_config.log_every == 0:
                say(f"  step {step}: mean loss this epoch {total / count:.3f}, last batch {loss.item():.3f} "
                    f"({time.monotonic() - start:.0f} s)")
            if budget is not None and time.monotonic() - start > budget:
                out_of_time = True
                break
        entry: dict[str, Any] = {"epoch": epoch, "steps": step, "train_loss": total / max(count, 1),
                                 "seconds": round(time.monotonic() - start, 1)}
        if val_pairs:
            entry["val_loss"] = _validation_loss(model, val_pairs, train_config.max_tokens)
        history.append(entry)
        say("epoch {epoch}: train loss {train_loss:.3f}".format(**entry)
            + (f", val loss {entry['val_loss']:.3f}" if "val_loss" in entry else "")
            + f" ({entry['seconds']:.0f} s)" + (" — time budget spent" if out_of_time else ""))
        extra["history"] = history
        save_translation_run(out, model, tokenizers, run_id=run_id, extra=extra)
        snapshots.append({k: v.detach().clone() for k, v in model.tensors_to_save().items()})
        _save_progress(out, model, optimizer, {"epoch": epoch, "step": step, "seconds": time.monotonic() - start,
                                               "history": history}, keep)
    if len(snapshots) > 1:
        _average_snapshots(model, list(snapshots), val_pairs, train_config, history, extra, say)
        save_translation_run(out, model, tokenizers, run_id=run_id, extra=extra)
    model.eval()
    summary: dict[str, Any] = {"run_id": run_id, "history": history, "steps": step,
                               "seconds": round(time.monotonic() - start, 1)}
    if val is not None:
        translator = Translator(model, tokenizers, max_src_len=train_config.max_len)
        n = len(val) if train_config.eval_sentences is None else min(len(val), train_config.eval_sentences)
        hyps = [t.text for t in translator.translate(val.sources[:n], beam=train_config.eval_beam)]
        summary["val_bleu"] = corpus_bleu(hyps, val.targets[:n])
        say(f"validation BLEU {summary['val_bleu']:.2f} (beam {train_config.eval_beam}, {n} sentences)")
        extra["metrics"] = {"val_bleu": summary["val_bleu"]}
        save_translation_run(out, model, tokenizers, run_id=run_id, extra=extra)
    return summary


# --- commands ------------------------------------------------------------------------------------


@click.command("train-translate")
@click.option("--src", "src_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training source sentences, one per line (plain or .gz).")
@click.option("--tgt", "tgt_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Training target sentences, line-aligned with --src.")
@click.option("--val-src", type=click.Path(exists=True, dir_okay=False), help="Validation source sentences.")
@click.option("--val-tgt", type=click.Path(exists=True, dir_okay=False), help="Validation target sentences.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to write.")
@click.option("--vocab-size", type=click.IntRange(min=8), default=8000, show_default=True,
              help="BPE vocabulary size (joint, or per side with --separate-vocab).")
@click.option("--separate-vocab", is_flag=True, help="One vocabulary per language instead of a joint one.")
@click.option("--d-model", type=click.IntRange(min=1), default=256, show_default=True)
@click.option("--heads", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--d-ff", type=click.IntRange(min=1), default=1024, show_default=True)
@click.option("--encoder-layers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--decoder-layers", type=click.IntRange(min=1), default=3, show_default=True)
@click.option("--dropout", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True)
@click.option("--attention-dropout", type=click.FloatRange(0, 1, max_open=True),
              help="Dropout on attention weights (default: --dropout).")
@click.option("--activation-dropout", type=click.FloatRange(0, 1, max_open=True),
              help="Dropout on the feed-forward hidden activations (default: --dropout).")
@click.option("--post-norm", is_flag=True, help="Post-norm layers (the original Transformer) instead of pre-norm.")
@click.option("--epochs", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--batch-tokens", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Padded tokens per batch and side.")
@click.option("--lr", type=click.FloatRange(0, min_open=True), default=5e-4, show_default=True, help="Peak learning rate.")
@click.option("--warmup", type=click.IntRange(min=0), default=1000, show_default=True, help="Warm-up steps.")
@click.option("--label-smoothing", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True)
@click.option("--max-len", type=click.IntRange(min=1), default=100, show_default=True,
              help="Longest sentence in subword tokens (longer ones are truncated).")
@click.option("--time-budget", type=click.FloatRange(0, min_open=True), help="Stop training after this many minutes.")
@click.option("--average-last", type=click.IntRange(min=1), default=1, show_default=True,
              help="Average the weights of the last N epochs at the end (kept when validation agrees).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace a different run already in --out.")
@click.option("--resume", is_flag=True,
              help="Go on with the interrupted run in --out after its last finished epoch (same settings).")
@click.option("--quiet", "-q", is_flag=True, help="No progress lines.")
@friendly_errors
def train_translate(**v: Any) -> None:
    """Train a Transformer translation model on a parallel corpus.

    \b
    Example:
      attnkit train --task translate --src train.de.gz --tgt train.en.gz \\
          --val-src val.de.gz --val-tgt val.en.gz --out runs/de-en --time-budget 60
    """
    if (v["val_src"] is None) != (v["val_tgt"] is None):
        raise click.UsageError("give both --val-src and --val-tgt, or neither")
    if v["resume"] and v["overwrite"]:
        raise click.UsageError("--resume continues the run in --out and --overwrite replaces it; give one")
    train = read_parallel(v["src_path"], v["tgt_path"])
    val = read_parallel(v["val_src"], v["val_tgt"]) if v["val_src"] else None
    model_options = {"d_model": v["d_model"], "num_heads": v["heads"], "d_ff": v["d_ff"],
                     "encoder_layers": v["encoder_layers"], "decoder_layers": v["decoder_layers"],
                     "dropout": v["dropout"], "attention_dropout": v["attention_dropout"],
                     "activation_dropout": v["activation_dropout"], "norm_first": not v["post_norm"],
                     "label_smoothing": v["label_smoothing"], "tie_embeddings": True}
    budget = None if v["time_budget"] is None else 60.0 * v["time_budget"]
    config = TranslationTrainConfig(epochs=v["epochs"], max_tokens=v["batch_tokens"], lr=v["lr"],
                                    warmup=v["warmup"], seed=v["seed"], max_len=v["max_len"],
                                    vocab_size=v["vocab_size"], time_budget_s=budget, average_last=v["average_last"])
    try:
        summary = fit_translation(train, val, model_options=model_options, train_config=config,
                                  out_dir=v["out"], overwrite=v["overwrite"], shared_vocab=not v["separate_vocab"],
                                  log=None if v["quiet"] else click.echo, resume=v["resume"])
    except KeyboardInterrupt:
        click.echo(f"\ninterrupted; the last finished epoch is saved in {v['out']} (go on with --resume)", err=True)
        sys.exit(130)
    click.echo(f"saved run to {v['out']} ({summary['steps']} steps, {summary['seconds']:.0f} s)")


@click.command("translate")
@click.argument("checkpoint", type=click.Path())
@click.argument("texts", nargs=-1)
@click.option("--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="Translate every non-blank line of this file (plain or .gz) as well.")
@click.option("--beam", type=click.IntRange(min=1), default=4, show_default=True, help="Beam size (1: greedy).")
@click.option("--length-penalty", type=click.FloatRange(0), default=0.6, show_default=True,
              help="GNMT length-penalty exponent alpha (0: raw log-probability).")
@click.option("--alignment", "alignment_path", type=click.Path(dir_okay=False),
              help="Plot the cross-attention alignment of the first text to this image file.")
@friendly_errors
def translate(checkpoint: str, texts: tuple[str, ...], text_file: str | None, beam: int, length_penalty: float,
              alignment_path: str | None) -> None:
    """Translate texts with a trained translation run; prints one translation per line.

    \b
    Example:
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --beam 4 --alignment align.png
    """
    from attnkit.data.parallel import read_lines

    items = list(texts)
    if text_file:
        items += [line for line in read_lines(text_file) if line.strip()]
    if not items:
        raise click.UsageError("give at least one TEXT argument or --file")
    translator = load_translation_run(checkpoint)
    results = translator.translate(items, beam=beam, length_penalty=length_penalty, return_alignment=alignment_path is not None)
    for r in results:
        click.echo(r.text)
    if alignment_path is not None:
        from attnkit.viz.explain import plot_alignment

        first = results[0]
        assert first.alignment is not None
        targets = first.target_tokens + ["[EOS]"] * (first.alignment.shape[0] - len(first.target_tokens))
        plot_alignment(first.alignment.numpy(), first.source_tokens, targets, path=alignment_path)
        click.echo(f"alignment written to {alignment_path}", err=True)
