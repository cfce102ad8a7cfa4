"""The training configurations, saved with every run: :class:`TrainSettings`, the fields every trainer
reads, extended by the classifiers' (:class:`ClassifierTrainSettings`, :class:`TrainConfig`), the NumPy
twin's and translation's (:class:`TranslationTrainConfig`) settings; and how a classifier's text becomes ids
(:class:`DataSettings`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from attnkit._checks import MAX_SEED, check_settings, dataclass_kwargs, setting, setting_fields
from attnkit._finite import ON_NAN
from attnkit.reference.trainer import lr_factor as warmup_linear_factor
from attnkit.train.metrics import CLASS_WEIGHTS, check_metric

__all__ = ["TrainSettings", "ClassifierTrainSettings", "TrainConfig", "DataSettings", "TranslationTrainConfig",
           "warmup_linear_factor", "USER_TRAIN_FIELDS", "USER_DATA_FIELDS",
           "OPTIMIZER_KERNELS", "PRECISIONS"]

OPTIMIZER_KERNELS = ("foreach", "fused")
"""The values of :attr:`TrainConfig.optimizer_kernel`, each the keyword torch's AdamW takes for it."""

PRECISIONS = ("fp32", "bf16", "auto")
"""The values of :attr:`TrainConfig.precision`: the number format of a training step's matrix products."""

S = TypeVar("S", bound="TrainSettings")


@dataclass(frozen=True)
class TrainSettings:
    """What every training run of attnkit is told, whatever it trains; saved with the run.

    The classifiers' :class:`TrainConfig` and the NumPy twin's
    :class:`~attnkit.train.tasks.numpy.numpy_backend.NumpyTrainSettings` (through
    :class:`ClassifierTrainSettings`), and translation's
    :class:`~attnkit.train.tasks.translate.translation.TranslationTrainConfig` extend it;
    a subclass may give a field another default, never another meaning.

    Args:
        epochs: passes over the training set (at most; early stopping may end sooner).
        lr: peak learning rate.
        clip_norm: clip the global gradient norm to this value; ``0`` turns clipping off.
        seed: seeds the weights' initialisation (by the caller), dropout and the batch order.
    """

    epochs: int = setting(10, "Maximum epochs.", low=1)
    lr: float = setting(1e-3, "Peak learning rate.", low=0, low_open=True)
    clip_norm: float = setting(1.0, "Gradient-norm clipping, 0 = off.", low=0)
    seed: int = setting(0, "Seed for weights, dropout and batch order.", low=0, high=MAX_SEED)

    def __post_init__(self) -> None:
        check_settings(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[S], d: Mapping[str, Any]) -> S:
        """Build from a dict: unknown keys raise a ValueError listing the valid ones, a value of the wrong type
        a TypeError naming the field (:func:`attnkit._checks.dataclass_kwargs`), a bad range a ValueError."""
        return cls(**dataclass_kwargs(cls, d))


@dataclass(frozen=True)
class ClassifierTrainSettings(TrainSettings):
    """:class:`TrainSettings` plus what both classifier trainers (torch and NumPy) read.

    Args:
        batch_size: examples per optimizer step (on each process).
        weight_decay: decoupled weight decay of AdamW (Loshchilov and Hutter, 2019), applied
            to parameters with two or more dimensions only (biases and norm scales are not decayed).
        warmup_ratio: share of all steps over which the rate rises linearly from
            0 to ``lr``; it then falls linearly (to ``lr * min_lr_ratio`` in the torch trainer, to 0 in
            the NumPy one). ``None`` (NumPy trainer only) keeps the rate constant.
        patience: stop after this many epochs without a better validation
            accuracy and restore the best weights; ``0`` turns early stopping off.
        on_nan: what a step with a non-finite loss or gradient norm does:
            ``"stop"`` training with an error naming the epoch and step, or
            ``"skip-step"`` (leave the weights as they were, count the skip,
            stop after too many in a row); see :mod:`attnkit._finite`.
    """

    batch_size: int = setting(32, "Examples per step and process.", low=1)
    weight_decay: float = setting(0.01, "Decoupled weight decay.", low=0)
    warmup_ratio: float | None = setting(0.1, "Share of steps with linear warm-up, then linear decay (none: a "
                                         "constant rate).", low=0, high=1, high_open=True)
    patience: int = setting(3, "Early-stopping patience in epochs, 0 = off.", low=0)
    on_nan: str = setting("stop", "A step with a non-finite loss or gradient norm: stop with an error (nothing of "
                          "the epoch is committed), or skip it (counted as skipped_steps; 10 in a row stop).",
                          choices=ON_NAN)


