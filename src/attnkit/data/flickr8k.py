"""Flickr8k (Hodosh, Young & Hockenmaier, 2013): 8,091 photographs with 5 human captions each and the
standard 6,000 / 1,000 / 1,000 split.

A Flickr8k folder holds ``images/`` (the photographs), a caption file and the
split lists ``Flickr_8k.trainImages.txt``, ``Flickr_8k.devImages.txt`` and
``Flickr_8k.testImages.txt`` (one image name a line). Two caption layouts are
read, told apart by their first line:

* ``captions.txt``: a CSV header ``image,caption``, then ``name.jpg,caption``
  rows (the caption may hold commas);
* ``Flickr8k.token.txt``, the original: ``name.jpg#0<TAB>caption`` lines.

Captions are normalised by :func:`~attnkit.data.captions.tokenize_caption`
(lower case, punctuation dropped). Every problem raises
:class:`~attnkit.data.captions.CaptionFormatError` naming the file: a caption
file in neither layout, a split image without captions or without an image
file, an image that is unreadable or not RGB.

Shape legend: S image side.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnkit.data.captions import (
    CaptionFormatError,
    read_caption_text,
    read_flickr_captions,
    tokenize_caption,
)

__all__ = ["FLICKR8K_SPLITS", "Flickr8k", "read_flickr8k_captions", "read_split_list", "load_flickr8k",
           "read_rgb_image"]

FLICKR8K_SPLITS = {"train": "Flickr_8k.trainImages.txt", "dev": "Flickr_8k.devImages.txt",
                   "test": "Flickr_8k.testImages.txt"}
"""Split name -> the file listing its images."""
_CAPTION_FILES = ("captions.txt", "Flickr8k.token.txt")


def read_flickr8k_captions(path: str | Path) -> dict[str, list[str]]:
    """``{image name: [captions]}`` from a ``captions.txt`` (CSV) or ``Flickr8k.token.txt`` (TAB) file.

    Captions keep their text; normalise them with
    :func:`~attnkit.data.captions.tokenize_caption`.
    """
    path = Path(path)
    text = read_caption_text(path)
    lines = text.split("\n")
    first = lines[0].strip().lower() if lines else ""
    if first.replace(" ", "") == "image,caption":
        return _read_csv_layout(path, lines[1:])
    if "\t" in first and "#" in first.partition("\t")[0]:
        return read_flickr_captions(path)
    raise CaptionFormatError(
        f"{path} is in neither Flickr8k caption layout: expected a first line 'image,caption' (captions.txt) "
        f"or 'name.jpg#0<TAB>caption' (Flickr8k.token.txt), got {lines[0][:80]!r}")


def _read_csv_layout(path: Path, rows: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for number, line in enumerate(rows, start=2):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        name, comma, caption = line.partition(",")
        caption = caption.strip().strip('"').strip()
        if not comma or not name.strip() or not caption:
            raise CaptionFormatError(f"{path}, line {number}: expected 'name.jpg,caption', got {line[:80]!r}")
        out.setdefault(name.strip(), []).append(caption)
    if not out:
        raise CaptionFormatError(f"{path} holds no captions")
    return out


def read_split_list(path: str | Path) -> list[str]:
    """The image names of a split file (one a line, blank lines skipped), in file order."""
    path = Path(path)
    if not path.is_file():
        raise CaptionFormatError(f"split list {path} does not exist")
    names = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
    if not names:
        raise CaptionFormatError(f"split list {path} names no images")
    return names


def read_rgb_image(path: str | Path, size: int) -> np.ndarray:
    """An RGB image file as uint8 pixels, resized (bilinear) to ``size × size``.

    Any other mode (greyscale, CMYK, RGBA ...) or an unreadable file is a
    CaptionFormatError naming the file.

    Shape:
        returns ``(size, size, 3)`` uint8.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as img:
            if img.mode != "RGB":
                raise CaptionFormatError(f"{path} is a {img.mode} image; Flickr8k images must be RGB")
            pixels = img.resize((size, size), Image.Resampling.BILINEAR) if img.size != (size, size) else img
            return np.asarray(pixels, dtype=np.uint8).copy()
    except (UnidentifiedImageError, OSError) as err:
        raise CaptionFormatError(f"{path} is not a readable image: {err}") from None


@dataclass(frozen=True)
class Flickr8k:
    """A Flickr8k folder, read: the image folder, and per split the image names with their captions."""

    images_dir: Path
    captions_file: Path
    splits: dict[str, list[tuple[str, list[str]]]]

    def names(self, split: str) -> list[str]:
        """The image names of ``split`` (``train``, ``dev`` or ``test``), in the split file's order."""
        return [name for name, _ in self.splits[split]]

    def references(self, split: str) -> list[list[str]]:
        """The captions of each image of ``split``, normalised (lower-case words joined by spaces)."""
        return [[" ".join(tokenize_caption(c)) for c in caps] for _, caps in self.splits[split]]


def load_flickr8k(root: str | Path, *, captions: str | Path | None = None) -> Flickr8k:
    """Read a Flickr8k folder: ``captions`` (default ``root/captions.txt`` or ``root/Flickr8k.token.txt``),
    the three split lists and ``root/images/`` (or ``root/Flicker8k_Dataset/``).

    Every split image must have captions and an image file; the error names the first that does not.
    """
    root = Path(root)
    if not root.is_dir():
        raise CaptionFormatError(f"Flickr8k folder {root} does not exist")
    if captions is None:
        found = [root / n for n in _CAPTION_FILES if (root / n).is_file()]
        if not found:
            raise CaptionFormatError(f"{root} holds no caption file (expected one of {list(_CAPTION_FILES)})")
        captions = found[0]
    table = read_flickr8k_captions(captions)
    images = next((d for d in (root / "images", root / "Flicker8k_Dataset") if d.is_dir()), root / "images")
    splits: dict[str, list[tuple[str, list[str]]]] = {}
    for split, filename in FLICKR8K_SPLITS.items():
        names = read_split_list(root / filename)
        lost = [n for n in names if n not in table]
        if lost:
            raise CaptionFormatError(f"{len(lost)} image(s) of {root / filename} have no captions in {captions}, "
                                     f"e.g. {lost[0]!r}")
        missing = [n for n in names if not (images / n).is_file()]
        if missing:
            raise CaptionFormatError(f"{len(missing)} image(s) of {root / filename} are not in {images}, "
                                     f"e.g. {missing[0]!r}")
        splits[split] = [(n, table[n]) for n in names]
    return Flickr8k(images, Path(captions), splits)
