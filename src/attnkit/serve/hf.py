"""A Hugging Face sequence classifier folder served beside the runs (``attnkit serve RUN --hf FOLDER``).

The folder is read as :mod:`attnkit.inspect.sources` reads one: checked first (no custom code, no
pickled weights), local files only, safetensors only. The model is wrapped in
:class:`attnkit.attribution.HFClassifier`, so explanations use the same methods as a run's
(without a faithfulness record: the folder was not trained here) and the attention maps come from
:func:`attnkit.inspect.capture`. Each text runs alone, so its numbers never depend on the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.serve.models import RequestError, ServedModel, method_title, rounded, spans

__all__ = ["HFServedModel", "HFGenerator", "served_folder"]


def served_folder(name: str, folder: Path) -> Any:
    """``--hf FOLDER`` as the server answers for it: a causal or sequence-to-sequence language model (its
    config's architecture is one of transformers' causal-LM or seq2seq-LM classes) generates
    (:class:`HFGenerator`), anything else is read as a sequence classifier."""
    import json

    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    )

    try:
        architectures = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError):
        architectures = []  # the classifier's loader names what is wrong with the folder
    generative = {n for mapping in (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
                  for names in mapping.values() for n in ((names,) if isinstance(names, str) else names)}
    if any(str(a) in generative for a in architectures):
        return HFGenerator(name, folder)
    return HFServedModel(name, folder)


class HFServedModel(ServedModel):
    """A Hugging Face classifier folder behind the API, answering as :class:`ServedModel` does."""

    def __init__(self, name: str, folder: Path) -> None:
        from attnkit._hf_folder import check_model_folder
        from attnkit.attribution.hf import HFClassifier
        from attnkit.attribution.methods import applicable_methods
        from attnkit.attribution.report import default_method
        from attnkit.inspect.sources import SAFE_LOAD

        if not (folder / "config.json").is_file():
            raise ValueError(f"--hf {folder}: expected a Hugging Face model folder holding config.json")
        check_model_folder(folder)
        import transformers

        try:
            model = transformers.AutoModelForSequenceClassification.from_pretrained(
                folder, **SAFE_LOAD, use_safetensors=True).eval()
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"--hf {folder}: transformers cannot load it as a sequence classifier "
                             f"({str(err).splitlines()[0]})") from None
        self.name, self.path, self.predictor, self.torch, self.data = name, folder, None, True, None
        self.classifier = HFClassifier(model, self.tokenizer)
        id2label = getattr(model.config, "id2label", None) or {}
        self.labels = [str(id2label.get(i, f"LABEL_{i}")) for i in range(int(model.config.num_labels))]
        limit = int(getattr(model.config, "max_position_embeddings", 512) or 512)
        self.max_len = min(512, limit) - 2  # [CLS] and [SEP] around the text
        self._record = None
        self._methods = applicable_methods(self.classifier)
        self._default = default_method(self.classifier) if self._methods else None

    def info(self) -> dict[str, Any]:
        kind = type(self.classifier.model).__name__
        return {"name": self.name, "kind": self.kind, "routes": list(self.routes), "labels": self.labels,
                "model": f"Hugging Face {kind}", "backend": "torch",
                "max_len": self.max_len, "default_method": self._default,
                "methods": [{"method": m, "title": method_title(m), "faithfulness": None} for m in self._methods],
                "data": self.data is not None, "notice": None}

    def _ids(self, text: str) -> tuple[Any, Any, list[int]]:
        import torch

        ids = self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=self.max_len)["input_ids"]
        ids = list(ids) or [int(self.classifier.unk_token_id or 0)]
        return torch.tensor([ids]), torch.tensor([len(ids)]), ids

    def predict(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        import torch

        out = []
        for text in texts:
            ids, lengths, _ = self._ids(text)
            with torch.no_grad():
                probs = self.classifier(ids, lengths).float().softmax(-1)[0]  # (C,)
            best = int(probs.argmax())
            out.append({"text": text, "label": self.labels[best], "probability": float(probs[best]),
                        "probabilities": {lb: float(p) for lb, p in zip(self.labels, probs.tolist(), strict=True)},
                        "top_tokens": []})
        return out

    def explain(self, text: str, method: str | None) -> dict[str, Any]:
        from attnkit.attribution.methods import attribute

        chosen = method or self._default
        if chosen not in self._methods:
            raise RequestError(f"method: {chosen!r} does not apply to this model; it takes "
                               f"{', '.join(self._methods) or 'none'}", "method")
        ids, lengths, raw = self._ids(text)
        p = self.predict([text])[0]
        target = ids.new_tensor([self.labels.index(p["label"])])
        scores = attribute(self.classifier, ids, lengths, chosen, target=target)[0]  # (T,)
        offsets = self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=self.max_len,
                                 return_offsets_mapping=True)["offset_mapping"]
        return {"model": self.name, **{k: p[k] for k in ("text", "label", "probability", "probabilities")},
                "method": chosen, "tokens": [str(t) for t in self.tokenizer.convert_ids_to_tokens(raw)],
                "scores": [float(s) for s in scores.tolist()], "spans": spans(text, offsets, len(raw)),
                "title": method_title(chosen),
                "faithfulness": None,
                "default_method": self._default, "top_tokens": []}

    def attention(self, text: str) -> dict[str, Any]:
        import torch

        from attnkit.inspect import capture

        ids, lengths, _ = self._ids(text)
        seq = self.classifier.sequence(ids, lengths)[0][0].tolist()
        with torch.no_grad(), capture(self.classifier.model) as cap:
            self.classifier(ids, lengths)
        maps = [{"name": name, "role": cap.roles[name], "shape": list(w.shape[1:]),
                 "weights": rounded(w[0])}
                for name, w in cap.weights.items()]
        return {"model": self.name, "text": text,
                "tokens": [str(t) for t in self.tokenizer.convert_ids_to_tokens(seq)], "maps": maps}

    def load_data(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """The data view is the runs' (a folder's labels need not match the data's)."""


