"""Inputs and baselines shared by the benchmark cases and the memory worker."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["relative_inputs"]


def relative_inputs(p: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """q, k, v ``(B, H, T, Dh)`` and rel_k, rel_v ``(2 max_rel + 1, Dh)`` for the relative case."""
    gen = torch.Generator().manual_seed(0)
    b, h, t, dh, m = p["B"], p["H"], p["T"], p["Dh"], p["max_rel"]
    q, k, v = (torch.randn(b, h, t, dh, generator=gen) for _ in range(3))  # (B, H, T, Dh)
    rel_k, rel_v = (torch.randn(2 * m + 1, dh, generator=gen) for _ in range(2))  # (2m+1, Dh)
    return q, k, v, rel_k, rel_v
