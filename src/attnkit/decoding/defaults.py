"""How a translation decodes unless told otherwise, stated once (without torch, so that settings and flags
read it): :func:`attnkit.decoding.beam_search`'s defaults."""

__all__ = ["BEAM_SIZE", "LENGTH_PENALTY"]

BEAM_SIZE = 4
"""How many hypotheses a translation keeps unless told otherwise: :func:`attnkit.decoding.beam_search`'s default, and so
``attnkit translate``'s and ``load_run(RUN).translate``'s (the translation task's settings read it)."""
LENGTH_PENALTY = 0.6
"""The GNMT exponent ``alpha`` a translation is ranked with unless told otherwise (GNMT's own)."""
