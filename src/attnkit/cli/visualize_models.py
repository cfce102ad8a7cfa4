"""``attnkit visualize`` for models attnkit did not build: any Hugging Face folder, a timm model.

The model runs as its library built it (its own attention kernels) under
:func:`attnkit.inspect.capture`; each text or image gives its tokens and
their ``(L, H, T, T)`` self-attention, which :mod:`attnkit.cli.visualize`
shows. For an image and a figure output
(``.png``/``.svg``/``.pdf``) the figure is the attention rollout of the class
token laid over the image.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["is_hf_folder", "is_attnkit_bert", "model_views", "write_image_rollout"]


def is_hf_folder(folder: Path) -> bool:
    """A folder with a Hugging Face ``config.json`` (one that names its ``model_type``)."""
    path = folder / "config.json"
    if not folder.is_dir() or not path.is_file():
        return False
    try:
        return "model_type" in json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def is_attnkit_bert(folder: Path) -> bool:
    """A BERT folder that attnkit's own ``BertModel`` reads (the long-standing path)."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return config.get("model_type") == "bert" and (folder / "model.safetensors").is_file()


def _self_attention(tokens: list[str], cap: Any) -> Any:
    """The ``(L, H, T, T)`` self-attention of one input: the calls of the commonest square shape."""
    import numpy as np

    shapes = Counter(tuple(w.shape) for w in cap.weights.values() if w.shape[-1] == w.shape[-2] == len(tokens))
    if not shapes:
        raise ValueError(f"no self-attention over the {len(tokens)} input tokens was recorded")
    shape = shapes.most_common(1)[0][0]
    names = [n for n, w in cap.weights.items() if tuple(w.shape) == shape]
    return np.asarray(cap.stacked(names)[0])  # (L, H, T, T)


def model_views(source: Path, texts: list[str], images: list[str], timm_name: str | None,
                max_len: int) -> tuple[list[tuple[list[str], Any]], str, list[Any]]:
    """Run ``source`` (a Hugging Face folder, or a weights file with ``timm_name``) on the inputs.

    Returns one ``(tokens, self-attention (L, H, T, T))`` per input, a title, and one
    ``(capture, pixels)`` per input.
    """
    from attnkit.inspect.sources import hf_folder_attention, timm_attention

    if timm_name is not None:
        if not source.is_file():
            raise ValueError(f"--timm: SOURCE must be the weights file of {timm_name!r}, got {source}")
        results = timm_attention(timm_name, source, images)
        title = f"timm {timm_name}"
    else:
        results = hf_folder_attention(source, texts or None, images or None, max_len=max_len)
        title = f"{json.loads((source / 'config.json').read_text(encoding='utf-8'))['model_type']} {source.name}"
    views = [(tokens, _self_attention(tokens, cap)) for tokens, cap, _ in results]
    return views, title, [(cap, pixels) for _, cap, pixels in results]


def write_image_rollout(captured: Any, tokens: list[str], out: Path) -> Path:
    """The class token's rollout over the first image, as a figure at ``out``."""
    cap, pixels = captured
    prefix = sum(1 for t in tokens if not t.startswith("patch "))
    names = [n for n, w in cap.weights.items() if w.shape[-1] == len(tokens)]
    cap.image_rollout(pixels, prefix_tokens=prefix, names=names, path=out)
    return out
