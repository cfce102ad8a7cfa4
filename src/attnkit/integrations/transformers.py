"""``attn_implementation="attnkit"``: attnkit's block-sparse attention inside Hugging Face models.

Importing this module (or calling :func:`register`, which is idempotent) adds
``"attnkit"`` to transformers' ``AttentionInterface`` (the attention function)
and ``AttentionMaskInterface`` (the mask builder), so that::

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="attnkit")
    check_model(model)  # once after loading: refusals by name, the forward's position ids

(or ``model.set_attn_implementation("attnkit")`` on a loaded model, then
``check_model(model)``) run every attention layer through
:func:`attnkit.attention`. Registration is all the backend does to
transformers: it replaces and wraps none of its methods.

**The mask builder** (:func:`attnkit_mask`) receives what transformers hands
every backend: the mask function of the layer type (causal, bidirectional,
sliding window, chunked, packed sequences found from position ids that restart,
image-token overlays), the 2-D padding mask and the query/key offsets of a KV
cache. It evaluates that function into an attnkit
:class:`~attnkit.core.block_mask.BlockMask` for ``(B, ·, Tq, Tk)``, never a
dense ``(Tq, Tk)`` tensor, the way transformers' ``flex_attention`` builds
torch's BlockMask. transformers' own mask functions (causal, bidirectional,
windows, chunks, padding, packed sequences, their ``and``/``or`` and offsets)
are read as block rules (:func:`~attnkit.core.block_mask.with_block_rule`),
so that only the blocks on a mask's edges are evaluated entry by entry. A rule
is recognised from the function's code and closure and then checked against
the function itself on every block's corners and edges (:func:`_probed`): a
release whose functions changed gets its masks evaluated everywhere, never wrong. Blocks
between packed documents and outside a window are skipped by the kernels.

**The attention function** (:func:`attnkit_attention_forward`) runs
:func:`attnkit.attention` with the layer's ``scaling``, grouped-query heads,
``dropout``, ``softcap`` (a score mod), attention sinks (``s_aux``: one extra
key per head whose logit is the sink) and an additive ``position_bias`` (a
score mod). ``output_attentions=True`` takes attnkit's weights path and returns
the probabilities (before dropout). What it cannot honour (a float or foreign
mask, a keyword it does not know) raises :class:`HFBackendError` at the first
call; a transformers version outside :data:`SUPPORTED` is refused at import; a
model whose attention layers do not call the interface, or whose family runs on
the backend only from a later release (:data:`FAMILY_SINCE`), is refused by
:func:`check_model`, the check the user calls after loading. Without it, a
family too early for its release is refused at its first attention call, and
so is a family whose layers never see the position ids
(:data:`POSITIONS_UNSEEN`) outside a watched forward; a model whose layers never
call the interface (DeBERTa-v2, BLOOM, Falcon, GPT-Neo in 5.24) is refused by
:func:`check_model`, and, built with ``attn_implementation="attnkit"``, as it is
built (:func:`_on_child`, a torch module-registration hook, with a family too
early for its release); switched with ``set_attn_implementation`` only
:func:`check_model` can refuse it (transformers itself warns and keeps the
model's own attention).

**Documents.** Where the position ids restart (the next id not greater than
the one before: :func:`document_ids`), a query attends only its own document,
in every layer (packed rows, ``DataCollatorWithFlattening``); a forward jump
(``[0..4, 10..14]``) keeps attending, as eager does. Models whose layers never
see the position ids (:data:`POSITIONS_UNSEEN`: DistilBERT, ModernBERT) get the
model forward's (:func:`watch_positions`, which :func:`check_model` installs);
without it they are refused at the first call, never run with packed rows mixed.

**Caches.** A single query row gets a dense ``(B, 1, 1, Tk)`` mask; the
BlockMasks ``generate()`` prepares for static caches pass through the builder
again unchanged.

**Compiled** (``torch.compile``): a BlockMask's layout is read from the mask's
values, which a compiled graph cannot branch on, so under compile the builder
evaluates the mask function into a dense ``(B, 1, Tq, Tk)`` boolean mask
(:func:`_compiled_mask`), as transformers' ``sdpa_mask`` does; padding and
restarting position ids are folded in without reading their values. The
backend then adds no graph break; every block is computed (no skipping).

Shape legend: B batch, H query heads, Hkv key/value heads, Tq/Tk query/key
length, Dh head width.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor

from attnkit.core.block_mask import (
    BlockBounds,
    BlockMask,
    BlockRule,
    and_mods,
    block_rule,
    causal_mod,
    combine_rules,
    create_block_mask,
    or_mods,
    same_id_rule,
    sliding_window_mod,
    with_block_rule,
)
from attnkit.core.functional import attention
from attnkit.core.masks import restart_documents
from attnkit.core.score_mods import bias_mod, soft_cap_mod
from attnkit.core.types import MaskMod, ScoreMod
from attnkit.integrations.context_parallel import context_parallel  # one sequence across processes
from attnkit.integrations.positions import FORWARD_POSITION_IDS

__all__ = ["NAME", "SUPPORTED", "FAMILY_SINCE", "POSITIONS_UNSEEN", "HFBackendError", "register", "check_model",
           "attnkit_mask",
           "attnkit_mask_from_cache_position", "attnkit_attention_forward", "document_ids", "watch_positions",
           "context_parallel"]

NAME = "attnkit"
"""The name to pass as ``attn_implementation``."""
SUPPORTED = ((4, 54), (5, 26))
"""transformers versions this backend supports: ``>= 4.54, < 5.26`` (the ``hf`` extra); 5.25 the newest release
tested. 4.54 is the first with both interfaces and the model hooks the backend needs (4.53 has the attention and
mask interfaces but not ``set_attn_implementation`` nor ``_can_set_attn_implementation``). Families whose layers
do not go through the interfaces in a release are refused by name there (:data:`FAMILY_SINCE`). Before 5.4 the
mask interface hands ``cache_position`` (:func:`attnkit_mask_from_cache_position`)."""
FAMILY_SINCE: dict[str, tuple[int, int]] = {
    "bert": (5, 0), "roberta": (5, 0), "distilbert": (5, 0),  # 4.5x: own attention, own float masks
    "bart": (5, 0),  # 4.5x: calls the attention interface with its own float masks
    "siglip2": (5, 2),  # 4.5x, 5.0, 5.1: its own float masks
    "modernbert": (5, 10), "t5": (5, 15),  # before: their own attention
}
"""The first transformers release in which a model family (the folder of ``transformers.models``) runs on the
backend: its attention layers call the attention interface with the mask builder's masks. :func:`check_model`
refuses the family by name before it. A family not named here that builds its own float masks in some release is
refused at the first call (:class:`HFBackendError` naming the mask)."""
POSITIONS_UNSEEN = frozenset({"distilbert", "modernbert"})
"""Model families whose attention layers never receive the position ids (DistilBERT reads them in its embeddings
only, ModernBERT turns them into rotary angles): packed rows stay apart only with the model forward's
(:func:`watch_positions`, installed by :func:`check_model`); outside a watched forward their first attention call
is refused by name."""
Q_LENGTH_SINCE = (5, 4)
"""The first transformers release whose mask interface passes ``q_length``/``q_offset``, not ``cache_position``."""

BLOCK_SIZE = 128
"""Block size of the masks the builder makes (attnkit's default)."""
MIN_PACKED_BLOCK_SIZE = 16
"""The smallest block size of a packed row's mask (:func:`packed_block_size`)."""

_RECIPE = ("attnkit.integrations.transformers", "mask_mod")  # BlockMask.cached key: the mod it was built from

# Keywords models pass down that do not change the attention math (bookkeeping, or read by the
# mask builder already: position ids, cache positions, a window the mask holds).
_IGNORED = frozenset({
    "position_ids", "cache_position", "use_cache", "output_hidden_states", "output_router_logits",
    "num_items_in_batch", "return_dict", "sliding_window", "layer_idx", "past_key_values", "cache",
    "max_length_q", "max_length_k", "token_type_ids", "position_embeddings", "head_dim",
})


_M = TypeVar("_M")


class HFBackendError(ValueError):
    """What the ``attnkit`` attention backend cannot honour: a mask, a keyword, a transformers version."""


def _version() -> tuple[int, int]:
    import transformers

    found = re.match(r"(\d+)\.(\d+)", transformers.__version__)
    if found is None:
        raise HFBackendError(f"cannot read the transformers version {transformers.__version__!r}")
    return int(found.group(1)), int(found.group(2))


def check_version(version: tuple[int, int] | None = None) -> None:
    """Raise :class:`HFBackendError` unless transformers (or ``version``) is in :data:`SUPPORTED`."""
    got = _version() if version is None else version
    low, high = SUPPORTED
    if not low <= got < high:
        raise HFBackendError(
            f"attn_implementation='attnkit' supports transformers >= {low[0]}.{low[1]}, "
            f"< {high[0]}.{high[1]} (the attention and mask interfaces it builds on, with every model family it "
            f"claims), got transformers {got[0]}.{got[1]}; "
            "install the range with pip install 'attnkit[hf]'"
        )


def register() -> None:
    """Register ``"attnkit"`` with transformers' attention and mask interfaces (idempotent)."""
    check_version()
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, attnkit_attention_forward)
    builder = attnkit_mask if _version() >= Q_LENGTH_SINCE else attnkit_mask_from_cache_position
    AttentionMaskInterface.register(NAME, builder)
    global _BUILT_HOOK
    if _BUILT_HOOK is None:
        _BUILT_HOOK = torch.nn.modules.module.register_module_module_registration_hook(_on_child)


