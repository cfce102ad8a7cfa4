"""The generated shapes captioning set and the readers of real caption sets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.data.captions import (
    CaptionFormatError,
    CaptionVocab,
    encode_captions,
    images_to_tensor,
    load_caption_set,
    load_image,
    read_captions,
    tokenize_caption,
)
from attnkit.data.shapes import COLOURS, SHAPES, draw_shape, generate_scenes, shapes_vocab

# --- generated scenes ----------------------------------------------------------------------------


def test_same_seed_same_scenes_other_seed_other_scenes() -> None:
    a, b, c = (generate_scenes(20, seed=s) for s in (3, 3, 4))
    assert all(np.array_equal(x.image, y.image) and x.caption == y.caption and x.objects == y.objects
               for x, y in zip(a, b, strict=True))
    assert [x.caption for x in a] != [x.caption for x in c]
    assert a[0].image.shape == (48, 48, 3) and a[0].image.dtype == np.uint8


@pytest.mark.parametrize("size", [32, 48])
def test_object_pixels_lie_in_their_boxes_and_boxes_are_tight(size: int) -> None:
    for scene in generate_scenes(40, seed=1, size=size, noise=0.0):
        for colour in {o.colour for o in scene.objects}:
            painted = np.all(scene.image == np.array(COLOURS[colour], dtype=np.uint8), axis=-1)  # (S, S)
            covered = np.zeros_like(painted)
            for obj in (o for o in scene.objects if o.colour == colour):
                x0, y0, x1, y1 = obj.box
                covered[y0:y1, x0:x1] = True
                inside = painted[y0:y1, x0:x1]
                # tight: the object's pixels touch all four sides of its box
                assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()
            assert not (painted & ~covered).any(), f"{colour} pixels outside the boxes in {scene.caption!r}"


def test_draw_shape_box_and_errors() -> None:
    mask = draw_shape(32, "square", 16.0, 16.0, 10)
    ys, xs = np.nonzero(mask)
    assert 11 <= xs.min() and xs.max() <= 20 and 11 <= ys.min() and ys.max() <= 20
    tri = draw_shape(32, "triangle", 16.0, 16.0, 12)
    assert tri[:16].sum() < tri[16:].sum()  # the apex is at the top
    with pytest.raises(ValueError, match=r"shape must be one of \['circle', 'square', 'triangle'\]"):
        draw_shape(32, "hexagon", 16.0, 16.0, 10)


def _centre(box: tuple[int, int, int, int]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


def test_captions_describe_the_picture() -> None:
    size = 48
    for scene in generate_scenes(60, seed=2, size=size):
        words = tokenize_caption(scene.caption)
        assert words == scene.caption.split()
        for index, box in scene.word_boxes.items():
            obj = next(o for o in scene.objects if o.box == box)
            assert words[index] in (obj.colour, obj.shape)
        if len(scene.objects) == 2:
            (ax, ay), (bx, by) = (_centre(o.box) for o in scene.objects)
            if "left" in words:
                assert ax < bx and abs(ax - bx) > abs(ay - by)
            else:
                assert "above" in words and ay < by and abs(ay - by) > abs(ax - bx)
            assert scene.objects[0] != scene.objects[1]
        else:
            x, y = _centre(scene.objects[0].box)
            side = words[-1]
            third, mid = size / 3 + 1, (0.4 * size - 1, 0.6 * size + 1)  # 1 px for rounding
            expected = {"left": x <= third and mid[0] <= y <= mid[1],
                        "right": x >= size - third and mid[0] <= y <= mid[1],
                        "top": y <= third and mid[0] <= x <= mid[1],
                        "bottom": y >= size - third and mid[0] <= x <= mid[1]}
            assert expected[side], (scene.caption, (x, y))


def test_vocab_covers_every_caption() -> None:
    vocab = shapes_vocab()
    captions = [s.caption for s in generate_scenes(200, seed=5)]
    assert all(vocab.unk_id not in vocab.encode(c) for c in captions)
    assert set(SHAPES) | set(COLOURS) <= set(vocab.words)
    assert {len(s.split()) for s in captions} == {6, 7, 10}  # every layout appears


@pytest.mark.parametrize(("kwargs", "match"), [({"n": 0}, "n must be"), ({"n": 2, "size": 16}, "size must be"),
                                               ({"n": 2, "two_object_share": 2.0}, "two_object_share")])
def test_generator_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        generate_scenes(**kwargs)  # type: ignore[arg-type]


# --- vocabulary and batches ----------------------------------------------------------------------


def test_vocab_round_trip_and_encoding() -> None:
    vocab = CaptionVocab.build(["A dog runs.", "a dog, sleeping", "cats"], min_frequency=2)
    assert vocab.words[:6] == ["<pad>", "<bos>", "<eos>", "<unk>", "a", "dog"]
    assert vocab.encode("a cat") == [1, 4, 3, 2]
    assert vocab.decode([1, 4, 5, 2, 4]) == ["a", "dog"]
    assert CaptionVocab.from_dict(json.loads(json.dumps(vocab.to_dict()))).words == vocab.words
    ids, lengths = encode_captions(["a dog", "a"], vocab)
    assert ids.tolist() == [[1, 4, 5, 2], [1, 4, 2, 0]] and lengths.tolist() == [4, 3]
    ids, lengths = encode_captions(["a dog dog dog"], vocab, max_len=4)
    assert ids.tolist() == [[1, 4, 5, 2]]
    with pytest.raises(ValueError, match="must start with"):
        CaptionVocab(["a", "b"])


def test_images_to_tensor_layout_and_errors() -> None:
    arr = np.zeros((2, 5, 7, 3), dtype=np.uint8)
    arr[1, 2, 3] = (255, 0, 51)
    x = images_to_tensor(arr)
    assert x.shape == (2, 3, 5, 7)
    assert torch.allclose(x[1, :, 2, 3], torch.tensor([1.0, 0.0, 0.2]))
    with pytest.raises(ValueError, match=r"\(N, H, W, 3\)"):
        images_to_tensor(np.zeros((2, 5, 7), dtype=np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        images_to_tensor(np.zeros((1, 5, 7, 3)))


# --- real caption sets ---------------------------------------------------------------------------


def _png(path: Path, colour: tuple[int, int, int]) -> None:
    from PIL import Image

    Image.fromarray(np.full((20, 30, 3), colour, dtype=np.uint8)).save(path)


def test_flickr_and_coco_caption_files(tmp_path: Path) -> None:
    flickr = tmp_path / "captions.txt"
    flickr.write_text("a.png#0\tA red thing.\na.png#1\tred\n\nb.png#0\ta green thing\n", encoding="utf-8")
    assert read_captions(flickr) == {"a.png": ["A red thing.", "red"], "b.png": ["a green thing"]}
    coco = tmp_path / "captions.json"
    coco.write_text(json.dumps({"images": [{"id": 7, "file_name": "a.png"}, {"id": 8, "file_name": "b.png"}],
                                "annotations": [{"image_id": 7, "caption": " a red thing "},
                                                {"image_id": 8, "caption": "green"}]}), encoding="utf-8")
    assert read_captions(coco) == {"a.png": ["a red thing"], "b.png": ["green"]}


def test_caption_file_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("a.png#0\tfine\nno tab here\n", encoding="utf-8")
    with pytest.raises(CaptionFormatError, match=r"bad\.txt, line 2: expected 'image\.jpg#0<TAB>caption'"):
        read_captions(bad)
    coco = tmp_path / "bad.json"
    coco.write_text(json.dumps({"images": [{"id": 1, "file_name": "a.png"}],
                                "annotations": [{"image_id": 2, "caption": "x"}]}), encoding="utf-8")
    with pytest.raises(CaptionFormatError, match=r"bad\.json: annotations\[0\] names image_id 2"):
        read_captions(coco)
    coco.write_text("{not json", encoding="utf-8")
    with pytest.raises(CaptionFormatError, match="not valid JSON"):
        read_captions(coco)
    with pytest.raises(CaptionFormatError, match="does not exist"):
        read_captions(tmp_path / "missing.txt")


def test_load_caption_set_reads_and_resizes(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    _png(folder / "a.png", (255, 0, 0))
    _png(folder / "b.png", (0, 255, 0))
    (tmp_path / "c.txt").write_text("b.png#0\tgreen\na.png#0\tred\na.png#1\tred again\n", encoding="utf-8")
    items = load_caption_set(folder, tmp_path / "c.txt", size=16)
    assert [i.path.name for i in items] == ["a.png", "b.png"]
    assert items[0].image.shape == (16, 16, 3) and tuple(items[0].image[8, 8]) == (255, 0, 0)
    assert items[0].captions == ("red", "red again")
    (tmp_path / "c.txt").write_text("zzz.png#0\tnothing\n", encoding="utf-8")
    with pytest.raises(CaptionFormatError, match="'zzz.png'"):
        load_caption_set(folder, tmp_path / "c.txt")
    (folder / "broken.png").write_bytes(b"not an image")
    with pytest.raises(CaptionFormatError, match="broken.png is not a readable image"):
        load_image(folder / "broken.png", 16)
