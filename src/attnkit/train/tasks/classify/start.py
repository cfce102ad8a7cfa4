"""How a classification run starts, from the values of ``attnkit train``'s (and ``cv``'s) flags: the plan of a
new run (from scratch, or fine-tuning a pretrained folder), the plan of a resume (its saved settings, checked
by the one rule of ``--resume``), what differs from a run already in ``--out``, where the run's data came from,
and what to do after an interrupt. The command parses, prints and calls; everything here is read and checked
before anything is written. A combination of flags that makes no run is a :class:`PlanError` naming them."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnkit.train.runs.data_record import DataRecordError, data_changes, locate_data, record_data
from attnkit.train.runs.resume import RUN_FLAGS, PlanError, flat_config
from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, PRETRAINED_PRESETS, data_defaults, train_defaults
from attnkit.train.tasks.classify.settings import DATA_KEYS, DATA_PATHS, ClassifyData
from attnkit.train.tasks.numpy.settings import NumpyTrainSettings

__all__ = ["PlanError", "check_model", "require_baseline", "data_plan", "train_config", "data_settings",
           "Recipe", "recipe", "cv_settings", "new_plan", "resume_plan", "numpy_resume", "run_changes",
           "resumed_data_source"]


def require_baseline(values: dict[str, Any]) -> None:
    """Before any work (the data not read, nothing trained): ``--baseline`` needs scikit-learn (the tasks extra),
    for ``train`` and ``cv`` alike."""
    if values.get("baseline"):
        from attnkit._lazy import require_extra

        require_extra("--baseline", "sklearn")


def check_model(values: dict[str, Any]) -> None:
    """A ``--model`` that names no torch model is an error naming the close one, before any data is read
    (the NumPy twin's: :func:`attnkit.train.tasks.numpy.numpy_backend.train_numpy`)."""
    from attnkit._checks import one_of

    if values.get("model") is None:
        return
    from attnkit.models import MODELS

    one_of("`model`", values["model"], sorted(MODELS))


def data_plan(values: dict[str, Any], out: Path, reader: dict[str, Any]) -> Any:
    """The :class:`~attnkit.data.sources.DataSource` of the data flags in ``values`` (``reader``: how to read
    the files), with its record (:func:`attnkit.train.runs.data_record.record_data`: paths resolved, with sizes
    and SHA-256; a hash already in ``values``, put there by :func:`resumed_data_source` after checking it against
    the file, is kept)."""
    from attnkit.data.sources import DataSource
    from attnkit.train.runs.rundir import check_output_path

    record = {**{k: values[k] for k in DATA_KEYS if k in values},
              **record_data({key: values.get(key) for key in DATA_PATHS}, check_output_path(out, flags=RUN_FLAGS),
                            known=values)}
    return DataSource(train=values["data"], val=values["val_path"], test=values["test_path"],
                      val_ratio=values["val_ratio"], test_ratio=values["test_ratio"], reader=reader, record=record)


def resumed_data_source(saved: dict[str, Any], values: dict[str, Any], out: Path) -> dict[str, Any]:
    """The data flags' values for going on with run ``out`` (a resume, its reports): the saved ones, each path
    located and checked (:func:`attnkit.train.runs.data_record.locate_data`); a :class:`PlanError` names the
    flag when the data cannot be found or differs."""
    try:
        located = locate_data(saved, values, out, DATA_PATHS)
    except DataRecordError as err:
        raise PlanError(str(err)) from None
    return {**{k: saved[k] for k in DATA_KEYS if k in saved}, **located}


def train_config(values: Mapping[str, Any], **defaults: Any) -> Any:
    """A TrainConfig from the given (non-None) values over ``defaults``."""
    from attnkit.train.config import USER_TRAIN_FIELDS, TrainConfig

    given = {k: values[k] for k in USER_TRAIN_FIELDS if values.get(k) is not None}
    return TrainConfig.from_dict({**defaults, **given})


def data_settings(values: Mapping[str, Any], **defaults: Any) -> Any:
    """A DataSettings from the given (non-None) values over ``defaults``."""
    from attnkit.train.config import DataSettings

    given = {f.name: values[f.name] for f in dataclasses.fields(DataSettings) if values.get(f.name) is not None}
    return DataSettings(**{**defaults, **given})


@dataclasses.dataclass(frozen=True)
class Recipe:
    """What a classification run trains: the model, its settings, and when it fine-tunes, the BERT
    ``folder`` and its ``tokenizer``."""

    model_name: str
    model_options: dict[str, Any]
    train_config: Any
    data: Any
    tokenizer: Any = None
    folder: str | None = None

    def init_model(self) -> Any:
        """The function that loads the folder's weights into the model (None: trained from scratch)."""
        from attnkit.train.tasks.classify.finetune import pretrained_initializer

        return pretrained_initializer(self.folder) if self.folder else None


# what a pretrained BERT folder fixes: its own WordPiece tokenizer and vocabulary
_FOLDER_FIXED = ("tokenizer", "vocab_size", "min_frequency")


def recipe(given: Mapping[str, Any], model_options: Mapping[str, Any], *, extra: tuple[str, str] = (
           "--preset {}", "choose --preset fast"), **config: Any) -> Recipe:
    """What a run trains from the settings a user gave (``attnkit train``'s and ``cv``'s flags,
    :class:`attnkit.TextClassifier`'s arguments; None: not given): ``model``'s recipe
    (:mod:`~attnkit.train.tasks.classify.recipe`) with the given settings over it, or fine-tuning a BERT folder
    (``init_from``, or the MiniLM of ``preset`` balanced or accurate) with fine-tuning's defaults
    (:func:`attnkit.train.tasks.classify.finetune.finetune_defaults`) under them. ``config``: more TrainConfig
    defaults. Settings that cannot go together are a :class:`PlanError` naming them as `` `setting` ``
    (spelt as flags or as arguments by the caller); ``extra`` words the error of a missing ``pretrained`` extra
    (the preset, what to choose instead)."""
    from attnkit._checks import one_of
    from attnkit.train.tasks.classify import finetune
    from attnkit.train.tasks.classify.recipe import PRESETS, pretrained_folder

    preset, init_from, model = given.get("preset"), given.get("init_from"), given.get("model")
    if preset is not None:
        one_of("preset", preset, PRESETS)
    finetuned = preset if preset in PRETRAINED_PRESETS else None
    if not finetuned and init_from is None:
        model_name = model or DEFAULT_MODEL
        if model_name == "bert":
            raise PlanError("`model` bert fine-tunes a pretrained folder: give `init_from` FOLDER or `preset` "
                            "balanced or accurate")
        return Recipe(model_name, dict(model_options), train_config(given, **{**train_defaults(model_name), **config}),
                      data_settings(given, **data_defaults(model_name)))
    what = f"`preset` {finetuned}" if finetuned else "`init_from`"
    if finetuned and init_from is not None:
        raise PlanError(f"{what} fine-tunes all-MiniLM-L6-v2 and `init_from` another folder: give one of them")
    if model not in (None, "bert"):
        instead = " or use `preset` fast" if finetuned else ""
        raise PlanError(f"{what} fine-tunes a BERT folder (`model` bert), got `model` {model}: drop `model`{instead}")
    fixed = [f"`{name}`" for name in _FOLDER_FIXED if given.get(name) is not None]
    if fixed:
        raise PlanError(f"{what} fine-tunes with the BERT folder's own WordPiece tokenizer, which {', '.join(fixed)} "
                        f"cannot change: drop {'it' if len(fixed) == 1 else 'them'}")
    if finetuned:
        folder = pretrained_folder(extra[0].format(finetuned), extra[1])
    else:
        folder = str(finetune.check_bert_folder(str(init_from), what="`init_from` "))
    tokenizer = finetune.load_finetune_tokenizer(folder)
    defaults, max_len, options = finetune.finetune_defaults(finetuned)
    options = finetune.bert_model_options(folder, tokenizer, {**options, **model_options})
    return Recipe("bert", options, train_config(given, **{**defaults, **config}),
                  data_settings(given, max_len=max_len, tokenizer="wordpiece", vocab_size=int(options["vocab_size"])),
                  tokenizer=tokenizer, folder=str(Path(folder).resolve()))


def cv_settings(values: dict[str, Any], model_options: dict[str, Any]) -> dict[str, Any]:
    """What :func:`attnkit.train.tasks.classify.pipeline.cross_validate` trains in every fold, from ``cv``'s
    flags: ``model_name``, ``model_options``, ``train_config``, ``data`` and, fine-tuning, ``tokenizer`` and
    ``init_model``."""
    check_model(values)
    chosen = recipe(values, model_options, device="auto")  # a BERT folder to fine-tune: every fold the same one
    fine = {"tokenizer": chosen.tokenizer, "init_model": chosen.init_model()} if chosen.folder else {}
    return {"model_name": chosen.model_name, "model_options": chosen.model_options,
            "train_config": chosen.train_config, "data": chosen.data, **fine}


def new_plan(values: dict[str, Any], model_options: dict[str, Any], reader: dict[str, Any]) -> Any:
    """The plan of a new run (or an overwrite) from ``train``'s flags: from scratch, or fine-tuning a folder."""
    from attnkit.train.runs.run import new_run_id
    from attnkit.train.tasks.classify.plan import ClassifierPlan

    if not values["data"]:
        raise PlanError("missing --data (the training data); see attnkit train --help")
    chosen = recipe(values, model_options)
    out = Path(values["out"])
    return ClassifierPlan(model_name=chosen.model_name, model_options=chosen.model_options,
                          train_config=chosen.train_config, data_settings=chosen.data, tokenizer=chosen.tokenizer,
                          init_from=chosen.folder, out=out, data=data_plan(values, out, reader), quiet=values["quiet"],
                          run_id=new_run_id(), mode="overwrite" if values["overwrite"] else "new",
                          baseline=bool(values.get("baseline")), max_memory=values.get("max_memory"), flags=RUN_FLAGS)


def resume_plan(values: dict[str, Any], given: list[str], warn: Any = None, log: Any = None) -> Any:
    """The plan that goes on with run ``values["out"]`` with its saved settings (None when it is finished);
    the settings ``given`` are checked by the one rule of ``--resume`` (a changed one is refused naming both
    values, :class:`~attnkit.train.runs.resume.ResumeError`). Its files are read as the run read them (its
    recorded reader settings; ``warn`` takes the skipped rows' line)."""
    from attnkit._checks import tree_from_flat
    from attnkit.data.readers import ReaderSettings
    from attnkit.models import MODELS
    from attnkit.train.config import DataSettings
    from attnkit.train.runs import checkpoint as ckpt
    from attnkit.train.runs.resume import resumed_settings
    from attnkit.train.tasks.classify.plan import ClassifierPlan
    from attnkit.train.tasks.classify.settings import ClassifySettings

    out = Path(values["out"])
    saved = ckpt.read_run_config(out)
    folder = ckpt.committed_dir(out)
    for key in ("model_name", "model_config", "run_id", "train_config", "data_settings"):
        if key not in saved:
            raise ckpt.RunFileError(f"{folder / 'config.json'} lacks {key!r}; it cannot be resumed")
    if not isinstance(saved["model_config"], dict):
        raise ckpt.RunFileError(f"{folder / 'config.json'} holds a model_config that is not a dict of fields")
    if saved["model_name"] not in MODELS:
        raise ckpt.RunFileError(f"{folder / 'config.json'} names model {saved['model_name']!r}, which this "
                                f"attnkit does not know (known: {sorted(MODELS)})")
    resumed_settings(ClassifySettings.from_run(saved), tree_from_flat(ClassifySettings, {n: values[n] for n in given}),
                     given, run=str(out), log=log)
    if ckpt.run_status(saved) == "done":
        return None
    tokenizer, label_vocab = ckpt.load_run_vocabularies(out, saved)
    values = {**values, **resumed_data_source(saved.get("data", {}), values, out)}
    reader = ReaderSettings.of(values).kwargs(warn)
    return ClassifierPlan(
        out=out, model_name=saved["model_name"], mode="resume", model_options=dict(saved["model_config"]),
        run_id=saved["run_id"], tokenizer=tokenizer, label_vocab=label_vocab,
        train_config=train_config({}, **saved["train_config"]), data_settings=DataSettings(**saved["data_settings"]),
        data=data_plan(values, out, reader), quiet=values["quiet"], baseline=bool(values.get("baseline")),
        max_memory=values.get("max_memory"), flags=RUN_FLAGS)


@dataclasses.dataclass(frozen=True)
class _NumpyRecord:
    """What a NumPy run records and a resume compares: its data and its training settings."""

    data: ClassifyData
    training: NumpyTrainSettings


def numpy_resume(values: dict[str, Any], given: list[str], log: Any = None) -> dict[str, Any] | None:
    """The flags' values that go on with the NumPy run ``values["out"]``: its model, its saved settings (the
    settings ``given`` checked by the one rule of ``--resume``) and its data, located and checked
    (:func:`resumed_data_source`); None when it is finished."""
    from attnkit._checks import tree_from_flat
    from attnkit.train.runs.resume import resumed_settings
    from attnkit.train.runs.rundir import run_status
    from attnkit.train.tasks.classify import TASK
    from attnkit.train.tasks.numpy.numpy_backend import load_numpy_run

    out = Path(values["out"])
    saved = load_numpy_run(out)  # its settings checked, a damaged file named
    done = run_status(saved.meta) == "done"
    tree = resumed_settings(_NumpyRecord(ClassifyData.of(saved.meta.get("data") or {}), saved.settings),
                            tree_from_flat(_NumpyRecord, {n: values[n] for n in given}), given, run=str(out),
                            grows=() if done else TASK.grows, log=log)
    if done:
        return None
    return {**values, **resumed_data_source(saved.meta.get("data", {}), values, out),
            **dataclasses.asdict(tree.training), "model": saved.meta["model_name"]}


def run_changes(saved: dict[str, Any], plan: Any) -> list[str]:
    """What differs between the run committed as ``saved`` (its config.json) and ``plan``: each setting
    named as `` `setting` `` with its value there and now; a data file by its path and content."""
    changes: list[str] = []

    def compare(before: dict[str, Any], now: dict[str, Any], name: Any) -> None:
        now = json.loads(json.dumps(now))  # as config.json holds it: tuples as lists
        for key in sorted(set(before) | set(now), key=str):
            if before.get(key) != now.get(key):
                changes.append(name(key, before.get(key), now.get(key)))

    if saved.get("model_name") != plan.model_name:
        changes.append(f"`model` {saved.get('model_name')} there, {plan.model_name} now")
    else:
        from attnkit.train.tasks.classify.pipeline import model_config_dict

        before = saved.get("model_config") or {}
        try:
            now = model_config_dict(plan.model_name, plan.model_options, vocab_size=before["vocab_size"],
                                    num_classes=before["num_classes"], max_len=plan.data_settings.max_len)
        except (KeyError, TypeError, ValueError):
            now = before
        if before.get("max_len") == (saved.get("data_settings") or {}).get("max_len"):
            now["max_len"] = before.get("max_len")  # the data's --max-len: compared with the data settings below
        compare(flat_config(before), flat_config(now), lambda k, b, n: f"`model_opt` {k}={b!r} there, {n!r} now")
    for part, now in (("train_config", plan.train_config.to_dict()),
                      ("data_settings", dataclasses.asdict(plan.data_settings))):
        compare(saved.get(part) or {}, now, lambda k, b, n: f"`{k}` {b!r} there, {n!r} now")
    return changes + data_changes(saved.get("data") or {}, plan.data.record)
