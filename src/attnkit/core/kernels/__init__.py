"""The kernels of :func:`attnkit.attention`, side by side; :mod:`attnkit.core.dispatch` picks one.

* :mod:`~attnkit.core.kernels.dense` — the whole ``(Tq, Tk)`` problem: torch's fused
  scaled-dot-product kernel, or the readable formula step by step (also with a ``score_mod``).
* :mod:`~attnkit.core.kernels.runs` — a BlockMask whose key blocks form one contiguous run per
  query block: strided views through the CPU flash kernel, no gather.
* :mod:`~attnkit.core.kernels.gather` — any BlockMask: each query block gathers its non-empty key
  blocks (fused kernel, or autograd with a ``score_mod``, dropout or weights).
* :mod:`~attnkit.core.kernels.tiles` — a ``score_mod`` in query tiles, flash style, with or without
  a BlockMask.
"""
