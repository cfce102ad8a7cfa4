"""``attnkit train --backend numpy``: train, save, evaluate and use the NumPy twin's classifiers.

The NumPy twin (:mod:`attnkit.reference`) has its own models
(:class:`~attnkit.reference.models.TransformerClassifier`, the default, and
:class:`~attnkit.reference.models.DocumentClassifier`), whitespace vocabulary,
AdamW and training loop (hand-written backward passes, no autograd). This
module gives them the same command-line life as the torch models -- read the
user's data, split it, train with early stopping, print test metrics, save a
run directory that ``attnkit evaluate`` and ``attnkit predict`` read -- and
never imports torch, so it runs where torch is not installed.

A numpy run directory is a transaction (:mod:`attnkit.train.runs.rundir`, which
loads no torch) committed after every epoch (status "training") and when training is done; its
generation ``RUN/checkpoints/NNNNNN/`` holds::

    config.json        "backend": "numpy", model kind and ClassifierConfig (its layer a nested dict), training
                       settings, data settings, run id, status, progress, metrics
    model.safetensors  the weights, torch-style names (attnkit.reference.io): while training the best so far
    vocab.json         {"itos": [...]}: the whitespace vocabulary, 0 = <pad>, 1 = <unk>
    labels.json        {"labels": [...]}: class id -> label
    train_state/       while training, what ``--resume`` goes on from exactly (Trainer.state): last.safetensors,
                       best.safetensors, optimizer.safetensors (AdamW's step and moments), state.json (history,
                       counters, the states of the shuffling and dropout generators)

The writer's lock is taken before training, so a second writer is refused at
once; a different run in the directory is replaced only with ``overwrite``, at the commit.

Differences from the torch path, by design of the reference trainer: a
constant learning rate unless ``--warmup-ratio`` is given (then the torch
trainer's warm-up and linear decay), no label smoothing, CPU only, documents
tokenized on whitespace after optional lower-casing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from attnkit._checks import dataclass_kwargs, nested_paths_hint
from attnkit._finite import NonFiniteError, non_finite_message
from attnkit.data.readers import read_examples
from attnkit.data.sources import split_examples
from attnkit.reference.analysis import attention_received
from attnkit.reference.io import load_weights
from attnkit.reference.models import ClassifierConfig, build_model
from attnkit.reference.module import Module
from attnkit.reference.optim import AdamW
from attnkit.reference.text import Vocabulary, pad_batch
from attnkit.reference.trainer import Trainer
from attnkit.train.runs.run import commit_generation, save_run, start_run
from attnkit.train.runs.run_files import check_labels, check_vocab_size, refuse_non_finite_file
from attnkit.train.runs.rundir import (
    RESUME_ONLY,
    RunFileError,
    RunWriter,
    committed_dir,
    read_json,
    read_run_config,
    verify_committed,
)
from attnkit.train.tasks.numpy.settings import NumpyTrainSettings

__all__ = ["BACKEND", "NUMPY_KINDS", "NumpyTrainSettings", "NumpyRun", "read_examples",
           "split_examples", "train_numpy_run", "numpy_model_config", "save_numpy_run",
           "load_numpy_run", "is_numpy_run", "evaluate_numpy_run", "predict_numpy_run", "metrics", "train_numpy"]

BACKEND = "numpy"
NUMPY_KINDS = ("transformer", "document")
_DEFAULTS = NumpyTrainSettings()


@dataclass
class NumpyRun:
    """A trained (or loaded) numpy classifier with its vocabulary and labels."""

    model: Module
    vocab: Vocabulary
    labels: list[str]
    settings: NumpyTrainSettings
    meta: dict[str, Any] = field(default_factory=dict)

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Word ids of each text (lower-cased if the run was), truncated, never empty (``<unk>``)."""
        lower = self.settings.lowercase
        return [self.vocab.encode(t.lower() if lower else t, max_len=self.settings.max_len) or [1]
                for t in texts]

    def logits(self, texts: Sequence[str], batch_size: int = 256) -> tuple[np.ndarray, list[np.ndarray]]:
        """Logits ``(N, C)`` and, per text, how much each of its tokens counts ``(T_i,)``.

        The per-token weights are the attention pooling weights when the model
        pools by attention, else the attention each token receives in the last
        self-attention layer (mean over heads and real queries).
        """
        ids_all = self.encode(texts)
        model = self.model
        model.eval()
        out, weights = [], []
        for start in range(0, len(ids_all), batch_size):
            chunk = ids_all[start : start + batch_size]
            ids = pad_batch(chunk)  # (B, T)
            out.append(model.forward(ids))  # type: ignore[attr-defined]
            pooling = getattr(model, "pooling", None)
            w = getattr(pooling, "weights", None)
            if w is None:
                w = attention_received(model.attention_weights(), ids != 0)  # type: ignore[attr-defined]
            weights += [np.asarray(w[row, : len(seq)]) for row, seq in enumerate(chunk)]
        return (np.concatenate(out) if out else np.zeros((0, len(self.labels)))), weights

    def attention_maps(self, text: str) -> tuple[list[str], np.ndarray, np.ndarray | None, np.ndarray]:
        """What ``attnkit visualize`` shows of one text: its tokens, every self-attention layer's weights,
        the pooling weights (None for mean pooling) and the class probabilities.

        Shape:
            tokens ``T`` (after truncation to ``max_len``); layers ``(L, H, T, T)``; pooling ``(T,)``;
            probabilities ``(C,)`` in ``labels`` order.
        """
        ids = self.encode([text])[0]
        logits, _ = self.logits([text])
        model: Any = self.model
        layers = [layer.self_attn.weights for layer in model.encoder.layers] if hasattr(model, "encoder") \
            else [model.self_attn.weights]
        pooling = getattr(getattr(model, "pooling", None), "weights", None)
        tokens = [self.vocab.itos[i] for i in ids]
        return (tokens, np.stack([np.asarray(w[0]) for w in layers]),
                None if pooling is None else np.asarray(pooling[0]), _softmax(logits[0].astype(np.float64)))


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def metrics(predictions: np.ndarray, targets: np.ndarray, num_classes: int) -> dict[str, Any]:
    """Accuracy, macro-F1 and confusion matrix (rows: true, columns: predicted), as the torch path reports."""
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (targets, predictions), 1)
    tp = np.diag(matrix).astype(np.float64)
    precision = tp / np.maximum(matrix.sum(0), 1)
    recall = tp / np.maximum(matrix.sum(1), 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0.0)
    return {"accuracy": float(tp.sum() / max(len(targets), 1)), "macro_f1": float(f1.mean()),
            "confusion_matrix": matrix.tolist(), "n": int(len(targets))}


