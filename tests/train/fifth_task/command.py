"""``attnkit weigh RUN WORD...``: the counter's own command, a tree and a function; the command line
generates it (nothing there names this task)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnkit._checks import setting
from attnkit.train.registry import Say, allow_unfinished
from attnkit.train.runs.resume import PlanError


@dataclass(frozen=True)
class WeighCommand:
    """Print what a word counter counted for each WORD."""

    run: str = setting("", "The counter's run.", argument=True, required=True, path="dir")
    words: tuple[str, ...] = setting((), "Words to weigh.", argument=True, multiple=True)
    digits: int = setting(2, "Digits after the point.", low=0, high=6)
    allow_unfinished: bool = allow_unfinished()


def weigh(settings: WeighCommand, say: Say) -> Iterator[str]:
    from .train import load_counter

    if not settings.words:
        raise PlanError("give at least one WORD")
    counts = load_counter(Path(settings.run), allow_unfinished=settings.allow_unfinished)
    for word in settings.words:
        yield f"{word}\t{counts.get(word, 0.0):.{settings.digits}f}"
