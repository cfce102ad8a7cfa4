"""What attnkit checks in a Hugging Face model folder before anything else reads it.

A model folder is data, never code. Three things are refused, each by one
line naming the file:

- **custom code**: an ``auto_map`` entry in ``config.json`` (or in the
  tokenizer's or processor's config) points ``transformers`` at Python files
  of the folder itself; attnkit never imports them, whatever stdin says;
- **pickled weights**: ``pytorch_model.bin`` and the like are pickles, which
  can run code when loaded; attnkit reads only ``*.safetensors``;
- **damaged safetensors**: a header that lies about its size or its tensors
  is named here, before a loader fails deeper without the path;
- **sizes that are not sizes**: each size field of ``config.json``
  (:data:`SIZE_FIELDS`: vocabulary, width, layers, feed-forward width, heads,
  positions) must be a positive int, and the parameters they describe
  (:func:`estimated_parameters`) must fit the available memory and be about as
  many as the weights files hold, all before anything is allocated: a
  ``vocab_size`` of 10^8 or 100,000 layers is named, never built.

Weights that hold NaN or infinity are named by file and tensor
(:func:`check_finite_weights`, read one tensor at a time). :func:`hf_model_type`
tells a Hugging Face folder from any other path.

This module sits below everything else (it imports from attnkit only the
leaf modules :mod:`attnkit._finite` and :mod:`attnkit._memory`), so the BERT
loader, ``--init-from`` and :mod:`attnkit.inspect` share it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnkit._finite import non_finite_message, non_finite_names
from attnkit._memory import memory_budget

__all__ = ["check_model_folder", "check_safetensors_file", "check_config_sizes", "check_finite_weights",
           "estimated_parameters", "hf_model_type", "CODE_CONFIGS", "PICKLED_WEIGHTS", "SIZE_FIELDS"]

# The JSON files transformers reads an ``auto_map`` (custom classes in the folder's own .py files) from.
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json",
                "image_processor_config.json", "feature_extractor_config.json")
# Weight files that are Python pickles (torch.save, or pickled checkpoints of other tools).
PICKLED_WEIGHTS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt")
# The size fields of Hugging Face configs, by what they size (each architecture spells them its own way).
SIZE_FIELDS: dict[str, tuple[str, ...]] = {
    "vocabulary": ("vocab_size",),
    "width": ("hidden_size", "d_model", "n_embd", "dim", "embed_dim"),
    "layers": ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
               "num_decoder_layers"),
    "feed-forward": ("intermediate_size", "n_inner", "d_ff", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim",
                     "hidden_dim", "mlp_dim"),
    "heads": ("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
              "decoder_attention_heads", "num_key_value_heads"),
    "positions": ("max_position_embeddings", "n_positions", "n_ctx"),
}
# A config may describe more parameters than its files hold (a head initialised by the loader, a table
# counted twice); past this factor (plus a million values) it describes other weights than the folder's.
PARAMETERS_PER_STORED_VALUE = 2


def hf_model_type(folder: str | os.PathLike[str]) -> str | None:
    """The ``model_type`` named by a Hugging Face folder's ``config.json``; None for any other path."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return str(config["model_type"]) if isinstance(config, dict) and "model_type" in config else None


def _custom_code(path: Path) -> str | None:
    """The ``auto_map`` of a JSON config file, as text (None when it has none or is not JSON)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # the loader that reads the file names what is wrong with it
    if not isinstance(data, dict) or not data.get("auto_map"):
        return None
    auto_map = data["auto_map"]
    targets = sorted({str(v) for v in auto_map.values()}) if isinstance(auto_map, dict) else [str(auto_map)]
    return ", ".join(targets)[:200]


def check_safetensors_file(path: str | os.PathLike[str]) -> int:
    """The number of values the safetensors file ``path`` holds, read from its header alone; a ValueError
    naming ``path`` when that header cannot be read (damaged or lying)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return sum(_product(f.get_slice(name).get_shape()) for name in f.keys())
    except Exception as err:  # safetensors raises its own SafetensorError (and OSError for unreadable files)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"{path} is not a readable safetensors file (damaged, truncated or a lying "
                         f"header): {reason}") from None


def _product(shape: list[int]) -> int:
    out = 1
    for n in shape:
        out *= int(n)
    return out


def check_finite_weights(directory: str | os.PathLike[str], *, what: str = "") -> None:
    """Raise a ValueError naming the file and its tensors when a ``*.safetensors`` file of ``directory``
    holds NaN or infinity in any float dtype (float32, bfloat16, float16...). Tensors are read one at a
    time, so the check needs memory for the largest one only."""
    from safetensors import safe_open

    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            names = [name for name in f.keys() if non_finite_names({name: f.get_tensor(name)})]
        refuse_non_finite_weights(path, names, what=what)


def refuse_non_finite_weights(path: str | os.PathLike[str], names: list[str], *, what: str = "") -> None:
    """Raise a ValueError when the tensors ``names`` of the model folder's weights file ``path`` are not finite."""
    if names:
        raise ValueError(f"{what}{non_finite_message(str(path), names)}: a model with such weights computes "
                         "nothing usable; give a folder with finite weights")


