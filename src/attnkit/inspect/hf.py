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

An ``attention_mask`` the weights cannot be read from (a flex-attention
``BlockMask``) or a logit soft-cap marks the call as missed, by module name,
rather than recording wrong weights.
"""

from __future__ import annotations

import functools
import inspect as _pyinspect
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.attention import masks
from attnkit.attention.functional import attention_weights

__all__ = ["is_hf_attention", "hf_weights", "HFPatches"]

Callback = Callable[[nn.Module, Tensor, Tensor, Any, dict[str, Any]], None]


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


def hf_weights(module: nn.Module, query: Tensor, key: Tensor, attention_mask: Any,
               kwargs: dict[str, Any]) -> Tensor:
    """``softmax(Q K^T * scaling + mask)`` for one call of the attention function.

    Shape:
        query ``(B, H, Tq, Dh)``, key ``(B, Hkv, Tk, Dh)``; attention_mask a
        ``(B, 1|H, Tq, Tk)`` bool (True = attend) or additive float tensor, a
        ``(B, Tk)`` 1/0 padding mask, or None; returns ``(B, H, Tq, Tk)``.
    """
    if kwargs.get("softcap") is not None:
        raise UnreadableCall("logit soft-capping is not reproduced")
    scaling = kwargs.get("scaling")
    tq, tk = query.shape[-2], key.shape[-2]
    keep: Tensor | None = None
    bias: Tensor | None = None
    causal = False
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
        bias = attention_mask[..., :tk]
    w = attention_weights(query.detach(), key.detach(), mask=keep, bias=None if bias is None else bias.detach(),
                          causal=causal, scale=scaling)
    return w


def _wrap(original: Callable[..., Any], owners: dict[int, Callback]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapped(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                *args: Any, **kwargs: Any) -> Any:
        out = original(module, query, key, value, attention_mask, *args, **kwargs)
        callback = owners.get(id(module))
        if callback is not None:
            callback(module, query, key, attention_mask, kwargs)
        return out

    wrapped.__attnkit_original__ = original  # type: ignore[attr-defined]
    return wrapped


class HFPatches:
    """The wrapped attention functions, shared by every open capture (reference-counted)."""

    owners: dict[int, Callback] = {}
    _installed: dict[tuple[Any, ...], tuple[Callable[[], None], int]] = {}

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
        """Wrap the functions ``modules`` dispatch to and route their calls to ``callback``."""
        keys = []
        for m in modules:
            key, install = cls._target(m)
            if key in cls._installed:
                restore, count = cls._installed[key]
                cls._installed[key] = (restore, count + 1)
            else:
                cls._installed[key] = (install(), 1)
            keys.append(key)
            cls.owners[id(m)] = callback
        return keys

    @classmethod
    def close(cls, modules: list[nn.Module], keys: list[tuple[Any, ...]]) -> None:
        for m in modules:
            cls.owners.pop(id(m), None)
        for key in keys:
            restore, count = cls._installed[key]
            if count == 1:
                restore()
                del cls._installed[key]
            else:
                cls._installed[key] = (restore, count - 1)
