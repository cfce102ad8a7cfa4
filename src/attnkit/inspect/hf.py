"""Weights of Hugging Face attention modules, whatever their ``attn_implementation``.

Every attention module of a current ``transformers`` model (BERT and its
family, GPT-2, LLaMA and its family, ViT, ...) hands its projected queries and
keys to one attention function, picked at call time from
``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`` or, for ``"eager"``,
the ``eager_attention_forward`` of the model's own file. While a capture is
open that function is wrapped: the wrapper calls the original (SDPA, flash,
eager...) unchanged, returns its output untouched, and then computes
``softmax(Q K^T * scaling + mask)`` beside it from the same ``query``, ``key``
(rotary positions and key/value caches already applied, grouped key/value
heads shared as in the kernel) and ``attention_mask`` with
:func:`attnkit.attention_weights`. The wrappers are removed when the last
capture closes; calls from modules that are not being captured pass straight
through.

Inside :func:`attnkit.core.dispatch.weights_in_graph` (a context
variable: this thread only), a captured call runs the model's own eager
function instead, so its output is computed from the recorded weights and
gradients reach them (``cap.live``).

An ``attention_mask`` the weights cannot be read from (torch's flex-attention
``BlockMask``) marks the call as missed, by module name, rather than recording
wrong weights. attnkit's own ``BlockMask`` (``attn_implementation="attnkit"``)
is read as the dense mask it stands for (:func:`dense_mask`).
"""

from __future__ import annotations

import functools
import inspect as _pyinspect
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.core import masks
from attnkit.core.block_mask import BlockMask
from attnkit.core.dispatch import weights_kept_for_gradients
from attnkit.core.functional import attention_weights, safe_softmax
from attnkit.integrations.positions import FORWARD_POSITION_IDS

__all__ = ["is_hf_attention", "hf_weights", "check_keywords", "HFPatches", "UnreadableCall", "INERT", "TERMS",
           "eager_reference", "eager_call", "dense_mask", "real_queries", "BACKEND"]

Callback = Callable[..., None]
"""Called after each captured call: module, query, key, value, mask, keywords, and a seventh argument, the
weights the output was computed from, only inside :func:`~attnkit.core.dispatch.weights_in_graph`."""


@functools.lru_cache(maxsize=256)
def _dispatches(cls: Any) -> bool:
    try:
        source = _pyinspect.getsource(cls.forward)  # type: ignore[attr-defined]
    except (OSError, TypeError):
        return False
    return "ALL_ATTENTION_FUNCTIONS" in source and "eager_attention_forward" in source


def is_hf_attention(module: nn.Module) -> bool:
    """True for a ``transformers`` module that dispatches through the attention interface."""
    config = getattr(module, "config", None)
    return (type(module).__module__.startswith("transformers.") and config is not None
            and hasattr(config, "_attn_implementation") and _dispatches(type(module)))  # type: ignore[arg-type]


class UnreadableCall(ValueError):
    """A call whose weights cannot be computed beside the kernel (the reason is the message)."""


INERT = frozenset({
    "dropout", "output_attentions", "output_hidden_states", "output_router_logits", "deterministic",
    "position_ids", "num_items_in_batch", "max_length_q", "max_length_k", "use_cache", "cache_position",
    "return_dict", "layer_idx", "target_dtype", "token_type_ids",
})
"""Keywords an attention function receives that change no score: read and set aside."""

TERMS = ("scaling", "is_causal", "position_bias", "softcap", "s_aux", "sinks", "sliding_window")
"""Keywords that change the scores and are computed into the recorded weights."""

# Keywords that restrict keys in a way only a 4-D mask also carries (packed documents).
PACKING = ("cu_seq_lens_q", "cu_seq_lens_k", "seq_idx")


def check_keywords(kwargs: dict[str, Any], attention_mask: Any) -> None:
    """Raise :class:`UnreadableCall` for a keyword whose effect on the scores is not reproduced.

    Every keyword is read by name: a score term in :data:`TERMS` is computed,
    one in :data:`INERT` changes nothing, packed-sequence boundaries are taken
    from the 4-D mask that carries them too; anything else that is set (not
    None, a bool or a string) may add to the scores, so the call is refused
    by the keyword's name rather than recorded wrong.
    """
    for name, value in kwargs.items():
        if name in TERMS or name in INERT or value is None or isinstance(value, (bool, str)):
            continue
        if name in PACKING:
            if isinstance(attention_mask, Tensor) and attention_mask.dim() == 4:
                continue
            raise UnreadableCall(f"packed sequences ({name}) without a 4-D mask that separates them")
        raise UnreadableCall(f"the attention function receives {name}={type(value).__name__}, "
                             "whose effect on the scores is not reproduced")


