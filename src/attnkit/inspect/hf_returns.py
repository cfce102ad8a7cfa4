"""Hugging Face attention modules that compute their own eager weights instead of dispatching.

A few ``transformers`` architectures keep an attention module that does not
go through the attention interface (:mod:`attnkit.inspect.hf`) but computes
its probabilities itself, with terms no generic reader reproduces: ALiBi
(BLOOM, Falcon), local windows (GPT-Neo), disentangled position terms
(DeBERTa-v2). Their weights are read from the module itself:

* modules that always return them (``BloomAttention``, ``GPTNeoSelfAttention``,
  ``BlipAttention``): the second element of the module's output, untouched;
* modules that return them on request (``FalconAttention`` under SDPA,
  DeBERTa-v2's ``DisentangledSelfAttention``): when the model did not ask,
  the module is called once more with ``output_attentions=True``, in eval
  mode and without gradients, and only its weights are kept (the model's
  output is the first call's). Only under ``attn_implementation="eager"``:
  Falcon's SDPA path folds ALiBi into the mask, which its weights path
  would add a second time, so there the call is missed with that reason. A call whose key/value cache already held
  earlier keys is not repeated (the cache would grow twice): it is missed.

Only the classes listed here are read this way, by name: another module's
second output need not be a map over key positions (Longformer's is banded).
"""

from __future__ import annotations

import inspect as _pyinspect
from typing import Any

import torch
from torch import Tensor, nn

from attnkit._modes import eval_mode

__all__ = ["RETURNS_WEIGHTS", "ON_REQUEST", "is_hf_returning", "returned_weights"]

RETURNS_WEIGHTS = frozenset({"BloomAttention", "GPTNeoSelfAttention", "BlipAttention"})
"""Classes whose output always holds their ``(B, H, Tq, Tk)`` weights second."""

ON_REQUEST = frozenset({"FalconAttention", "DisentangledSelfAttention"})
"""Classes that return their weights when called with ``output_attentions=True`` (eager only)."""

_CACHES = ("layer_past", "past_key_values", "past_key_value", "cache")


def is_hf_returning(module: nn.Module) -> bool:
    """True for one of the listed ``transformers`` classes that compute their own weights."""
    cls = type(module)
    return cls.__module__.startswith("transformers.") and cls.__name__ in RETURNS_WEIGHTS | ON_REQUEST


class RepeatRefused(ValueError):
    """A call that cannot be repeated for its weights (the reason is the message)."""


def _weights(output: Any, tq: int) -> Tensor | None:
    if isinstance(output, tuple) and len(output) > 1 and isinstance(output[1], Tensor) \
            and output[1].dim() == 4 and output[1].shape[-2] == tq:
        return output[1]
    return None


def returned_weights(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> Tensor:
    """The ``(B, H, Tq, Tk)`` weights of one call, from its output or one weights-only repeat.

    Shape:
        hidden_states ``(B, Tq, D)``; returns ``(B, H, Tq, Tk)``.
    """
    bound = _pyinspect.signature(type(module).forward).bind(module, *args, **kwargs)
    a = dict(bound.arguments)
    a.pop("self")
    extra = a.pop("kwargs", {}) if "kwargs" in _pyinspect.signature(type(module).forward).parameters else {}
    hidden = a.get("hidden_states")
    tq = int(hidden.shape[1]) if isinstance(hidden, Tensor) else -1
    w = _weights(output, tq)
    if w is not None:
        return w.detach()
    if type(module).__name__ not in ON_REQUEST:
        raise RepeatRefused("its output holds no (B, H, Tq, Tk) weights")
    impl = getattr(getattr(module, "config", None), "_attn_implementation", "eager") or "eager"
    if impl != "eager":  # Falcon under SDPA folds ALiBi into the mask; its output_attentions path does not
        raise RepeatRefused(f"under attn_implementation={impl!r} the module's output_attentions path is not "
                            "the path that ran (load the model with attn_implementation='eager' to read it)")
    for name in _CACHES:
        cache = a.get(name)
        if cache is None:
            continue
        held = cache.get_seq_length(getattr(module, "layer_idx", 0)) if hasattr(cache, "get_seq_length") else -1
        if held != tq:  # earlier keys in the cache: the repeat would not see the same keys
            raise RepeatRefused("a cached decoding step is not repeated (its cache would grow twice)")
        a[name] = None
    a["output_attentions"] = True
    if "use_cache" in a:
        a["use_cache"] = False
    with eval_mode(module), torch.no_grad():
        again = type(module).forward(module, **a, **extra)
    w = _weights(again, tq)
    if w is None:
        raise RepeatRefused("output_attentions=True returned no (B, H, Tq, Tk) weights")
    return w.detach()
