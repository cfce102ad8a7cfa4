"""What every example shares: the ``--out`` and ``--data`` flags, the small mode and shape printing.

``ATTNKIT_EXAMPLES_SMALL=1`` shrinks every example (small sizes, few steps) so
that the whole tour runs in seconds in the test suite; the figures and files
it writes keep their names.

An example that can use a real data set finds it with :func:`optional_data`:
``--data``, else ``$ATTNKIT_DATA/NAME``, else ``../shared/data/NAME`` next to
the repository (:mod:`attnkit.data.locations`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from attnkit.data.locations import ENV_VAR, data_path

REPO = Path(__file__).resolve().parents[1]


def small() -> bool:
    """True when ``ATTNKIT_EXAMPLES_SMALL=1`` asks for small sizes and few steps."""
    return os.environ.get("ATTNKIT_EXAMPLES_SMALL", "") not in ("", "0")


def quick_mode(note: str) -> None:
    """In small mode, say what the smaller run shows and what only the full run shows."""
    if small():
        print(f"quick mode (ATTNKIT_EXAMPLES_SMALL=1): {note}")


def parse_args(description: str | None, *, data: str | None = None) -> argparse.Namespace:
    """Parse ``--out`` (default ``./example_output``, created) and, when ``data`` names a data set, ``--data``."""
    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example_output"),
                        help="folder for the figures and files this example writes")
    if data is not None:
        parser.add_argument("--data", type=Path, default=None,
                            help=f"the {data} data set folder (default: ${ENV_VAR}/{data}, else "
                                 f"../shared/data/{data} next to the repository; absent: generated data)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    return args


def output_dir(description: str | None) -> Path:
    """Parse ``--out`` (default ``./example_output``), create it and return it."""
    out: Path = parse_args(description).out
    return out


def optional_data(name: str, given: Path | None) -> Path | None:
    """Data set ``name``'s folder, or None when it is absent and nobody asked for it.

    A folder asked for with ``--data`` or ``ATTNKIT_DATA`` must exist
    (:class:`attnkit.data.locations.DataNotFoundError` otherwise); the default
    location may be absent, and the example then uses generated data.
    """
    path = data_path(name, given, base=REPO, must_exist=False)
    if path.exists():
        return path
    if given is not None or os.environ.get(ENV_VAR, "").strip():
        return data_path(name, given, base=REPO)  # raises, naming --data and ATTNKIT_DATA
    return None


def show(name: str, value: Any) -> None:
    """Print ``name`` and the shape of a tensor/array (or the value itself)."""
    shape = getattr(value, "shape", None)
    text = f"{tuple(shape)}" if shape is not None else repr(value)
    print(f"{name:<28} {text}")


def saved(path: Path) -> None:
    print(f"wrote {path}")


def save_figure(fig: Any, path: Path) -> None:
    """Lay out a matplotlib figure, write it to ``path`` at 100 dpi and say so."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    saved(path)


SUBJECTS = ("the cat", "a dog", "the old man", "my sister", "a small bird", "the teacher", "our neighbour")
VERBS = ("sees", "finds", "likes", "paints", "carries", "hides", "follows")
OBJECTS = ("a red ball", "the blue door", "an old key", "the green hat", "a wooden box", "the little boat")
PLACES = ("in the garden", "near the river", "at school", "under the table", "by the sea", "on the hill")


def sentences(count: int, seed: int = 0) -> str:
    """``count`` sentences of a small English grammar (subject, verb, object, place), as one text.

    A character language model has plenty to learn from it (words, spelling,
    which word may follow which) and learns it in seconds on a CPU.
    """
    import random

    rng = random.Random(seed)
    return " ".join(f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(PLACES)}."
                    for _ in range(count))


def char_corpus(held_out: int) -> tuple[list[str], Any, Any]:
    """The characters of :func:`sentences`, a training text (600 sentences in small mode, else 4000) and
    ``held_out`` validation sentences, as id tensors ``(N,)`` and ``(M,)``."""
    import torch

    text, valid = sentences(600 if small() else 4000, seed=0), sentences(held_out, seed=1)
    chars = sorted(set(text + valid))
    index = {c: i for i, c in enumerate(chars)}
    return chars, torch.tensor([index[c] for c in text]), torch.tensor([index[c] for c in valid])

