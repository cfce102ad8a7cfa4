"""The Shaw et al. (2018) relative-position attention formula, written out directly.

This is the readable, memory-hungry form: it builds the ``(Tq, Tk, Dh)``
relative tables ``a^K`` and ``a^V`` expanded over the batch to
``(B, Tq, Tk, Dh)``, exactly as the paper's equations read::

    e_ij = q_i · (k_j + a^K_ij) / sqrt(Dh)
    z_i  = Σ_j softmax_j(e_ij) (v_j + a^V_ij),   a_ij = w[clip(j - i, -k, k)]

``attnkit bench``'s relative case compares
:class:`attnkit.layers.relative.RelativePositionAttention` against it (it ships in
the package, so the case runs from an installed wheel); the unit tests hold the
two equal.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["naive_relative_attention"]


def naive_relative_attention(
    q: Tensor, k: Tensor, v: Tensor, rel_k: Tensor, rel_v: Tensor, max_rel: int,
    mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Shaw attention with explicit ``(B, Tq, Tk, Dh)`` relative tensors.

    Distances are ``j - i`` bottom-right aligned (the queries are the last Tq
    keys). ``mask`` is boolean, True where a query may attend; a query with no
    key gets zero output.

    Shape:
        q ``(B, H, Tq, Dh)``, k and v ``(B, H, Tk, Dh)``, rel_k and rel_v
        ``(2 max_rel + 1, Dh)``; returns output ``(B, H, Tq, Dh)`` and weights
        ``(B, H, Tq, Tk)``.
    """
    b, h, tq, dh = q.shape
    tk = k.shape[2]
    i = torch.arange(tq).unsqueeze(1) + (tk - tq)  # (Tq, 1)
    j = torch.arange(tk).unsqueeze(0)  # (1, Tk)
    bucket = (j - i).clamp(-max_rel, max_rel) + max_rel  # (Tq, Tk)
    a_k = rel_k[bucket].unsqueeze(0).expand(b, tq, tk, dh).contiguous()  # (B, Tq, Tk, Dh)
    a_v = rel_v[bucket].unsqueeze(0).expand(b, tq, tk, dh).contiguous()  # (B, Tq, Tk, Dh)
    content = q @ k.transpose(-1, -2)  # (B, H, Tq, Tk)
    position = torch.einsum("bhid,bijd->bhij", q, a_k)  # (B, H, Tq, Tk)
    scores = (content + position) / math.sqrt(dh)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights, nan=0.0)  # rows with no key: zero weights
    out = weights @ v + torch.einsum("bhij,bijd->bhid", weights, a_v)  # (B, H, Tq, Dh)
    return out, weights