BACKEND = "attnkit"
"""The ``attn_implementation`` of attnkit's own backend (:mod:`attnkit.integrations.transformers`)."""


def dense_mask(module: nn.Module, attention_mask: Any, kwargs: dict[str, Any], tq: int, tk: int) -> Any:
    """The mask a call attends with, dense where the attnkit backend passed a BlockMask or packs rows.

    An attnkit :class:`~attnkit.core.block_mask.BlockMask` (what the backend's
    mask builder makes) becomes its exact ``(B|1, 1, Tq, Tk)`` boolean mask. A
    module running on the backend also keeps each query within its document
    where ``position_ids`` restart (:func:`attnkit.core.masks.restart_documents`;
    the call's own, else those of the model forward, ``FORWARD_POSITION_IDS``)
    and the mask is a BlockMask or none, as the backend does; a causal call
    without a mask then gets causality written in. Anything else is returned as given.
    """
    dense = attention_mask.to_dense() if isinstance(attention_mask, BlockMask) else attention_mask
    position_ids = kwargs.get("position_ids")
    if position_ids is None:  # a model that keeps them from its layers (ModernBERT): its forward's
        position_ids = FORWARD_POSITION_IDS.get()
    on_backend = getattr(getattr(module, "config", None), "_attn_implementation", None) == BACKEND
    if (not on_backend or not isinstance(position_ids, Tensor) or position_ids.dim() != 2 or tq != tk
            or position_ids.shape[-1] != tq or not (attention_mask is None or isinstance(attention_mask, BlockMask))):
        return dense
    docs = masks.restart_documents(position_ids.to(dense.device if isinstance(dense, Tensor) else position_ids.device))
    if docs is None:
        return dense
    same = (docs[:, :, None] == docs[:, None, :])[:, None]  # (B, 1, T, T)
    if dense is None:
        is_causal = kwargs.get("is_causal")
        if bool(getattr(module, "is_causal", True) if is_causal is None else is_causal) and tq > 1:
            same = same & masks.causal(tq, tk, device=same.device)
        return same
    return dense & same


def real_queries(module: nn.Module, attention_mask: Any, kwargs: dict[str, Any], tq: int, tk: int
                 ) -> Tensor | None:
    """True for each query row the call's mask lets attend some key: the real queries, not padding.

    Read from the 4-D mask the call attends with (:func:`dense_mask`: boolean,
    or additive with the dtype's minimum or ``-inf`` where a key is excluded);
    ``None`` where the call has no such mask (every row is a real query).

    Shape:
        returns ``(B|1, H|1, Tq, 1)`` bool or ``None``.
    """
    mask = dense_mask(module, attention_mask, kwargs, tq, tk)
    if not (isinstance(mask, Tensor) and mask.dim() == 4):
        return None
    mask = mask[..., :tk]
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return allowed.any(dim=-1, keepdim=True)


def _sink_softmax(scores: Tensor, keep: Tensor | None, sinks: Tensor) -> Tensor:
    """Softmax over each row plus one sink logit per head, the sink's share dropped (GPT-OSS).

    Shape:
        scores ``(B, H, Tq, Tk)``, sinks ``(H,)``; returns ``(B, H, Tq, Tk)``.
    """
    sink = sinks.float().reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)  # (B, H, Tq, 1)
    both = torch.cat([scores, sink], dim=-1)  # (B, H, Tq, Tk + 1)
    if keep is not None:  # the sink is always allowed
        keep = torch.cat([keep.expand(*scores.shape), keep.new_ones(*scores.shape[:-1], 1)], dim=-1)
    return safe_softmax(both, keep)[..., :-1]


