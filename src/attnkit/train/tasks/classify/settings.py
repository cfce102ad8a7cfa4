"""The settings a classification run records and a resume compares, as one tree: how text becomes ids
(``tokenizer``, :class:`~attnkit.train.config.DataSettings`) and how the classifier is trained (``training``,
:class:`~attnkit.train.config.TrainConfig`). Their :func:`~attnkit._checks.setting` leaves are flags of
``attnkit train``; ``--resume`` checks the ones given by the one rule (:mod:`attnkit.train.runs.resume`). The
data a run reads (:class:`ClassifyData`: its files, the shares split off, how they are read) are flags too, and
its data record (:mod:`attnkit.train.runs.data_record`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from attnkit._checks import flag_name, setting, setting_fields
from attnkit.data.readers import ReaderSettings
from attnkit.data.sources import DataSource
from attnkit.train.config import DataSettings, TrainConfig
from attnkit.train.memory_budget import max_memory_help
from attnkit.train.tasks.classify import SHRINKS
from attnkit.train.tasks.classify.recipe import PRESET_HELP, PRESETS

__all__ = ["ClassifySettings", "ClassifyCommand", "ClassifyData", "CvCommand", "CvOutput", "ModelChoice", "TrainChoice",
           "Backend", "DATA_PATHS", "DATA_KEYS", "TORCH_ONLY", "NUMPY_HELP", "flag_notes"]


@dataclass(frozen=True)
class ModelChoice:
    """Where a classification run starts from besides its model (:func:`~attnkit.train.tasks.classify.start.recipe`
    decides from these with the model and the other settings): a preset, or a BERT folder to fine-tune."""

    preset: str = setting("fast", PRESET_HELP, choices=PRESETS)
    init_from: str | None = setting(
        None, "Fine-tune a local Hugging Face BERT folder (config.json, model.safetensors, tokenizer.json or "
              "vocab.txt) with --model bert; defaults become lr 5e-5, 3 epochs, max-len 128, no early stopping.")


@dataclass(frozen=True)
class _DataFiles:
    data: str | None = setting(None, "Labelled training data (file or folder).", path="any")
    val_path: str | None = setting(None, "Validation data (default: split from --data).", path="any", flag="--val")
    test_path: str | None = setting(None, "Test data (default: split from --data).", path="any", flag="--test")
    val_ratio: float = setting(DataSource.val_ratio, "Share of --data held out for validation when --val is absent.",
                               low=0, high=1, high_open=True)
    test_ratio: float = setting(DataSource.test_ratio, "Share of --data held out for testing when --test is absent.",
                                low=0, high=1, high_open=True)


@dataclass(frozen=True)
class ClassifyData(ReaderSettings, _DataFiles):
    """The labelled data of a classification run: the training file or folder, validation and test files or
    the shares of the training data split off for them (by the run's seed), and how the files are read
    (:class:`~attnkit.data.readers.ReaderSettings`)."""


DATA_PATHS = {f.name: flag_name(f.name, f.metadata["attnkit"]) for f, _ in setting_fields(ClassifyData)
              if f.metadata["attnkit"]["path"]}
"""Option -> flag of the files a classification run reads (recorded with their sizes and SHA-256)."""
DATA_KEYS = tuple(f.name for f, _ in setting_fields(ClassifyData) if f.name not in DATA_PATHS)
"""The data settings recorded beside them: the shares split off and how the files are read."""


TORCH_ONLY = "Not with `backend` numpy."
NUMPY_HELP = {"device": "`backend` numpy runs on the CPU (auto or cpu).",
              "tokenizer": "`backend` numpy splits on whitespace and refuses this flag.",
              "model": "`backend` numpy: transformer or document."}
"""What a flag's help says of the NumPy backend, where it says more than its default (shown on a command that
has ``--backend``, the setting as its flag)."""
_NUMPY_DEFAULTS = {"model": "attnkit.train.tasks.numpy.numpy_backend:train_numpy_run.kind"}
"""Where the NumPy backend keeps its own default of a flag whose default is not a field of its settings."""


def flag_notes(name: str, help: str | None, decided: bool) -> dict[str, Any]:
    """What the flag of setting ``name`` of classification's commands says beyond its field's ``help``
    (:func:`attnkit.cli.options.settings_options` reads it from the tree): where the NumPy backend keeps its
    default (``numpy_default_from``) or what it says of that backend (``numpy_help``, :data:`TORCH_ONLY` for
    a setting it refuses); for a setting the recipe decides (``decided``), the help with what the default
    model's recipe sets."""
    from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, data_defaults, train_defaults
    from attnkit.train.tasks.numpy.settings import NumpyTrainSettings

    if not decided:
        return {"numpy_default_from": _NUMPY_DEFAULTS.get(name), "numpy_help": NUMPY_HELP.get(name)}
    numpy = name in {f.name for f in dataclasses.fields(NumpyTrainSettings)}
    recipe = {**train_defaults(DEFAULT_MODEL), **data_defaults(DEFAULT_MODEL)}
    if name in recipe and help is not None:
        value = recipe[name]
        shown = f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else str(value)
        help = f"{help.rstrip('.')} ({DEFAULT_MODEL}'s recipe: {shown})."
    return {"help": help, "numpy_help": NUMPY_HELP.get(name, None if numpy else TORCH_ONLY),
            "numpy_default_from": f"{NumpyTrainSettings.__module__}:NumpyTrainSettings.{name}" if numpy else None}