def _label_ids(labels: Sequence[str], examples: Sequence[Any]) -> np.ndarray:
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({e.label for e in examples} - set(index))
    if unknown:
        raise ValueError(f"label(s) {unknown} are unknown to this model; it knows {list(labels)}")
    return np.asarray([index[e.label] for e in examples], dtype=np.int64)


# --- run directory ---------------------------------------------------------------------------------


def save_numpy_run(run: NumpyRun, directory: str | Path, *, run_id: str, overwrite: bool = False) -> Path:
    """Commit ``run`` to ``directory`` as one generation (status ``"done"``); returns its folder."""
    return save_run(directory, lambda writer: _commit(writer, run), run_id=run_id, overwrite=overwrite)


def _commit(writer: RunWriter, run: NumpyRun, *, weights: dict[str, np.ndarray] | None = None,
            state: tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]] | None = None,
            progress: dict[str, Any] | None = None) -> Path:
    """Commit ``run`` (serving its model's weights, or ``weights``) through the open ``writer``: finished, or
    with the trainer's ``state`` (:meth:`~attnkit.reference.trainer.Trainer.state`) a generation to resume."""
    from safetensors.numpy import save

    tensors = {k: np.ascontiguousarray(v) for k, v in (weights or run.model.parameters()).items()}
    bad = [k for k, v in tensors.items() if not np.isfinite(v).all()]
    if bad:  # never committed: the folder keeps what it held
        raise NonFiniteError(f"{non_finite_message('the trained model', bad)}; nothing was committed")
    config = run.model.config  # type: ignore[attr-defined]
    fields = {**run.meta, "backend": BACKEND, "model_name": config.kind, "model_config": config.to_dict(),
              "settings": run.settings.__dict__, "data_settings": {"max_len": run.settings.max_len}}
    files: dict[str, Any] = {"model.safetensors": save(tensors), "vocab.json": {"itos": run.vocab.itos},
                             "labels.json": {"labels": list(run.labels)}}
    if state is not None:
        files |= {f"{RESUME_ONLY}{name}.safetensors": save(dict(group))
                  for name, group in state[0].items()} | {f"{RESUME_ONLY}state.json": state[1]}
    return commit_generation(writer, fields, status="done" if state is None else "training", files=files,
                             progress=progress, carry=("vocab.json", "labels.json"))


