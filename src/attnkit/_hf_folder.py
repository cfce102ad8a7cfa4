"""What attnkit checks in a Hugging Face model folder before anything else reads it.

A model folder is data, never code. Three things are refused, each by one
line naming the file:

- **custom code**: an ``auto_map`` entry in ``config.json`` (or in the
  tokenizer's or processor's config) points ``transformers`` at Python files
  of the folder itself; attnkit never imports them, whatever stdin says;
- **pickled weights**: ``pytorch_model.bin`` and the like are pickles, which
  can run code when loaded; attnkit reads only ``*.safetensors``;
- **damaged safetensors**: a header that lies about its size or its tensors
  is named here, before a loader fails deeper without the path.

This module sits below everything else (it imports nothing from attnkit), so
the BERT loader, ``--init-from`` and :mod:`attnkit.inspect` share it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["check_model_folder", "check_safetensors_file", "CODE_CONFIGS", "PICKLED_WEIGHTS"]

# The JSON files transformers reads an ``auto_map`` (custom classes in the folder's own .py files) from.
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "preprocessor_config.json", "processor_config.json",
                "image_processor_config.json", "feature_extractor_config.json")
# Weight files that are Python pickles (torch.save, or pickled checkpoints of other tools).
PICKLED_WEIGHTS = ("pytorch_model*.bin", "*.pt", "*.pth", "*.ckpt")


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


def check_safetensors_file(path: str | os.PathLike[str]) -> None:
    """Raise a ValueError naming ``path`` when its safetensors header cannot be read (damaged or lying)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except Exception as err:  # safetensors raises its own SafetensorError (and OSError for unreadable files)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(f"{path} is not a readable safetensors file (damaged, truncated or a lying "
                         f"header): {reason}") from None


def check_model_folder(directory: str | os.PathLike[str], *, what: str = "") -> Path:
    """``directory`` as a Path, once it is known to hold no custom code and no pickled weights.

    Raises ValueError naming the file: a config with ``auto_map`` (the folder's
    own Python code, never run), a pickled weights file with no
    ``model.safetensors`` beside it, or a ``*.safetensors`` file whose header
    cannot be read. ``what`` (a flag such as ``"--init-from "``) starts the message.
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
    for path in weights:
        check_safetensors_file(path)
    return folder