@dataclass(frozen=True)
class ClassifySettings:
    """A classification run's ``data``, ``tokenizer`` and ``training`` settings."""

    data: ClassifyData = dataclasses.field(default_factory=ClassifyData)
    tokenizer: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainConfig = dataclasses.field(default_factory=TrainConfig)

    @classmethod
    def from_run(cls, config: Mapping[str, Any]) -> ClassifySettings:
        """The settings a run's config.json records (its data record, ``data_settings``, ``train_config``)."""
        return cls(data=ClassifyData.of(config.get("data") or {}), tokenizer=DataSettings(**config["data_settings"]),
                   training=TrainConfig.from_dict(config["train_config"]))


@dataclass(frozen=True)
class TrainChoice(ModelChoice):
    """What ``attnkit train`` and ``cv`` are asked to train besides the settings a run records: the model and
    its options, and the baseline scored beside it. A resume refuses them (the baseline aside), naming them:
    the run goes on with its own."""

    model: str | None = setting(
        None, "Model name: wide, document, sentiment or han; bert fine-tunes a pretrained folder "
              "(attnkit train --init-from).", default_from="attnkit.train.tasks.classify.recipe:DEFAULT_MODEL")
    model_opt: tuple[str, ...] = setting(
        (), "A model config field, e.g. --model-opt num_layers=1, or a field of its layer: --model-opt "
            "layer.d_model=128 (repeatable).", metavar="KEY=VALUE", multiple=True)
    baseline: bool = setting(False, "Also fit TF-IDF 1-2-grams + logistic regression on the same split or folds "
                                    "and print it beside the model, with the difference (needs scikit-learn, the "
                                    "tasks extra).")


@dataclass(frozen=True)
class Backend:
    """Which implementation trains the run."""

    backend: str = setting("torch", "numpy: train the NumPy twin's classifier (--model transformer or document) "
                                    "without torch.", choices=("torch", "numpy"))


@dataclass(frozen=True)
class ClassifyCommand(ClassifySettings):
    """Train a text classifier and save it as a run directory.

    \b
    Example:
      attnkit train --data reviews.csv --out runs/reviews
    Run on several processes with torchrun (gloo on CPU, nccl on GPU):
      torchrun --nproc_per_node=2 -m attnkit train --data reviews.csv --out runs/ddp
    Fine-tune a pretrained BERT folder, or train the NumPy twin:
      attnkit train --data reviews.csv --model bert --init-from path/to/bert --out runs/bert
      attnkit train --data reviews.csv --backend numpy --out runs/numpy
    """

    decided_by_recipe: ClassVar[tuple[str, ...]] = ("tokenizer", "training")
    """The groups whose flags the model's recipe decides when they are not given (:mod:`.recipe`)."""
    flag_notes = staticmethod(flag_notes)
    choice: TrainChoice = dataclasses.field(default_factory=TrainChoice)
    backend: Backend = dataclasses.field(default_factory=Backend)


@dataclass(frozen=True)
class _Folds:
    data: str | None = setting(None, "Labelled data (file or folder).", path="any", required=True)
    folds: int = setting(10, "Number of folds k.", low=2)
    max_folds: int | None = setting(None, "Run only the first N folds.", low=1)
    val_ratio: float = setting(DataSource.val_ratio, "Share of each fold's training part held out for early "
                                                     "stopping.", low=0, high=1, high_open=True)


@dataclass(frozen=True)
class CvData(ReaderSettings, _Folds):
    """The labelled data ``attnkit cv`` splits into stratified folds, and how its files are read."""


@dataclass(frozen=True)
class CvOutput:
    """What ``attnkit cv`` writes besides its lines, how it reports, and the memory each fold may plan."""

    out_json: str | None = setting(None, "Also write the fold results here.", flag="--json", path="new-file")
    quiet: bool = setting(False, "No progress bars.", short="-q")
    max_memory: int | None = setting(None, max_memory_help(SHRINKS), size=True, metavar="SIZE")


@dataclass(frozen=True)
class CvCommand:
    """Stratified k-fold cross-validation; prints per-fold and mean accuracy.

    \b
    Example:
      attnkit cv --data path/to/mr --encoding latin-1 --folds 10
    """

    decided_by_recipe: ClassVar[tuple[str, ...]] = ("tokenizer", "training")
    """Its data and folds, what it trains in every fold, and the tokenizer and training settings (decided by
    the model's recipe where not given, as for ``attnkit train``)."""
    flag_notes = staticmethod(flag_notes)
    data: CvData = dataclasses.field(default_factory=CvData)
    choice: TrainChoice = dataclasses.field(default_factory=TrainChoice)
    tokenizer: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    output: CvOutput = dataclasses.field(default_factory=CvOutput)
