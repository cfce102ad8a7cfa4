"""What every example shares: the ``--out`` flag, the small mode and shape printing.

``ATTNKIT_EXAMPLES_SMALL=1`` shrinks every example (small sizes, few steps) so
that the whole tour runs in seconds in the test suite; the figures and files
it writes keep their names.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any


def small() -> bool:
    """True when ``ATTNKIT_EXAMPLES_SMALL=1`` asks for small sizes and few steps."""
    return os.environ.get("ATTNKIT_EXAMPLES_SMALL", "") not in ("", "0")


def output_dir(description: str | None) -> Path:
    """Parse ``--out`` (default ``./example_output``), create it and return it."""
    parser = argparse.ArgumentParser(description=(description or "").strip().splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example_output"),
                        help="folder for the figures and files this example writes")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    return out


def show(name: str, value: Any) -> None:
    """Print ``name`` and the shape of a tensor/array (or the value itself)."""
    shape = getattr(value, "shape", None)
    text = f"{tuple(shape)}" if shape is not None else repr(value)
    print(f"{name:<28} {text}")


def saved(path: Path) -> None:
    print(f"wrote {path}")
