"""Explanations of a Hugging Face sequence classifier, through :func:`attnkit.inspect.capture`.

:class:`HFClassifier` wraps a ``transformers`` model for sequence
classification (``BertForSequenceClassification`` and its kind) so that it
reads what attnkit's classifiers read: token ids without the special tokens,
padded with ``[PAD]``, and their lengths; it adds ``[CLS]`` and ``[SEP]``
around each document itself (when it knows their ids) and returns the logits.
:func:`attnkit.attribution.attribute` and
:func:`attnkit.attribution.faithfulness` take it (or the bare model, read
as it is: the ids then include whatever special tokens the caller put in)
like any attnkit classifier:

* ``attention`` and ``rollout`` read the weights a capture records beside the
  model's own kernels: the row of the position the classifier reads
  (:meth:`HFClassifier.pooled_positions`: ``[CLS]``, the first, for BERT-style
  encoders; each row's last non-pad token for GPT-2-, Llama- or Mistral-style
  classifiers) of the last layer, mean of the heads, or through every layer
  with the residual; ``chefer`` starts from the same row;
* ``grad_input`` and ``integrated_gradients`` differentiate through the input
  embeddings (``model.get_input_embeddings()``), all-zero embeddings as the
  baseline;
* ``chefer`` captures inside :func:`attnkit.core.dispatch.weights_in_graph`:
  each attention call then runs the model's eager function, so its output is
  computed from the recorded weights and the gradients reach them
  (``cap.live``); another thread using the model meanwhile is not affected.

Exact contributions and attention x value norm need an attention-pooling
head and do not apply.

Shape legend: B batch, T tokens, S the model's sequence (``[CLS]`` tokens ``[SEP]``, or the tokens alone), H heads.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

import torch
from torch import Tensor, nn

from attnkit._checks import one_of
from attnkit.core.masks import AttentionMask

__all__ = ["HFClassifier", "POOLED", "is_hf_classifier", "as_classifier", "hf_methods", "reads_last_token"]

POOLED = ("first", "last")
"""Where a classifier reads its sequence: the first position, or each row's last non-pad token."""


def is_hf_classifier(model: Any) -> bool:
    """Whether ``model`` is a ``transformers`` model (a sequence classifier is what the methods expect)."""
    return isinstance(model, nn.Module) and type(model).__module__.startswith("transformers.")


@cache
def _forward_pools_last(cls: type) -> bool:
    for klass in cls.__mro__:
        if "forward" in vars(klass):
            try:
                return "last_non_pad_token" in inspect.getsource(vars(klass)["forward"])
            except (OSError, TypeError):  # no source to read (a compiled or generated class)
                return False
    return False


def reads_last_token(model: nn.Module) -> bool:
    """Whether ``model`` classifies from each row's last non-pad token, as ``transformers``' decoder classifiers do.

    ``GPT2ForSequenceClassification``, ``GenericForSequenceClassification``
    (Llama, Mistral, Qwen2...) and the others of that kind pool with
    ``last_non_pad_token`` in their ``forward``; that is what is looked for.
    BERT-style encoders (BERT, RoBERTa, DistilBERT...) read the first position.
    """
    cls: Any = type(model)
    return _forward_pools_last(cls)


