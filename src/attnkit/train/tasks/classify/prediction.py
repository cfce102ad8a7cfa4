"""What a classifier says of a text, for a run of either backend: :class:`Prediction` (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Prediction"]


@dataclass(frozen=True)
class Prediction:
    """A predicted label, its probability, all class probabilities and the most attended tokens, for a run
    of either backend.

    An explained prediction carries ``explanation``: ``{"method", "tokens", "scores"}``, each token's score
    for the predicted class by the method (:mod:`attnkit.attribution.methods`); for an exact method also
    ``"logit"`` and ``"bias"``, with ``sum(scores) + bias == logit``.

    For a model with an n-gram half (:class:`attnkit.models.ngram_half.NgramHalf`) it also carries
    ``halves`` -- how far each half raises the predicted class's logit above the mean of the classes
    (``{"network": ..., "ngrams": ...}``; the two add up to the whole margin) -- and ``top_ngrams``, the
    n-grams that raise it most, with what each adds.
    """

    text: str
    label: str
    probability: float
    probabilities: dict[str, float]
    top_tokens: tuple[tuple[str, float], ...] = ()
    top_ngrams: tuple[tuple[str, float], ...] = ()
    halves: dict[str, float] = field(default_factory=dict)
    explanation: dict[str, object] = field(default_factory=dict)

    def fields(self) -> dict[str, Any]:
        """What ``attnkit predict --json`` prints of it (and ``/v1/predict`` answers): text, label, probability,
        probabilities, top tokens, and the explanation, halves and top n-grams where it has them."""
        explained = {"explanation": self.explanation} if self.explanation else {}
        halves = {"top_ngrams": [list(t) for t in self.top_ngrams], "halves": self.halves} if self.halves else {}
        return {"text": self.text, "label": self.label, "probability": self.probability,
                "probabilities": self.probabilities, "top_tokens": [list(t) for t in self.top_tokens],
                **explained, **halves}
