"""Token attributions of a text classifier's prediction, by several methods side by side.

Every method gives each token position of each document a score for one
class (the predicted one unless ``target`` names another); higher means the
token pushed the model further toward that class.

=========================  =====================================================================
name                       score of token ``t``
=========================  =====================================================================
``contributions``          exact: what ``t`` adds to the class's logit, ``alpha_t (w_c . v_t)``
                           for attention pooling under a linear head (plus, for the wide model,
                           its n-grams' terms); the scores plus the bias are the logit
``attention``              the pooling weight ``alpha_t`` (``weights["pooling"]``: the pooling
                           attention, or BERT's ``[CLS]`` row of the last layer; a Hugging Face
                           decoder classifier's last non-pad token's row)
``attention_norm``         ``||alpha_t v_t||``: the size of what ``t`` adds to the pooled vector
                           (Kobayashi et al., 2020, "Attention is Not Only a Weight")
``rollout``                the pooling row (or the read token's) through the layers' attention with
                           the residual, :func:`attnkit.viz.measures.attention_rollout`
                           (Abnar & Zuidema, 2020)
``grad_input``             ``grad_e logit_c . e_t`` on the word embeddings
``integrated_gradients``   ``e_t . mean_k grad logit_c((k + 1/2)/m e)``, ``m = 20`` steps from the
                           all-zero (``[PAD]``) embeddings (Sundararajan et al., 2017)
``chefer``                 gradient-weighted attention relevance (Chefer et al., 2021):
                           ``R = I``, ``R += mean_h (grad A . A)^+ R`` per layer, read through
                           ``(grad alpha . alpha)^+`` of attention pooling (mean pooling's and
                           BERT's ``[CLS]`` row as they are)
=========================  =====================================================================

:func:`applicable_methods` names those a model supports; asking another
raises :class:`MethodNotApplicable` listing them. The gradient methods see
only what flows through the embeddings: the n-gram half of a wide model
reads token ids and gets no gradient, so they explain its network half alone
(``contributions`` holds both).

Shape legend: B batch, T tokens, C classes, H heads, L layers, E embedding width.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.attribution.hf import (
    HFClassifier,
    as_classifier,
    embedding_module,
    hf_methods,
    layer_attention,
)
from attnkit.core.dispatch import weights_in_graph, weights_kept_for_gradients

__all__ = ["METHODS", "METHOD_NAMES", "MethodNotApplicable", "applicable_methods", "attribute",
           "is_exact", "method_list", "IG_STEPS"]

METHODS = ("contributions", "attention", "attention_norm", "rollout", "grad_input", "integrated_gradients",
           "chefer")
METHOD_NAMES = {
    "contributions": "exact contributions",
    "attention": "raw attention",
    "attention_norm": "attention x value norm (Kobayashi et al., 2020)",
    "rollout": "attention rollout (Abnar & Zuidema, 2020)",
    "grad_input": "gradient x input",
    "integrated_gradients": "integrated gradients (Sundararajan et al., 2017)",
    "chefer": "gradient-weighted attention relevance (Chefer et al., 2021)",
}
IG_STEPS = 20


class MethodNotApplicable(ValueError):
    """An attribution method that the model does not support; the message lists those it does."""


def is_exact(method: str) -> bool:
    """Whether ``method``'s scores plus a bias add up to the logit."""
    return method == "contributions"


def _models() -> tuple[type, type, type, type]:
    from attnkit.models import (
        BertClassifier,
        DocumentClassifier,
        SentimentClassifier,
        WideDeepClassifier,
    )

    return DocumentClassifier, WideDeepClassifier, SentimentClassifier, BertClassifier


