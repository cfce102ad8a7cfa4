"""A generated captioning set: coloured shapes on a dark background, described in words.

Every scene holds one or two filled shapes (circle, square, triangle) in one
of four colours (red, green, blue, yellow). The caption follows from the
picture alone, so a model can learn it exactly:

* one shape, placed in one side of the image::

      "a green triangle on the left"      (left / right / top / bottom)

* two shapes side by side or one over the other, the left or upper one first::

      "a red circle to the left of a blue square"
      "a yellow square above a green circle"

Each scene also records the box of every object and, for each caption word
that names an object (its colour and its shape), the box of that object, so
the attention a captioner pays while it says "circle" can be checked against
where the circle is. Boxes are tight around the object's pixels: ``(x0, y0,
x1, y1)`` with ``x1``/``y1`` exclusive, in pixels.

The generator uses only NumPy and is deterministic per seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnkit.data.captions import CaptionVocab, tokenize_caption

__all__ = [
    "SHAPES",
    "COLOURS",
    "POSITIONS",
    "Box",
    "ShapeObject",
    "ShapeScene",
    "draw_shape",
    "generate_scenes",
    "shapes_vocab",
]

SHAPES = ("circle", "square", "triangle")
"""The shape words of the generated scenes."""
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 200, 60),
    "blue": (50, 80, 235),
    "yellow": (235, 215, 40),
}
"""Colour words and their RGB values."""
POSITIONS = ("left", "right", "top", "bottom")
"""Where an object may sit; captions say it (\"on the left\")."""
Box = tuple[int, int, int, int]  # x0, y0, x1, y1 (x1, y1 exclusive)


@dataclass(frozen=True)
class ShapeObject:
    """One drawn shape: what it is, its colour and its tight pixel box."""

    shape: str
    colour: str
    box: Box


@dataclass(frozen=True)
class ShapeScene:
    """A generated image ``(S, S, 3)`` uint8, its caption, its objects and the words that name them.

    ``word_boxes`` maps the index of a caption word (in
    :func:`~attnkit.data.captions.tokenize_caption` order) to the box of the
    object that word names.

    Shape:
        image ``(S, S, 3)`` uint8.
    """

    image: np.ndarray
    caption: str
    objects: tuple[ShapeObject, ...]
    word_boxes: dict[int, Box]


def draw_shape(size: int, shape: str, cx: float, cy: float, extent: int) -> np.ndarray:
    """A boolean mask of one filled shape centred at ``(cx, cy)``, ``extent`` pixels wide.

    Shape:
        returns ``(size, size)`` bool.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {list(SHAPES)}, got {shape!r}")
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5  # pixel centres
    half = extent / 2.0
    if shape == "circle":
        return _as_bool((xs - cx) ** 2 + (ys - cy) ** 2 <= half**2)
    if shape == "square":
        half *= 0.9  # a square of the same width looks bigger than a circle
        return _as_bool((np.abs(xs - cx) <= half) & (np.abs(ys - cy) <= half))
    # Upward triangle: apex at the top centre, base at the bottom.
    top, bottom = cy - half, cy + half
    rel = (ys - top) / (bottom - top)  # 0 at the apex, 1 at the base
    return _as_bool((rel >= 0) & (rel <= 1) & (np.abs(xs - cx) <= half * rel))


def _as_bool(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=bool)


def _box(mask: np.ndarray) -> Box:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _centres(rng: np.random.Generator, size: int, layout: str, extent: int) -> list[tuple[float, float]]:
    """Object centres for a layout: a side (one object), or 'horizontal' / 'vertical' (two)."""
    margin = extent / 2 + 1
    low, high = margin, size - margin
    third = size / 3

    def along(lo: float, hi: float) -> float:
        return float(rng.uniform(max(lo, low), min(hi, high)))

    mid = (size / 2 - size / 10, size / 2 + size / 10)
    if layout == "left":
        return [(along(0, third), along(*mid))]
    if layout == "right":
        return [(along(2 * third, size), along(*mid))]
    if layout == "top":
        return [(along(*mid), along(0, third))]
    if layout == "bottom":
        return [(along(*mid), along(2 * third, size))]
    # Two objects: one per half along the main axis, far enough apart not to touch.
    a, b = along(0, size / 2 - extent / 2 - 1), along(size / 2 + extent / 2 + 1, size)
    # The cross-axis offset stays small, so "to the left of" never also looks like "above".
    c = along(size / 4, 3 * size / 4)
    d = float(np.clip(c + rng.uniform(-size / 10, size / 10), low, high))
    return [(a, c), (b, d)] if layout == "horizontal" else [(c, a), (d, b)]


def generate_scenes(n: int, *, seed: int = 0, size: int = 48, noise: float = 8.0,
                    two_object_share: float = 0.6) -> list[ShapeScene]:
    """``n`` random scenes with captions, object boxes and per-word boxes.

    Args:
        n: how many scenes.
        seed: the same seed always gives the same scenes.
        size: image side ``S`` in pixels (>= 32).
        noise: standard deviation of the Gaussian pixel noise (0..255 scale).
        two_object_share: probability of a two-object scene.

    Shape:
        each ``scene.image`` is ``(S, S, 3)`` uint8.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 32:
        raise ValueError(f"size must be an int >= 32, got {size!r}")
    if not 0.0 <= two_object_share <= 1.0:
        raise ValueError(f"two_object_share must lie in [0, 1], got {two_object_share!r}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")
    rng = np.random.default_rng(seed)
    colours = list(COLOURS)
    scenes = []
    for _ in range(n):
        two = bool(rng.random() < two_object_share)
        layout = str(rng.choice(["horizontal", "vertical"] if two else list(POSITIONS)))
        extent = int(rng.integers(size // 4, size // 3 + 1))
        centres = _centres(rng, size, layout, extent)
        picks: list[tuple[str, str]] = []
        while len(picks) < len(centres):
            pick = (str(rng.choice(SHAPES)), str(rng.choice(colours)))
            if pick not in picks:  # two identical objects would make the caption ambiguous
                picks.append(pick)
        image = np.full((size, size, 3), 20.0)
        objects = []
        for (shape, colour), (cx, cy) in zip(picks, centres, strict=True):
            mask = draw_shape(size, shape, cx, cy, extent)
            image[mask] = COLOURS[colour]
            objects.append(ShapeObject(shape, colour, _box(mask)))
        if noise:
            image = image + rng.normal(0.0, noise, image.shape)
        pixels = np.clip(np.rint(image), 0, 255).astype(np.uint8)
        if two:
            relation = "to the left of" if layout == "horizontal" else "above"
            first, second = objects
            caption = f"a {first.colour} {first.shape} {relation} a {second.colour} {second.shape}"
            n_rel = len(relation.split())
            word_boxes = {1: first.box, 2: first.box, 4 + n_rel: second.box, 5 + n_rel: second.box}
        else:
            (obj,) = objects
            caption = f"a {obj.colour} {obj.shape} on the {layout}"
            word_boxes = {1: obj.box, 2: obj.box}
        scenes.append(ShapeScene(pixels, caption, tuple(objects), word_boxes))
    return scenes


def shapes_vocab() -> CaptionVocab:
    """Every word the generator can write (the same vocabulary for every seed)."""
    words = ["a", "on", "the", "to", "of", "above", *SHAPES, *COLOURS, *POSITIONS]
    vocab = CaptionVocab.build([" ".join(words)])
    assert all(w in vocab.index for w in tokenize_caption(" ".join(words)))
    return vocab
