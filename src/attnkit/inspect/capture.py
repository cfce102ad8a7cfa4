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
BLOOM, Falcon, GPT-Neo, DeBERTa-v2...   the weights the module computes itself (``hf_returns``)
timm ``Attention``                      forward pre-hook, from its qkv layer (``timm_attention``)
timm Swin, BEiT, EVA, CaiT, ConViT...   the map the block passes through its ``attn_drop`` (``timm_blocks``)
attnkit layers                          ``return_weights=True`` (``own_layers``)
======================================= ======================================================

In every case the weights are computed *beside* the model: its output is
bit-for-bit what it gives without a capture, from the same kernels. Modules
that look like attention (by name, or by what they compute: see
:mod:`attnkit.inspect.detect`) but which none of these reads are listed in
``cap.unsupported`` (and a warning names them); calls that could not be read
exactly are in ``cap.missed`` with the reason, never recorded approximately.
``verify=True`` checks each read against the plain computation
(:mod:`attnkit.inspect.verify`). Each map has a role (``cap.roles``): encoder
self, decoder self, cross, self, or channel (XCiT's channel x channel map).
A windowed block's maps (Swin, MaxViT) keep their window order, with their
layout in ``cap.layouts``; ``cap.on_image(name)`` lays them on image positions.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from attnkit.inspect.detect import unread_attention
from attnkit.inspect.hf import (
    HFPatches,
    UnreadableCall,
    eager_reference,
    hf_weights,
    is_hf_attention,
    real_queries,
)
from attnkit.inspect.hf_returns import RepeatRefused, is_hf_returning, returned_weights
from attnkit.inspect.own_layers import OWN_LAYERS, CacheCall, own_layer_weights
from attnkit.inspect.timm_attention import is_timm_attention, timm_call_weights
from attnkit.inspect.timm_blocks import (
    WindowLayout,
    channel_block,
    drop_inputs,
    eager_probabilities,
    is_timm_block,
    outputs_agree,
    place_windows,
    window_layout,
)
from attnkit.inspect.torch_nn import encoder_layer_call_weights, mha_call_weights
from attnkit.inspect.verify import (
    CaptureMismatch,
    encoder_layer_reference,
    map_difference,
    mha_reference,
    timm_reference,
    tolerance,
)
from attnkit.inspect.views import CaptureViews

__all__ = ["capture", "Capture", "find_attention", "CaptureMismatch"]

SUPPORTED = ("torch.nn.MultiheadAttention (also inside nn.TransformerEncoder/Decoder), Hugging Face "
             "attention modules that dispatch through ALL_ATTENTION_FUNCTIONS or return their own weights "
             "(BLOOM, Falcon, GPT-Neo, DeBERTa-v2, BLIP), timm Attention and the timm blocks that pass their map "
             "through attn_drop (Swin, BEiT, EVA, CaiT, ConViT, MaxViT, XCiT), attnkit layers")


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.TransformerEncoderLayer):
        return "torch-encoder-layer"
    if isinstance(module, nn.MultiheadAttention):
        return "torch-mha"
    if isinstance(module, OWN_LAYERS):
        return "attnkit"
    if is_hf_attention(module):
        return "hf"
    if is_hf_returning(module):
        return "hf-returns"
    if is_timm_attention(module):
        return "timm"
    if is_timm_block(module):
        return "timm-block"
    return None


