"""A run as the server answers for it: predictions, explanations with their faithfulness, attention maps
and, with ``--data``, the dataset view.

Every answer comes from the code the command line uses: predictions from
:func:`attnkit.train.tasks.classify.inference.predict_texts` (``attnkit predict --json``'s numbers; to the last digit
with ``--max-batch 1``, and batched too for a small model, see docs/serve.md), the default explanation
method from
:func:`attnkit.attribution.report.default_method` (the run's most faithful method, recorded at
training), its figures from the run's ``faithfulness.json``, the attention maps from
:func:`attnkit.inspect.capture`. The methods here are synchronous and run on the server's one model
thread (:mod:`attnkit.serve.batching`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from attnkit._checks import FieldError

__all__ = ["ServedModel", "RequestError", "unique_names", "method_title", "spans", "rounded"]

MAP_DIGITS = 4  # attention weights are sent rounded to this many decimals
TOP_TOKENS = 5


class RequestError(FieldError):
    """A request the model cannot answer, with the request field to blame (a 422; a served model of any task
    may raise :class:`attnkit._checks.FieldError` for it)."""


def unique_names(paths: Sequence[str | Path]) -> list[str]:
    """The name each run is served under: its folder's name, with ``-2``, ``-3``... for repeats."""
    names: list[str] = []
    for path in paths:
        base = Path(path).resolve().name or "run"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