def _size(config: Mapping[str, Any], source: str, prefix: str, names: tuple[str, ...]) -> int:
    """The largest of the size fields ``names`` that ``config`` holds (0 when it holds none); each one it holds
    must be a positive int, or a list of them (one per stage: Swin's ``num_heads``); null is unset."""
    found = 0
    for name in names:
        value = config.get(name)
        if value is None:
            continue
        for item in value if isinstance(value, list) and value else [value]:
            if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
                raise ValueError(f"{source} field {prefix}{name} must be a positive int, got {_short(value)}")
            found = max(found, item)
    return found


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rotary(config: Mapping[str, Any]) -> bool:
    """Whether the config's positions are rotary (``rope_theta``, ``rotary_dim``...): no table of them is held."""
    return any("rope" in str(key) or "rotary" in str(key) for key in config)


def estimated_parameters(config: Mapping[str, Any], source: str = "config.json", prefix: str = "") -> int:
    """About how many parameters a Hugging Face config describes, from its size fields alone: the token and
    position tables (none for rotary positions) plus each layer's attention (4 d^2) and feed-forward
    (2 d x ffn) weights; a nested
    config (``text_config``, ``vision_config``, ``encoder``...) adds its own. A size field that is not a
    positive int raises a ValueError naming ``source`` and the field (by its path)."""
    sizes = {kind: _size(config, source, prefix, names) for kind, names in SIZE_FIELDS.items()}
    width = sizes["width"]
    ffn = sizes["feed-forward"] or 4 * width
    positions = 0 if _rotary(config) else sizes["positions"]
    total = (sizes["vocabulary"] + positions) * width + sizes["layers"] * (4 * width * width + 2 * width * ffn)
    for key, value in config.items():
        if isinstance(value, Mapping) and (key.endswith("_config") or key in ("encoder", "decoder")):
            total += estimated_parameters(value, source, f"{prefix}{key}.")
    return total


def _largest_sizes(config: Mapping[str, Any]) -> str:
    fields = [(v, k) for names in SIZE_FIELDS.values() for k in names
              if isinstance(v := config.get(k), int) and not isinstance(v, bool)]
    return ", ".join(f"{k}={v:,}" for v, k in sorted(fields, reverse=True)[:3])


def check_config_sizes(path: str | os.PathLike[str], stored: int | None = None, *, what: str = "") -> None:
    """Refuse the Hugging Face ``config.json`` at ``path`` before any model is built from it: a size field
    that is not a positive int, a model whose float32 weights exceed the available memory, or (``stored``:
    the number of values its weights files hold) one that describes far more parameters than that."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # the loader that reads the file names what is wrong with it
    if not isinstance(config, dict):
        return
    params = estimated_parameters(config, f"{what}{path}")
    nbytes, budget = 4 * params, memory_budget()
    if budget.bytes is not None and nbytes > budget.bytes:
        raise ValueError(f"{what}{path} describes a model of about {nbytes / 2**30:,.1f} GiB of float32 weights, "
                         f"more than the {budget.bytes / 2**30:,.1f} GiB of memory {budget.source} "
                         f"({_largest_sizes(config)}); nothing was allocated")
    if stored and params > PARAMETERS_PER_STORED_VALUE * stored + 2**20:
        raise ValueError(f"{what}{path} describes a model of about {params:,} parameters "
                         f"({_largest_sizes(config)}), but the folder's weights files hold {stored:,} values: "
                         "the config does not describe these weights; nothing was built")


def check_model_folder(directory: str | os.PathLike[str], *, what: str = "") -> Path:
    """``directory`` as a Path, once it is known to hold no custom code, no pickled weights and a config
    whose sizes are sizes.

    Raises ValueError naming the file: a config with ``auto_map`` (the folder's
    own Python code, never run), a pickled weights file with no
    ``model.safetensors`` beside it, a ``*.safetensors`` file whose header
    cannot be read, or a ``config.json`` whose sizes are not positive ints or
    describe a model that does not fit the memory or the weights files
    (:func:`check_config_sizes`). ``what`` (a flag such as ``"--init-from "``) starts the message.
    """
    folder = Path(directory)
    for name in CODE_CONFIGS:
        targets = _custom_code(folder / name)
        if targets is not None:
            raise ValueError(
                f"{what}{folder / name} has auto_map ({targets}): the folder needs its own Python code, which "
                "attnkit never runs; use a folder of a standard architecture (without auto_map)")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        pickled = sorted(p for pattern in PICKLED_WEIGHTS for p in folder.glob(pattern) if p.is_file())
        if pickled:
            raise ValueError(
                f"{what}{pickled[0]} holds pickled weights, which attnkit never loads (a pickle can run code); "
                f"give the folder a model.safetensors instead (save_pretrained(..., safe_serialization=True) "
                "writes one)")
    stored = sum(check_safetensors_file(path) for path in weights)
    if (folder / "config.json").is_file():
        check_config_sizes(folder / "config.json", stored, what=what)
    return folder
