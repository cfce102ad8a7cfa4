"""Which modules look like attention, by what they do rather than what they are called.

A capture reads the modules it knows (see :mod:`attnkit.inspect.capture`);
everything else that *looks* like attention must be listed, so that a map is
never missing without a name. A module looks like attention when

* its class name says so (``...Attention``, ``...Attn``), or
* its ``forward`` dispatches through Hugging Face's attention interface, or
* it holds query/key projections (``qkv``, ``q_proj``/``k_proj``,
  ``query``/``key``, ``in_proj_weight``, ...) and its ``forward`` takes a
  softmax or calls ``scaled_dot_product_attention`` — timm's ``XCA``, say,
  whose name says neither.

:func:`unread_attention` returns the innermost such modules that no reader
covers: a container whose child is listed is not listed again.
"""

from __future__ import annotations

import functools
import inspect as _pyinspect
import re

from torch import nn

__all__ = ["looks_like_attention", "unread_attention"]

_ATTENTION_NAME = re.compile(r"attention|attn", re.IGNORECASE)
_PROJECTIONS = (
    ("qkv",), ("to_qkv",), ("c_attn",), ("query_key_value",), ("in_proj_weight",), ("Wqkv",), ("qk",),
    ("q", "k"), ("q_proj", "k_proj"), ("query", "key"), ("to_q", "to_k"), ("wq", "wk"), ("Wq", "Wk"),
    ("q_lin", "k_lin"), ("query_proj", "key_proj"), ("q_linear", "k_linear"),
)
_SCORES = re.compile(r"softmax|scaled_dot_product_attention|ALL_ATTENTION_FUNCTIONS")


@functools.lru_cache(maxsize=512)
def _forward_scores(cls: type) -> bool:
    try:
        source = _pyinspect.getsource(cls.forward)  # type: ignore[attr-defined]
    except (OSError, TypeError):
        return False
    return bool(_SCORES.search(source))


def looks_like_attention(module: nn.Module) -> bool:
    """True when ``module`` is named like attention or computes it (projections and a softmax)."""
    cls = type(module)
    if _ATTENTION_NAME.search(cls.__name__):
        return True
    if not any(all(hasattr(module, p) for p in names) for names in _PROJECTIONS):
        return False
    return _forward_scores(cls)  # type: ignore[arg-type]


def unread_attention(model: nn.Module, covered: set[int], top_name: str) -> list[str]:
    """``"name (Class)"`` of each innermost attention-like module no reader covers.

    ``covered`` holds the ids of the read modules and everything inside them.
    A container of read modules (a Hugging Face ``BertAttention``) is not listed.
    """
    named: list[tuple[str, nn.Module]] = [(n or top_name, m) for n, m in model.named_modules()]
    candidates: dict[int, tuple[str, nn.Module]] = {}
    for name, m in named:
        if id(m) in covered or not looks_like_attention(m):
            continue
        if any(id(s) in covered for s in m.modules()):
            continue
        candidates[id(m)] = (name, m)
    out = []
    for name, m in candidates.values():
        if any(id(s) in candidates for s in m.modules() if s is not m):
            continue  # its attention-like child is listed instead
        out.append(f"{name} ({type(m).__name__})")
    return out