_BUILT_HOOK: Any = None
"""The handle of :func:`_on_child`, registered once with torch."""


def check_model(model: _M) -> _M:
    """Raise :class:`HFBackendError` unless every attention layer of ``model`` can run through attnkit; prepare it.

    Call it once after loading (``model = AutoModelForX.from_pretrained(...,
    attn_implementation="attnkit"); check_model(model)``); it returns ``model``.
    ``model`` is a transformers ``PreTrainedModel`` (instance or class). Refused
    by name: a family before the release it runs on the backend from
    (:data:`FAMILY_SINCE`), and a model whose attention layers do not call
    transformers' attention interface (DeBERTa-v2, BLOOM, Falcon, GPT-Neo in
    transformers 5.24), which would keep its own attention: transformers only
    warns on ``set_attn_implementation`` and says nothing on ``from_pretrained``.
    transformers' own test of the source (``_can_set_attn_implementation``)
    decides, not ``_supports_attention_backend``, which T5 and BART leave False
    although they use the interface.

    For a model instance it then installs :func:`watch_positions` on every
    ``PreTrainedModel`` inside it (idempotent), so that layers that never see the
    position ids (:data:`POSITIONS_UNSEEN`) keep packed rows apart; without it
    their first attention call on the backend is refused.
    """
    from transformers import PreTrainedModel

    modules: list[Any] = list(model.modules()) if isinstance(model, torch.nn.Module) else [model]
    for m in modules:
        cls = m if isinstance(m, type) else type(m)
        if issubclass(cls, PreTrainedModel):
            _refuse_class(cls)
    for m in modules:
        if isinstance(m, PreTrainedModel):
            watch_positions(m)
    return model


_CHECK_MODEL = "attnkit.integrations.transformers.check_model(model) names every model the backend refuses"


def _refuse_class(cls: type) -> None:
    """Raise :class:`HFBackendError` naming ``cls``, its family and ``check_model`` unless its layers run on the
    backend: the family runs from this release (:data:`FAMILY_SINCE`) and its attention layers call the interface."""
    _refuse_too_early(cls.__name__, _family(cls))
    if not cls._can_set_attn_implementation():  # type: ignore[attr-defined]
        raise HFBackendError(
            f"{cls.__name__} (model family {_family(cls)!r}) cannot use attn_implementation='attnkit': its attention "
            "layers do not call transformers' attention interface (AttentionInterface), so they would keep their "
            f"own attention; use attn_implementation='eager' or 'sdpa' for this model ({_CHECK_MODEL})"
        )


