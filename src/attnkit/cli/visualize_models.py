"""``attnkit visualize`` for models attnkit did not build: any Hugging Face folder, a timm model.

The model runs as its library built it (its own attention kernels) under
:func:`attnkit.inspect.capture`; each text or image gives its tokens and
their ``(L, H, T, T)`` self-attention, which :mod:`attnkit.cli.visualize`
shows. For an image and a figure output
(``.png``/``.svg``/``.pdf``) the figure is the attention rollout of the class
token laid over the image. A windowed timm model (Swin, MaxViT) gives one view
per stage, each patch's attention over the image's patches
(:meth:`~attnkit.inspect.Capture.image_views`), and XCiT its channel x channel
maps; a figure output is then their layers x heads overview.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["is_hf_folder", "is_attnkit_bert", "model_views", "write_image_rollout"]


ViewRow = tuple[list[str], Any, "list[str] | None", "str | None"]
"""One view for the report: query tokens, maps ``(L, H, Tq, Tk)``, key tokens (None: the query tokens), a name."""

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


def _role_views(source: list[str], target: list[str], cap: Any, label: str) -> list[ViewRow]:
    """An encoder-decoder's three views of one input: encoder self, decoder self, cross.

    Each view stacks the maps of one role, layers in call order; queries and
    keys carry the tokens of their side (source, or what the decoder read).
    """
    import numpy as np

    views: list[ViewRow] = []
    for role, queries, keys in (("encoder self", source, None), ("decoder self", target, None),
                                ("cross", target, source)):
        names = [n for n in cap.weights if cap.roles[n] == role]
        if not names:
            raise ValueError(f"no {role}-attention was recorded; not recorded: {cap.missed or 'nothing'}")
        layers = np.asarray(cap.stacked(names)[0])  # (L, H, Tq, Tk)
        views.append((queries, layers, keys, f"{label} · {role}"))
    return views


def model_views(source: Path, texts: list[str], images: list[str], timm_name: str | None,
                max_len: int, targets: list[str] | None = None) -> tuple[list[ViewRow], str, list[Any]]:
    """Run ``source`` (a Hugging Face folder, or a weights file with ``timm_name``) on the inputs.

    An encoder-decoder folder reads each text as the source and ``targets``
    (one per text, optional) as what the decoder reads; each input then gives
    three views, by role. Returns one :data:`ViewRow` per view, a title, and one
    ``(capture, pixels)`` per input.
    """
    from attnkit.inspect.sources import (
        hf_folder_attention,
        hf_seq2seq_attention,
        is_encoder_decoder,
        timm_attention,
    )

    if timm_name is None and is_encoder_decoder(source):
        if images:
            raise ValueError(f"{source} is an encoder-decoder over text: --image does not apply")
        pairs = hf_seq2seq_attention(source, texts, targets, max_len=max_len)
        model_type = json.loads((source / "config.json").read_text(encoding="utf-8"))["model_type"]
        roles = [v for i, (src, tgt, cap) in enumerate(pairs) for v in _role_views(src, tgt, cap, f"text {i + 1}")]
        return roles, f"{model_type} {source.name}", [(cap, None) for _, _, cap in pairs]
    if targets:
        raise ValueError("--target: only an encoder-decoder folder (T5, BART, Marian...) reads a target text")

    if timm_name is not None:
        if not source.is_file():
            raise ValueError(f"--timm: SOURCE must be the weights file of {timm_name!r}, got {source}")
        timm_results = timm_attention(timm_name, source, images)
        if all(tokens is None for tokens, _, _ in timm_results):  # windowed or channel maps only
            views: list[ViewRow] = [(tokens, maps, None, f"image {i + 1} · {name}")
                                    for i, (_, cap, _) in enumerate(timm_results)
                                    for name, tokens, maps in cap.image_views()]
            return views, f"timm {timm_name}", [(cap, None) for _, cap, _ in timm_results]
        results = [(tokens or [], cap, pixels) for tokens, cap, pixels in timm_results]
        title = f"timm {timm_name}"
    else:
        results = hf_folder_attention(source, texts or None, images or None, max_len=max_len)
        title = f"{json.loads((source / 'config.json').read_text(encoding='utf-8'))['model_type']} {source.name}"
    views = [(tokens, _self_attention(tokens, cap), None, None) for tokens, cap, _ in results]
    return views, title, [(cap, pixels) for _, cap, pixels in results]


def write_image_rollout(captured: Any, tokens: list[str], out: Path) -> Path:
    """The class token's rollout over the first image, as a figure at ``out``."""
    cap, pixels = captured
    prefix = sum(1 for t in tokens if not t.startswith("patch "))
    names = [n for n, w in cap.weights.items() if w.shape[-1] == len(tokens)]
    cap.image_rollout(pixels, prefix_tokens=prefix, names=names, path=out)
    return out
