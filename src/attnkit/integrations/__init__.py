"""attnkit inside other libraries' models.

* :mod:`attnkit.integrations.transformers` — ``attn_implementation="attnkit"`` for Hugging Face
  transformers: block masks for padding, sliding windows and packed rows, attnkit's kernels for
  the attention itself. Importing it registers the backend (the ``hf`` extra).
* :mod:`attnkit.integrations.context_parallel` — a transformers model's attention through
  :func:`attnkit.parallel.ring_attention` inside a ``with`` block, one sequence across processes
  (``attn_implementation="attnkit_ring"``; transformers is loaded when the block is entered).

Nothing here is imported by ``import attnkit``.
"""
