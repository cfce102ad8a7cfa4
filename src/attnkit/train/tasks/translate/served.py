"""A translation run behind ``attnkit serve``: ``POST /v1/translate`` (the server is :mod:`attnkit.serve`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit._checks import FieldError
from attnkit.train.tasks.translate.settings import DECODING

__all__ = ["ServedTranslator"]


class ServedTranslator:
    """A :class:`~attnkit.train.tasks.translate.translation_run.Translator` as the server answers for it:
    translations of texts, as ``attnkit translate`` prints them with the same beam."""

    kind = "translate"
    routes = ("translate", "explain")

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

    def explain(self, text: str, method: str | None) -> dict[str, Any]:
        """``text`` translated and each generated token explained, every method's faithfulness measured on it
        (:meth:`~attnkit.train.tasks.translate.translation_run.Translator.explain`)."""
        from attnkit.attribution.generation import GENERATION_METHODS

        if method is not None and method not in GENERATION_METHODS:
            raise FieldError(f"method: {method!r} does not apply to a translation run; it takes "
                             f"{', '.join(GENERATION_METHODS)}", "method")
        return {"model": self.name, **self.translator.explain(text, method=method)}
