"""Inputs and baselines shared by the benchmark cases and the memory worker."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_naive_relative", "relative_inputs"]


def load_naive_relative() -> Callable[..., Any] | None:
    """``naive_relative_attention`` from ``benchmarks/naive_relative.py`` of a source checkout.

    Returns ``None`` when the file is not there (e.g. an installed wheel).
    """
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "naive_relative.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location("attnkit_bench_naive_relative", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "naive_relative_attention", None)


def relative_inputs(p: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    """q, k, v ``(B, H, T, Dh)`` and rel_k, rel_v ``(2 max_rel + 1, Dh)`` for the relative case."""
    gen = torch.Generator().manual_seed(0)
    b, h, t, dh, m = p["B"], p["H"], p["T"], p["Dh"], p["max_rel"]
    q, k, v = (torch.randn(b, h, t, dh, generator=gen) for _ in range(3))  # (B, H, T, Dh)
    rel_k, rel_v = (torch.randn(2 * m + 1, dh, generator=gen) for _ in range(2))  # (2m+1, Dh)
    return q, k, v, rel_k, rel_v
