"""Caption sets: a word vocabulary, caption encoding, and readers for real image–caption data.

Two caption file layouts are read, each paired with a folder of images:

* **Flickr8k style** text, one caption a line: ``image.jpg#0<TAB>a dog runs``
  (the ``#k`` caption number is optional).
* **COCO style** JSON: ``{"images": [{"id": 1, "file_name": "a.jpg"}, ...],
  "annotations": [{"image_id": 1, "caption": "a dog runs"}, ...]}``.

Images are read with Pillow, converted to RGB and resized to a square
``size × size`` (the captioner works on one fixed grid of regions). A problem
in a file raises :class:`CaptionFormatError` (a ``ValueError``) naming the file
and, for text files, the line.

A caption becomes ids ``<bos> w_1 ... w_n <eos>`` padded with ``<pad>``; the
lengths count ``<bos>`` and ``<eos>``.

Shape legend: N images, T caption length (with ``<bos>``/``<eos>``), H/W image
height/width.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "CaptionFormatError",
    "CaptionVocab",
    "CaptionedImage",
    "tokenize_caption",
    "encode_captions",
    "images_to_tensor",
    "load_image",
    "read_flickr_captions",
    "read_coco_captions",
    "read_captions",
    "load_caption_set",
]

PAD = "<pad>"
"""Padding word (id 0)."""
BOS = "<bos>"
"""Start-of-caption word, fed to the decoder first."""
EOS = "<eos>"
"""End-of-caption word: decoding stops after it."""
UNK = "<unk>"
"""Stands for words outside the vocabulary."""
_SPECIALS = (PAD, BOS, EOS, UNK)
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


class CaptionFormatError(ValueError):
    """A caption file or image folder could not be read; the message names the file (and line)."""


def tokenize_caption(caption: str) -> list[str]:
    """Lower-case words of a caption; punctuation is dropped (``"A dog, running."`` -> 3 words)."""
    if not isinstance(caption, str):
        raise TypeError(f"caption must be a str, got {type(caption).__name__}")
    return _WORD.findall(caption.lower())


class CaptionVocab:
    """Words <-> ids, with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.

    Build one from training captions with :meth:`build`; store it with
    :meth:`to_dict` (a JSON-ready dict) and restore it with :meth:`from_dict`.
    """

    def __init__(self, words: Sequence[str]) -> None:
        words = list(words)
        if tuple(words[: len(_SPECIALS)]) != _SPECIALS:
            raise ValueError(f"words must start with {list(_SPECIALS)}, got {words[:4]}")
        if len(set(words)) != len(words):
            dupes = sorted(w for w, n in Counter(words).items() if n > 1)
            raise ValueError(f"words must be unique, got duplicates {dupes[:5]}")
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}

    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    @classmethod
    def build(cls, captions: Iterable[str], *, min_frequency: int = 1) -> CaptionVocab:
        """The words seen at least ``min_frequency`` times, most frequent first (ties alphabetical)."""
        if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
            raise ValueError(f"min_frequency must be a positive int, got {min_frequency!r}")
        counts = Counter(w for c in captions for w in tokenize_caption(c))
        kept = sorted((w for w, n in counts.items() if n >= min_frequency and w not in _SPECIALS),
                      key=lambda w: (-counts[w], w))
        return cls([*_SPECIALS, *kept])

    def __len__(self) -> int:
        return len(self.words)

    def encode(self, caption: str) -> list[int]:
        """``<bos>`` + word ids (``<unk>`` for unseen words) + ``<eos>``."""
        ids = [self.index.get(w, self.unk_id) for w in tokenize_caption(caption)]
        return [self.bos_id, *ids, self.eos_id]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """The words of ``ids``, stopping at ``<eos>`` and skipping ``<bos>``/``<pad>``."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i in (self.bos_id, self.pad_id):
                continue
            if not 0 <= i < len(self.words):
                raise ValueError(f"id {i} is outside the vocabulary of {len(self.words)} words")
            out.append(self.words[i])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"words": list(self.words)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaptionVocab:
        if not isinstance(data, Mapping) or not isinstance(data.get("words"), list):
            raise ValueError("a caption vocabulary must be a dict with a 'words' list")
        return cls(data["words"])


