"""A tiny generated Flickr8k folder for the tests: random RGB photographs, captions and split lists."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WORDS = ["a", "dog", "runs", "on", "the", "grass", "man", "rides", "bike", "red", "ball", "child", "plays"]


def make_flickr8k(root: Path, *, n: tuple[int, int, int] = (8, 3, 3), size: int = 32, layout: str = "csv",
                  seed: int = 0) -> Path:
    """``root`` as a Flickr8k folder with ``n`` (train, dev, test) images, 5 captions each.

    The word ``zebra`` appears only in test captions (the vocabulary must not know it).
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    splits = {"train": [], "dev": [], "test": []}  # type: dict[str, list[str]]
    k = 0
    for split, count in zip(splits, n, strict=True):
        for _ in range(count):
            name = f"{1000 + k}_{k:04x}.jpg"
            k += 1
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(root / "images" / name)
            splits[split].append(name)
            for _ in range(5):
                words = list(rng.choice(WORDS, size=int(rng.integers(3, 7))))
                if split == "test":
                    words.append("zebra")
                rows.append((name, " ".join(words).capitalize() + ", here ."))
    if layout == "csv":
        text = "image,caption\n" + "".join(f"{name},{cap}\n" for name, cap in rows)
        (root / "captions.txt").write_text(text, encoding="utf-8")
    else:
        counts: dict[str, int] = {}
        lines = []
        for name, cap in rows:
            lines.append(f"{name}#{counts.get(name, 0)}\t{cap}\n")
            counts[name] = counts.get(name, 0) + 1
        (root / "Flickr8k.token.txt").write_text("".join(lines), encoding="utf-8")
    for split, filename in (("train", "trainImages"), ("dev", "devImages"), ("test", "testImages")):
        (root / f"Flickr_8k.{filename}.txt").write_text("".join(f"{x}\n" for x in splits[split]))
    return root
