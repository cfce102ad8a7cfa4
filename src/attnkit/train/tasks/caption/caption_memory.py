"""The memory plan of an image-captioning run, checked before any image is read.

:func:`check_captioning` runs once the vocabulary and the model are built and
before the pixels or features are loaded. Its plan
(:func:`estimate_captioning`, a :class:`~attnkit.train.memory_budget.MemoryEstimate`):

- the model: the trained parameters four times (their gradients and two Adam
  moments), a frozen encoder's parameters and the buffers once;
- the inputs training holds: each training image once (uint8 pixels, or float16
  region features of a frozen encoder), the caption ids, and the held-out
  images as float pixels;
- one training step (:func:`caption_step_bytes`): the most bytes of tensors
  alive at once in a forward and backward pass (:class:`LivePeak`), measured on
  a copy of the model with two and four random inputs and drawn through to the
  batch, times :data:`STEP_FACTOR`; or, when larger, what encoding the held-out
  images for captioning holds (:func:`caption_generation_bytes`).

The limit is :func:`~attnkit.train.memory_budget.limit_and_source`'s, as for
every other run; above it :class:`~attnkit.train.memory_budget.MemoryLimitError`
names the plan, the limit that bound and the settings that lower it.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from attnkit.train import memory_budget as plans
from attnkit.train.memory_budget import MemoryBudget, MemoryEstimate, MemoryLimitError, format_bytes
from attnkit.train.tasks.caption.caption_settings import GENERATE_BATCH

if TYPE_CHECKING:
    from attnkit.models.captioning import ImageCaptioner

__all__ = ["STEP_FACTOR", "LivePeak", "caption_step_bytes", "caption_generation_bytes", "estimate_captioning",
           "check_captioning"]

STEP_FACTOR = 1.65
"""A step's whole-process peak over the live tensors' peak :class:`LivePeak` counts (the allocator's
growth and the optimiser's step; measured with ``evals/memory_plan.py --models caption``)."""


class LivePeak(TorchDispatchMode):
    """Counts the bytes of the tensors the operations under it create (each storage once, views aside,
    until its last tensor is freed) and keeps the most alive at once in :attr:`peak`. Storages of
    ``external`` tensors (parameters, inputs) are not counted."""

    def __init__(self, external: Iterable[Tensor]) -> None:
        super().__init__()
        self.external = {t.untyped_storage().data_ptr() for t in external}
        self.tensors: dict[int, int] = {}  # storage -> live tensors on it
        self.sizes: dict[int, int] = {}
        self.live = self.peak = 0

    def _freed(self, key: int) -> None:
        self.tensors[key] -= 1
        if not self.tensors[key]:
            del self.tensors[key]
            self.live -= self.sizes.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, Tensor):
                continue
            key = t.untyped_storage().data_ptr()
            if key == 0 or key in self.external:
                continue
            if key not in self.tensors:
                self.tensors[key], self.sizes[key] = 0, t.untyped_storage().nbytes()
                self.live += self.sizes[key]
                self.peak = max(self.peak, self.live)
            self.tensors[key] += 1
            weakref.finalize(t, self._freed, key)
        return out


def _probe_peak(model: ImageCaptioner, batch: int, features: bool, *, train: bool = True) -> int:
    """:class:`LivePeak` of a training step's forward and backward (``train``) of a copy of ``model`` on
    ``batch`` random inputs of captions as long as ``max_len``, or of encoding ``batch`` images as
    captioning does (no gradients, ``train=False``); the copy keeps the model's state (batch-norm
    statistics, random stream) untouched."""
    import torch

    cfg, (h, w) = model.config, model.grid
    generator = torch.Generator().manual_seed(0)
    captions = torch.randint(0, cfg.vocab_size, (batch, cfg.max_len), generator=generator)
    lengths = torch.full((batch,), cfg.max_len)
    with torch.random.fork_rng():
        net = copy.deepcopy(model).train(train)
        if features:
            x = torch.randn(batch, h * w, model.feature_dim, generator=generator)
        else:
            x = torch.rand(batch, 3, cfg.image_size, cfg.image_size, generator=generator)
        with LivePeak([*net.parameters(), *net.buffers(), x, captions, lengths]) as count:
            if not train:
                with torch.no_grad():
                    net.encode(x)
            else:
                regions = x if features else net.encode(x)  # net.loss, written out
                net.loss_features(regions, captions, lengths)[0].backward()
    return count.peak


