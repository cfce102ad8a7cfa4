"""``capture(model)``: read the attention weights out of a model that does not return them.

::

    with capture(model) as cap:
        out = model(x)              # the model's own kernels, its own output
    cap.weights                     # {module name: (B, H, Tq, Tk)}, in call order

Which modules are read, and how (each file says more):

======================================= ======================================================
module                                  how its weights are read
======================================= ======================================================
``nn.MultiheadAttention``               forward pre-hook on the module (``torch_nn``)
``nn.TransformerEncoderLayer``'s MHA    forward pre-hook on the layer, also on the fast path
Hugging Face attention modules          the attention function they dispatch to is wrapped (``hf``)
timm ``Attention``                      forward pre-hook, from its qkv layer (``timm_attention``)
attnkit layers                          ``return_weights=True`` (``own_layers``)
======================================= ======================================================

In every case the weights are computed *beside* the model: its output is
bit-for-bit what it gives without a capture, from the same kernels. Modules
whose class name says attention but which none of these reads are listed in
``cap.unsupported`` (and a warning names them); calls that could not be read
are in ``cap.missed`` with the reason.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.inspect.hf import HFPatches, UnreadableCall, hf_weights, is_hf_attention
from attnkit.inspect.own_layers import OWN_LAYERS, CacheCall, own_layer_weights
from attnkit.inspect.timm_attention import is_timm_attention, timm_call_weights
from attnkit.inspect.torch_nn import encoder_layer_call_weights, mha_call_weights
from attnkit.inspect.views import CaptureViews

__all__ = ["capture", "Capture", "find_attention"]

_ATTENTION_NAME = re.compile(r"attention|attn", re.IGNORECASE)
SUPPORTED = ("torch.nn.MultiheadAttention (also inside nn.TransformerEncoder/Decoder), Hugging Face "
             "attention modules that dispatch through ALL_ATTENTION_FUNCTIONS, timm Attention, attnkit layers")


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.TransformerEncoderLayer):
        return "torch-encoder-layer"
    if isinstance(module, nn.MultiheadAttention):
        return "torch-mha"
    if isinstance(module, OWN_LAYERS):
        return "attnkit"
    if is_hf_attention(module):
        return "hf"
    if is_timm_attention(module):
        return "timm"
    return None


def find_attention(model: nn.Module) -> tuple[dict[str, tuple[str, nn.Module]], list[str]]:
    """The attention modules of ``model``: ``({name: (kind, module)}, unsupported names)``.

    An encoder layer's ``self_attn`` is listed under its own name
    (``layers.0.self_attn``) but read through the layer (kind
    ``torch-encoder-layer``), whose fast path bypasses it. Unsupported: a module
    whose class name mentions attention, that is not read, holds no read module
    and sits inside none.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    found: dict[str, tuple[str, nn.Module]] = {}
    inside: set[int] = set()
    for name, m in model.named_modules():
        if id(m) in inside:
            continue
        kind = _kind(m)
        if kind is None:
            continue
        key = f"{name}.self_attn" if kind == "torch-encoder-layer" else name
        found[key.lstrip(".")] = (kind, m)
        inside.update(id(s) for s in m.modules())
    covered = {id(s) for _, m in found.values() for s in m.modules()}
    unsupported = []
    for name, m in model.named_modules():
        if id(m) in covered or not _ATTENTION_NAME.search(type(m).__name__):
            continue
        if any(id(s) in covered for s in m.modules()):
            continue  # a container of read modules (a Hugging Face BertAttention, say)
        unsupported.append(f"{name or '(model)'} ({type(m).__name__})")
    return found, unsupported