def _load_state(trainer: Trainer, directory: str | Path) -> None:
    """Give ``trainer`` the train state committed in run ``directory``; a damaged or foreign file is a
    :class:`~attnkit.train.runs.rundir.RunFileError` naming it."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder = verify_committed(directory, under=RESUME_ONLY) / RESUME_ONLY
    arrays = {}
    for path in sorted(folder.glob("*.safetensors")):
        try:
            arrays[path.stem] = load_file(path)
        except (SafetensorError, OSError, ValueError) as err:
            raise RunFileError(f"{path} is not a readable safetensors file: {' '.join(str(err).split())}") from None
    rest = read_json(folder / "state.json")
    try:
        trainer.load_state(arrays, rest)
    except (KeyError, TypeError, ValueError) as err:
        raise RunFileError(f"{folder} is not the train state of this run: {err!r}") from None


def is_numpy_run(directory: str | Path) -> bool:
    """True when the committed ``config.json`` of run ``directory`` says ``"backend": "numpy"``."""
    try:
        return read_run_config(directory).get("backend") == BACKEND
    except (OSError, ValueError):
        return False


def load_numpy_run(directory: str | Path) -> NumpyRun:
    """Rebuild the numpy run committed in ``directory``; a missing, damaged or foreign file
    raises :class:`~attnkit.train.runs.rundir.RunFileError` naming it."""
    from safetensors import SafetensorError

    folder, meta = committed_dir(directory), read_run_config(directory)
    if meta.get("backend") != BACKEND:
        raise RunFileError(f"{folder / 'config.json'} is not a numpy run's config (no \"backend\": \"numpy\")")
    itos = read_json(folder / "vocab.json")
    itos = itos.get("itos") if isinstance(itos, dict) else None
    if not isinstance(itos, list):
        raise RunFileError(f"{folder / 'vocab.json'} must hold {{\"itos\": [...]}}, the list of words")
    try:
        config = ClassifierConfig.from_dict(meta["model_config"], what="model_config")
        settings = NumpyTrainSettings(**dataclass_kwargs(NumpyTrainSettings, meta["settings"], what="settings"))
        model = build_model(config)
    except (KeyError, TypeError, ValueError, MemoryError) as err:
        raise RunFileError(f"{folder / 'config.json'} holds a numpy run config that does not build: {err}") from None
    labels = check_labels(folder / "labels.json", read_json(folder / "labels.json"), config.num_classes)
    check_vocab_size(folder / "vocab.json", len(itos), config.vocab_size)
    weights = folder / "model.safetensors"
    if not weights.is_file():
        raise RunFileError(f"numpy run directory {directory} is incomplete: {weights} is missing")
    try:
        load_weights(model, weights, cast=False)  # a tensor of another dtype is a damaged file
    except (SafetensorError, OSError, ValueError) as err:
        raise RunFileError(f"{weights} is not readable as this run's weights ({weights.stat().st_size} bytes): "
                           f"{' '.join(str(err).split())[:400]}") from None
    refuse_non_finite_file(weights, [k for k, v in model.parameters().items() if not np.isfinite(v).all()])
    vocab = Vocabulary(itos[2:]) if isinstance(itos, list) else None
    if vocab is None or vocab.itos != itos:
        raise RunFileError(f"{folder / 'vocab.json'} must start with <pad>, <unk> and list each word once")
    return NumpyRun(model, vocab, labels, settings, meta)


# --- train, evaluate, predict ----------------------------------------------------------------------


def train_numpy_run(
    train: Sequence[Any], val: Sequence[Any], test: Sequence[Any], *, kind: str = "transformer",
    model_options: dict[str, Any] | None = None, settings: NumpyTrainSettings = _DEFAULTS,
    out_dir: str | Path | None = None, overwrite: bool = False, resume: bool = False,
    log: Callable[[str], None] | None = None, extra: dict[str, Any] | None = None,
) -> tuple[NumpyRun, dict[str, Any] | None]:
    """Train the NumPy classifier ``kind`` on ``train`` (early stopping on ``val``); score ``test``.

    ``train``/``val``/``test`` are :class:`attnkit.data.readers.Example` lists.
    ``model_options`` are :class:`~attnkit.reference.models.ClassifierConfig`
    fields, the layer's as a nested dict (``{"layer": {"d_model": 32}}``; ``vocab_size``,
    ``num_classes`` and ``seed`` come from the data and the settings: :func:`numpy_model_config`).
    With ``out_dir`` each finished epoch is committed; ``resume`` goes on with the unfinished run there after
    its last one (its model, vocabulary, labels and train state; ``kind`` and ``model_options`` unused).
    Returns the run and the test metrics (None without test data).
    """
    if kind not in NUMPY_KINDS:
        raise ValueError(f"--backend numpy trains model 'transformer' or 'document', got {kind!r}")
    if not train:
        raise ValueError("the training data is empty")
    if resume and out_dir is None:
        raise ValueError("resume goes on with the run in out_dir: give out_dir")
    # Refuses an occupied out_dir now; the lock is taken once the inputs are checked, before training.
    writer = None if out_dir is None else start_run(out_dir, overwrite=overwrite, resume=resume)
    if resume and out_dir is not None:
        run = replace(load_numpy_run(out_dir), settings=settings, meta={})
    else:
        labels = sorted({e.label for e in train})
        if len(labels) < 2:
            raise ValueError(f"need at least 2 classes in the training data, got {labels}")
        lower = settings.lowercase
        vocab = Vocabulary.build([e.text.lower() if lower else e.text for e in train],
                                 min_frequency=settings.min_frequency, max_size=settings.vocab_size)
        config = numpy_model_config(kind, model_options or {}, vocab_size=len(vocab), num_classes=len(labels),
                                    seed=settings.seed)
        run = NumpyRun(build_model(config), vocab, labels, settings)
    encode, model, labels = run.encode, run.model, run.labels
    optimizer = AdamW(model.parameters(), model.gradients(), lr=settings.lr, weight_decay=settings.weight_decay)
    trainer = Trainer(model, optimizer, batch_size=settings.batch_size, clip_norm=settings.clip_norm or None,
                      patience=settings.patience or None, seed=settings.seed, max_len=settings.max_len,
                      warmup_ratio=settings.warmup_ratio, on_nan=settings.on_nan)
    train_x, train_y = encode([e.text for e in train]), _label_ids(labels, train)
    val_x, val_y = (encode([e.text for e in val]), _label_ids(labels, val)) if val else (None, None)
    if test:
        _label_ids(labels, test)
    if resume and out_dir is not None:
        _load_state(trainer, out_dir)
    history = trainer.history

    def summary() -> dict[str, Any]:
        return {**(extra or {}), "epochs_run": len(history.train_loss),
                "history": {"train_loss": history.train_loss, "val_accuracy": history.val_accuracy,
                            "best_epoch": history.best_epoch + 1,
                            **({"skipped_steps": history.skipped_steps} if settings.on_nan == "skip-step" else {})}}

    def commit_epoch() -> None:
        assert writer is not None
        _commit(writer, replace(run, meta=summary()), weights=trainer.best, state=trainer.state(),
                progress={"epoch": len(history.train_loss), "epochs": settings.epochs, "step": trainer.step,
                          "best_epoch": history.best_epoch + 1 or None})

    with writer if writer is not None else contextlib.nullcontext():
        start = time.perf_counter()
        trainer.fit(train_x, train_y, epochs=settings.epochs, val_x=val_x, val_y=val_y, log=log,
                    on_epoch=None if writer is None else commit_epoch)
        test_metrics = evaluate_numpy_run(run, test) if test else None
        run.meta = {**summary(), "seconds": round(time.perf_counter() - start, 2),
                    "metrics": {"test": test_metrics,
                                "val_best": max(history.val_accuracy) if history.val_accuracy else None}}
        if writer is not None:
            _commit(writer, run)
    return run, test_metrics


def numpy_model_config(kind: str, options: dict[str, Any], *, vocab_size: int, num_classes: int,
                       seed: int) -> ClassifierConfig:
    """The :class:`~attnkit.reference.models.ClassifierConfig` of a numpy run: ``options`` (the fields a
    user may set, ``layer`` as a whole or in part: ``{"layer": {"d_ff": 64}}``) over the defaults, with the
    sizes the data gives. An unknown key is a ValueError listing the valid ones; a field of the layer given
    flat (``d_model``) is named by its path (``layer.d_model``), as for the torch models."""
    given = {"kind": kind, "vocab_size": vocab_size, "num_classes": num_classes, "seed": seed}
    valid = [name for name in ClassifierConfig.__dataclass_fields__ if name not in given]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(f"unknown numpy {kind} model option(s) {unknown}; valid keys: {valid}"
                         f"{nested_paths_hint(ClassifierConfig, unknown)}")
    return ClassifierConfig.from_dict({**options, **given})


def evaluate_numpy_run(run: NumpyRun, examples: Sequence[Any]) -> dict[str, Any]:
    """Accuracy, macro-F1 and confusion matrix of ``run`` on labelled examples."""
    if not examples:
        raise ValueError("no examples to evaluate")
    targets = _label_ids(run.labels, examples)
    logits, _ = run.logits([e.text for e in examples])
    report = metrics(logits.argmax(-1), targets, len(run.labels))
    report["labels"] = list(run.labels)
    return report


def predict_numpy_run(run: NumpyRun, texts: Sequence[str], *, top_k: int = 0) -> list[dict[str, Any]]:
    """Label, probabilities and (with ``top_k``) the most attended words of each text."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single str")
    logits, weights = run.logits(texts)
    probs = _softmax(logits.astype(np.float64))  # (N, C)
    encoded = run.encode(texts)
    out = []
    for row, text in enumerate(texts):
        best = int(probs[row].argmax())
        order: list[int] = np.argsort(-weights[row], kind="stable")[:top_k].tolist() if top_k else []
        top = [(run.vocab.itos[encoded[row][i]], float(weights[row][i])) for i in order]
        out.append({"text": text, "label": run.labels[best], "probability": float(probs[row, best]),
                    "probabilities": {lb: float(p) for lb, p in zip(run.labels, probs[row], strict=True)},
                    "top_tokens": top})
    return out


