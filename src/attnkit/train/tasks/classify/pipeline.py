"""From labelled examples to a trained, saved classifier: tokenizer, labels, model, trainer.

:func:`fit_classifier` is what ``attnkit train``, ``attnkit cv``, ``attnkit
demo`` and ``evals/mr_cv.py`` share: train a tokenizer on the training part
only, encode the three parts, build a registered model (:mod:`attnkit.models`)
sized to the vocabulary and the label set, train it with :class:`Trainer`,
measure it on the test part and (optionally) save a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnkit._checks import nested_paths_hint, spell_settings
from attnkit.data.batching import LabelVocab, TextClassificationDataset
from attnkit.data.readers import Example
from attnkit.data.sources import split_examples
from attnkit.data.splits import kfold
from attnkit.data.tokenization import train_tokenizer
from attnkit.train.config import DataSettings, TrainConfig
from attnkit.train.loop.distributed import DistInfo
from attnkit.train.loop.trainer import Trainer
from attnkit.train.memory_budget import peak_rss_mib
from attnkit.train.runs import checkpoint as ckpt
from attnkit.train.runs.checkpoint import unwrap
from attnkit.train.runs.run import new_run_id, start_run
from attnkit.train.tasks.classify.memory import fit_to_memory
from attnkit.train.tasks.classify.objective import check_objective, fit_decision

__all__ = ["DataSettings", "FitResult", "model_config_dict", "fit_classifier", "cross_validate"]


@dataclass
class FitResult:
    model: nn.Module
    tokenizer: Any
    label_vocab: LabelVocab
    model_config: dict[str, Any]
    history: list[dict[str, Any]]
    test: dict[str, Any] | None = None
    test_data: TextClassificationDataset | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    is_main: bool = True  # False on the other processes of a data-parallel run
    val_data: TextClassificationDataset | None = None  # the validation part (reports choose an explanation on it)
    test_scores: tuple[Any, Any] | None = None
    """The test part's class probabilities ``(N, C)`` and pooling weights (None without pooling attention), from
    the pass that scored it; None: the reports compute them."""


def model_config_dict(model_name: str, overrides: dict[str, Any], *, vocab_size: int, num_classes: int,
                      max_len: int) -> dict[str, Any]:
    """The config dict of ``model_name``: every field's default, the data-given sizes, then ``overrides``.

    Every field is written out, a nested config's (``layer``) included, so that a run saved now keeps its
    values if a default changes. ``overrides`` may give a nested config in part (``{"layer": {"d_ff": 512}}``).

    Unknown keys raise a ValueError listing the valid ones (from the model's config class); a key that is
    a field of a nested config is named with its path (``layer.d_model``).
    """
    from attnkit.models import MODELS

    if model_name not in MODELS:
        raise ValueError(f"unknown model {model_name!r}; valid names: {sorted(MODELS)}")
    config_cls = MODELS[model_name][1]
    fields = typing.get_type_hints(config_cls)
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown {model_name} model option(s) {unknown}; valid keys: {list(fields)}"
                         f"{nested_paths_hint(config_cls, unknown)}")
    # a model reading long documents in chunks reads chunks of the data's max_len (models.wide)
    sizes = {"vocab_size": vocab_size, "num_classes": num_classes, "max_len": max_len, "chunk_len": max_len}
    return config_cls.from_dict({**{k: v for k, v in sizes.items() if k in fields}, **overrides}).to_dict()


def _tokenizer_given(model_name: str, options: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """``options`` over the fields the model's config reads off the tokenizer (``tokenizer_defaults``)."""
    from attnkit.models import MODELS

    if model_name not in MODELS:  # model_config_dict names the valid ones
        return options
    return {**MODELS[model_name][1].tokenizer_defaults(tokenizer), **options}


def _datasets(tokenizer: Any, labels: LabelVocab, max_len: int, *parts: Sequence[Example]
              ) -> list[TextClassificationDataset]:
    known = set(labels.labels)
    for part in parts:
        for e in part:
            if e.label not in known:
                raise ValueError(f"label {e.label!r} does not occur in the training data; "
                                 f"known labels: {sorted(known)}")
    return [TextClassificationDataset(list(p), tokenizer, labels, max_len) for p in parts]


def fit_classifier(
    train: Sequence[Example], val: Sequence[Example], test: Sequence[Example], *,
    model_name: str, model_options: dict[str, Any] | None = None, train_config: TrainConfig, reports: bool = False,
    data: DataSettings = DataSettings(), out_dir: str | Path | None = None, run_id: str | None = None,
    overwrite: bool = False, resume: bool = False, quiet: bool = False, dist: DistInfo | None = None,
    log: Callable[[str], None] | None = None, tokenizer: Any = None, label_vocab: LabelVocab | None = None,
    extra: dict[str, Any] | None = None, init_model: Callable[[nn.Module], None] | None = None,
    baseline: dict[str, Any] | None = None, max_memory: int | None = None, flags: Mapping[str, str] | None = None,
) -> FitResult:
    """Train ``model_name`` on ``train`` (early stopping on ``val``), measure on ``test``.

    With ``out_dir`` the run is committed there after every epoch (status ``training``, the best weights so
    far) and once more when it is done, so an interrupted run can be resumed with ``resume=True`` (pass the
    saved tokenizer and labels). A directory holding another run is replaced only with ``overwrite``, and only
    at the first commit (``flags``: as in :class:`~attnkit.train.tasks.classify.plan.ClassifierPlan`).
    ``tokenizer`` / ``label_vocab`` may be given to skip building them. ``init_model`` is called on the freshly
    built model before training (e.g. to load pretrained weights). ``baseline`` (figures scored beforehand) is
    committed as ``metrics.baseline``. ``max_memory`` (bytes; None: a share of the available memory) bounds
    what the run may plan to allocate (:func:`attnkit.train.tasks.classify.memory.fit_to_memory`: fewer n-gram
    rows, or a refusal, before the model is built); the run's peak resident memory is committed as
    ``metrics.peak_memory_mib``; ``reports``: keep the test's scores for them (:attr:`FitResult.test_scores`).
    """
    label_vocab = _checked_labels(train, train_config, data, label_vocab)
    dist = dist or DistInfo()
    run_id = run_id or new_run_id()
    if tokenizer is None:
        tokenizer = train_tokenizer([e.text for e in train], kind=data.tokenizer,  # type: ignore[arg-type]
                                    vocab_size=data.vocab_size, min_frequency=data.min_frequency,
                                    lowercase=data.lowercase)
    from attnkit.models import build_model

    config = model_config_dict(model_name, _tokenizer_given(model_name, model_options or {}, tokenizer),
                               vocab_size=tokenizer.get_vocab_size(),
                               num_classes=len(label_vocab), max_len=data.max_len)
    read_len = _reading_length(model_name, config, data.max_len, train_config.pack)
    train_ds, val_ds, test_ds = _datasets(tokenizer, label_vocab, read_len, train, val, test)
    loss_weights = check_objective(train_config.metric, train_config.class_weight, train_ds.labels,
                                   label_vocab.labels)
    config, cap, budgeted = _budgeted(model_name, config, (train_ds, val_ds, test_ds), train_config,
                                      data.max_len, limit=max_memory, can_shrink=not resume and init_model is None,
                                      note=_memory_note(log, dist), processes=dist.world_size)
    torch.manual_seed(train_config.seed)
    model = build_model(model_name, config)
    if init_model is not None:
        init_model(model)
    if getattr(model, "has_ngram_half", False) and not resume:
        # A model with an n-gram half (models.ngram_half) gets its table from the training part, and only from it.
        model.init_from_training_data(train_ds.ids, train_ds.labels,  # type: ignore[operator]
                                      class_weights=loss_weights)
    meta = {"train_config": train_config.to_dict(), "data_settings": dataclasses.asdict(data), **(extra or {})}
    # Everything above is validated before the run directory is touched; the writer takes the
    # lock now and replaces nothing until its first commit, at the end of the first epoch.
    writer = start_run(out_dir, run_id=run_id, overwrite=overwrite,
                       flags=flags) if out_dir is not None and dist.is_main else None
    with contextlib.ExitStack() as stack:
        run = None
        if writer is not None:
            stack.enter_context(writer)
            run = ckpt.RunCheckpointer(writer, model_name, config, tokenizer, label_vocab, meta)
        trainer = Trainer(model, budgeted, train_ds, val_ds if len(val_ds) else None,
                          lengths=train_ds.lengths, out_dir=out_dir, quiet=quiet, dist=dist, log=log,
                          checkpoint=run.epoch_hook() if run is not None else None, batch_tokens=cap)
        history = trainer.fit(resume=resume)
        # the halves weighed and the class offsets tuned on the validation part, for the run's metric
        decision = fit_decision(unwrap(model), trainer.predict, val_ds, metric=train_config.metric,
                                class_weight=train_config.class_weight, tune=train_config.tune_thresholds,
                                names=label_vocab.labels, log=log if dist.is_main else None)
        test_metrics, test_scores = _scored_test(trainer, test_ds, reports)
        chunked = _chunked(unwrap(model), test_metrics, train=train_ds, val=val_ds, test=test_ds)
        if run is not None:
            metrics = {"test": test_metrics, "val_best": _best_val(history),
                       "peak_memory_mib": round(peak_rss_mib(), 1), "decision": decision, **chunked}
            if baseline is not None:
                metrics["baseline"] = baseline
            run.commit(unwrap(model).state_dict(), status="done", history=history, progress=trainer._summary(),
                       meta={"epochs_run": len(history), "metrics": metrics})
    return FitResult(model.cpu().eval(), tokenizer, label_vocab, config, history, test_metrics, test_ds,
                     extra={"decision": decision}, is_main=dist.is_main, val_data=val_ds if len(val_ds) else None,
                     test_scores=test_scores)


def _scored_test(trainer: Trainer, test: TextClassificationDataset, reports: bool) -> tuple[Any, Any]:
    """The test part's measures and, for ``reports``, from the same pass what they show of each document: its
    class probabilities and pooling weights (:attr:`FitResult.test_scores`; a model whose weights are asked
    for may take a slower path, so only then). ``None, None`` without a test part."""
    if not len(test):
        return None, None
    if not reports:
        return trainer.evaluate(test), None
    logits, labels, weights = trainer.predict(test, pooling=True)
    return trainer.measure(logits, labels), (logits.softmax(-1), weights)


def _reading_length(model_name: str, config: dict[str, Any], max_len: int, pack: int | None) -> int:
    """Tokens of each document the model reads (more than ``max_len`` when it reads chunks), checked
    against ``pack``: a packed row must hold the longest document."""
    from attnkit.models import config_from_dict
    from attnkit.models.config import reading_length

    read_len = reading_length(config_from_dict(model_name, config), max_len)
    if pack and pack < read_len:
        chunks = f" (`max_len` {max_len} read in up to {config['max_chunks']} chunks)" if read_len > max_len else ""
        raise ValueError(
            f"`pack` {pack} tokens per row must hold the longest document, {read_len} tokens{chunks}; "
            f"raise `pack` or lower `max_len`" + (" or the model's max_chunks" if chunks else "")
        )
    return read_len


def _budgeted(model_name: str, config: dict[str, Any], parts: Sequence[TextClassificationDataset],
              train_config: TrainConfig, max_len: int, *, limit: int | None, can_shrink: bool,
              note: Callable[[str], None] | None, processes: int
              ) -> tuple[dict[str, Any], int | None, TrainConfig]:
    """``config`` fitted to the memory limit (:func:`attnkit.train.tasks.classify.memory.fit_to_memory`) for the
    encoded ``parts`` (train, validation, test) and the training batches, the batches' token cap, and
    ``train_config`` with the epochs its token budget allows (:func:`_within_token_budget`)."""
    train_ds = parts[0]
    cap, batch_tokens = _long_batches(model_name, config, train_ds.lengths, train_config, max_len, note,
                                      processes=processes)
    config = fit_to_memory(model_name, config, tokens=int(train_ds.ids.offsets[-1]),
                           documents=sum(d.ids.nbytes for d in parts), batch_tokens=batch_tokens,
                           train_documents=len(train_ds), longest=max(train_ds.lengths, default=0),
                           limit=limit, can_shrink=can_shrink, log=note)
    return config, cap, _within_token_budget(train_config, train_ds.lengths, note)


def _long_batches(model_name: str, config: dict[str, Any], lengths: Sequence[int], train_config: TrainConfig,
                  max_len: int, note: Callable[[str], None] | None, *, processes: int = 1
                  ) -> tuple[int | None, int]:
    """The most padded tokens a training batch may hold (None: no cap) and the padded tokens of the
    largest training batch, for the memory estimate; says in one line (``note``) how many training
    documents a model reading long documents in chunks reads that way.

    Chunks let a document hold up to the model's ``reading_length`` tokens; a batch of such documents
    is capped at ``batch_size * max_len`` tokens (what a batch of documents cut at ``max_len`` holds),
    so its activations stay those of a batch read without chunks (on one process: several need the
    same batch count each, :func:`attnkit.train.loop.task.epoch_batches`).
    """
    from attnkit.models import config_from_dict
    from attnkit.models.config import reading_length
    from attnkit.models.wide import chunked_documents

    model_config = config_from_dict(model_name, config)
    longest, size = max(lengths, default=0), min(train_config.batch_size, len(lengths))
    read_len = reading_length(model_config, max_len)
    if read_len <= max_len or not train_config.bucket or processes > 1:
        return None, size * longest
    chunked = chunked_documents(model_config, lengths)
    if chunked is None:  # past max_len only a half that costs little reads (an n-gram half: ngram_len)
        return None, size * min(longest, max_len)
    cap = train_config.batch_size * max_len
    if chunked and note is not None:
        note(f"long documents: {chunked} of {len(lengths)} training documents are longer than `max_len` "
             f"{max_len}, read in overlapping chunks of {max_len} tokens up to {read_len} tokens each "
             f"(the model's max_chunks={config['max_chunks']}); a batch of them holds at most {cap} tokens")
    return cap, max(longest, min(cap, size * longest))


def _within_token_budget(train_config: TrainConfig, lengths: Sequence[int],
                         note: Callable[[str], None] | None) -> TrainConfig:
    """``train_config`` with the epochs its ``token_budget`` allows for training documents of ``lengths``
    tokens (:meth:`~attnkit.train.config.TrainConfig.epochs_within_budget`), said in one line when fewer."""
    per_epoch = int(sum(lengths))
    epochs = train_config.epochs_within_budget(per_epoch)
    if epochs == train_config.epochs:
        return train_config
    if note is not None:
        note(f"token budget: {epochs} epoch(s) of {per_epoch:,} training tokens fit `token_budget` "
             f"{train_config.token_budget:,} (`epochs` {train_config.epochs})")
    return dataclasses.replace(train_config, epochs=epochs)


def _chunked(model: nn.Module, test_metrics: dict[str, Any] | None, **parts: TextClassificationDataset
             ) -> dict[str, Any]:
    """``{"chunked_documents": {part: count}}``: the documents of each part read in overlapping chunks
    (longer than ``max_len``), also set as the test metrics' ``chunked_documents``; empty without chunks."""
    from attnkit.models.wide import chunked_documents

    counts = {name: chunked_documents(model, part.lengths) for name, part in parts.items()}
    if counts["test"] is None:
        return {}
    if test_metrics is not None:
        test_metrics["chunked_documents"] = counts["test"]
    return {"chunked_documents": counts}


def _checked_labels(train: Sequence[Example], train_config: TrainConfig, data: DataSettings,
                    label_vocab: LabelVocab | None) -> LabelVocab:
    """The run's labels (read off ``train`` unless given), after the checks that need no model."""
    if not train:
        raise ValueError("the training data is empty")
    if label_vocab is None:
        label_vocab = LabelVocab(sorted({e.label for e in train}))
    if len(label_vocab) < 2:
        raise ValueError(f"need at least 2 classes in the training data, got {len(label_vocab)} class: "
                         f"{label_vocab.labels}")
    return label_vocab


def _memory_note(log: Callable[[str], None] | None, dist: DistInfo) -> Callable[[str], None] | None:
    """Where the one-line notes before training go (a shrunk n-gram half, documents read in chunks):
    ``log``, or stderr without one (main process only; the settings named bare)."""
    if not dist.is_main:
        return None
    return log or (lambda line: print(spell_settings(line), file=sys.stderr))


def _best_val(history: list[dict[str, Any]]) -> float | None:
    vals = [h["val_accuracy"] for h in history if "val_accuracy" in h]
    return max(vals) if vals else None


_MEASURES = ("accuracy", "macro_f1", "weighted_f1", "macro_recall")


def cross_validate(
    examples: Sequence[Example], *, folds: int, model_name: str, model_options: dict[str, Any] | None,
    train_config: TrainConfig, data: DataSettings = DataSettings(), val: float = 0.1,
    max_folds: int | None = None, quiet: bool = True, log: Callable[[str], None] | None = None,
    epoch_log: bool = False, only: Sequence[int] | None = None, max_memory: int | None = None,
    tokenizer: Any = None, init_model: Callable[[nn.Module], None] | None = None,
) -> list[dict[str, Any]]:
    """Stratified k-fold cross-validation; one dict per fold (``accuracy``, ``macro_f1``, ``weighted_f1``,
    ``macro_recall``, the ``train_config.metric``, ``epochs``).

    Each fold trains from scratch: its own tokenizer on the fold's training
    part, ``val`` of that part held out for early stopping, the fold's test
    part used once at the end. ``max_folds`` runs only the first folds.
    ``only`` runs just the listed folds (1-based). ``max_memory`` as in :func:`fit_classifier`.
    ``log`` gets one line per
    fold (and per epoch with ``epoch_log``). ``tokenizer`` and ``init_model`` (a pretrained model's
    tokenizer and weights, as :func:`attnkit.train.tasks.classify.finetune.finetune_bert` passes them) serve every fold
    instead of a tokenizer trained on the fold and fresh weights.
    """
    labels = [e.label for e in examples]
    parts = kfold(len(examples), folds, train_config.seed, labels=labels)
    results = []
    for index, (train_idx, test_idx) in enumerate(parts[: max_folds or folds]):
        if only is not None and index + 1 not in only:
            continue
        fold_train = [examples[i] for i in train_idx]
        tr, va, _ = split_examples(fold_train, val=val, test=0.0, seed=train_config.seed + index)
        fold_log = None
        if log is not None and epoch_log:
            def fold_log(line: str, _fold: int = index + 1) -> None:
                log(f"  fold {_fold}: {line}")
        result = fit_classifier(tr, va, [examples[i] for i in test_idx], model_name=model_name,
                                model_options=model_options, train_config=train_config, data=data,
                                quiet=quiet, log=fold_log, max_memory=max_memory, tokenizer=tokenizer,
                                init_model=init_model)
        assert result.test is not None
        row = {"fold": index + 1, **{k: result.test[k] for k in (*_MEASURES, train_config.metric)
                                     if k in result.test}, "epochs": len(result.history),
               "peak_memory_mib": round(peak_rss_mib(), 1)}
        results.append(row)
        if log is not None:
            chosen = ("" if train_config.metric in ("accuracy", "macro_f1")
                      else f"  {train_config.metric} {row[train_config.metric]:.4f}")
            log(f"fold {index + 1:>2}/{folds}  accuracy {row['accuracy']:.4f}  "
                f"macro-F1 {row['macro_f1']:.4f}{chosen}  epochs {row['epochs']}")
    return results