def _select(found: dict[str, tuple[str, nn.Module]], model: nn.Module, modules: Iterable[Any] | None,
            layers: Iterable[int] | None) -> dict[str, tuple[str, nn.Module]]:
    chosen = dict(found)
    if modules is not None:
        if isinstance(modules, (str, nn.Module)):
            modules = [modules]
        names = {id(m): n for n, m in model.named_modules()}
        chosen = {}
        for item in modules:
            name = names.get(id(item)) if isinstance(item, nn.Module) else item
            if not isinstance(name, str):
                raise ValueError(f"modules: {item!r} is not a module of the model (expected names or submodules)")
            if name not in names.values():
                raise ValueError(f"modules: the model has no module {name!r}; its attention modules are "
                                 f"{sorted(found)}")
            under = {n: v for n, v in found.items() if n == name or n.startswith(f"{name}.") or not name}
            if not under:
                m = dict(model.named_modules())[name]
                raise ValueError(f"modules: {name!r} ({type(m).__name__}) cannot be captured: it is not, and "
                                 f"holds no, supported attention module ({SUPPORTED})")
            chosen.update(under)
    if layers is not None:
        order = list(chosen)
        picked: dict[str, tuple[str, nn.Module]] = {}
        for i in layers:
            if not isinstance(i, int) or isinstance(i, bool) or not -len(order) <= i < len(order):
                raise ValueError(f"layers: expected indices into the {len(order)} attention modules "
                                 f"({-len(order)} .. {len(order) - 1}), got {i!r}")
            picked[order[i]] = chosen[order[i]]
        chosen = dict(sorted(picked.items(), key=lambda kv: order.index(kv[0])))
    return chosen


class Capture(CaptureViews):
    """What one :func:`capture` recorded.

    Attributes:
        weights: ``{module name: weights (B, H, Tq, Tk)}`` in call order; a
            module called again in the same capture adds ``name#1``, ``name#2``...
        vectors: ``{name: (q (B, H, Tq, Dh), k (B, H, Tk, Dh))}`` when
            ``vectors=True`` (for the neuron view), for the modules that have them.
        modules: ``{name: kind}`` of the modules being read.
        unsupported: attention-like modules nothing reads, by name and class.
        missed: ``{name: reason}`` for calls whose weights could not be read.
    """

    def __init__(self, modules: dict[str, str], unsupported: list[str], keep_vectors: bool) -> None:
        self.weights: dict[str, Tensor] = {}
        self.vectors: dict[str, tuple[Tensor, Tensor]] = {}
        self.modules = modules
        self.unsupported = unsupported
        self.missed: dict[str, str] = {}
        self._keep_vectors = keep_vectors
        self._calls: dict[str, int] = {}

    def _record(self, name: str, w: Tensor, q: Tensor | None = None, k: Tensor | None = None) -> None:
        n = self._calls.get(name, 0)
        self._calls[name] = n + 1
        key = name if n == 0 else f"{name}#{n}"
        self.weights[key] = w.detach()
        if self._keep_vectors and q is not None and k is not None:
            self.vectors[key] = (q.detach(), k.detach())

    def __repr__(self) -> str:
        shapes = ", ".join(f"{n}: {tuple(w.shape)}" for n, w in list(self.weights.items())[:4])
        more = " ..." if len(self.weights) > 4 else ""
        return f"Capture({len(self.weights)} calls: {shapes}{more}; unsupported {self.unsupported})"


class _ForwardWrapper:
    """``fn(module, args, kwargs)`` run before each call of ``module``, without a torch hook.

    ``nn.TransformerEncoderLayer`` leaves its fast path when any hook is
    attached to it or to its submodules, which would change the kernel that
    runs (and the last bits of the output). An instance attribute ``forward``
    that calls the class's own ``forward`` is invisible to that check; it is
    removed when the capture closes.
    """

    def __init__(self, module: nn.Module, fn: Any) -> None:
        self.module = module
        self.before = module.__dict__.get("forward")
        original = module.forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            fn(module, args, kwargs)
            return original(*args, **kwargs)

        self.wrapper = forward
        module.forward = forward  # type: ignore[method-assign]

    def remove(self) -> None:
        if self.module.__dict__.get("forward") is self.wrapper:
            if self.before is None:
                del self.module.forward
            else:
                self.module.forward = self.before  # type: ignore[method-assign]


