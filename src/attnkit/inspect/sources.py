"""Run a model from local files under a capture: any Hugging Face folder, or a timm model.

:func:`hf_folder_attention` loads a Hugging Face model folder with
``transformers`` (``AutoModel``, local files only, safetensors only, never the
folder's own code: a folder with ``auto_map`` is refused before transformers
sees it, see :mod:`attnkit._hf_folder`) and runs it on texts (through the folder's tokenizer)
or on images (through its image processor, or a plain resize when the folder
has none). :func:`timm_attention` builds a timm model by name without
downloading anything (a registered architecture name only: no ``hf-hub:`` or
``local-dir:`` source), loads a local weights file (safetensors, or a ``.pth``
read with ``weights_only=True``) and runs it on images. Both return the tokens
and the :class:`~attnkit.inspect.Capture` of one forward pass per input.
:func:`model_views` turns those captures into the report views of ``attnkit
visualize``.
"""

from __future__ import annotations

import inspect as _pyinspect
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnkit._hf_folder import check_finite_weights, check_model_folder, check_safetensors_file, hf_model_type
from attnkit.inspect.capture import Capture, capture
from attnkit.viz.views import AttentionView

__all__ = ["hf_folder_attention", "hf_seq2seq_attention", "timm_attention", "load_image", "folder_kind",
           "is_encoder_decoder", "model_views", "write_image_rollout"]


def folder_kind(folder: str | os.PathLike[str]) -> str:
    """``"vision"`` when the folder's config describes an image model, else ``"text"``."""
    path = Path(folder) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable Hugging Face config ({err})") from None
    return "vision" if "image_size" in config or "num_channels" in config else "text"


