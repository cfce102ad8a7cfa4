"""A translation run behind ``attnkit serve``: ``POST /v1/translate`` (the server is :mod:`attnkit.serve`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.train.tasks.translate.settings import DECODING

__all__ = ["ServedTranslator"]


class ServedTranslator:
    """A :class:`~attnkit.train.tasks.translate.translation_run.Translator` as the server answers for it:
    translations of texts, as ``attnkit translate`` prints them with the same beam."""

    kind = "translate"
    routes = ("translate",)

    def __init__(self, name: str, path: Path, translator: Any) -> None:
        self.name, self.path, self.translator = name, path, translator

    def info(self) -> dict[str, Any]:
        """``/v1/models``'s entry."""
        return {"name": self.name, "kind": self.kind, "routes": list(self.routes),
                "beam_size": DECODING.beam_size, "length_penalty": DECODING.length_penalty,
                "notice": self.translator.meta.get("notice")}

    def translate(self, texts: Sequence[str], beam_size: int = DECODING.beam_size) -> list[str]:
        """The translation of each text."""
        return [t.text for t in self.translator.translate(list(texts), beam_size=beam_size)]