def _hooks(cap: Capture, chosen: dict[str, tuple[str, nn.Module]], model: nn.Module) -> list[Any]:
    handles: list[Any] = []
    seen_len: dict[str, int | None] = {"encoder": None}

    def pre(name: str, fn: Any) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            try:
                with torch.no_grad():
                    w, q, k = fn(module, args, kwargs)
            except Exception as exc:  # the model's own call must go on: report, do not raise
                cap.missed[name] = f"{type(exc).__name__}: {exc}"
                return
            cap._record(name, w, q, k)
        return hook

    def own(name: str) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            try:
                cap._record(name, own_layer_weights(module, args, kwargs, output))
            except CacheCall as exc:
                cap.missed[name] = str(exc)
            except Exception as exc:  # the model's own call must go on: report, do not raise
                cap.missed[name] = f"{type(exc).__name__}: {exc}"
        return hook

    for name, (kind, m) in chosen.items():
        if kind == "torch-mha":
            handles.append(m.register_forward_pre_hook(pre(name, mha_call_weights), with_kwargs=True))
        elif kind == "torch-encoder-layer":
            def layer_fn(mod: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
                return encoder_layer_call_weights(mod, a, kw, seen_len["encoder"])  # type: ignore[arg-type]
            handles.append(_ForwardWrapper(m, pre(name, layer_fn)))
        elif kind == "timm":
            handles.append(m.register_forward_pre_hook(pre(name, timm_call_weights), with_kwargs=True))
        elif kind == "attnkit":
            handles.append(m.register_forward_hook(own(name), with_kwargs=True))

    def encoder_len(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        src = args[0] if args else kwargs.get("src")
        seen_len["encoder"] = int(src.shape[1]) if isinstance(src, Tensor) and src.dim() == 3 else None
    for m in model.modules():
        if isinstance(m, nn.TransformerEncoder):
            handles.append(_ForwardWrapper(m, encoder_len))
    return handles


def _hf_callback(cap: Capture, names: dict[int, str], pending: set[int]) -> Any:
    def callback(module: nn.Module, query: Tensor, key: Tensor, mask: Any, kwargs: dict[str, Any]) -> None:
        pending.discard(id(module))
        try:
            with torch.no_grad():
                w = hf_weights(module, query, key, mask, kwargs)
        except UnreadableCall as exc:
            cap.missed[names[id(module)]] = f"cannot be read beside the kernel: {exc}"
            return
        except Exception as exc:  # the model's own call must go on: report, do not raise
            cap.missed[names[id(module)]] = f"{type(exc).__name__}: {exc}"
            return
        cap._record(names[id(module)], w, query, key)
    return callback


@contextmanager
def capture(model: nn.Module, *, modules: Iterable[Any] | None = None, layers: Iterable[int] | None = None,
            vectors: bool = False) -> Iterator[Capture]:
    """Record the per-head attention weights of every supported attention module of ``model``.

    Args:
        model: any ``torch.nn.Module``.
        modules: names (or submodules) to read; a name of a container reads the
            attention modules under it. Default: all.
        layers: indices (negative from the end) into the attention modules, in
            model order, to keep (after ``modules``).
        vectors: also keep each call's query and key vectors (the neuron view).

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: the model has no attention module, a named module does not
            exist or cannot be captured, or an index is out of range.

    Shape:
        ``cap.weights[name]`` is ``(B, H, Tq, Tk)``.
    """
    found, unsupported = find_attention(model)
    if not found:
        what = f"; these attention modules cannot be captured: {unsupported}" if unsupported else ""
        raise ValueError(f"model: {type(model).__name__} has no attention module attnkit can capture "
                         f"(supported: {SUPPORTED}){what}")
    chosen = _select(found, model, modules, layers)
    if unsupported:
        warnings.warn(f"attention modules that cannot be captured (their weights are not recorded): "
                      f"{', '.join(unsupported)}", stacklevel=3)
    cap = Capture({n: kind for n, (kind, _) in chosen.items()}, unsupported, vectors)
    hf = [m for kind, m in chosen.values() if kind == "hf"]
    names = {id(m): n for n, (_, m) in chosen.items()}
    pending: set[int] = set()
    handles = _hooks(cap, chosen, model)
    for m in hf:
        handles.append(m.register_forward_pre_hook(lambda mod, _a: pending.add(id(mod))))

        def check(mod: nn.Module, _a: Any, _o: Any) -> None:
            if id(mod) in pending:
                pending.discard(id(mod))
                cap.missed.setdefault(names[id(mod)], "its attention function was not called "
                                      "(a model-specific path, e.g. GPT-2's reorder_and_upcast_attn)")
        handles.append(m.register_forward_hook(check))
    keys = HFPatches.open(hf, _hf_callback(cap, names, pending))
    try:
        yield cap
    finally:
        for h in handles:
            h.remove()
        HFPatches.close(hf, keys)
        if cap.missed:
            warnings.warn(f"attention calls not recorded: {cap.missed}", stacklevel=3)