def encode_captions(captions: Sequence[str], vocab: CaptionVocab, *,
                    max_len: int | None = None) -> tuple[Tensor, Tensor]:
    """Pad encoded captions into one batch.

    ``max_len`` (counting ``<bos>`` and ``<eos>``) truncates longer captions,
    keeping their ``<eos>``.

    Shape:
        returns ids ``(N, T)`` int64 and lengths ``(N,)`` int64.
    """
    if max_len is not None and (isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2):
        raise ValueError(f"max_len must be an int >= 2 (room for <bos> and <eos>), got {max_len!r}")
    if len(captions) == 0:
        raise ValueError("captions must not be empty")
    encoded = [vocab.encode(c) for c in captions]
    if max_len is not None:
        encoded = [e if len(e) <= max_len else [*e[: max_len - 1], vocab.eos_id] for e in encoded]
    t = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), t), vocab.pad_id, dtype=torch.long)  # (N, T)
    for row, e in enumerate(encoded):
        ids[row, : len(e)] = torch.tensor(e, dtype=torch.long)
    lengths = torch.tensor([len(e) for e in encoded], dtype=torch.long)  # (N,)
    return ids, lengths


def images_to_tensor(images: np.ndarray | Sequence[np.ndarray]) -> Tensor:
    """uint8 RGB images ``(N, H, W, 3)`` -> float ``(N, 3, H, W)`` in ``[0, 1]``.

    Shape:
        images ``(N, H, W, 3)`` (or a list of ``(H, W, 3)``); returns ``(N, 3, H, W)``.
    """
    arr = np.stack(list(images)) if not isinstance(images, np.ndarray) else images
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"images must be (N, H, W, 3) RGB, got shape {arr.shape}")
    if arr.dtype != np.uint8:
        raise TypeError(f"images must be uint8 (0..255), got dtype {arr.dtype}")
    return torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2).float() / 255.0  # (N, 3, H, W)


def load_image(path: str | Path | bytes, size: int, *, max_pixels: int | None = None, name: str | None = None
               ) -> np.ndarray:
    """Read an image file (or its bytes) as RGB uint8 (bilinear resize). ``max_pixels`` refuses a larger
    image from its header, before its pixels are decoded; ``name`` names it in messages (default: the path).

    Shape:
        returns ``(size, size, 3)`` uint8.
    """
    import io

    from PIL import Image, UnidentifiedImageError

    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if not isinstance(path, bytes):
        path = Path(path)
        if not path.is_file():
            raise CaptionFormatError(f"image file {path} does not exist")
    what = name or str(path if not isinstance(path, bytes) else "the image")
    try:
        with Image.open(io.BytesIO(path) if isinstance(path, bytes) else path) as img:
            width, height = img.size
            if max_pixels is not None and width * height > max_pixels:
                raise CaptionFormatError(f"{what} has {width}x{height} = {width * height} pixels, more than the "
                                         f"limit of {max_pixels}")
            rgb = img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
            return np.asarray(rgb, dtype=np.uint8).copy()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
        raise CaptionFormatError(f"{what} is not a readable image: {err}") from None


