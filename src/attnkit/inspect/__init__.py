"""See inside any model: attention weights captured from PyTorch, Hugging Face, timm and attnkit models.

:func:`capture` is a context manager; inside it, every forward of a supported
attention module records its per-head weights ``(B, H, Tq, Tk)`` into
``cap.weights`` while the model computes exactly what it computes without it,
with its own (fused) kernels. The capture then draws: ``cap.report(path,
tokens=...)`` (the offline HTML report, with a neuron view), ``cap.figure()``,
``cap.rollout()``, ``cap.entropy()``, ``cap.image_rollout(image)``, and it shows
itself inline in Jupyter. See ``docs/inspect.md``.
"""

from attnkit.inspect.capture import Capture, CaptureMismatch, capture, find_attention

__all__ = ["capture", "Capture", "CaptureMismatch", "find_attention"]