def _drawn_through(model: ImageCaptioner, batch: int, features: bool, *, train: bool = True) -> int:
    """:func:`_probe_peak` on 2 and on 4 inputs, drawn through to ``batch`` (the part that does not grow
    with it, the weights' gradients, once), times :data:`STEP_FACTOR`."""
    two, four = _probe_peak(model, 2, features, train=train), _probe_peak(model, 4, features, train=train)
    return int(max(two + (four - two) / 2 * (batch - 2), two) * STEP_FACTOR)


def caption_step_bytes(model: ImageCaptioner, batch: int, *, features: bool) -> int:
    """Bytes a training step of ``model`` holds for ``batch`` captions of its longest length (``max_len``):
    the live-tensor peak of a step on 2 and on 4 random images (or region features, ``features=True``),
    drawn through to ``batch``, times :data:`STEP_FACTOR`."""
    return _drawn_through(model, batch, features)


def caption_generation_bytes(model: ImageCaptioner, batch: int = GENERATE_BATCH) -> int:
    """Bytes encoding ``batch`` images for captioning holds (the held-out images are captioned
    :data:`GENERATE_BATCH` at a time), measured as :func:`caption_step_bytes` is."""
    return _drawn_through(model, batch, False, train=False)


def estimate_captioning(model: ImageCaptioner, *, images: int, captions: int, held_out: int, batch_size: int,
                        features: bool) -> MemoryEstimate:
    """:class:`~attnkit.train.memory_budget.MemoryEstimate` of training ``model`` on ``images`` training
    images (or their region features, ``features=True``) with ``captions`` caption rows, ``held_out``
    validation images, in batches of ``batch_size``."""
    trained = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    cfg = model.config
    h, w = model.grid
    per_image = 2 * h * w * model.feature_dim if features else 3 * cfg.image_size ** 2
    per_held_out = 2 * h * w * model.feature_dim if features else 4 * 3 * cfg.image_size ** 2
    held = images * per_image + held_out * per_held_out + captions * (8 * cfg.max_len + 16)
    step = caption_step_bytes(model, min(batch_size, max(captions, 1)), features=features)
    if held_out and not features:  # captioning the held-out images passes them through the encoder
        step = max(step, caption_generation_bytes(model, min(held_out, GENERATE_BATCH)))
    return MemoryEstimate(trained, frozen + buffers, 0, held, step, data_name="images and captions")


def check_captioning(model: ImageCaptioner, *, images: int, captions: int, held_out: int, batch_size: int,
                     features: bool, limit: int | None = None, budget: MemoryBudget | None = None
                     ) -> MemoryEstimate:
    """:func:`estimate_captioning`, checked against :func:`~attnkit.train.memory_budget.limit_and_source`
    of ``limit`` (``max_memory``) and ``budget`` (None: :func:`attnkit._memory.memory_budget` now)."""
    budget = budget if budget is not None else plans.memory_budget()  # looked up now: tests replace it
    bound, source = plans.limit_and_source(limit, budget)
    need = estimate_captioning(model, images=images, captions=captions, held_out=held_out,
                               batch_size=batch_size, features=features)
    if bound is None or need.total <= bound:
        return need
    raise MemoryLimitError(
        f"captioning {images} images ({captions} captions, {held_out} held out) at {model.config.image_size} "
        f"pixels needs {need.describe()}, over the limit of {format_bytes(bound)} ({source}); raise "
        f"{plans._raise_what(need.total, source, budget)}, or lower `batch_size` (one batch's activations: about "
        f"{format_bytes(need.activations)}), `image_size`, the number of images or the model's size")