# --- the command line ------------------------------------------------------------------------------


def _torch_only(values: dict[str, Any]) -> list[str]:
    """The flags given that the NumPy trainer has no field for: the torch classifier's settings
    (``TrainConfig``, ``DataSettings``) outside ``NumpyTrainSettings``, and ``--init-from``."""
    import dataclasses

    from attnkit.train.config import DataSettings, TrainConfig

    own = {f.name for f in dataclasses.fields(NumpyTrainSettings)}
    names = [f.name for cls in (TrainConfig, DataSettings) for f in dataclasses.fields(cls)
             if f.name not in own and f.name != "device"] + ["init_from"]
    return ["--" + name.replace("_", "-") for name in names if values.get(name)]


def train_numpy(values: dict[str, Any], model_options: dict[str, Any], source: Any, *,
                echo: Callable[[str], None], report: Callable[[str, dict[str, Any], list[str]], None]) -> Any:
    """``attnkit train --backend numpy``: train the NumPy classifier on ``source`` (a
    :class:`attnkit.data.sources.DataSource`) with the settings in the command's option ``values`` (a flag
    the NumPy trainer has no field for is a ValueError naming it; ``resume``: go on with the run in ``--out``,
    ``values`` being its saved settings); ``report`` the test metrics and save the run to ``--out``. Torch is
    never imported on this path."""
    import dataclasses

    from attnkit._checks import one_of
    from attnkit.data.sources import load_splits

    if values.get("model") is not None:
        one_of("`model` of --backend numpy", values["model"], NUMPY_KINDS)
    given = _torch_only(values)
    if values.get("device") not in (None, "auto", "cpu"):
        given.append("--device")
    if given:
        raise ValueError(f"--backend numpy does not support {', '.join(given)}; "
                         "the NumPy trainer runs on the CPU for --epochs, without label smoothing, packing "
                         "or a measure other than accuracy")
    kind = values.get("model") or "transformer"
    settings = NumpyTrainSettings(**{f.name: values[f.name] for f in dataclasses.fields(NumpyTrainSettings)
                                     if values.get(f.name) is not None})
    if not values.get("overwrite") and not values.get("resume"):
        from attnkit.train.runs.resume import RUN_FLAGS
        from attnkit.train.runs.run import refuse_existing_run

        refuse_existing_run(values["out"], lambda saved: _changes(saved, kind, model_options, settings, source.record),
                            flags=RUN_FLAGS, resume=f"attnkit train --out {values['out']} --resume")
    tr, va, te = load_splits(source, seed=settings.seed)
    echo(f"numpy {kind}: {len(tr)} train, {len(va)} validation, {len(te)} test examples")
    run, test_metrics = train_numpy_run(
        tr, va, te, kind=kind, model_options=model_options, settings=settings, out_dir=values["out"],
        overwrite=bool(values.get("overwrite")), resume=bool(values.get("resume")),
        log=None if values.get("quiet") else echo,
        extra={"data": source.record})
    if test_metrics is not None:
        report("test", test_metrics, run.labels)
    echo(f"saved run to {values['out']}")
    return run


def _changes(saved: dict[str, Any], kind: str, model_options: dict[str, Any], settings: Any,
             data: dict[str, Any]) -> list[str]:
    """What differs between the numpy run committed as ``saved`` and this command: backend, model, each
    setting and ``--model-opt``, the data."""
    import json

    from attnkit.train.runs.data_record import data_changes
    from attnkit.train.runs.resume import flat_config

    changes = [] if saved.get("backend") == BACKEND else [f"`backend` torch there, {BACKEND} now"]
    if saved.get("model_name") != kind:
        changes.append(f"`model` {saved.get('model_name')} there, {kind} now")
    before_settings, now_settings = saved.get("settings") or {}, json.loads(json.dumps(settings.__dict__))
    changes += [f"`{k}` {before_settings.get(k)!r} there, {now_settings.get(k)!r} now"
                for k in sorted(set(before_settings) | set(now_settings))
                if before_settings.get(k) != now_settings.get(k)]
    config = saved.get("model_config") or {}
    for key, value in sorted(flat_config(model_options).items()):
        there = flat_config(config).get(key)
        if there != value:
            changes.append(f"`model_opt` {key}={there!r} there, {value!r} now")
    return changes + data_changes(saved.get("data") or {}, data)

