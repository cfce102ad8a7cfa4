"""A captioning run's data: each image held once, as uint8 pixels, and sized before it is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit._checks import tree_from_flat
from attnkit.data.captions import CaptionFormatError, load_caption_set
from attnkit.train.tasks.caption.caption_data import prepare_caption_data
from attnkit.train.tasks.caption.caption_settings import CaptionSettings


def _caption_set(tmp_path: Path, images: int = 10, per_image: int = 3) -> tuple[Path, Path]:
    from PIL import Image

    folder = tmp_path / "images"
    folder.mkdir()
    lines = []
    for i in range(images):
        Image.fromarray(np.full((20, 20, 3), (25 * i, 0, 255 - 25 * i), dtype=np.uint8)).save(folder / f"{i}.png")
        lines += [f"{i}.png#{k}\ta thing number {i} seen {k} times" for k in range(per_image)]
    (tmp_path / "c.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, tmp_path / "c.txt"


def test_a_caption_set_holds_each_image_once_as_uint8_pixels(tmp_path: Path) -> None:
    folder, captions = _caption_set(tmp_path)
    settings = tree_from_flat(CaptionSettings,
        {"images": str(folder), "captions": str(captions), "image_size": 32}).resolved()
    seen: list[tuple[int, int, int, bool]] = []
    data = prepare_caption_data(settings, check=lambda model, *sizes: seen.append(sizes))
    assert seen == [(9, 27, 1, False)]  # a tenth of the 10 images held out, 3 captions each
    assert data.inputs.dtype == torch.uint8 and data.inputs.shape == (9, 3, 32, 32)
    assert data.ids.shape[0] == 27 and data.image_index.tolist() == [i // 3 for i in range(27)]
    # each caption row reads the pixels of its own image (the blue channel tells the image apart)
    words = data.vocab.decode(data.ids[4].tolist())
    blue = int(data.inputs[data.image_index[4], 2, 16, 16])
    assert words[3] == str((255 - blue) // 25), (words, blue)
    val_images, refs, _ = data.validation
    assert val_images.shape == (1, 3, 32, 32) and val_images.dtype == torch.float32 and len(refs[0]) == 3


def test_the_check_sees_the_sizes_before_any_image_is_read(tmp_path: Path, monkeypatch) -> None:
    from attnkit.data import captions as caption_module

    folder, captions = _caption_set(tmp_path, images=4, per_image=2)
    settings = tree_from_flat(CaptionSettings,
        {"images": str(folder), "captions": str(captions), "image_size": 32}).resolved()
    monkeypatch.setattr(caption_module, "load_image", lambda *a: pytest.fail("an image was read"))

    def refuse(model, images, rows, held_out, features):
        raise MemoryError(f"{images} {rows} {held_out}")

    with pytest.raises(MemoryError, match="3 6 1"):
        prepare_caption_data(settings, check=refuse)


def test_load_caption_set_reads_the_names_asked_for(tmp_path: Path) -> None:
    folder, captions = _caption_set(tmp_path, images=3, per_image=1)
    assert [i.path.name for i in load_caption_set(folder, captions, size=8, names=["2.png", "0.png"])] \
        == ["2.png", "0.png"]
    with pytest.raises(CaptionFormatError, match="1 image.s. are not in .*c.txt, e.g. 'x.png'"):
        load_caption_set(folder, captions, names=["x.png"])