def hf_weights(module: nn.Module, query: Tensor, key: Tensor, attention_mask: Any,
               kwargs: dict[str, Any]) -> Tensor:
    """``softmax(softcap(Q K^T * scaling + position_bias) + mask)`` (with sinks) for one call.

    The terms come from the keywords the attention function receives
    (:data:`TERMS`); any other keyword that may change the scores makes the
    call unreadable (:func:`check_keywords`). A ``sliding_window`` is applied
    when the mask does not already hold it (a flash-attention call's
    ``(B, Tk)`` padding mask, or none).

    Shape:
        query ``(B, H, Tq, Dh)``, key ``(B, Hkv, Tk, Dh)``; attention_mask a
        ``(B, 1|H, Tq, Tk)`` bool (True = attend) or additive float tensor, a
        ``(B, Tk)`` 1/0 padding mask, or None; position_bias ``(1|B, H, Tq, Tk)``;
        sinks ``(H,)``; returns ``(B, H, Tq, Tk)``.
    """
    tq, tk = query.shape[-2], key.shape[-2]
    attention_mask = dense_mask(module, attention_mask, kwargs, tq, tk)
    check_keywords(kwargs, attention_mask)
    scaling = kwargs.get("scaling")
    keep: Tensor | None = None
    bias: Tensor | None = None
    causal = False
    full = isinstance(attention_mask, Tensor) and attention_mask.dim() == 4
    if attention_mask is None:
        is_causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", False) if is_causal is None else is_causal) and tq > 1
    elif not isinstance(attention_mask, Tensor):
        raise UnreadableCall(f"an attention_mask of type {type(attention_mask).__name__}")
    elif attention_mask.dim() == 2:  # flash attention's (B, Tk) padding mask
        keep = masks.from_hf_attention_mask(attention_mask)
        causal = bool(getattr(module, "is_causal", False)) and tq > 1
    elif attention_mask.dtype == torch.bool:
        keep = attention_mask[..., :tk]
    else:
        bias = attention_mask[..., :tk].float()
    window = kwargs.get("sliding_window")
    if window is not None and not full and int(window) < tk:  # HF's window: key distance < sliding_window
        band = masks.sliding_window(tq, tk, int(window) - 1, device=query.device)
        keep = masks.combine(keep, masks.combine(band, masks.causal(tq, tk, device=query.device)))
    position_bias = kwargs.get("position_bias")
    if isinstance(position_bias, Tensor):
        term = position_bias[..., :tk].float()
        bias = term if bias is None else bias + term
    softcap = kwargs.get("softcap")
    sinks = next((kwargs[n] for n in ("s_aux", "sinks") if isinstance(kwargs.get(n), Tensor)), None)
    q, k = query.detach(), key.detach()
    if softcap is None and sinks is None:
        w = attention_weights(q, k, mask=keep, bias=None if bias is None else bias.detach(), causal=causal,
                              scale=scaling)
        return w
    groups = q.shape[1] // k.shape[1]
    scale = q.shape[-1] ** -0.5 if scaling is None else float(scaling)
    scores = q.float() @ k.float().repeat_interleave(groups, dim=1).transpose(-2, -1) * scale  # (B, H, Tq, Tk)
    if softcap is not None:
        scores = torch.tanh(scores / float(softcap)) * float(softcap)
    if bias is not None:
        scores = scores + bias.detach()
    if causal:
        keep = masks.combine(keep, masks.causal(tq, tk, device=q.device))
    if sinks is not None:
        return _sink_softmax(scores, keep, sinks.detach()).to(q.dtype)
    return safe_softmax(scores, keep).to(q.dtype)