def is_encoder_decoder(folder: str | os.PathLike[str]) -> bool:
    """Whether the folder's config describes an encoder-decoder (T5, BART, Marian, ...)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(config.get("is_encoder_decoder"))


def load_image(
    path: str | os.PathLike[str], size: int, mean: Any = 0.5, std: Any = 0.5
) -> tuple[np.ndarray, torch.Tensor]:
    """An RGB image file as ``(pixels (H, W, 3) in [0, 1], model input (1, 3, size, size))``.

    Shape:
        returns ``(H, W, 3)`` and ``(1, 3, size, size)``.
    """
    from PIL import Image

    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB")
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: not a readable image ({err})") from None
    pixels = np.asarray(rgb, dtype=np.float32) / 255.0  # (H, W, 3)
    small = np.asarray(rgb.resize((size, size), Image.Resampling.BICUBIC), dtype=np.float32) / 255.0
    norm = (small - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return pixels, torch.from_numpy(norm.transpose(2, 0, 1).copy())[None]  # (1, 3, size, size)


# Every transformers load: never the folder's own code (so never a question on stdin), never the network.
SAFE_LOAD = {"trust_remote_code": False, "local_files_only": True}


def _patch_tokens(n: int, prefix: int) -> list[str]:
    return ["[CLS]" if i == 0 else f"[prefix {i}]" for i in range(prefix)] + [f"patch {i}" for i in range(n - prefix)]


def _run(model: nn.Module, inputs: dict[str, Any]) -> Capture:
    with torch.no_grad(), capture(model) as cap:
        model(**inputs)
    return cap


def hf_folder_attention(folder: str | os.PathLike[str], texts: list[str] | None = None,
                        images: list[str] | None = None, *, max_len: int = 512) -> list[tuple[list[str], Capture, Any]]:
    """Capture a Hugging Face folder's attention on each text or image: ``[(tokens, capture, pixels)]``.

    ``pixels`` is the ``(H, W, 3)`` image for an image input, else None.

    Shape:
        each capture holds ``(1, H, T, T)`` per attention module.
    """
    root = Path(folder)
    if not (root / "config.json").is_file():
        raise ValueError(f"{folder}: expected a Hugging Face model folder holding config.json")
    check_model_folder(root)  # before transformers reads anything: no auto_map, no pickles, sizes that fit
    check_finite_weights(root)
    import transformers

    try:
        model = transformers.AutoModel.from_pretrained(root, **SAFE_LOAD, use_safetensors=True).eval()
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{folder}: transformers cannot load this folder ({str(err).splitlines()[0]})") from None
    out: list[tuple[list[str], Capture, Any]] = []
    if folder_kind(root) == "vision":
        if not images:
            raise ValueError(f"{folder} is an image model: give --image FILE")
        size = int(model.config.image_size)
        patch = int(getattr(model.config, "patch_size", 16))
        for image in images:
            pixels, x = load_image(image, size)
            cap = _run(model, {"pixel_values": x})
            t = next(iter(cap.weights.values())).shape[-1]
            out.append((_patch_tokens(t, t - (size // patch) ** 2), cap, pixels))
        return out
    if not texts:
        raise ValueError(f"{folder} is a text model: give at least one text")
    if getattr(model.config, "is_encoder_decoder", False):
        raise ValueError(f"{folder} is an encoder-decoder: read it with hf_seq2seq_attention (source and target)")
    tokenizer = transformers.AutoTokenizer.from_pretrained(root, **SAFE_LOAD)
    limit = min(max_len, int(getattr(model.config, "max_position_embeddings", max_len) or max_len))
    for text in texts:
        enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=limit)
        cap = _run(model, dict(enc))
        tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        out.append(([str(t) for t in tokens], cap, None))
    return out


def hf_seq2seq_attention(folder: str | os.PathLike[str], texts: list[str], targets: list[str] | None = None,
                         *, max_len: int = 512) -> list[tuple[list[str], list[str], Capture]]:
    """Capture an encoder-decoder folder on each source text: ``[(source tokens, target tokens, capture)]``.

    The decoder reads its start token followed by the target text's tokens
    (``targets[i]`` for ``texts[i]``; only the start token when there is no
    target), so the decoder's queries are labelled with exactly what it read.
    The capture's ``roles`` say which map is encoder self (source x source),
    decoder self (target x target) or cross (target x source).
    """
    if not texts:
        raise ValueError(f"{folder} is an encoder-decoder: give at least one source text")
    targets = list(targets or [])
    if len(targets) > len(texts):
        raise ValueError(f"--target: {len(targets)} targets for {len(texts)} source texts (at most one each)")
    import transformers

    root = Path(folder)
    check_model_folder(root)
    check_finite_weights(root)
    try:
        model = transformers.AutoModel.from_pretrained(root, **SAFE_LOAD, use_safetensors=True).eval()
        tokenizer = transformers.AutoTokenizer.from_pretrained(root, **SAFE_LOAD)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{folder}: transformers cannot load this folder ({str(err).splitlines()[0]})") from None
    if "input_ids" not in _pyinspect.signature(model.forward).parameters:
        raise ValueError(f"{folder}: {type(model).__name__} does not read text (an audio or image encoder); "
                         "capture it in Python with attnkit.inspect.capture")
    start = model.config.decoder_start_token_id
    if start is None:
        raise ValueError(f"{folder}/config.json: decoder_start_token_id is not set")
    out: list[tuple[list[str], list[str], Capture]] = []
    for i, text in enumerate(texts):
        enc = tokenizer(text, return_tensors="pt", truncation=True, max_length=max_len)
        target_ids = [int(start)]
        if i < len(targets):
            target_ids += tokenizer(text_target=targets[i], truncation=True, max_length=max_len - 1)["input_ids"]
        inputs = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                  "decoder_input_ids": torch.tensor([target_ids])}
        cap = _run(model, inputs)
        source = [str(t) for t in tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())]
        target = [str(t) for t in tokenizer.convert_ids_to_tokens(target_ids)]
        out.append((source, target, cap))
    return out


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        check_safetensors_file(path)
        return load_file(str(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several kinds for a file it will not unpickle safely
        raise ValueError(f"{path}: not a weights file torch can read safely ({type(err).__name__})") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path}: expected a mapping of tensor names to tensors")
    return state


def _token_count(name: str, cap: Capture) -> int | None:
    """The length of the token sequence the model's self-attention runs over.

    None for a model whose maps are only windowed (Swin, MaxViT) or over
    channels (XCiT): :meth:`~attnkit.inspect.Capture.image_views` draws those.
    """
    square = [w for n, w in cap.weights.items()
              if cap.roles[n] == "self" and n not in cap.layouts and w.shape[-1] == w.shape[-2]]
    if not square and (cap.layouts or "channel" in cap.roles.values()):
        return None
    if not square:
        kinds = sorted({"windowed (Swin, MaxViT)" if n in cap.layouts else cap.roles[n] for n in cap.weights})
        raise ValueError(f"timm model {name!r}: no self-attention over the image's tokens to draw (its maps are "
                         f"{', '.join(kinds) or 'none'}); capture it in Python, where cap.on_image(name) lays a "
                         "windowed block's maps on the image")
    return int(square[0].shape[-1])


def timm_attention(
    name: str, weights: str | os.PathLike[str], images: list[str]
) -> list[tuple[list[str] | None, Capture, Any]]:
    """Capture timm model ``name`` (with ``weights`` from a local file) on each image.

    Returns ``(tokens, capture, pixels)`` per image; ``tokens`` is None for a
    model without self-attention over the image's tokens (windowed Swin and
    MaxViT, XCiT's channels), whose maps ``capture.image_views()`` lays out.

    Shape:
        each capture holds ``(1, H, T, T)`` per attention block (per window
        ``(windows, H, N, N)``, per head ``(1, H, C/H, C/H)`` for channels).
    """
    if ":" in name:  # timm would fetch hf-hub:NAME, or read local-dir:FOLDER's config
        raise ValueError(f"--timm {name!r}: give a registered timm architecture name (see timm.list_models()); "
                         "attnkit builds it without a hub or folder source and loads only the weights file given")
    import timm

    path = Path(weights)
    if not path.is_file():
        raise ValueError(f"the weights file {str(path)!r} does not exist (give the timm model's .safetensors or .pth)")
    if not images:
        raise ValueError("a timm model needs at least one --image FILE")
    state = _read_weights(path)
    head = state.get("head.weight", state.get("head.fc.weight"))  # Swin, MaxViT: head.fc
    try:
        model = timm.create_model(name, pretrained=False,
                                  **({"num_classes": int(head.shape[0])} if head is not None else {}))
        model.load_state_dict(state)
    except RuntimeError as err:
        raise ValueError(f"{path}: the weights do not fit timm model {name!r}: {str(err).splitlines()[0]}") from None
    except Exception as err:  # timm's unknown model name
        raise ValueError(f"timm model {name!r}: {err}") from None
    model.eval()
    cfg = getattr(model, "pretrained_cfg", {}) or {}
    size = int(cfg.get("input_size", (3, 224, 224))[-1])
    out: list[tuple[list[str] | None, Capture, Any]] = []
    for image in images:
        pixels, x = load_image(image, size, cfg.get("mean", 0.5), cfg.get("std", 0.5))
        cap = _run(model, {"x": x})
        count = _token_count(name, cap)
        tokens = None if count is None else _patch_tokens(count, int(getattr(model, "num_prefix_tokens", 1)))
        out.append((tokens, cap, pixels))
    return out


def _self_attention(tokens: list[str], cap: Capture) -> np.ndarray:
    """The ``(L, H, T, T)`` self-attention of one input: the calls of the commonest square shape."""
    shapes = Counter(tuple(w.shape) for w in cap.weights.values() if w.shape[-1] == w.shape[-2] == len(tokens))
    if not shapes:
        raise ValueError(f"no self-attention over the {len(tokens)} input tokens was recorded")
    shape = shapes.most_common(1)[0][0]
    return cap.stacked([n for n, w in cap.weights.items() if tuple(w.shape) == shape])[0]


def model_views(source: Path, texts: list[str], images: list[str], timm_name: str | None, max_len: int,
                targets: list[str] | None = None) -> tuple[list[AttentionView], str, list[tuple[Capture, Any]]]:
    """Run ``source`` (a Hugging Face folder, or a weights file with ``timm_name``) on the inputs, as report views.

    Each text or image gives the self-attention over its tokens (the calls of
    the commonest square shape, in call order); a windowed or channel timm model
    its :meth:`~attnkit.inspect.Capture.image_views`. An encoder-decoder folder
    reads each text as the source and ``targets`` (one per text, optional) as
    what the decoder reads, and gives three views per text, one per role
    (:meth:`~attnkit.inspect.Capture.role_maps`). Returns the views, a title,
    and one ``(capture, pixels)`` per input (pixels None but for an image of a
    model with self-attention over its patches).

    Shape:
        each view's layers ``(L, H, Tq, Tk)``.
    """
    if timm_name is None and is_encoder_decoder(source):
        if images:
            raise ValueError(f"{source} is an encoder-decoder over text: --image does not apply")
        pairs = hf_seq2seq_attention(source, texts, targets, max_len=max_len)
        views = [AttentionView(queries, maps, None, source=keys, name=f"text {i + 1} · {role}")
                 for i, (src, tgt, cap) in enumerate(pairs) for role, queries, keys, maps in cap.role_maps(src, tgt)]
        return views, f"{hf_model_type(source)} {source.name}", [(cap, None) for _, _, cap in pairs]
    if targets:
        raise ValueError("--target: only an encoder-decoder folder (T5, BART, Marian...) reads a target text")
    results: Sequence[tuple[list[str] | None, Capture, Any]]
    if timm_name is not None:
        if not source.is_file():
            raise ValueError(f"--timm: SOURCE must be the weights file of {timm_name!r}, got {source}")
        results, title = timm_attention(timm_name, source, images), f"timm {timm_name}"
        if all(tokens is None for tokens, _, _ in results):  # windowed or channel maps only
            views = [AttentionView(tokens, maps, None, name=f"image {i + 1} · {name}")
                     for i, (_, cap, _) in enumerate(results) for name, tokens, maps in cap.image_views()]
            return views, title, [(cap, None) for _, cap, _ in results]
    else:
        results = hf_folder_attention(source, texts or None, images or None, max_len=max_len)
        title = f"{hf_model_type(source)} {source.name}"
    views = [AttentionView(tokens or [], _self_attention(tokens or [], cap), None) for tokens, cap, _ in results]
    return views, title, [(cap, pixels) for _, cap, pixels in results]


def write_image_rollout(captured: tuple[Capture, Any], tokens: list[str], out: Path) -> Path:
    """The class token's rollout over the image ``pixels`` of ``captured = (capture, pixels)``, as a figure at
    ``out``; ``tokens`` are the capture's (those not named ``patch ...`` lead the patches).

    Shape:
        pixels ``(H, W, 3)``; the capture's self-attention ``(1, H, T, T)`` with ``T = len(tokens)``.
    """
    cap, pixels = captured
    prefix = sum(1 for t in tokens if not t.startswith("patch "))
    names = [n for n, w in cap.weights.items() if w.shape[-1] == len(tokens)]
    cap.image_rollout(pixels, prefix_tokens=prefix, names=names, path=out)
    return out
