"""A trained text classifier served from a run directory (torch or numpy backend): :class:`Predictor`.

``attnkit.load_run`` (:mod:`attnkit.train.registry`) returns one for every classification run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.train.tasks.classify.prediction import Prediction

__all__ = ["Predictor", "Prediction"]


class Predictor:
    """A trained text classifier read from a run directory.

    Attributes:
        path: the run directory it was read from or last saved to by :meth:`save_pretrained`; None for a
            classifier fitted in memory (:class:`attnkit.TextClassifier`) and not saved yet.
        config: the run's whole ``config.json`` (model, training and data settings, metrics).
        notice: for an unfinished run loaded with ``allow_unfinished``, the line that says which
            weights are served; None otherwise.

    Shape:
        ``predict_proba(texts)`` returns ``(N, C)`` for N texts and the C classes of ``labels``.
    """

    def __init__(self, path: Path | None, config: dict[str, Any], *, torch_parts: tuple[Any, Any, Any] | None = None,
                 numpy_run: Any = None) -> None:
        self.path = path
        self.config = config
        self.notice: str | None = config.get("notice")
        self._torch = torch_parts
        self._numpy = numpy_run

    # --- loading and saving ---------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], *, allow_unfinished: bool = False,
                        device: str = "cpu") -> Predictor:
        """Read the classification run in ``path`` (see :func:`load_run`); a run of another task is refused,
        naming the command that serves it."""
        from attnkit.train.tasks.classify import TASK
        from attnkit.train.tasks.numpy.numpy_backend import BACKEND, load_numpy_run

        folder = Path(path)
        config = TASK.committed(folder, allow_unfinished=allow_unfinished)[1]
        if config.get("backend") == BACKEND:
            numpy_run = load_numpy_run(folder)
            return cls(folder, {**numpy_run.meta, **({"notice": config["notice"]} if "notice" in config else {})},
                       numpy_run=numpy_run)
        from attnkit.train.runs.checkpoint import load_checkpoint

        model, tokenizer, labels, meta = load_checkpoint(folder, device=device, allow_unfinished=allow_unfinished)
        return cls(folder, meta, torch_parts=(model, tokenizer, labels))

    def save_pretrained(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write this classifier as a new run directory at ``path`` (one committed generation) that
        ``attnkit predict``, ``evaluate``, ``visualize`` and :func:`load_run` read.

        The weights written are the model's current ones. As with ``attnkit train``, ``path``
        must be missing, empty or an attnkit run; another run is replaced only with ``overwrite``.
        Returns ``path``, which becomes :attr:`path`.
        """
        from attnkit.train.runs.run import new_run_id

        out = Path(path)
        meta = {k: v for k, v in self.config.items()
                if k not in ("run_id", "model_name", "model_config", "attnkit_version", "notice")}
        if self._numpy is not None:
            from dataclasses import replace

            from attnkit.train.tasks.numpy.numpy_backend import save_numpy_run

            save_numpy_run(replace(self._numpy, meta=meta), out, run_id=new_run_id(), overwrite=overwrite)
            self.path = out
            return out
        from attnkit.train.runs.checkpoint import save_checkpoint

        model, tokenizer, labels = self._parts()
        save_checkpoint(out, model, self.config["model_name"], self.config["model_config"], tokenizer, labels,
                        run_id=new_run_id(), overwrite=overwrite, extra=meta)
        self.path = out
        return out

    # --- what the run knows ---------------------------------------------------------------------

    @property
    def labels(self) -> list[str]:
        """The class names, in the order of :meth:`predict_proba`'s columns."""
        if self._numpy is not None:
            return list(self._numpy.labels)
        return list(self._parts()[2].labels)

    @property
    def max_len(self) -> int:
        """How many tokens of a text the model reads (the run's ``--max-len``)."""
        if self._numpy is not None:
            return int(self._numpy.settings.max_len)
        return int(self.config["data_settings"]["max_len"])

    @property
    def read_len(self) -> int:
        """How many tokens of each text the model reads: :attr:`max_len`, or more for a model reading long
        documents in chunks (:func:`attnkit.models.config.reading_length`)."""
        if self._numpy is not None:
            return self.max_len
        from attnkit.models.config import reading_length

        return reading_length(self._parts()[0], self.max_len)

    @property
    def model(self) -> Any:
        """The torch ``nn.Module`` (in eval mode), or the NumPy twin's model for a numpy run."""
        return self._numpy.model if self._numpy is not None else self._parts()[0]

    @property
    def backend(self) -> str:
        """``"torch"``, or ``"numpy"`` for a run of the NumPy twin (``attnkit train --backend numpy``)."""
        return "numpy" if self._numpy is not None else "torch"

    @property
    def tokenizer(self) -> Any:
        """The run's tokenizer (``tokenizers.Tokenizer``); None for a numpy run, which splits on whitespace."""
        return None if self._numpy is not None else self._parts()[1]

    @property
    def label_vocab(self) -> Any:
        """The run's :class:`~attnkit.data.batching.LabelVocab` (torch runs; a numpy run: None)."""
        return None if self._numpy is not None else self._parts()[2]

    def default_method(self) -> str | None:
        """The method that explains this run's predictions: the one its reports chose as the most faithful,
        else the model's first applicable one (:func:`attnkit.attribution.report.default_method`); None for a
        numpy run (its attention weights only) or a model no method applies to."""
        if self._numpy is not None:
            return None
        from attnkit.attribution.methods import applicable_methods
        from attnkit.attribution.report import default_method
        from attnkit.train.runs.rundir import reports_dir

        model = self._parts()[0]
        if not applicable_methods(model):
            return None
        return default_method(model, reports_dir(self.path) if self.path is not None else None)

    def _parts(self) -> tuple[Any, Any, Any]:
        assert self._torch is not None
        return self._torch

    # --- using it -------------------------------------------------------------------------------

    def explain(self, texts: Sequence[str], *, top: int = 5, method: str | None = None) -> list[Prediction]:
        """One :class:`Prediction` per text, with its ``top`` most attended tokens (``top=0``: none) and, for a
        torch run, every token's score by ``method`` (default: :meth:`default_method`)."""
        _check_texts(texts)
        if self._numpy is not None:
            from attnkit.train.tasks.numpy.numpy_backend import predict_numpy_run

            return [Prediction(**{**p, "top_tokens": tuple(p["top_tokens"])})
                    for p in predict_numpy_run(self._numpy, list(texts), top_k=top)]
        from attnkit.train.tasks.classify.inference import predict_texts

        model, tokenizer, labels = self._parts()
        chosen = method or (self.default_method() if top else None)
        return predict_texts(model, tokenizer, labels, list(texts), max_len=self.max_len, top_k=top, method=chosen)

    def attention_views(self, texts: Sequence[str]) -> list[Any]:
        """Each text's attention as :class:`~attnkit.viz.views.AttentionView` (what ``attnkit visualize`` draws):
        the tokens read, every self-attention layer's weights ``(L, H, T, T)``, the pooling weights ``(T,)`` when
        the model pools by attention, the predicted label and its probability, and how many tokens the text
        holds (more than those read when it was truncated)."""
        from attnkit.viz.views import AttentionView

        _check_texts(texts)
        if self._numpy is not None:
            run, views = self._numpy, []
            for text in texts:
                tokens, layers, pooling, probs = run.attention_maps(text)
                best = int(probs.argmax())
                total = len(run.vocab.encode(text.lower() if run.settings.lowercase else text))
                views.append(AttentionView(tokens, layers, pooling, run.labels[best], float(probs[best]),
                                           total_tokens=max(total, len(tokens))))
            return views
        import torch

        from attnkit.data.tokenization import encode_batch, tokenizable

        model, tokenizer, labels = self._parts()
        totals = [len(e.ids) for e in tokenizer.encode_batch(tokenizable(list(texts)), add_special_tokens=False)]
        views = []
        for ids, total in zip(encode_batch(tokenizer, list(texts), self.read_len), totals, strict=True):
            ids = ids or [0]
            with torch.no_grad():
                logits, weights = model(torch.tensor([ids]), torch.tensor([len(ids)]), return_weights=True)
            probs = logits.softmax(-1)[0]  # (C,)
            maps = [w[0] for name, w in weights.items() if name != "pooling" and w.dim() == 4]  # (H, T, T) each
            layers = torch.stack(maps).numpy() if maps else torch.zeros(0, 1, len(ids), len(ids)).numpy()
            pooling = weights["pooling"][0].numpy() if "pooling" in weights else None
            best = int(probs.argmax())
            views.append(AttentionView([str(tokenizer.id_to_token(i)) for i in ids], layers, pooling,
                                       labels.decode(best), float(probs[best]),
                                       total_tokens=max(total, len(ids))))
        return views

    def predict(self, texts: Sequence[str]) -> list[str]:
        """The predicted label of each text (what ``attnkit predict`` prints first)."""
        return [p.label for p in self.explain(texts, top=0)]

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities ``(len(texts), len(labels))``; column ``j`` is ``labels[j]``."""
        labels = self.labels
        rows = [p.probabilities for p in self.explain(texts, top=0)]
        return np.asarray([[row[label] for label in labels] for row in rows], dtype=np.float64).reshape(-1,
                                                                                                         len(labels))

    def evaluate(self, texts: Sequence[str], labels: Sequence[str], *, progress: bool = False) -> dict[str, Any]:
        """Accuracy, macro-F1, per-class scores and the confusion matrix on labelled texts
        (what ``attnkit evaluate`` reports; ``progress``: long work says how far it is on stderr)."""
        from attnkit.data.readers import Example

        _check_texts(texts)
        if len(texts) != len(labels):
            raise ValueError(f"texts and labels must be as long, got {len(texts)} texts and {len(labels)} labels")
        examples = [Example(str(t), str(y)) for t, y in zip(texts, labels, strict=True)]
        if self._numpy is not None:
            from attnkit.train.tasks.numpy.numpy_backend import evaluate_numpy_run

            return dict(evaluate_numpy_run(self._numpy, examples))
        from attnkit.train.tasks.classify.inference import evaluate_examples

        model, tokenizer, vocab = self._parts()
        return evaluate_examples(model, tokenizer, vocab, examples, max_len=self.max_len, show_progress=progress)

    def __repr__(self) -> str:
        backend = self.backend
        name = self.config.get("model_name", self.config.get("model", "?"))
        where = "not saved" if self.path is None else repr(str(self.path))
        return f"Predictor({where}, model={name!r}, backend={backend!r}, labels={self.labels})"


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of strings, got a single str (wrap it in a list)")
