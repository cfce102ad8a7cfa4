"""Translation runs: train a :class:`~attnkit.models.seq2seq.Seq2SeqTransformer`, save it, translate with it.

:func:`fit_translation` trains the tokenizers and the model (resumable, with
weight averaging), :func:`save_translation_run` and :func:`load_translation_run`
write and read a run directory, :class:`Translator` turns text into text, and
:func:`corpus_bleu` scores it. The commands in :mod:`attnkit.cli.translate`
are built on these. A translation run directory holds::

    config.json          run id, model config, training settings, history, metrics (written last)
    model.safetensors    the weights (tied tensors stored once)
    tokenizer.json       the joint BPE tokenizer  -- or src_tokenizer.json + tgt_tokenizer.json
    train_state/         last weights, optimizer, RNG and the epoch snapshots to average (for --resume)

Every file is written atomically (temporary file + rename), and a directory
holding a different run is never written into without ``overwrite``.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnkit.data.parallel import (
    ParallelCorpus,
    TranslationTokenizers,
    batches_by_tokens,
    collate_pairs,
    encode_pairs,
    train_translation_tokenizers,
)
from attnkit.decoding import beam_search, greedy_decode
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from attnkit.train import checkpoint as ckpt

__all__ = [
    "TranslationTrainConfig", "Translation", "Translator", "fit_translation", "save_translation_run",
    "load_translation_run", "corpus_bleu",
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
    ckpt.save_train_state(out, {"model": weights, "best": None, "optimizer": optimizer, "progress": progress})
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
        for epoch in range(max(1, first_epoch - keep), first_epoch):  # the snapshots still kept on disk
            if keep > 1 and _snapshot_path(out, epoch).is_file():
                snapshots.append(ckpt.load_tensors(_snapshot_path(out, epoch)))
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