def _refuse_too_early(name: str, family: str) -> None:
    """Raise :class:`HFBackendError` naming ``name`` and ``family`` if the family runs on the backend only from a
    later release."""
    since = FAMILY_SINCE.get(family)
    if since is not None and _version() < since:
        raise HFBackendError(
            f"{name} (model family {family!r}) cannot use attn_implementation='attnkit' in transformers "
            f"{'.'.join(map(str, _version()))}: its attention layers call transformers' attention interface "
            f"with the mask builder's masks from transformers {since[0]}.{since[1]} on; upgrade transformers, "
            f"or use attn_implementation='eager' or 'sdpa' for this model ({_CHECK_MODEL})"
        )


def _on_child(module: torch.nn.Module, name: str, child: Any) -> None:
    """torch's module-registration hook: a ``PreTrainedModel`` built with ``attn_implementation="attnkit"`` is
    checked (:func:`_refuse_class`) as its first submodule is set, before its layers are built.

    Families whose layers keep their own attention pick an attention class by the implementation's name while
    they are built (GPT-Neo, Falcon; BERT, DistilBERT, ModernBERT before 5.0) and would fail with
    ``KeyError: 'attnkit'`` from inside transformers; others (BLOOM, T5 before 5.15) would load and then
    fail at their first forward on the mask builder's BlockMask, or run their own attention. All are refused
    here by name, as :func:`check_model` refuses them.
    """
    state = module.__dict__
    if state.get("_attnkit_built") or getattr(state.get("config"), "_attn_implementation", None) != NAME:
        return
    from transformers import PreTrainedModel

    if isinstance(module, PreTrainedModel):
        state["_attnkit_built"] = True
        _refuse_class(type(module))


def _family(cls: type) -> str:
    """The model family of a transformers class: its folder under ``transformers.models`` (``"bert"``)."""
    parts = cls.__module__.split(".")  # string methods only: read inside compiled code too
    return parts[2] if len(parts) > 3 and parts[0] == "transformers" and parts[1] == "models" else ""


def _check_layer(module: torch.nn.Module) -> None:
    """Refuse, at its call, an attention layer the backend cannot run as things stand (named, never silent).

    A family before the release it runs from (:data:`FAMILY_SINCE`; the error
    :func:`check_model` gives), checked outside compiled code; and a family whose
    layers never see the position ids (:data:`POSITIONS_UNSEEN`) called outside a
    forward :func:`watch_positions` watches, where packed rows would mix.
    """
    family = _family(type(module))
    if not torch.compiler.is_compiling():
        _refuse_too_early(type(module).__name__, family)
    if family in POSITIONS_UNSEEN and not _watching():
        raise HFBackendError(
            f"{type(module).__name__} (model family {family!r}) never receives the position ids, so "
            "attn_implementation='attnkit' cannot keep packed rows (DataCollatorWithFlattening) apart in it "
            "unless the model forward's are handed over: call attnkit.integrations.transformers.check_model(model) "
            "once after loading the model"
        )


def watch_positions(model: torch.nn.Module) -> None:
    """Hand the ``position_ids`` that ``model``'s forward receives to its attention calls (idempotent).

    Some models never pass position ids to their attention layers (DistilBERT
    reads them in its embeddings only, ModernBERT turns them into rotary
    angles): their packed rows (``DataCollatorWithFlattening``) would mix
    examples. While the forward of a ``PreTrainedModel`` on the backend runs,
    its ``position_ids`` (or ``None``) are what :func:`attnkit_attention_forward`
    reads when the layer passes none; the innermost model's forward decides
    (a vision tower inside a language model sees its own, none).
    """
    if getattr(model, "_attnkit_positions", False) or not hasattr(model, "_forward_pre_hooks"):
        return
    tokens: list[tuple[contextvars.Token[Tensor | None], contextvars.Token[bool]]] = []

    def enter(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        found = kwargs.get("position_ids")
        _COMPILED_POSITIONS.append(found if isinstance(found, Tensor) else None)
        if not torch.compiler.is_compiling():  # torch.compile cannot trace a ContextVar
            tokens.append((FORWARD_POSITION_IDS.set(found if isinstance(found, Tensor) else None),
                           _WATCHED.set(True)))

    def leave(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if _COMPILED_POSITIONS:
            _COMPILED_POSITIONS.pop()
        if tokens and not torch.compiler.is_compiling():
            positions, watched = tokens.pop()
            _WATCHED.reset(watched)
            FORWARD_POSITION_IDS.reset(positions)

    model.register_forward_pre_hook(enter, with_kwargs=True)
    model.register_forward_hook(leave, with_kwargs=True, always_call=True)
    model._attnkit_positions = True  # type: ignore[assignment]


_COMPILED_POSITIONS: list[Tensor | None] = []
"""The model forwards' position ids, innermost last, for compiled code (which cannot read a ContextVar); empty
outside a watched forward."""
_WATCHED: contextvars.ContextVar[bool] = contextvars.ContextVar("attnkit_watched_forward", default=False)
"""Whether a forward :func:`watch_positions` watches is running (this thread or task): it tells "no position ids
given" (``FORWARD_POSITION_IDS`` None) from "nobody handed them over"."""


def _watching() -> bool:
    """Whether the running forward is one :func:`watch_positions` watches (then its position ids are known)."""
    if torch.compiler.is_compiling():
        return bool(_COMPILED_POSITIONS)
    return _WATCHED.get()


def _forward_positions() -> Tensor | None:
    """The position ids of the innermost model forward on the backend (:func:`watch_positions`)."""
    if torch.compiler.is_compiling():
        return _COMPILED_POSITIONS[-1] if _COMPILED_POSITIONS else None
    return FORWARD_POSITION_IDS.get()


_MASKS: OrderedDict[tuple[Any, ...], BlockMask] = OrderedDict()  # the last few masks built, by what built them
_KEEP_MASKS = 4


class _NoKey(Exception):
    """A mask function whose closure holds something that cannot be compared by value."""


def _fingerprint(obj: Any, depth: int = 0) -> Any:
    """What a mask function computes, by value: its code and, recursively, what its closure holds.

    transformers builds a new closure per forward; two with the same code and
    equal captured values (ints, the padding or packing tensors) are the same
    index-based function, so their BlockMask (and the plan the kernels keep on
    it) serves every step of that layout.
    """
    if depth > 12:
        raise _NoKey
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, Tensor):
        data = obj.detach().cpu().contiguous().numpy().tobytes()
        return ("tensor", str(obj.dtype), tuple(obj.shape), str(obj.device), hashlib.blake2b(data).hexdigest())
    if isinstance(obj, (tuple, list)):
        return tuple(_fingerprint(x, depth + 1) for x in obj)
    code = getattr(obj, "__code__", None)
    if code is not None and not getattr(obj, "__defaults__", None) and not getattr(obj, "__kwdefaults__", None):
        cells = tuple(_fingerprint(c.cell_contents, depth + 1) for c in (obj.__closure__ or ()))
        return ("function", code, cells)
    raise _NoKey


@functools.cache
def _codes() -> dict[Any, str]:
    """The code objects of transformers' mask functions, by what they compute."""
    from transformers import masking_utils as mu

    ones, ids = torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.long)
    makers: list[tuple[str, Callable[[], Any]]] = [
        ("causal", lambda: mu.causal_mask_function),
        ("all", lambda: mu.bidirectional_mask_function),  # transformers >= 5.0
        ("window-after", lambda: mu.sliding_window_overlay(1)),
        ("chunk", lambda: mu.chunked_overlay(1, ids[0])),  # 4.57 on: the left padding too
        ("chunk", lambda: mu.chunked_overlay(1)),  # type: ignore[call-arg]  # 4.54: the chunk size only
        ("chunk", lambda: mu._legacy_chunked_overlay(1)),  # type: ignore[attr-defined]  # 4.57, torch < 2.6
        ("padding", lambda: mu.padding_mask_function(ones)),
        ("same-id", lambda: mu.packed_sequence_mask_function(ids)),
        ("and", lambda: mu.and_masks(mu.causal_mask_function)),
        ("or", lambda: mu.or_masks(mu.causal_mask_function)),
        ("offsets", lambda: mu.add_offsets_to_mask_function(mu.causal_mask_function, 0, 0)),
        ("window", lambda: mu.sliding_window_bidirectional_overlay(1)),  # transformers >= 5.3
    ]
    codes: dict[Any, str] = {}
    for kind, make in makers:
        try:  # a function this release lacks, or builds with other arguments, is evaluated entry by entry
            codes[make().__code__] = kind
        except (AttributeError, TypeError):
            continue
    return codes