def read_caption_text(path: Path) -> str:
    """A caption file's text (UTF-8, BOM allowed); :class:`CaptionFormatError` naming the file otherwise."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise CaptionFormatError(f"{path} is not UTF-8 text: {err}") from None
    except OSError as err:
        raise CaptionFormatError(f"cannot read caption file {path}: {err}") from None


def read_flickr_captions(path: str | Path) -> dict[str, list[str]]:
    """Flickr8k-style ``image.jpg#k<TAB>caption`` lines -> ``{image name: [captions]}``.

    Blank lines are skipped; a line without a tab or with an empty name or
    caption raises :class:`CaptionFormatError` naming the file and line.
    """
    path = Path(path)
    text = read_caption_text(path)
    out: dict[str, list[str]] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        name, tab, caption = line.partition("\t")
        name = name.split("#", 1)[0].strip()
        if not tab or not name or not caption.strip():
            raise CaptionFormatError(
                f"{path}, line {number}: expected 'image.jpg#0<TAB>caption', got {line[:80]!r}"
            )
        out.setdefault(name, []).append(caption.strip())
    if not out:
        raise CaptionFormatError(f"{path} holds no captions")
    return out


def _field(path: Path, where: str, entry: Any, key: str, kinds: tuple[type, ...]) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get(key), kinds) or isinstance(entry.get(key), bool):
        names = "/".join(k.__name__ for k in kinds)
        raise CaptionFormatError(f"{path}: {where} needs a {names} field {key!r}, got {str(entry)[:80]}")
    return entry[key]


def read_coco_captions(path: str | Path) -> dict[str, list[str]]:
    """COCO-style caption JSON -> ``{file name: [captions]}`` (images without captions dropped)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CaptionFormatError(f"{path} is not valid JSON: {err}") from None
    except OSError as err:
        raise CaptionFormatError(f"cannot read caption file {path}: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("annotations"), list):
        raise CaptionFormatError(f"{path}: expected a JSON object with 'images' and 'annotations' lists")
    names: dict[Any, str] = {}
    for i, entry in enumerate(data["images"]):
        names[_field(path, f"images[{i}]", entry, "id", (int, str))] = \
            _field(path, f"images[{i}]", entry, "file_name", (str,))
    out: dict[str, list[str]] = {}
    for i, entry in enumerate(data["annotations"]):
        image_id = _field(path, f"annotations[{i}]", entry, "image_id", (int, str))
        caption = _field(path, f"annotations[{i}]", entry, "caption", (str,))
        if image_id not in names:
            raise CaptionFormatError(f"{path}: annotations[{i}] names image_id {image_id!r}, "
                                     "which is not in 'images'")
        out.setdefault(names[image_id], []).append(caption.strip())
    if not out:
        raise CaptionFormatError(f"{path} holds no captions")
    return out


def read_captions(path: str | Path) -> dict[str, list[str]]:
    """Read a caption file by its kind: ``.json`` is COCO style, anything else Flickr8k style."""
    path = Path(path)
    if not path.is_file():
        raise CaptionFormatError(f"caption file {path} does not exist")
    return read_coco_captions(path) if path.suffix.lower() == ".json" else read_flickr_captions(path)


@dataclass(frozen=True)
class CaptionedImage:
    """One image of a caption set: its file, its pixels and its captions.

    Shape:
        pixels ``(size, size, 3)`` uint8.
    """

    path: Path
    image: np.ndarray
    captions: tuple[str, ...]


def load_caption_set(images_dir: str | Path, captions_path: str | Path, *, size: int = 48,
                     limit: int | None = None, names: Sequence[str] | None = None) -> list[CaptionedImage]:
    """Pair a folder of images with a caption file (sorted by image name).

    Every image the caption file names must exist in ``images_dir``; the error
    names the first missing one. ``limit`` keeps only the first images;
    ``names`` reads only those images of the file, in that order.
    """
    folder = Path(images_dir)
    if not folder.is_dir():
        raise CaptionFormatError(f"image folder {folder} does not exist")
    table = read_captions(captions_path)
    if names is not None and (unknown := [n for n in names if n not in table]):
        raise CaptionFormatError(f"{len(unknown)} image(s) are not in {captions_path}, e.g. {unknown[0]!r}")
    names = list(names) if names is not None else sorted(table)[: limit if limit is not None else None]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise CaptionFormatError(
            f"{len(missing)} image(s) named in {captions_path} are not in {folder}, e.g. {missing[0]!r}"
        )
    return [CaptionedImage(folder / n, load_image(folder / n, size), tuple(table[n])) for n in names]
