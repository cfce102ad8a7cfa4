"""attnkit inside other libraries' models.

* :mod:`attnkit.integrations.transformers` — ``attn_implementation="attnkit"`` for Hugging Face
  transformers: block masks for padding, sliding windows and packed rows, attnkit's kernels for
  the attention itself. Importing it registers the backend (the ``hf`` extra).

Nothing here is imported by ``import attnkit``: each integration loads its library on import.
"""