class HFGenerator:
    """A Hugging Face causal or sequence-to-sequence language model folder behind the API: ``/v1/generate``
    (greedy outputs) and ``/v1/explain`` (each generated token by the prompt's tokens, every method's
    faithfulness measured on that output, :func:`attnkit.attribution.generation.explain_causal_lm`). Loaded
    as classifiers are: checked first, local files, safetensors, no custom code; eager attention, so its
    weights can be read."""

    kind = "generate"
    routes = ("generate", "explain")

    def __init__(self, name: str, folder: Path) -> None:
        from attnkit._hf_folder import check_model_folder
        from attnkit.inspect.sources import SAFE_LOAD

        check_model_folder(folder)
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(folder, **SAFE_LOAD)
            auto = transformers.AutoModelForSeq2SeqLM if config.is_encoder_decoder else \
                transformers.AutoModelForCausalLM
            self.model = auto.from_pretrained(folder, **SAFE_LOAD, use_safetensors=True,
                                              attn_implementation="eager").eval()
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
        except (OSError, ValueError, KeyError) as err:
            raise ValueError(f"--hf {folder}: transformers cannot load it as a language model "
                             f"({str(err).splitlines()[0]})") from None
        self.name, self.path = name, folder

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "routes": list(self.routes),
                "model": f"Hugging Face {type(self.model).__name__}", "notice": None}

    def generate(self, texts: Sequence[str], max_new_tokens: int) -> list[str]:
        """Each prompt's greedy continuation (the new text only), each prompt alone."""
        from attnkit.attribution.generation import explain_causal_lm

        out = []
        for text in texts:
            try:
                out.append(explain_causal_lm(self.model, self.tokenizer, text, max_new_tokens=max_new_tokens,
                                             explain=False)["generated"])
            except ValueError as err:
                raise RequestError(str(err), "texts") from None
        return out

    def explain(self, text: str, method: str | None, *, max_new_tokens: int = 20) -> dict[str, Any]:
        from attnkit.attribution.generation import HF_METHODS, explain_causal_lm

        if method is not None and method not in HF_METHODS:
            raise RequestError(f"method: {method!r} does not apply to a language model; it takes "
                               f"{', '.join(HF_METHODS)}", "method")
        try:
            return {"model": self.name, **explain_causal_lm(self.model, self.tokenizer, text,
                                                            max_new_tokens=max_new_tokens, method=method)}
        except ValueError as err:
            raise RequestError(str(err), "text") from None