class ServedModel:
    """One classification run behind the API (``predictor``: what :func:`attnkit.load_run` returned).

    A served model of any task has a ``name``, a ``kind`` (its task), the ``routes`` it answers (``/v1/ROUTE``),
    a method per route, and ``info()`` for ``/v1/models``; each task's folder holds its own (``served.py``).
    """

    kind = "classify"
    routes = ("predict", "explain", "attention")

    def __init__(self, name: str, path: Path, predictor: Any) -> None:
        from attnkit.train.tasks.classify.predictor import Predictor

        if not isinstance(predictor, Predictor):
            raise ValueError(f"{path}: a {type(predictor).__name__} run; attnkit serve answers text "
                             "classification runs")
        self.name = name
        self.path = path
        self.predictor: Any = predictor
        self.torch = predictor.backend == "torch"
        self.data: dict[str, Any] | None = None
        self._record: dict[str, Any] | None = None
        self._methods: tuple[str, ...] = ()
        self._default: str | None = None
        if self.torch:
            from attnkit.attribution.methods import applicable_methods
            from attnkit.attribution.report import read_record
            from attnkit.train.runs.rundir import reports_dir

            self._record = read_record(reports_dir(path))
            self._methods = applicable_methods(predictor.model)
            self._default = predictor.default_method()

    # --- what the run is --------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """``/v1/models``'s entry: name, labels, model, backend, the methods with their faithfulness."""
        config = self.predictor.config
        return {"name": self.name, "kind": self.kind, "routes": list(self.routes), "labels": self.predictor.labels,
                "model": config.get("model_name", config.get("model", "?")),
                "backend": "torch" if self.torch else "numpy", "max_len": self.predictor.max_len,
                "default_method": self._default,
                "methods": [{"method": m, "title": method_title(m), "faithfulness": self.faithfulness(m)}
                            for m in self._methods],
                "data": self.data is not None, "notice": self.predictor.notice}

    def faithfulness(self, method: str) -> dict[str, Any] | None:
        """``method``'s comprehensiveness and sufficiency on the run, beside the random control, from the
        run's record: the test part's figures where it has them, else the validation part's; None if unscored."""
        for part in ("test", "validation"):
            scored = (self._record or {}).get(part) or {}
            figures = (scored.get("methods") or {}).get(method)
            if figures:
                return {"part": part, "documents": scored.get("n"),
                        "comprehensiveness": figures["comprehensiveness"], "sufficiency": figures["sufficiency"],
                        "random": scored.get("random")}
        return None

    # --- answers ----------------------------------------------------------------------------------

    def predict(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """What ``attnkit predict --json`` prints for each text (one dict per text)."""
        return [p.fields() for p in self.predictor.explain(texts, top=0)]

    def explain(self, text: str, method: str | None) -> dict[str, Any]:
        """The prediction of ``text`` explained by ``method`` (default: the run's most faithful one)."""
        self._need_torch("explanations")
        chosen = method or self._default
        if chosen not in self._methods:
            raise RequestError(f"method: {chosen!r} does not apply to this model; it takes "
                               f"{', '.join(self._methods) or 'none'}", "method")

        p = self.predictor.explain([text], top=TOP_TOKENS, method=chosen)[0]
        from attnkit.data.tokenization import tokenizable

        tokenizer = self.predictor.tokenizer
        offsets = tokenizer.encode(tokenizable([text])[0], add_special_tokens=False).offsets
        return {"model": self.name, "text": text, "label": p.label, "probability": p.probability,
                "probabilities": p.probabilities, **p.explanation,
                "spans": spans(text, offsets, len(cast(list, p.explanation["tokens"]))), "title": method_title(chosen),
                "faithfulness": self.faithfulness(chosen), "default_method": self._default,
                "top_tokens": [list(t) for t in p.top_tokens]}

    def attention(self, text: str) -> dict[str, Any]:
        """Every attention map the model computes on ``text``, as :func:`attnkit.inspect.capture` records them."""
        self._need_torch("attention maps")
        import torch

        from attnkit.data.tokenization import encode_batch
        from attnkit.inspect import capture

        model, tokenizer = self.predictor.model, self.predictor.tokenizer
        ids = encode_batch(tokenizer, [text], self.predictor.read_len)[0] or [1]
        with torch.no_grad(), capture(model) as cap:
            model(torch.tensor([ids]), torch.tensor([len(ids)]))
        maps = [{"name": name, "role": cap.roles[name], "shape": list(w.shape[1:]),
                 "weights": rounded(w[0])}
                for name, w in cap.weights.items()]
        return {"model": self.name, "text": text, "tokens": [str(tokenizer.id_to_token(i)) for i in ids],
                "maps": maps}

    def load_data(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """Predict every labelled text once, for the dataset view (``/v1/data``)."""
        from attnkit.train.metrics import classification_report

        known = self.predictor.labels
        unknown = sorted({y for y in labels if y not in known})
        if unknown:
            raise ValueError(f"--data: labels {unknown[:5]} are not among the run {self.name}'s labels {known}")
        rows = self.predict(texts)
        index = {y: i for i, y in enumerate(known)}
        report = classification_report([index[y] for y in labels], [index[r["label"]] for r in rows],
                                       len(known), known)
        self.data = {"model": self.name, "labels": known, "metrics": report, "n": len(rows),
                     "rows": [{"i": i, "text": r["text"], "label": y, "predicted": r["label"],
                               "probability": r["probability"], "words": len(r["text"].split())}
                              for i, (r, y) in enumerate(zip(rows, labels, strict=True))]}

    def _need_torch(self, what: str) -> None:
        if not self.torch:
            raise RequestError(f"model: {self.name} is a numpy-backend run; {what} need a torch run", "model")


def rounded(weights: Any) -> list[Any]:
    """A tensor of attention weights as nested lists of numbers of :data:`MAP_DIGITS` decimals (each one the
    float nearest its decimal, so JSON writes at most 6 characters for it: ``0.1234``, not
    ``0.12340000271797180``)."""
    import numpy as np

    return list(np.round(weights.detach().double().cpu().numpy(), MAP_DIGITS).tolist())


def spans(text: str, offsets: Sequence[tuple[int, int]], n: int) -> list[list[int] | None]:
    """Where each of the ``n`` tokens explained lies in ``text``: ``[start, end)`` in characters (code points),
    or None for a token of no text (the ``[UNK]`` that stands for a text without tokens). A token's span
    takes the combining marks after it that no other token starts at (``a`` + U+0301, which NFKC reads as
    one ``á``, is offset as its first character alone)."""
    out: list[list[int] | None] = []
    for i in range(n):
        if i >= len(offsets):
            out.append(None)
            continue
        start, end = offsets[i]
        limit = offsets[i + 1][0] if i + 1 < len(offsets) else len(text)
        while end < limit and unicodedata.combining(text[end]):
            end += 1
        out.append([start, end])
    return out


def method_title(method: str) -> str:
    from attnkit.attribution.methods import METHOD_NAMES

    return METHOD_NAMES.get(method, method)