def _wrap(original: Callable[..., Any], owners: dict[int, list[Callback]]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapped(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                *args: Any, **kwargs: Any) -> Any:
        callbacks = list(owners.get(id(module), ()))  # every open capture of this module
        live = None
        if callbacks and not args and weights_kept_for_gradients():
            try:  # the output from the weights, so gradients reach them (inside weights_in_graph only)
                out = eager_call(module, query, key, value, attention_mask, kwargs)
                live = out[1]
            except UnreadableCall:
                live = None
        if live is None:
            out = original(module, query, key, value, attention_mask, *args, **kwargs)
        for callback in callbacks:  # the live weights only when there are any: older callbacks take six
            if live is None:
                callback(module, query, key, value, attention_mask, kwargs)
            else:
                callback(module, query, key, value, attention_mask, kwargs, live)
        return out

    wrapped.__attnkit_original__ = original  # type: ignore[attr-defined]
    return wrapped


def eager_function(module: nn.Module) -> Callable[..., Any]:
    """The ``eager_attention_forward`` of ``module``'s own model file (unwrapped)."""
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    while fn is not None and hasattr(fn, "__attnkit_original__"):
        fn = fn.__attnkit_original__
    if fn is None:
        raise UnreadableCall(f"{type(module).__module__} has no eager_attention_forward to recompute it with")
    return fn  # type: ignore[no-any-return]


def eager_reference(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                    kwargs: dict[str, Any]) -> Tensor:
    """The weights the model's own eager attention function returns for this call (:func:`eager_call`).

    Shape:
        as :func:`hf_weights`; returns ``(B, H, Tq, Tk)``.
    """
    return eager_call(module, query, key, value, attention_mask, kwargs)[1]


def eager_call(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
               kwargs: dict[str, Any]) -> tuple[Any, Tensor]:
    """The model's own eager attention function on this call: its output and the weights it is computed from.

    The mask is handed over in the eager form (additive floats, the dtype's
    minimum where a key is excluded); a call whose kernel took the causal or
    sliding-window structure from a flag or a ``(B, Tk)`` padding mask gets
    that structure written into the mask. Dropout is off.

    Shape:
        as :func:`hf_weights`; the output as the attention function returns it, weights ``(B, H, Tq, Tk)``.
    """
    fn = eager_function(module)
    tq, tk = query.shape[-2], key.shape[-2]
    mask = dense_mask(module, attention_mask, kwargs, tq, tk)
    if not (isinstance(mask, Tensor) and mask.dim() == 4):
        keep: Tensor | None = None
        if isinstance(mask, Tensor):  # (B, Tk) 1/0 padding
            keep = masks.from_hf_attention_mask(mask)
        is_causal = kwargs.get("is_causal")
        if bool(getattr(module, "is_causal", False) if is_causal is None else is_causal) and tq > 1:
            keep = masks.combine(keep, masks.causal(tq, tk, device=query.device))
        window = kwargs.get("sliding_window")
        if window is not None and int(window) < tk:
            keep = masks.combine(keep, masks.causal(tq, tk, device=query.device),
                                 masks.sliding_window(tq, tk, int(window) - 1, device=query.device))
        mask = keep
    if isinstance(mask, Tensor) and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
            ~mask, torch.finfo(query.dtype).min)
    rest = {k: v for k, v in kwargs.items() if k not in ("dropout", "is_causal", "sliding_window")}
    out, weights = fn(module, query, key, value, mask, dropout=0.0, **rest)
    if not isinstance(weights, Tensor):
        raise UnreadableCall(f"{fn.__module__}.eager_attention_forward returns no weights")
    return out, weights


class HFPatches:
    """The wrapped attention functions, shared by every open capture (reference-counted, thread-safe)."""

    owners: dict[int, list[Callback]] = {}
    _installed: dict[tuple[Any, ...], tuple[Callable[[], None], int]] = {}
    _lock = threading.Lock()

    @classmethod
    def _target(cls, module: nn.Module) -> tuple[tuple[Any, ...], Callable[[], Callable[[], None]]]:
        pymod: Any = sys.modules[type(module).__module__]
        impl = getattr(module.config, "_attn_implementation", None) or "eager"
        interface = getattr(pymod, "ALL_ATTENTION_FUNCTIONS", None)
        if impl == "eager" or interface is None or impl not in interface:
            def install_eager() -> Callable[[], None]:
                original = pymod.eager_attention_forward
                pymod.eager_attention_forward = _wrap(original, cls.owners)
                return lambda: setattr(pymod, "eager_attention_forward", original)
            return ("eager", pymod.__name__), install_eager

        def install_interface() -> Callable[[], None]:
            local = interface._local_mapping
            had, before = impl in local, local.get(impl)
            local[impl] = _wrap(interface[impl], cls.owners)

            def restore() -> None:
                if had:
                    local[impl] = before
                else:
                    local.pop(impl, None)
            return restore
        return ("interface", id(interface), impl), install_interface

    @classmethod
    def open(cls, modules: list[nn.Module], callback: Callback) -> list[tuple[Any, ...]]:
        """Wrap the functions ``modules`` dispatch to and route their calls to ``callback`` too."""
        keys = []
        with cls._lock:
            for m in modules:
                key, install = cls._target(m)
                if key in cls._installed:
                    restore, count = cls._installed[key]
                    cls._installed[key] = (restore, count + 1)
                else:
                    cls._installed[key] = (install(), 1)
                keys.append(key)
                cls.owners.setdefault(id(m), []).append(callback)
        return keys

    @classmethod
    def close(cls, modules: list[nn.Module], keys: list[tuple[Any, ...]], callback: Callback) -> None:
        with cls._lock:
            for m in modules:
                left = [c for c in cls.owners.get(id(m), []) if c is not callback]
                if left:
                    cls.owners[id(m)] = left
                else:
                    cls.owners.pop(id(m), None)
            for key in keys:
                restore, count = cls._installed[key]
                if count == 1:
                    restore()
                    del cls._installed[key]
                else:
                    cls._installed[key] = (restore, count - 1)
