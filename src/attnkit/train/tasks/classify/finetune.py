"""Fine-tuning a pretrained BERT folder as a text classifier through the usual pipeline.

Devlin et al. (2019) fine-tune every weight for 2-4 epochs with AdamW at a
small peak rate (2e-5 to 5e-5), linear warmup over the first 10 % of steps
and linear decay; :data:`FINETUNE_DEFAULTS` are those settings, which any
flag overrides. The folder's own WordPiece tokenizer replaces attnkit's
trained one (the embedding table only knows its ids), and
:class:`attnkit.models.bert_classifier.BertClassifier` gets the folder's
encoder weights before the first step. The run directory is an ordinary one:
``model.safetensors`` holds every fine-tuned weight and ``config.json`` the
whole architecture, so it loads without the pretrained folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from attnkit._hf_folder import check_model_folder
from attnkit.data.readers import Example
from attnkit.models.bert import BertConfig, BertModel, load_bert_tokenizer
from attnkit.train.config import TrainConfig
from attnkit.train.tasks.classify.pipeline import DataSettings, FitResult, fit_classifier

__all__ = ["FINETUNE_DEFAULTS", "FINETUNE_MAX_LEN", "FINETUNE_NGRAM_LEN", "finetune_defaults",
           "check_bert_folder", "bert_model_options",
           "pretrained_initializer", "load_finetune_tokenizer", "finetune_bert"]

FINETUNE_DEFAULTS: dict[str, Any] = {"lr": 5e-5, "epochs": 3, "batch_size": 32, "warmup_ratio": 0.1,
                                     "weight_decay": 0.01, "patience": 0, "optimizer_kernel": "fused",
                                     "precision": "auto"}
"""TrainConfig values for fine-tuning (Devlin et al., 2019, appendix A.3); flags override them. AdamW's fused
kernel: the same accuracy as the reference kernel, up to 1.1x faster a run (docs/results.md, presets)."""
FINETUNE_MAX_LEN = 128
"""Default truncation length (WordPiece tokens, without ``[CLS]``/``[SEP]``)."""
FINETUNE_NGRAM_LEN = 4096
"""Tokens of each document the n-gram half reads by default (the model option ``ngram_len``, about 3,000
words), while the encoder reads the first ``max_len``: a long document is judged by all its words, as the
default recipe reads whole reviews (:data:`attnkit.train.tasks.classify.recipe.MODEL_DATA_DEFAULTS`), at the
encoder's cost (docs/results.md, presets: 1,024 tokens cut the long documents of ``mixed``)."""


def finetune_defaults(preset: str | None = None) -> tuple[dict[str, Any], int, dict[str, Any]]:
    """The TrainConfig defaults, the truncation length and the model options of fine-tuning:
    :data:`FINETUNE_DEFAULTS`, :data:`FINETUNE_MAX_LEN` and ``ngram_len`` :data:`FINETUNE_NGRAM_LEN`, with
    what ``preset`` (``--preset balanced``; None: ``--init-from``) changes
    (:data:`attnkit.train.tasks.classify.recipe.PRETRAINED_PRESETS`: a
    :class:`~attnkit.models.bert_classifier.BertClassifierConfig` field is a model option). Flags override
    all three."""
    from attnkit.models.bert_classifier import BertClassifierConfig
    from attnkit.train.tasks.classify.recipe import preset_settings

    changes = preset_settings(preset) if preset is not None else {}
    max_len = int(changes.pop("max_len", FINETUNE_MAX_LEN))
    model_fields = {f.name for f in dataclasses.fields(BertClassifierConfig)}
    model = {key: changes.pop(key) for key in list(changes) if key in model_fields}
    model = {"ngram_len": FINETUNE_NGRAM_LEN, **model}
    return {**FINETUNE_DEFAULTS, **changes}, max_len, model


def check_bert_folder(directory: str | Path, *, what: str = "") -> Path:
    """``directory`` as a Path if it is a BERT folder, else an error naming what is missing.

    A BERT folder holds ``config.json``, ``model.safetensors`` and
    ``tokenizer.json`` or ``vocab.txt``, and no custom code (``auto_map``) or
    pickled weights (:func:`attnkit._hf_folder.check_model_folder`). ``what``
    (the caller's flag, such as ``"--init-from "``) starts the message.
    """
    folder = Path(directory)
    if not folder.is_dir():
        raise FileNotFoundError(f"{what}{folder}: no such folder")
    check_model_folder(folder, what=what)
    for name in ("config.json", "model.safetensors"):
        if not (folder / name).is_file():
            raise ValueError(f"{what}{folder} is not a BERT folder: {name} is missing")
    if not (folder / "tokenizer.json").is_file() and not (folder / "vocab.txt").is_file():
        raise ValueError(f"{what}{folder} is not a BERT folder: tokenizer.json or vocab.txt is missing")
    return folder


def load_finetune_tokenizer(directory: str | Path) -> Any:
    """The folder's WordPiece tokenizer with truncation off (the pipeline truncates to ``max_len``)."""
    tokenizer = load_bert_tokenizer(check_bert_folder(directory))
    tokenizer.no_truncation()
    return tokenizer


def _special_id(tokenizer: Any, token: str) -> int:
    index = tokenizer.token_to_id(token)
    if index is None:
        raise ValueError(f"the BERT tokenizer has no {token} token")
    return int(index)


def bert_model_options(directory: str | Path, tokenizer: Any, overrides: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
    """The ``"bert"`` model options of a folder: its architecture, its special-token ids, then ``overrides``."""
    folder = check_bert_folder(directory)
    arch = BertConfig.from_file(folder / "config.json")
    options: dict[str, Any] = dataclasses.asdict(arch)
    options.update(cls_token_id=_special_id(tokenizer, "[CLS]"), sep_token_id=_special_id(tokenizer, "[SEP]"))
    options.update(overrides or {})
    return options


def pretrained_initializer(directory: str | Path) -> Callable[[nn.Module], None]:
    """A function that copies the folder's encoder weights into a built ``BertClassifier``."""
    folder = check_bert_folder(directory)

    def load(model: nn.Module) -> None:
        encoder = BertModel.from_pretrained(folder)
        target = getattr(model, "bert", None)
        if not isinstance(target, BertModel):
            raise TypeError(f"the weights of {folder} need a BertClassifier, got {type(model).__name__}")
        target.load_state_dict(encoder.state_dict())

    return load


def finetune_bert(
    train: Sequence[Example], val: Sequence[Example], test: Sequence[Example], *, init_from: str | Path,
    train_config: TrainConfig, max_len: int = FINETUNE_MAX_LEN, model_options: dict[str, Any] | None = None,
    **fit_kwargs: Any,
) -> FitResult:
    """Fine-tune the BERT folder ``init_from`` on ``train`` and measure it on ``test``.

    ``fit_kwargs`` go to :func:`attnkit.train.tasks.classify.pipeline.fit_classifier`
    (``out_dir``, ``run_id``, ``quiet``, ``log``, ...).
    """
    tokenizer = fit_kwargs.pop("tokenizer", None) or load_finetune_tokenizer(init_from)
    options = bert_model_options(init_from, tokenizer, model_options)
    data = DataSettings(tokenizer="wordpiece", vocab_size=int(options["vocab_size"]), max_len=max_len)
    extra = dict(fit_kwargs.pop("extra", None) or {}, init_from=str(Path(init_from).resolve()))
    return fit_classifier(train, val, test, model_name="bert", model_options=options, train_config=train_config,
                          data=data, tokenizer=tokenizer, init_model=pretrained_initializer(init_from),
                          extra=extra, **fit_kwargs)