@dataclass(frozen=True)
class TrainConfig(ClassifierTrainSettings):
    """Everything the torch classifier's training loop needs besides the model and the data.

    The fields of :class:`ClassifierTrainSettings` and :class:`TrainSettings`, and:

    Args:
        warmup_ratio: as in :class:`ClassifierTrainSettings`; a number here (``0``: no warm-up).
        min_lr_ratio: the final rate as a share of ``lr``.
        bucket: group examples of similar length into batches (less padding), still shuffled.
        label_smoothing: cross-entropy label smoothing.
        pack: ``0`` (off) or the tokens per row: pack each training batch's
            documents into rows of this many tokens (:mod:`attnkit.data.packing`);
            it must be at least the longest document (the data's ``max_len``).
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.
        metric: the measure the run is trained for (:data:`attnkit.train.metrics.METRICS` or
            ``f1:<class>``): early stopping, the best epoch, the weighing of an n-gram half and the
            tuned class offsets follow it (:mod:`attnkit.train.tasks.classify.objective`).
        class_weight: ``"none"`` or ``"balanced"`` (each class weighs alike in the losses).
        tune_thresholds: tune per-class offsets on the validation part for ``metric``
            (None: when ``metric`` is not accuracy and ``class_weight`` is none).
        token_budget: ``0`` (off) or the most training tokens a run reads: ``epochs`` is lowered to the
            whole epochs that fit (at least one) before the schedule is planned, so a corpus of long
            documents costs what a budget of tokens costs, not ``epochs`` passes over all of it.
        optimizer_kernel: how AdamW updates the weights (:data:`OPTIMIZER_KERNELS`): ``"foreach"`` (torch's
            multi-tensor kernel: bitwise the numbers of its one-tensor loop, torch's default on a CPU) or
            ``"fused"`` (one pass over each weight, many times faster a step than the loop on a CPU; its
            roundings differ in the last bits, so its runs are not bitwise those of ``"foreach"``). A whole
            MiniLM fine-tuning run on a CPU gains little from it (docs/results.md, presets).
        precision: the number format of a training step's forward pass (:data:`PRECISIONS`): ``"fp32"``, or
            ``"bf16"`` (``torch.autocast``: matrix products in bfloat16, the loss, norms and softmax in float32;
            weights, gradients, optimizer state, validation and every prediction stay float32), or ``"auto"``
            (bf16 where the device computes it natively: a CUDA GPU that supports it, a CPU with AVX-512 BF16 or
            AMX; else fp32). Fine-tuning's default is ``"auto"`` (docs/results.md, presets).
    """

    warmup_ratio: float = setting(0.1, "Share of steps with linear warm-up, then linear decay.", low=0, high=1,
                                  high_open=True)
    min_lr_ratio: float = 0.0
    bucket: bool = True
    label_smoothing: float = setting(0.0, "Cross-entropy label smoothing.", low=0, high=1, high_open=True)
    device: str = setting("auto", "auto, cpu, cuda or cuda:N.")
    pack: int = setting(0, "Pack each batch's documents into rows of this many tokens (0 = padded batches); at "
                        "least the longest document (max_len).", low=0, metavar="TOKENS")
    metric: str = setting("accuracy", "The measure to train for: accuracy, macro_f1, weighted_f1, macro_recall or "
                          "f1:CLASS; early stopping, the best epoch, the weighing of the n-gram half, the tuned "
                          "class offsets and the report's headline follow it.", metavar="METRIC")
    class_weight: str = setting("none", "Weigh each class alike in the losses (network, n-gram half, baseline): "
                                "balanced, or none.", choices=CLASS_WEIGHTS)
    tune_thresholds: bool | None = setting(None, "Tune per-class offsets (priors, thresholds) on the validation "
                                           "part for the metric trained for (none: on when that is not accuracy "
                                           "and the classes are not weighed alike).")
    token_budget: int = setting(0, "Train at most the whole epochs that read this many tokens, at least one (0 = "
                                "off).", low=0, metavar="TOKENS")
    optimizer_kernel: str = setting("foreach", "AdamW's kernel: foreach (the reference numbers) or fused (one pass "
                                    "over each weight, several times faster a step on a CPU; the last bits of "
                                    "each update differ; fine-tuning's default).", choices=OPTIMIZER_KERNELS)
    precision: str = setting("fp32", "A training step's forward pass: fp32, bf16 (autocast: matrix products in "
                             "bfloat16; weights, optimizer and predictions stay float32) or auto (bf16 where the "
                             "device computes it natively; fine-tuning's default).", choices=PRECISIONS)

    def epochs_within_budget(self, tokens_per_epoch: int) -> int:
        """The epochs a run trains whose every epoch reads ``tokens_per_epoch`` training tokens: ``epochs``,
        or fewer, the whole epochs within ``token_budget`` (at least one)."""
        if not self.token_budget or tokens_per_epoch <= 0:
            return self.epochs
        return max(1, min(self.epochs, self.token_budget // tokens_per_epoch))

    def __post_init__(self) -> None:
        if self.warmup_ratio is None:
            raise ValueError("warmup_ratio must be a number in [0, 1), got None (a constant rate is the NumPy "
                             "trainer's alone)")
        super().__post_init__()
        if isinstance(self.min_lr_ratio, bool) or not isinstance(self.min_lr_ratio, (int, float)) \
                or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be a number in [0, 1], got {self.min_lr_ratio!r}")
        check_metric(self.metric)
        if self.device not in ("auto", "cpu", "cuda") and not str(self.device).startswith("cuda:"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")


USER_TRAIN_FIELDS = tuple(f.name for f, _ in setting_fields(TrainConfig))
"""The :class:`TrainConfig` fields a user sets (``train``'s and ``cv``'s flags, :class:`attnkit.TextClassifier`'s
arguments): its settings (``min_lr_ratio`` and ``bucket`` are the library's)."""


@dataclass(frozen=True)
class DataSettings:
    """How text becomes token ids: tokenizer kind and size, truncation length."""

    tokenizer: str = setting("word", "Tokenizer kind.", choices=("word", "wordpiece", "bpe"))
    vocab_size: int = setting(20000, "Tokenizer vocabulary size.", low=1)
    min_frequency: int = setting(1, "Minimum token count.", low=1)
    lowercase: bool = True
    max_len: int = setting(256, "Truncate documents to this many tokens.", low=1)

    def __post_init__(self) -> None:
        check_settings(self)


USER_DATA_FIELDS = tuple(f.name for f, _ in setting_fields(DataSettings))
"""The :class:`DataSettings` fields a user sets (``train``'s and ``cv``'s tokenizer flags,
:class:`attnkit.TextClassifier`'s arguments): its settings (``lowercase`` is the library's)."""


EXPLAIN_OUTPUTS = (32, "Held-out outputs whose explanations' faithfulness chooses the method shown first when "
                   "the run is explained (0: chosen on each output).")


@dataclass(frozen=True)
class TranslationTrainConfig(TrainSettings):
    """Training settings: Adam (0.9, 0.98), linear warm-up then inverse square-root decay
    (Vaswani et al., 2017, eq. 3, with ``lr`` as the peak).

    The fields of :class:`attnkit.train.config.TrainSettings` (``epochs``,
    ``lr``, ``clip_norm``, ``seed``; ``lr`` defaults to 5e-4 here), and:

    Args:
        max_tokens: source plus target tokens per batch.
        warmup_steps: optimizer steps of the linear warm-up.
        max_len: sentence pairs with a side longer than this many tokens are left out of training.
        vocab_size: of the BPE tokenizers trained on the corpus.
        lowercase: lowercase the corpus before the tokenizers are trained.
        time_budget_s: stop after the epoch that passes this many seconds (None: no limit).
        eval_beam_size: beam width of the BLEU score on the validation part.
        eval_sentences: sentence count of that BLEU score.
        log_every: steps between progress lines.
        explain_outputs: validation sentences whose explanations' faithfulness chooses the method an
            explanation of this run shows first (0: chosen on each output).
        average_last: > 1 averages the weights saved at the end of the last
            that many epochs (Vaswani et al., 2017, section 6.1) and keeps the average
            when its validation loss is no worse than the last epoch's.
    """

    lr: float = setting(5e-4, "Peak learning rate.", low=0, low_open=True)
    max_tokens: int = setting(4096, "Padded tokens per batch and side.", low=1)
    warmup_steps: int = setting(1000, "Warm-up steps.", low=0)
    max_len: int = setting(100, "Longest sentence in subword tokens (longer ones are truncated).", low=1)
    vocab_size: int = setting(8000, "BPE vocabulary size (joint, or per side when each language has its own).", low=8)
    lowercase: bool = setting(False, "Lowercase the corpus before the tokenizers are trained.")
    time_budget_s: float | None = setting(None, "Stop training after this long.", low=0, low_open=True,
                                          flag="--time-budget", duration=True)
    eval_beam_size: int = setting(1, "Beam width of the validation BLEU.", low=1)
    eval_sentences: int | None = setting(None, "Sentences of the validation BLEU (default: all).", low=0)
    log_every: int = setting(100, "Steps between progress lines.", low=1)
    explain_outputs: int = setting(EXPLAIN_OUTPUTS[0], EXPLAIN_OUTPUTS[1], low=0)
    average_last: int = setting(1, "Average the weights of the last N epochs at the end (kept when validation "
                                "agrees).", low=1)