def applicable_methods(model: nn.Module) -> tuple[str, ...]:
    """The methods of :data:`METHODS` that apply to ``model``, in that order."""
    from attnkit.layers.pooling import AttentionPooling
    from attnkit.models.base import TextClassifier

    model = as_classifier(model)
    if isinstance(model, HFClassifier):
        hf = hf_methods(model)
        return tuple(m for m in METHODS if hf.get(m, False))
    if not isinstance(model, TextClassifier):
        return ()
    document, wide, sentiment, bert = _models()
    aligned = isinstance(model, (document, wide, sentiment, bert))  # embeddings line up with the tokens
    layers = (isinstance(model, document) and (model.encoder is not None or model.config.parameter_free_layers > 0)
              or isinstance(model, bert))
    found = {
        "contributions": callable(getattr(model, "token_contributions", None)),
        "attention": True,
        "attention_norm": isinstance(model, (document, wide, sentiment))
        and isinstance(getattr(model, "pooling", None), AttentionPooling),
        "rollout": layers,
        "grad_input": aligned,
        "integrated_gradients": aligned,
        "chefer": layers,
    }
    return tuple(m for m in METHODS if found[m])


def _check_method(model: nn.Module, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    valid = applicable_methods(model)
    if method not in valid:
        raise MethodNotApplicable(
            f"method {method!r} does not apply to {type(model).__name__}"
            f"{_why(model, method)}; the methods that do: {', '.join(valid) or 'none'}")


def _why(model: nn.Module, method: str) -> str:
    if method == "contributions":
        return " (its logit is not a linear function of per-token pooled vectors it exposes)"
    if method in ("rollout", "chefer"):
        return " (it has no self-attention layers)"
    if method in ("grad_input", "integrated_gradients"):
        return " (its embeddings do not line up with the tokens)"
    if method == "attention_norm":
        return " (it has no attention pooling)"
    return ""


def attribute(model: nn.Module, ids: Tensor, lengths: Tensor, method: str, *,
              target: Tensor | None = None, steps: int = IG_STEPS) -> Tensor:
    """Each token's score for class ``target`` (default: the predicted class) by ``method``, in eval mode.

    The model is left in eval mode. ``steps`` is the number of integrated-gradients steps.

    Shape:
        ids ``(B, T)``, lengths ``(B,)``, target ``(B,)``; returns ``(B, T)`` float32, zero on padding.
    """
    model = as_classifier(model)
    _check_method(model, method)
    model.eval()
    ids, lengths, mask = model.prepare(ids, lengths)  # type: ignore[operator]
    real = mask.key_mask()  # (B, T)
    if target is None:
        with torch.no_grad():
            target = model(ids, lengths).argmax(-1)  # (B,)
    target = torch.as_tensor(target, dtype=torch.long, device=ids.device).reshape(-1)
    if target.shape[0] != ids.shape[0]:
        raise ValueError(f"target must hold one class per document ({ids.shape[0]}), got {tuple(target.shape)}")
    scores = _METHODS[method](model, ids, lengths, target, steps)
    return (scores.detach().float() * real).to(torch.float32)


def _pick(logits: Tensor, target: Tensor) -> Tensor:
    """The sum of each document's ``target`` logit (a scalar to differentiate)."""
    return logits.gather(1, target[:, None]).sum()


@torch.no_grad()
def _contributions(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    per, _ = model.token_contributions(ids, lengths)  # (B, T, C)
    return per.gather(2, target[:, None, None].expand(-1, per.shape[1], 1))[..., 0]


@torch.no_grad()
def _attention(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    if _is_hf(model):
        _, layers, row, on_tokens = _layer_attention(model, ids, lengths)
        last = layers[-1].float().mean(1)  # (B, S, S): the last layer, mean of the heads
        return on_tokens((row.to(last)[:, None] @ last)[:, 0])  # the row of the position the classifier reads
    return model(ids, lengths, return_weights="pooling")[1]["pooling"]


def _is_hf(model: Any) -> bool:
    return isinstance(model, HFClassifier)


@torch.no_grad()
def _attention_norm(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    if hasattr(model, "weighted_norms"):  # a model whose pooling reads other rows than the tokens (chunks)
        return model.weighted_norms(ids, lengths)  # type: ignore[no-any-return]
    seen: list[Tensor] = []
    handle = model.pooling.register_forward_hook(lambda _m, args, _out: seen.append(args[0]))
    try:
        weights = model(ids, lengths, return_weights="pooling")[1]["pooling"]  # (B, T)
    finally:
        handle.remove()
    return weights * seen[-1].norm(dim=-1)  # (B, T): ||alpha_t v_t||


def _on_tokens(per_position: Tensor, tokens: Tensor, t: int, places: Tensor | None = None) -> Tensor:
    """The scores ``(B, T)`` of ``T = t`` tokens from per-position ones ``(B, S)``: the positions ``tokens``
    are the tokens ``places`` ``(B, n)`` of each document (None: the first ones, in order), and a token
    no position read gets 0 (a BERT classifier's encoder reads ``max_len`` of a document its n-gram half
    reads further: :meth:`~attnkit.models.bert_classifier.BertClassifier.encoder_places`)."""
    got = per_position[:, tokens]
    if places is None:
        return nn.functional.pad(got, (0, t - got.shape[1]))
    return got.new_zeros(got.shape[0], t).scatter(1, places, got)


def _layer_attention(model: Any, ids: Tensor, lengths: Tensor
                     ) -> tuple[Tensor, list[Tensor], Tensor, Callable[[Tensor], Tensor]]:
    """The logits, the self-attention maps in layer order, the pooling row and what turns scores of its
    positions ``(B, S)`` into the tokens' ``(B, T)`` (:func:`_on_tokens`: a token the attention did not
    read gets 0).

    For the document model: its encoder's and parameter-free layers' weights
    ``(B, H, T, T)`` and the pooling weights ``(B, T)``; for BERT, its layers'
    ``(B, H, S, S)`` over ``[CLS] tokens [SEP]`` and a one-hot ``[CLS]`` row
    (or the mean of the token rows with mean pooling); for a Hugging Face
    classifier, a one-hot row at the position it reads.
    """
    if _is_hf(model):
        logits, maps, row, tokens = layer_attention(model, ids, lengths, live=weights_kept_for_gradients())
        return logits, maps, row, lambda per: _on_tokens(per, tokens, ids.shape[1])
    if hasattr(model, "bert"):  # a BertClassifier
        layers: list[Tensor] = []  # each layer's own weights (the stacked copy is outside the graph)
        handles = [layer.register_forward_hook(lambda _m, _a, out: layers.append(out[1]))
                   for layer in model.bert.encoder.layer]
        try:
            logits = model(ids, lengths, return_weights=("layers", "pooling"))[0]
        finally:
            for handle in handles:
                handle.remove()
        s = layers[0].shape[-1]
        t = s - 2  # the tokens the encoder read (its first max_len when the n-gram half reads more)
        row = torch.zeros(ids.shape[0], s, dtype=layers[0].dtype, device=ids.device)
        if model.config.pooling == "cls":
            row[:, 0] = 1.0
        else:
            read = lengths.clamp(max=t)
            real = (torch.arange(t, device=ids.device)[None] < read[:, None]).to(row.dtype)
            row[:, 1 : t + 1] = real / read[:, None].to(row.dtype)
        tokens, places = torch.arange(1, t + 1, device=ids.device), model.encoder_places(lengths, ids.shape[1])
        return logits, layers, row, lambda per: _on_tokens(per, tokens, ids.shape[1], places)
    logits, found = model(ids, lengths, return_weights=True)
    names = sorted((k for k in found if k.startswith("encoder.")), key=lambda k: int(k.split(".")[1]))
    names += sorted((k for k in found if k.startswith("parameter_free.")), key=lambda k: int(k.split(".")[1]))
    return logits, [found[k] for k in names], found["pooling"], lambda per: per


@torch.no_grad()
def _rollout(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    from attnkit.viz.measures import attention_rollout

    _, layers, row, on_tokens = _layer_attention(model, ids, lengths)
    per_layer = [w.float().mean(1, keepdim=True).cpu().numpy() for w in layers]  # L x (B, 1, S, S)
    flow = torch.from_numpy(np.asarray(attention_rollout(per_layer), dtype=np.float32))  # (B, S, S)
    scores = (row.float().cpu()[:, None] @ flow)[:, 0]  # (B, S): the pooling row through the layers
    return on_tokens(scores.to(ids.device))


def _chefer(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    with torch.enable_grad(), weights_in_graph():
        logits, layers, row, on_tokens = _layer_attention(model, ids, lengths)
        wanted = [x for x in (*layers, row) if x.requires_grad]  # a one-hot row ([CLS]'s) is a constant
        found = iter(torch.autograd.grad(_pick(logits, target), wanted, allow_unused=True))
        grads = [next(found) if x.requires_grad else None for x in (*layers, row)]
    s = layers[0].shape[-1]
    relevance = torch.eye(s, device=ids.device).expand(ids.shape[0], s, s)  # (B, S, S)
    for a, g in zip(layers, grads[:-1], strict=True):
        g = torch.zeros_like(a) if g is None else g
        cam = (g * a).clamp_min(0).mean(1)  # (B, S, S): gradient-weighted heads, positive part
        relevance = relevance + cam @ relevance
    g_row = grads[-1]
    pool = row.detach() if g_row is None else (g_row * row).clamp_min(0).detach()  # (B, S)
    return on_tokens((pool[:, None] @ relevance)[:, 0]).detach()


def _embedding_module(model: Any) -> nn.Module:
    if _is_hf(model):
        return embedding_module(model)
    return model.bert.embeddings.word_embeddings if hasattr(model, "bert") else model.embedding


def _with_embeddings(model: Any, ids: Tensor, lengths: Tensor, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The logits with the word embeddings ``e`` replaced by a leaf ``scale * e``, that leaf, and ``e``."""
    leaf: list[Tensor] = []

    def hook(_m: nn.Module, _args: Any, out: Tensor) -> Tensor:
        leaf.extend([(out.detach() * scale).requires_grad_(True), out.detach()])
        return leaf[0]

    handle = _embedding_module(model).register_forward_hook(hook)
    try:
        logits = model(ids, lengths)
    finally:
        handle.remove()
    return logits, leaf[0], leaf[1]


def _token_axis(model: Any, per: Tensor, lengths: Tensor, t: int) -> Tensor:
    """Per-position scores of the embedded sequence, cut to the tokens (BERT's ``[CLS]``/``[SEP]`` dropped)."""
    if _is_hf(model):
        return per[:, model.offset : model.offset + t]
    if hasattr(model, "bert"):  # [CLS] tokens [SEP]: every token, or max_len of them (an n-gram half reads on)
        positions = torch.arange(1, per.shape[1] - 1, device=per.device)
        return _on_tokens(per, positions, t, model.encoder_places(lengths, t))
    return per


def _grad_input(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    with torch.enable_grad():
        logits, e, _ = _with_embeddings(model, ids, lengths, 1.0)
        (grad,) = torch.autograd.grad(_pick(logits, target), [e])
    return _token_axis(model, (grad * e).sum(-1), lengths, ids.shape[1]).detach()


def _integrated_gradients(model: Any, ids: Tensor, lengths: Tensor, target: Tensor, steps: int) -> Tensor:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    total: Tensor | None = None
    e_full: Tensor | None = None
    with torch.enable_grad():
        for k in range(steps):
            logits, e, e_full = _with_embeddings(model, ids, lengths, (k + 0.5) / steps)  # midpoint Riemann sum
            (grad,) = torch.autograd.grad(_pick(logits, target), [e])
            total = grad if total is None else total + grad
    assert total is not None and e_full is not None
    return _token_axis(model, (total / steps * e_full).sum(-1), lengths, ids.shape[1])


_METHODS: dict[str, Callable[[Any, Tensor, Tensor, Tensor, int], Tensor]] = {
    "contributions": _contributions,
    "attention": _attention,
    "attention_norm": _attention_norm,
    "rollout": _rollout,
    "grad_input": _grad_input,
    "integrated_gradients": _integrated_gradients,
    "chefer": _chefer,
}


def method_list(names: Sequence[str] | None, model: nn.Module) -> tuple[str, ...]:
    """``names`` checked against ``model`` (None: every applicable method)."""
    model = as_classifier(model)
    if names is None:
        return applicable_methods(model)
    for name in names:
        _check_method(model, name)
    return tuple(names)