def _rule_of(fn: Any, depth: int = 0) -> BlockRule | None:
    """A block rule for one of transformers' mask functions (recursively), or ``None`` (evaluated entry by entry).

    Each rule restates what the function computes on whole blocks: its code is
    recognised by identity and its closure read by name.
    """
    code = getattr(fn, "__code__", None)
    kind = _codes().get(code) if code is not None and depth <= 12 else None
    if kind is None or code is None:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ()), strict=True))
    if kind == "causal":
        return block_rule(causal_mod)
    if kind == "all":
        return lambda x: (False, True)
    if kind in ("and", "or"):
        return combine_rules([_rule_of(f, depth + 1) for f in cells["mask_functions"]], both=kind == "and")
    if kind == "offsets":
        inner, qo, ko = _rule_of(cells["mask_function"], depth + 1), cells["q_offset"], cells["kv_offset"]
        if inner is None or not isinstance(qo, int) or not isinstance(ko, int):
            return None
        found = inner
        return lambda x: found(x.shifted(qo, ko))
    if kind == "same-id":
        return same_id_rule(cells["packed_sequence_mask"], non_negative=False)
    if kind == "padding":
        pm = cells["padding_mask"].long()

        def padding(x: BlockBounds) -> tuple[Tensor, Tensor]:
            lo, hi = x.k_range(pm)
            return hi == 0, lo == 1

        return padding
    w = cells.get("sliding_window", cells.get("chunk_size"))
    if not isinstance(w, int) or w < 1:
        return None
    if kind == "window":
        return block_rule(sliding_window_mod(w))
    if kind == "window-after":  # kv_idx > q_idx - w
        return lambda x: (x.kz <= x.qa - w, x.ka > x.qz - w)
    left = cells.get("left_padding")  # chunk: (kv - left[b]) // w == (q - left[b]) // w; 4.54: none
    if left is not None and (not isinstance(left, Tensor) or left.dim() != 1):
        return None

    def chunk(x: BlockBounds) -> tuple[Tensor, Tensor]:
        lp = left.to(x.b.device)[x.b] if left is not None else 0
        qlo, qhi, klo, khi = ((x.qa - lp) // w, (x.qz - lp) // w, (x.ka - lp) // w, (x.kz - lp) // w)
        return (qhi < klo) | (khi < qlo), (qlo == qhi) & (klo == khi) & (qlo == klo)

    return chunk


def _probed(mod: Callable[..., Tensor]) -> BlockRule | None:
    """The block rule of a mask function transformers ships, checked on every block's corners and edges.

    :func:`_rule_of` recognises the function by its code and reads its closure;
    what it finds is trusted only where the function itself agrees: each block
    the rule calls empty (full) is evaluated on its first and last query rows and
    first and last key columns, and one entry there that is allowed (refused)
    drops the rule, so every block is evaluated entry by entry. A closure that
    cannot be read (a new release's refactor) drops it too. Either way the mask
    is the function's own, never a guess.
    """
    try:
        rule = _rule_of(mod)
    except (KeyError, AttributeError, TypeError, ValueError):
        return None
    if rule is None:
        return None
    found = rule

    def checked(x: BlockBounds) -> tuple[Tensor | bool, Tensor | bool]:
        empty, full = found(x)
        try:
            agrees = _edges_agree(mod, x, empty, full)
        except (RuntimeError, IndexError, TypeError, ValueError):
            agrees = False
        return (empty, full) if agrees else (False, False)

    return checked


def _edges_agree(mod: Callable[..., Tensor], x: BlockBounds, empty: Tensor | bool, full: Tensor | bool) -> bool:
    """Whether ``mod`` on the edges of each block (first and last rows and columns) fits ``empty`` and ``full``."""
    b = x.b.view(-1, 1, 1, 1, 1)
    h = torch.zeros(1, 1, 1, 1, 1, dtype=torch.long, device=b.device)
    q_ends, k_ends = x.q_pos[:, [0, -1]], x.k_pos[:, [0, -1]]  # (nQ, 2), (nK, 2)
    nq, nk = x.q_pos.shape[0], x.k_pos.shape[0]
    rows = mod(b, h, q_ends.view(1, nq, 1, 2, 1), x.k_pos.view(1, 1, nk, 1, -1))  # (B, nQ, nK, 2, bs)
    cols = mod(b, h, x.q_pos.view(1, nq, 1, -1, 1), k_ends.view(1, 1, nk, 1, 2))  # (B, nQ, nK, bs, 2)
    rows, cols = rows.expand(b.shape[0], nq, nk, 2, -1), cols.expand(b.shape[0], nq, nk, -1, 2)
    any_allowed = rows.flatten(3).any(-1) | cols.flatten(3).any(-1)  # (B, nQ, nK)
    all_allowed = rows.flatten(3).all(-1) & cols.flatten(3).all(-1)
    shape = (b.shape[0], 1, nq, nk)
    empty_t = torch.as_tensor(empty, device=b.device).expand(shape)[:, 0]
    full_t = torch.as_tensor(full, device=b.device).expand(shape)[:, 0]
    return not bool((empty_t & any_allowed).any() or (full_t & ~all_allowed).any())


def _as_int(value: int | Tensor, what: str) -> int:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise HFBackendError(f"the mask builder needs one {what} for the batch, got shape {tuple(value.shape)}")
        return int(value)
    return int(value)


def _prepared(mask: BlockMask, batch_size: int, q_length: int, kv_length: int) -> BlockMask:
    """A BlockMask this builder made before (``generate()`` prepares them for static caches), checked for size."""
    b, _, tq, tk = mask.shape
    if (tq, tk) != (q_length, kv_length) or b not in (None, batch_size):
        raise HFBackendError(
            f"the attnkit mask builder got a prepared BlockMask for (B={b}, Tq={tq}, Tk={tk}) where the layer "
            f"needs (B={batch_size}, Tq={q_length}, Tk={kv_length}); pass the 2-D padding attention_mask instead"
        )
    return mask


def _one_row(mod: MaskMod, batch_size: int, kv_length: int, device: torch.device | str) -> Tensor:
    """The ``(B, 1, 1, Tk)`` boolean mask of a single query row, ``mod`` evaluated on every key.

    Decoding steps and pooling heads (SigLIP2's, which repeats the mask as a
    tensor for ``nn.MultiheadAttention``) read it as a plain mask.
    """
    b = torch.arange(batch_size, device=device).view(-1, 1, 1, 1)
    zero = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
    kv = torch.arange(kv_length, device=device).view(1, 1, 1, -1)
    return mod(b, zero, zero, kv).expand(batch_size, 1, 1, kv_length).clone()


def _composed(mask_function: Callable[..., Tensor] | None, attention_mask: Tensor | None, kv_length: int,
              q_offset: int | Tensor, kv_offset: int | Tensor) -> Callable[..., Tensor]:
    """``mask_function`` (causal when None) and the 2-D padding mask, shifted by the cache offsets."""
    from transformers.masking_utils import (
        add_offsets_to_mask_function,
        and_masks,
        causal_mask_function,
        padding_mask_function,
    )

    mod = causal_mask_function if mask_function is None else mask_function
    if attention_mask is not None:
        if not isinstance(attention_mask, Tensor) or attention_mask.dim() != 2:
            shape = tuple(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask)
            raise HFBackendError(
                f"the attnkit mask builder takes a 2-D padding attention_mask (B, T), got {shape}"
            )
        # compiled: the padding is folded in whatever its values (reading them would break the graph)
        if torch.compiler.is_compiling() or not bool(attention_mask.all()):
            padding = _padding(attention_mask.bool(), kv_length, _as_int(kv_offset, "kv_offset"))
            mod = and_masks(mod, padding_mask_function(padding))
    q_shift: Any = _offset(q_offset, "q_offset")  # a one-element tensor adds as an int does
    return add_offsets_to_mask_function(mod, q_shift, _as_int(kv_offset, "kv_offset"))


def _padding(attention_mask: Tensor, kv_length: int, kv_offset: int) -> Tensor:
    """The 2-D padding mask padded with False to ``kv_offset + kv_length`` keys, never sliced: the mask function
    reads it at the keys' absolute positions (``add_offsets_to_mask_function``), as transformers' own
    ``flex_attention_mask`` does (its ``prepare_padding_mask`` slices by default before 5.0)."""
    if (missing := kv_length + kv_offset - attention_mask.shape[-1]) > 0:
        return torch.nn.functional.pad(attention_mask, (0, missing))
    return attention_mask


def _offset(value: int | Tensor, what: str) -> int | Tensor:
    """A cache offset as an int, or (compiled) a one-element tensor kept a tensor: reading it would break the graph."""
    if isinstance(value, Tensor) and torch.compiler.is_compiling():
        if value.numel() != 1:
            raise HFBackendError(f"the mask builder needs one {what} for the batch, got shape {tuple(value.shape)}")
        return value.reshape(())
    return _as_int(value, what)


def _q_span(cache_position: Tensor) -> tuple[int, int | Tensor]:
    """``q_length`` and ``q_offset`` of the queries at ``cache_position``, the contiguous positions ``q_offset + i``.

    As transformers' own ``flex_attention_mask`` before 5.4 reads them: the first position is the offset (a
    one-element tensor, which the builder reads as an int, or keeps a tensor under ``torch.compile``).
    """
    if not isinstance(cache_position, Tensor) or cache_position.dim() != 1:
        shape = tuple(cache_position.shape) if isinstance(cache_position, Tensor) else type(cache_position)
        raise HFBackendError(f"the attnkit mask builder takes cache_position of shape (Tq,), got {shape}")
    return cache_position.shape[0], cache_position[0]


def _compiled_mask(batch_size: int, q_length: int, kv_length: int, q_offset: int | Tensor, kv_offset: int | Tensor,
                   mask_function: Callable[..., Tensor] | None, attention_mask: Tensor | None,
                   device: torch.device | str) -> Tensor:
    """The builder under ``torch.compile``: the mask function evaluated into a dense ``(B, 1, Tq, Tk)`` bool mask.

    A BlockMask's layout (which blocks are empty, full or partial) is read from
    the mask's values, which a compiled graph cannot branch on; the dense mask
    is the function evaluated on broadcast index tensors, as transformers'
    ``sdpa_mask`` does under compile, so the graph holds it without a break.
    The documents of the model forward's restarting position ids
    (:func:`watch_positions`) are folded in, as the attention function folds
    them into a BlockMask in eager mode.
    """
    mod = _composed(mask_function, attention_mask, kv_length, q_offset, kv_offset)
    b = torch.arange(batch_size, device=device).view(-1, 1, 1, 1)
    zero = torch.zeros(1, 1, 1, 1, dtype=torch.long, device=device)
    q = torch.arange(q_length, device=device).view(1, 1, -1, 1)
    kv = torch.arange(kv_length, device=device).view(1, 1, 1, -1)
    dense = mod(b, zero, q, kv).expand(batch_size, 1, q_length, kv_length)
    same = _same_document(_forward_positions(), batch_size, q_length, kv_length, device)
    return dense if same is None else dense & same


def _same_document(position_ids: Any, b: int, tq: int, tk: int, device: torch.device | str) -> Tensor | None:
    """Compiled: ``(B, 1, T, T)`` True where query and key share a document (:func:`document_ids`), or ``None``.

    The documents are counted from the restarts without asking whether there
    are any (that would read the values): one document gives all True.
    """
    if not isinstance(position_ids, Tensor) or position_ids.dim() != 2 or tq != tk or position_ids.shape[-1] != tq:
        return None
    pos = position_ids.to(device).expand(b, -1)
    seq = torch.nn.functional.pad((pos[:, 1:] <= pos[:, :-1]).long().cumsum(-1), (1, 0))  # (B, T)
    return (seq[:, :, None] == seq[:, None, :]).unsqueeze(1)


def attnkit_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: int | Tensor = 0, kv_offset: int | Tensor = 0,
    mask_function: Callable[..., Tensor] | None = None, attention_mask: Tensor | None = None,
    local_size: int | None = None, allow_is_causal_skip: bool = True, allow_is_bidirectional_skip: bool = False,
    use_vmap: bool = False, device: torch.device | str = "cpu", dtype: torch.dtype | None = None,
    config: Any = None, **kwargs: Any,
) -> BlockMask | Tensor:
    """The ``AttentionMaskInterface`` entry: transformers' mask function as an attnkit BlockMask.

    A single query row (``Tq == 1``: a decoding step, a pooling head) gets its
    dense ``(B, 1, 1, Tk)`` boolean mask instead, which costs what its blocks
    would and which code that treats the mask as a tensor can read.

    ``mask_function(b, h, q_idx, kv_idx)`` is transformers' (True = may attend,
    attnkit's rule too); the padding mask and the cache offsets are folded in as
    transformers' own ``flex_attention_mask`` does. ``local_size``, ``dtype``,
    ``config`` and the ``allow_*_skip`` flags are accepted and need nothing: a
    BlockMask is never skipped (an all-full mask costs one pass through the
    fused kernel).

    Shape:
        attention_mask ``(B, Tk + kv_offset)`` or shorter (padded with False);
        returns a BlockMask for ``(B, H, Tq, Tk)``, ``H`` broadcast, or ``(B, 1, 1, Tk)`` bool.
    """
    if kwargs:
        raise HFBackendError(
            f"the attnkit mask builder got keywords it does not know: {sorted(kwargs)}; "
            "this transformers version passes more than attnkit understands"
        )
    if isinstance(attention_mask, BlockMask):
        return _prepared(attention_mask, batch_size, q_length, kv_length)
    if torch.compiler.is_compiling():
        return _compiled_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
                              device)
    mod = _composed(mask_function, attention_mask, kv_length, q_offset, kv_offset)

    try:
        key: tuple[Any, ...] | None = (batch_size, q_length, kv_length, str(device), _fingerprint(mod))
    except _NoKey:
        key = None
    if key is not None and key in _MASKS:
        _MASKS.move_to_end(key)
        return _MASKS[key]

    def evaluated(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        try:
            return mod(b, h, q_idx, kv_idx)
        except (RuntimeError, IndexError, TypeError) as e:
            raise HFBackendError(
                f"the model's mask function cannot be evaluated on broadcast index tensors ({e}); "
                "attn_implementation='attnkit' needs index-based mask functions"
                + (" (this one was built for torch.vmap)" if use_vmap else "")
            ) from e

    if q_length == 1:  # one query row: its dense mask costs what its blocks would
        return _one_row(evaluated, batch_size, kv_length, device)
    checked = with_block_rule(evaluated, _probed(mod))

    block_mask = create_block_mask(checked, batch_size, None, q_length, kv_length, block_size=BLOCK_SIZE,
                                   device=device)
    block_mask.cached(_RECIPE, lambda: checked)
    if key is not None:
        _MASKS[key] = block_mask
        while len(_MASKS) > _KEEP_MASKS:
            _MASKS.popitem(last=False)
    return block_mask


def attnkit_mask_from_cache_position(
    batch_size: int, cache_position: Tensor, kv_length: int, kv_offset: int | Tensor = 0, **kwargs: Any,
) -> BlockMask | Tensor:
    """The ``AttentionMaskInterface`` entry of transformers < 5.4, which hands ``cache_position`` (Tq,).

    The queries' positions are ``q_offset .. q_offset + Tq - 1``: ``q_length`` is its length and ``q_offset``
    its first entry (:func:`_q_span`), and :func:`attnkit_mask` builds the mask (the device is the positions').
    :func:`register` picks this entry or :func:`attnkit_mask` by the transformers version (:data:`Q_LENGTH_SINCE`).
    """
    q_length, q_offset = _q_span(cache_position)
    kwargs.setdefault("device", cache_position.device)
    return attnkit_mask(batch_size, q_length, kv_length, q_offset=q_offset, kv_offset=kv_offset, **kwargs)


def _sink_mask(mask: BlockMask | Tensor | None, b: int, tq: int, tk: int, causal: bool,
               device: torch.device) -> BlockMask | Tensor:
    """The mask with one more key at ``Tk`` that every query may attend (the sink)."""
    if isinstance(mask, Tensor):
        column = torch.ones(*mask.shape[:-1], 1, dtype=torch.bool, device=mask.device)
        return torch.cat([mask, column], dim=-1)

    def sink(b_: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx == tk

    def keys(b_: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return kv_idx < tk

    if mask is None:
        base: MaskMod = keys
        if causal:
            def base(b_: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
                return kv_idx <= q_idx + (tk - tq)
        return create_block_mask(or_mods(base, sink), None, None, tq, tk + 1, block_size=BLOCK_SIZE,
                                 device=device)
    bm = mask
    recipe: MaskMod | None = bm.cached(_RECIPE, lambda: None)
    if recipe is None:
        raise HFBackendError(
            "attention sinks (s_aux) need the attnkit mask builder's BlockMask; build the model's masks "
            "with attn_implementation='attnkit'"
        )
    found = recipe

    def keys_of_mask(b_: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return found(b_, h, q_idx, kv_idx.clamp(max=tk - 1)) & (kv_idx < tk)  # the sink is read by no mod

    return bm.cached(("attnkit.integrations.transformers", "sinks"), lambda: create_block_mask(
        or_mods(keys_of_mask, sink), bm.shape[0], None, tq, tk + 1, block_size=BLOCK_SIZE, device=device))


def packed_block_size(seq: Tensor) -> int:
    """The block size of a packed row's mask: a power of two near half its median document, 16 to 128.

    Blocks much longer than the documents make every query block attend the
    keys of its neighbours too (computed, then masked); blocks near the
    documents' size keep that waste small while the kernel calls stay few.

    Shape:
        seq ``(B, T)``: the document index of each position.
    """
    lengths = torch.cat([torch.unique_consecutive(row, return_counts=True)[1] for row in seq.cpu()])
    half = max(1, int(lengths.median()) // 2)
    size = 1 << (half.bit_length() - 1)  # the largest power of two <= half
    return max(MIN_PACKED_BLOCK_SIZE, min(BLOCK_SIZE, size))


def document_ids(position_ids: Tensor) -> Tensor | None:
    """The document of each position: a new one starts where the position id restarts, ``None`` for one each.

    :func:`attnkit.core.masks.restart_documents`: a restart is a position id not
    greater than the one before it (``[0, 1, 2, 0, 1]``: two documents). A forward
    jump (``[0, 1, 2, 7, 8]``, a prompt with a gap or a left-padded cache) stays in
    its document and keeps attending, as eager does (transformers' own
    ``find_packed_sequence_indices`` also splits at jumps, which only its packed
    causal masks without a cache see).

    Shape:
        position_ids ``(B, T)``; returns ``(B, T)`` document indices from 0, or ``None``.
    """
    return restart_documents(position_ids)


def _packed(mask: BlockMask | Tensor | None, position_ids: Any, b: int, tq: int, tk: int, causal: bool,
            device: torch.device) -> BlockMask | Tensor | None:
    """The mask kept within the documents that ``position_ids`` restarting mark (packed rows, :func:`document_ids`).

    transformers finds packed rows this way for its causal masks only; attnkit
    does it for every layer, so that an encoder (BERT) trains padding-free too.
    Rows of one document, or a call with a cache (``Tq != Tk``), keep ``mask``.
    """
    if not isinstance(position_ids, Tensor) or position_ids.dim() != 2 or tq != tk or position_ids.shape[-1] != tq:
        return mask
    if isinstance(mask, Tensor) and not isinstance(mask, BlockMask):
        return mask  # a caller's own dense mask (or the compiled builder's) says everything
    if torch.compiler.is_compiling():  # no mask: causal or not, within the documents, as a dense mask
        same = _same_document(position_ids, b, tq, tk, device)
        assert same is not None
        return same & torch.ones(tq, tk, dtype=torch.bool, device=device).tril() if causal else same
    seq = document_ids(position_ids.to(device).expand(b, -1))
    if seq is None:
        return mask
    key = ("attnkit.integrations.transformers", "packed", seq.cpu().numpy().tobytes())

    def same_doc_entries(b_: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return seq[b_, q_idx] == seq[b_, kv_idx]

    same_doc = with_block_rule(same_doc_entries, same_id_rule(seq, non_negative=False))
    size = packed_block_size(seq)
    if mask is None:
        base = and_mods(causal_mod, same_doc) if causal else same_doc
        return _with_recipe(base, b, tq, tk, size, device)
    bm = mask
    recipe: MaskMod | None = bm.cached(_RECIPE, lambda: None)
    if recipe is None:
        return mask
    found = recipe
    return bm.cached(key, lambda: _with_recipe(and_mods(found, same_doc), bm.shape[0] or b, tq, tk, size, device))


def _with_recipe(mod: MaskMod, b: int, tq: int, tk: int, size: int, device: torch.device) -> BlockMask:
    """``mod``'s BlockMask, which keeps ``mod`` as its recipe (what the sinks' mask is built from)."""
    block_mask = create_block_mask(mod, b, None, tq, tk, block_size=size, device=device)
    block_mask.cached(_RECIPE, lambda: mod)
    return block_mask


def _check_kwargs(kwargs: dict[str, Any]) -> None:
    unknown = sorted(k for k, v in kwargs.items() if k not in _IGNORED and v is not None and v is not False)
    for name in ("cu_seq_lens_q", "cu_seq_lens_k", "seq_idx"):
        if name in unknown:
            if kwargs.get("position_ids") is None:
                raise HFBackendError(
                    f"{name} without position_ids: attn_implementation='attnkit' finds packed sequences from "
                    "position ids that restart; pass position_ids (DataCollatorWithFlattening does)"
                )
            unknown.remove(name)
    if unknown:
        raise HFBackendError(
            f"attn_implementation='attnkit' does not know the attention keywords {unknown}; "
            "use attn_implementation='eager' for this model"
        )


def _mask_of(module: torch.nn.Module, attention_mask: Any, is_causal: bool | None, tq: int, tk: int
             ) -> tuple[BlockMask | Tensor | None, bool]:
    """The mask attention runs with, and whether it is causal without one; foreign masks refused."""
    mask: BlockMask | Tensor | None
    causal = False
    if isinstance(attention_mask, BlockMask) or attention_mask is None:
        mask = attention_mask
    elif isinstance(attention_mask, Tensor) and attention_mask.dtype == torch.bool and attention_mask.dim() == 4:
        mask = attention_mask[..., :tk]
    else:
        what = (f"a {attention_mask.dtype} tensor of shape {tuple(attention_mask.shape)}"
                if isinstance(attention_mask, Tensor) else type(attention_mask).__name__)
        raise HFBackendError(
            f"attn_implementation='attnkit' got attention_mask as {what}; it takes the masks its own mask "
            "builder makes, or a boolean (B, 1, Tq, Tk) mask (True = may attend), not a float or another "
            "backend's mask"
        )
    if mask is None:
        causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True)) and tq > 1
        if causal and tq != tk:
            raise HFBackendError(
                f"attn_implementation='attnkit' got no mask for a causal layer with Tq={tq} != Tk={tk}; "
                "build the model's masks with attn_implementation='attnkit'"
            )
    return mask, causal


def _score_mods(softcap: float | None, position_bias: Tensor | None, b: int, h: int, tq: int, tk: int
               ) -> list[ScoreMod]:
    """The score mods of soft-capping and an additive position bias, in eager's order."""
    mods: list[ScoreMod] = []
    if softcap is not None:
        mods.append(soft_cap_mod(float(softcap)))
    if position_bias is not None:
        pb = position_bias[..., :tk].expand(b, h, tq, tk)

        def bias(b_: Tensor, h_: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return pb[b_, h_, q_idx, kv_idx]  # float32 is added as float32, float64 as float64

        mods.append(bias_mod(bias))
    return mods


def attnkit_attention_forward(
    module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
    dropout: float = 0.0, scaling: float | None = None, softcap: float | None = None,
    s_aux: Tensor | None = None, position_bias: Tensor | None = None, is_causal: bool | None = None,
    output_attentions: bool | None = None, **kwargs: Any,
) -> tuple[Tensor, Tensor | None]:
    """The ``AttentionInterface`` entry: one attention layer of a transformers model through attnkit.

    ``attention_mask`` is the BlockMask of :func:`attnkit_mask`, a boolean
    ``(B, 1, Tq, Tk)`` mask a caller prepared (True = may attend), or ``None``
    (then ``is_causal``, else ``module.is_causal``, decides). A float mask or
    torch's FlexAttention BlockMask is refused: it was built for another backend.

    Shape:
        query ``(B, H, Tq, Dh)``, key ``(B, Hkv, Tk, Dh)``, value ``(B, Hkv, Tk, Dv)``,
        position_bias ``(B or 1, H, Tq, Tk)``, s_aux ``(H,)``; returns the output
        ``(B, Tq, H, Dv)`` and the weights ``(B, H, Tq, Tk)`` or ``None``.
    """
    _check_kwargs(kwargs)
    _check_layer(module)
    b, h, tq, _ = query.shape
    tk = key.shape[2]
    if output_attentions is None:
        output_attentions = bool(getattr(getattr(module, "config", None), "output_attentions", False))
    mask, causal = _mask_of(module, attention_mask, is_causal, tq, tk)
    position_ids = kwargs.get("position_ids")
    mask = _packed(mask, position_ids if position_ids is not None else _forward_positions(), b, tq, tk, causal,
                   query.device)
    if mask is not None and causal:
        causal = False  # the packed mask holds causality

    mods = _score_mods(softcap, position_bias, b, h, tq, tk)
    if s_aux is not None:
        if s_aux.shape != (h,):
            raise HFBackendError(f"s_aux must hold one sink logit per query head ({h},), got {tuple(s_aux.shape)}")
        mask = _sink_mask(mask, b, tq, tk, causal, query.device)
        causal = False
        key = torch.cat([key, key.new_zeros(*key.shape[:2], 1, key.shape[3])], dim=2)
        value = torch.cat([value, value.new_zeros(*value.shape[:2], 1, value.shape[3])], dim=2)
        sinks = s_aux

        def sink_logit(score: Tensor, b_: Tensor, h_: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return torch.where(kv_idx == tk, sinks[h_].to(score.dtype), score)

        mods.append(sink_logit)
    score_mod: ScoreMod | None = None
    if len(mods) == 1:
        score_mod = mods[0]
    elif mods:
        def score_mod(score: Tensor, b_: Tensor, h_: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            for m in mods:
                score = m(score, b_, h_, q_idx, kv_idx)
            return score

    p = float(dropout) if module.training else 0.0
    if output_attentions:
        out, weights = attention(query, key, value, mask=mask, causal=causal, dropout=p, scale=scaling,
                                 score_mod=score_mod, return_weights=True)
        if s_aux is not None:
            weights = weights[..., :tk]
        return out.transpose(1, 2).contiguous(), weights  # (B, Tq, H, Dv)
    out = attention(query, key, value, mask=mask, causal=causal, dropout=p, scale=scaling, score_mod=score_mod)
    return out.transpose(1, 2).contiguous(), None  # (B, Tq, H, Dv)


register()