class HFClassifier(nn.Module):
    """A Hugging Face sequence classifier that reads ``(ids, lengths)`` and returns ``(B, C)`` logits.

    Args:
        model: a ``transformers`` model whose output has ``.logits``.
        tokenizer: a Hugging Face tokenizer to take ``cls_token_id``,
            ``sep_token_id`` and ``pad_token_id`` from (optional).
        cls_token_id, sep_token_id: put before and after each document
            (None: nothing is added; the ids are read as they are).
        pad_token_id: the id that pads a batch (default: the tokenizer's, the
            model config's, else 0).
        pooled: the position the classifier reads, whose query row ``attention``,
            ``rollout`` and ``chefer`` explain: ``"first"`` (``[CLS]``) or
            ``"last"`` (each row's last non-pad token); None: found from the
            model (:func:`reads_last_token`).

    Shape:
        ids ``(B, T)`` (no special tokens), lengths ``(B,)``; returns ``(B, C)``.
    """

    def __init__(self, model: nn.Module, tokenizer: Any = None, *, cls_token_id: int | None = None,
                 sep_token_id: int | None = None, pad_token_id: int | None = None, pooled: str | None = None
                 ) -> None:
        super().__init__()
        if not is_hf_classifier(model):
            raise TypeError(f"model must be a transformers model, got {type(model).__name__}")
        if getattr(getattr(model, "config", None), "_attn_implementation", None) == "attnkit":
            from attnkit.integrations.transformers import check_model

            check_model(model)  # on attnkit's backend: refused by name, or its forward's position ids handed over
        self.model = model
        self.cls_token_id = cls_token_id if cls_token_id is not None else getattr(tokenizer, "cls_token_id", None)
        self.sep_token_id = sep_token_id if sep_token_id is not None else getattr(tokenizer, "sep_token_id", None)
        self.unk_token_id = getattr(tokenizer, "unk_token_id", None)  # a document left with no token
        pad = pad_token_id if pad_token_id is not None else getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(getattr(model, "config", None), "pad_token_id", None)
        self.pad_token_id = int(pad or 0)
        self.pooled = ("last" if reads_last_token(model) else "first") if pooled is None else one_of(
            "pooled", pooled, POOLED)

    @property
    def offset(self) -> int:
        """Where the first token sits in the model's sequence (1 after ``[CLS]``)."""
        return 0 if self.cls_token_id is None else 1

    def prepare(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, AttentionMask]:
        """``ids``, ``lengths`` as tensors and the mask of the real tokens, as the text classifiers give it."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        lengths = torch.as_tensor(lengths, dtype=torch.long, device=ids.device).reshape(-1)
        if ids.dim() != 2 or lengths.shape[0] != ids.shape[0]:
            raise ValueError(f"ids must be (B, T) with one length per row, got ids {tuple(ids.shape)} "
                             f"and lengths {tuple(lengths.shape)}")
        return ids, lengths, AttentionMask.from_lengths(lengths, ids.shape[1])

    def sequence(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The model's input ids ``(B, S)`` with ``[CLS]``/``[SEP]`` placed, and its attention mask."""
        b, t = ids.shape
        s = t + self.offset + (self.sep_token_id is not None)
        seq = torch.full((b, s), self.pad_token_id, dtype=torch.long, device=ids.device)
        real = torch.arange(t, device=ids.device)[None] < lengths[:, None]  # (B, T)
        seq[:, self.offset : self.offset + t] = torch.where(real, ids, seq[:, self.offset : self.offset + t])
        if self.cls_token_id is not None:
            seq[:, 0] = self.cls_token_id
        if self.sep_token_id is not None:
            seq[torch.arange(b, device=ids.device), lengths + self.offset] = self.sep_token_id
        keep = torch.arange(s, device=ids.device)[None] < (lengths + s - t)[:, None]  # (B, S)
        return seq, keep.long()

    def pooled_positions(self, seq: Tensor) -> Tensor:
        """Where the classifier reads each row of the model's input ids ``seq``, as ``transformers`` finds it.

        ``"first"``: position 0. ``"last"``: the rightmost id that is not the
        model config's ``pad_token_id``, so left and right padding alike (the
        last position when the config has no pad id, as ``transformers`` does).

        Shape:
            seq ``(B, S)``; returns ``(B,)`` long.
        """
        b, s = seq.shape
        if self.pooled == "first":
            return torch.zeros(b, dtype=torch.long, device=seq.device)
        config: Any = getattr(self.model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        pad = getattr(text, "pad_token_id", None)
        if pad is None:
            return torch.full((b,), s - 1, dtype=torch.long, device=seq.device)
        return (torch.arange(s, device=seq.device) * (seq != pad)).argmax(-1)

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        seq, keep = self.sequence(*self.prepare(ids, lengths)[:2])
        return self.model(input_ids=seq, attention_mask=keep).logits  # type: ignore[no-any-return]


def as_classifier(model: nn.Module) -> nn.Module:
    """A bare ``transformers`` model wrapped as :class:`HFClassifier` (ids read as given); others as they are."""
    return HFClassifier(model) if is_hf_classifier(model) else model


def hf_methods(model: HFClassifier) -> dict[str, bool]:
    """Which methods apply: the capture reads every attention module through the attention interface
    (``attention``, ``rollout``, ``chefer``); the input embeddings are reachable (the gradient methods)."""
    from attnkit.inspect import find_attention

    found, unsupported = find_attention(model.model)
    readable = bool(found) and not unsupported
    gradients = callable(getattr(model.model, "get_input_embeddings", None))
    return {"attention": readable, "rollout": readable, "chefer": readable and all(
        kind == "hf" for kind, _ in found.values()), "grad_input": gradients, "integrated_gradients": gradients}


def layer_attention(model: HFClassifier, ids: Tensor, lengths: Tensor, *, live: bool = False
                    ) -> tuple[Tensor, list[Tensor], Tensor, Tensor]:
    """The logits, each layer's weights ``(B, H, S, S)`` in order, a one-hot row ``(B, S)`` at the position the
    classifier reads (:meth:`HFClassifier.pooled_positions`), the token slice.

    With ``live`` the weights are the captured ones still in the autograd graph (call inside
    :func:`attnkit.core.dispatch.weights_in_graph`).
    """
    from attnkit.inspect import capture

    with capture(model.model) as cap:
        logits = model(ids, lengths)
    if not cap.weights:
        raise ValueError(f"no attention weights were captured from {type(model.model).__name__}: {cap.missed}")
    if live and set(cap.live) != set(cap.weights):
        kept = sorted(set(cap.weights) - set(cap.live))
        raise ValueError(f"gradients cannot reach the attention weights of {kept} in {type(model.model).__name__} "
                         f"(their calls cannot run the eager attention function): use another method")
    layers = list((cap.live if live else cap.weights).values())
    b, s = layers[0].shape[0], layers[0].shape[-1]
    row = torch.zeros(b, s, dtype=layers[0].dtype, device=ids.device)
    row[torch.arange(b, device=ids.device), model.pooled_positions(model.sequence(ids, lengths)[0])] = 1.0
    tokens = torch.arange(model.offset, model.offset + ids.shape[1], device=ids.device)
    return logits, layers, row, tokens


def embedding_module(model: HFClassifier) -> nn.Module:
    return model.model.get_input_embeddings()  # type: ignore[operator, no-any-return]