def find_attention(model: nn.Module) -> tuple[dict[str, tuple[str, nn.Module]], list[str]]:
    """The attention modules of ``model``: ``({name: (kind, module)}, unsupported names)``.

    An encoder layer's ``self_attn`` is listed under its own name
    (``layers.0.self_attn``) but read through the layer (kind
    ``torch-encoder-layer``), whose fast path bypasses it. The model itself,
    when it is the attention module, is named after its class. Unsupported:
    the innermost modules that look like attention (:mod:`attnkit.inspect.detect`)
    that are not read, hold no read module and sit inside none.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    top = type(model).__name__
    found: dict[str, tuple[str, nn.Module]] = {}
    inside: set[int] = set()
    for name, m in model.named_modules():
        if id(m) in inside:
            continue
        kind = _kind(m)
        if kind is None:
            continue
        key = f"{name}.self_attn" if kind == "torch-encoder-layer" else name
        found[key.lstrip(".") or top] = (kind, m)
        inside.update(id(s) for s in m.modules())
    covered = {id(s) for _, m in found.values() for s in m.modules()}
    return found, unread_attention(model, covered, top)


def _select(found: dict[str, tuple[str, nn.Module]], model: nn.Module, modules: Iterable[Any] | None,
            layers: Iterable[int] | None) -> dict[str, tuple[str, nn.Module]]:
    chosen = dict(found)
    if modules is not None:
        if isinstance(modules, (str, nn.Module)):
            modules = [modules]
        names = {id(m): n or type(model).__name__ for n, m in model.named_modules()}
        chosen = {}
        for item in modules:
            name = names.get(id(item)) if isinstance(item, nn.Module) else item
            name = type(model).__name__ if name == "" else name
            if not isinstance(name, str):
                raise ValueError(f"modules: {item!r} is not a module of the model (expected names or submodules)")
            if name not in names.values():
                raise ValueError(f"modules: the model has no module {name!r}; its attention modules are "
                                 f"{sorted(found)}")
            whole = name == type(model).__name__
            under = {n: v for n, v in found.items() if n == name or n.startswith(f"{name}.") or whole}
            if not under:
                m = {n or type(model).__name__: s for n, s in model.named_modules()}[name]
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


ROLES = ("encoder self", "decoder self", "cross", "self", "channel")
"""What a recorded map can be (``cap.roles``)."""

_CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn", "multihead_attn",
                "cross_attention")
_CROSS_KEYWORDS = ("key_value_states", "encoder_hidden_states")


def _stacks(names: Iterable[str]) -> bool:
    """Whether the module names show an encoder and a decoder (an encoder-decoder model)."""
    parts = [set(n.split(".")) for n in names]
    return any(p.startswith("encoder") for s in parts for p in s) and \
        any(p.startswith("decoder") for s in parts for p in s)


def _role(name: str, cross: bool, two_stacks: bool) -> str:
    """``"cross"``, ``"encoder self"``, ``"decoder self"`` or ``"self"`` for a call of module ``name``.

    Encoder and decoder are told apart only in a model that has both.
    """
    parts = name.split("#")[0].split(".")
    if cross or any(p in _CROSS_NAMES for p in parts):
        return "cross"
    if not two_stacks:
        return "self"
    if any(p.startswith("decoder") for p in parts):
        return "decoder self"
    if any(p.startswith("encoder") for p in parts):
        return "encoder self"
    return "self"


class Capture(CaptureViews):
    """What one :func:`capture` recorded.

    Attributes:
        weights: ``{module name: weights (B, H, Tq, Tk)}`` in call order; a
            module called again in the same capture adds ``name#1``, ``name#2``...
        roles: ``{name: role}`` for each recorded call: ``"encoder self"``,
            ``"decoder self"``, ``"cross"`` (decoder queries, encoder keys), ``"self"``
            or ``"channel"`` (XCiT: ``(B, H, C/H, C/H)``, channels attending to channels).
        layouts: ``{name: WindowLayout}`` for the calls of windowed blocks (Swin,
            MaxViT), whose weights are ``(B * windows, H, N, N)``; see :meth:`on_image`.
        vectors: ``{name: (q (B, H, Tq, Dh), k (B, H, Tk, Dh))}`` when
            ``vectors=True`` (for the neuron view), for the modules that have them.
        modules: ``{name: kind}`` of the modules being read.
        unsupported: attention-like modules nothing reads, by name and class.
        missed: ``{name: reason}`` for calls whose weights could not be read.
        verified: ``{module name: max |recorded - reference|}`` with ``verify=True``.
        live: for Hugging Face modules captured inside
            :func:`attnkit.core.dispatch.weights_in_graph`, the same weights
            still in the autograd graph: the module's output was computed from
            them by the model's eager function, so gradients reach them.

    Shape:
        weights: (B, H, Tq, Tk) per call; (B * windows, H, N, N) for windowed blocks,
        which :meth:`on_image` lays out as (B, H, HW, HW); (B, H, C/H, C/H) for channel maps.
    """

    def __init__(self, modules: dict[str, str], unsupported: list[str], keep_vectors: bool,
                 verify: bool = False) -> None:
        self.weights: dict[str, Tensor] = {}
        self.roles: dict[str, str] = {}
        self.vectors: dict[str, tuple[Tensor, Tensor]] = {}
        self.modules = modules
        self.unsupported = unsupported
        self.missed: dict[str, str] = {}
        self.live: dict[str, Tensor] = {}
        self.verified: dict[str, float] = {}
        self._dtypes: dict[str, torch.dtype] = {}
        self.layouts: dict[str, WindowLayout] = {}
        self._unverifiable: dict[str, str] = {}
        self._verify = verify
        self._keep_vectors = keep_vectors
        self._calls: dict[str, int] = {}
        self._cross: set[str] = set()
        self._thread = threading.get_ident()
        self._two_stacks = _stacks(modules)

    def _mine(self) -> bool:
        """Whether the current call belongs to this capture (made in the thread that opened it)."""
        return threading.get_ident() == self._thread

    def _record(self, name: str, w: Tensor, q: Tensor | None = None, k: Tensor | None = None,
                reference: Any = None, role: str | None = None, layout: WindowLayout | None = None,
                live: bool = False, queries: Any = None) -> None:
        n = self._calls.get(name, 0)
        self._calls[name] = n + 1
        key = name if n == 0 else f"{name}#{n}"
        self.weights[key] = w.detach()
        if live:
            self.live[key] = w
        self.roles[key] = role or _role(name, name in self._cross, self._two_stacks)
        if layout is not None:
            self.layouts[key] = layout
        if self._keep_vectors and q is not None and k is not None:
            self.vectors[key] = (q.detach(), k.detach())
        if self._verify and n == 0 and reference is not None:
            try:
                with torch.no_grad():
                    self.verified[name] = map_difference(w, reference(), None if queries is None else queries())
                    self._dtypes[name] = w.dtype
            except Exception as exc:  # reported when the capture closes, by module name
                self._unverifiable[name] = f"{type(exc).__name__}: {exc}"

    def _check(self) -> None:
        """Raise for the modules whose map differs from its reference, or could not be recomputed."""
        allowed = {n: tolerance(self._dtypes.get(n, torch.float32)) for n in self.verified}
        wrong = {n: d for n, d in self.verified.items() if not d <= allowed[n]}
        if wrong:
            listed = ", ".join(f"{n} (max difference {d:.2e} > {allowed[n]:g} for {self._dtypes.get(n)})"
                               for n, d in wrong.items())
            raise CaptureMismatch(f"verify: the recorded maps of {listed} differ from the plain eager computation "
                                  "by more than their dtype's tolerance; do not trust them")
        if self._unverifiable:
            listed = "; ".join(f"{n} ({why})" for n, why in self._unverifiable.items())
            raise CaptureMismatch(f"verify: these maps cannot be recomputed the plain way (capture without "
                                  f"verify=True to keep them unchecked): {listed}")

    def on_image(self, name: str) -> Tensor:
        """The windows of a windowed block's call laid on the image (zero between windows).

        Shape:
            returns ``(B, H, HW, HW)``, positions row-major over the feature map.
        """
        if name not in self.layouts:
            windowed = sorted(self.layouts) or "none"
            raise ValueError(f"name: {name!r} is not a recorded call of a windowed block (Swin, MaxViT); "
                             f"those recorded: {windowed}")
        return place_windows(self.weights[name], self.layouts[name])

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
    removed when the capture closes (nested captures stack their wrappers).
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

    def pre(name: str, fn: Any, reference: Any) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if not cap._mine():
                return
            try:
                with torch.no_grad():
                    w, q, k = fn(module, args, kwargs)
            except Exception as exc:  # the model's own call must go on: report, do not raise
                cap.missed[name] = f"{type(exc).__name__}: {exc}"
                return
            if q is not None and k is not None and q.dim() == k.dim() == 4 and q.shape[-2] != k.shape[-2]:
                cap._cross.add(name)
            cap._record(name, w, q, k, lambda: reference(module, args, kwargs))
        return hook

    def own(name: str, read: Any = own_layer_weights) -> Any:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
            if not cap._mine():
                return
            try:
                w = read(module, args, kwargs, output)
            except (CacheCall, RepeatRefused) as exc:
                cap.missed[name] = str(exc)
                return
            except Exception as exc:  # the model's own call must go on: report, do not raise
                cap.missed[name] = f"{type(exc).__name__}: {exc}"
                return
            cap._record(name, w, reference=lambda: w)  # the module's own eager weights
        return hook

    def mha_fn(mod: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        w, q, k = mha_call_weights(mod, a, kw)  # type: ignore[arg-type]
        query, key = (a + (None, None))[:2]
        query, key = kw.get("query", query), kw.get("key", key)
        if query is not key:
            cap._cross.add(names[id(mod)])
        return w, q, k

    names = {id(m): n for n, (_, m) in chosen.items()}
    parents = {id(child): parent for parent in model.modules() for child in parent.children()}
    for name, (kind, m) in chosen.items():
        if kind == "torch-mha":
            handles.append(m.register_forward_pre_hook(pre(name, mha_fn, mha_reference), with_kwargs=True))
        elif kind == "torch-encoder-layer":
            def layer_fn(mod: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
                return encoder_layer_call_weights(mod, a, kw, seen_len["encoder"])  # type: ignore[arg-type]

            def layer_ref(mod: nn.Module, a: tuple[Any, ...], kw: dict[str, Any]) -> Any:
                return encoder_layer_reference(mod, a, kw, seen_len["encoder"])  # type: ignore[arg-type]
            handles.append(_ForwardWrapper(m, pre(name, layer_fn, layer_ref)))
        elif kind == "timm":
            handles.append(m.register_forward_pre_hook(pre(name, timm_call_weights, timm_reference),
                                                       with_kwargs=True))
        elif kind == "timm-block":
            handles += _timm_block_hooks(cap, name, m, parents.get(id(m)))
        elif kind == "attnkit":
            handles.append(m.register_forward_hook(own(name), with_kwargs=True))
        elif kind == "hf-returns":
            handles.append(m.register_forward_hook(own(name, returned_weights), with_kwargs=True))

    def encoder_len(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        src = args[0] if args else kwargs.get("src")
        seen_len["encoder"] = int(src.shape[1]) if isinstance(src, Tensor) and src.dim() == 3 else None
    for m in model.modules():
        if isinstance(m, nn.TransformerEncoder):
            handles.append(_ForwardWrapper(m, encoder_len))
    return handles


def _timm_block_hooks(cap: Capture, name: str, block: nn.Module, parent: nn.Module | None) -> list[Any]:
    """Read a timm block's map from its ``attn_drop`` (:mod:`attnkit.inspect.timm_blocks`).

    A block without a fused path is read during its own call; a fused one is
    run the non-fused way beside its kernel, and read only when both outputs
    agree. A Swin or MaxViT block's window layout comes from its parent's input.
    """
    state: dict[str, Any] = {}
    image: list[tuple[int, int]] = []
    role = "channel" if channel_block(block) else None

    def before(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        state.clear()
        if not cap._mine():
            return
        state["call"] = (args, kwargs)
        if not getattr(mod, "fused_attn", False):
            state["seen"] = drop_inputs(mod).__enter__()
            return
        try:
            state["map"], state["eager"] = eager_probabilities(mod, args, kwargs)
        except Exception as exc:  # the model's own call must go on: report, do not raise
            state["error"] = f"{type(exc).__name__}: {exc}"

    def after(mod: nn.Module, _a: Any, _kw: Any, output: Any) -> None:
        if "call" not in state:
            return
        args, kwargs = state.pop("call")
        seen = state.pop("seen", None)
        try:
            if seen is not None:
                seen.__exit__()
                w = seen.single()
            elif "error" in state:
                raise RuntimeError(state["error"])
            else:
                w = state["map"]
                if not mod.training and outputs_agree(output, state["eager"]) is None:
                    raise RuntimeError("its non-fused path gives another output than its fused kernel")
        except Exception as exc:  # the model's own call must go on: report, do not raise
            cap.missed[name] = str(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
            return
        layout = window_layout(parent, image[-1]) if parent is not None and image else None
        cap._record(name, w, reference=lambda: eager_probabilities(mod, args, kwargs)[0], role=role, layout=layout)

    def parent_input(_m: nn.Module, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        if cap._mine() and isinstance(x, Tensor) and x.dim() == 4:  # (B, H, W, C), channels last
            image.append((int(x.shape[1]), int(x.shape[2])))

    handles = [block.register_forward_pre_hook(before, with_kwargs=True),
               block.register_forward_hook(after, with_kwargs=True)]
    if parent is not None and window_layout(parent, (1, 1)) is not None:
        handles.append(parent.register_forward_pre_hook(parent_input))
    return handles


def _hf_callback(cap: Capture, names: dict[int, str], pending: set[int]) -> Any:
    def callback(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, mask: Any,
                 kwargs: dict[str, Any], live: Tensor | None = None) -> None:
        if not cap._mine():
            return
        pending.discard(id(module))
        name = names[id(module)]
        if live is not None:
            cap._record(name, live, query, key, live=True)
            return
        try:
            with torch.no_grad():
                w = hf_weights(module, query, key, mask, kwargs)
        except UnreadableCall as exc:
            cap.missed[name] = f"cannot be read beside the kernel: {exc}"
            return
        except Exception as exc:  # the model's own call must go on: report, do not raise
            cap.missed[name] = f"{type(exc).__name__}: {exc}"
            return
        tq, tk = query.shape[-2], key.shape[-2]
        cap._record(name, w, query, key, lambda: eager_reference(module, query, key, value, mask, kwargs),
                    queries=lambda: real_queries(module, mask, kwargs, tq, tk))
    return callback


def _hf_call_hooks(cap: Capture, hf: list[nn.Module], names: dict[int, str], pending: set[int]) -> list[Any]:
    """Hooks around each Hugging Face module: a call that never reached its attention function is
    reported as missed; one given encoder states is cross-attention."""
    handles = []

    def before(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not cap._mine():
            return
        pending.add(id(mod))
        if any(kwargs.get(k) is not None for k in _CROSS_KEYWORDS):
            cap._cross.add(names[id(mod)])

    def after(mod: nn.Module, _a: Any, _o: Any) -> None:
        if cap._mine() and id(mod) in pending:
            pending.discard(id(mod))
            cap.missed.setdefault(names[id(mod)], "its attention function was not called "
                                  "(a model-specific path, e.g. GPT-2's reorder_and_upcast_attn)")
    for m in hf:
        handles.append(m.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(m.register_forward_hook(after))
    return handles


@contextmanager
def capture(model: nn.Module, *, modules: Iterable[Any] | None = None, layers: Iterable[int] | None = None,
            vectors: bool = False, verify: bool = False) -> Iterator[Capture]:
    """Record the per-head attention weights of every supported attention module of ``model``.

    Args:
        model: any ``torch.nn.Module``.
        modules: names (or submodules) to read; a name of a container reads the
            attention modules under it. Default: all.
        layers: indices (negative from the end) into the attention modules, in
            model order, to keep (after ``modules``).
        vectors: also keep each call's query and key vectors (the neuron view).
        verify: recompute the first call of each read module the plain way
            (:mod:`attnkit.inspect.verify`) and raise :class:`CaptureMismatch`,
            naming the modules, when a map differs by more than its dtype's
            tolerance (1e-5 in float32 and float64, 1.5625e-2 in bfloat16,
            1.953e-3 in float16: :data:`attnkit.inspect.verify.TOLERANCES`) or
            cannot be recomputed. The differences are in ``cap.verified``.

    Calls are recorded from the thread that opened the capture; captures may
    be nested (each records every call) and open in several threads at once.

    Raises:
        TypeError: ``model`` is not a module.
        ValueError: the model has no attention module, a named module does not
            exist or cannot be captured, or an index is out of range.
        CaptureMismatch: with ``verify=True``, when the capture closes.

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
    cap = Capture({n: kind for n, (kind, _) in chosen.items()}, unsupported, vectors, verify)
    hf = [m for kind, m in chosen.values() if kind == "hf"]
    names = {id(m): n for n, (_, m) in chosen.items()}
    pending: set[int] = set()
    handles = _hooks(cap, chosen, model) + _hf_call_hooks(cap, hf, names, pending)
    callback = _hf_callback(cap, names, pending)
    keys = HFPatches.open(hf, callback)
    try:
        yield cap
    finally:
        for h in reversed(handles):
            h.remove()
        HFPatches.close(hf, keys, callback)
        if cap.missed:
            warnings.warn(f"attention calls not recorded: {cap.missed}", stacklevel=3)
    if verify:
        cap._check()
