"""Position information for attention: absolute, rotary, ALiBi and relative distances.

Self-attention without positions is permutation-equivariant: shuffling the
tokens shuffles the outputs the same way. Each scheme here breaks that
symmetry differently:

* :class:`SinusoidalPositionalEncoding` and :func:`sinusoidal_table` — fixed
  sines and cosines added to the input (Vaswani et al., 2017).
* :class:`LearnedPositionalEmbedding` — one trained vector per position
  (BERT, GPT-2); cannot go past ``max_len``.
* :class:`RotaryEmbedding` — rotate query and key feature pairs by an angle
  proportional to the position, so ``q_m · k_n`` depends on ``m - n`` only
  (RoFormer, Su et al., 2021).
* :func:`alibi_slopes` and :func:`alibi_bias` — a per-head linear penalty on
  the query-key distance added to the logits (Press et al., 2022).
* :func:`relative_distance` and :func:`clipped_relative_index` — the ``j - i``
  tables behind relative-position attention (Shaw et al., 2018).

Shape legend: B batch, T length, D model width, H heads, Tq/Tk query/key
length, Dh head width.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnkit._checks import non_negative_int, positive_int

__all__ = [
    "sinusoidal_table",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "RotaryEmbedding",
    "rotate_half",
    "check_positions",
    "alibi_slopes",
    "alibi_bias",
    "relative_distance",
    "clipped_relative_index",
]


def _check_btd(name: str, x: object, width: int) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3 or x.shape[-1] != width:
        raise ValueError(f"{name} must be (B, T, {width}), got shape {tuple(x.shape)}")
    return x


def check_positions(positions: object, batch: int, length: int, device: torch.device) -> Tensor:
    """Validate explicit positions for a ``(B, T, ...)`` input: ``(T,)`` or ``(B, T)`` ints ``>= 0``.

    Explicit positions let each packed document start again at 0
    (:mod:`attnkit.data.packing`), or a cache keep its tokens' original positions.

    Shape:
        positions ``(T,)`` or ``(B, T)``; returns them as int64 on ``device``.
    """
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be an integer torch.Tensor, got {type(positions).__name__}")
    if positions.dtype.is_floating_point or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers, got dtype {positions.dtype}")
    if positions.shape not in ((length,), (batch, length)):
        raise ValueError(
            f"positions must be (T,) = ({length},) or (B, T) = ({batch}, {length}), "
            f"got shape {tuple(positions.shape)}"
        )
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got min {int(positions.min())}")
    return positions.to(device=device, dtype=torch.long)


def sinusoidal_table(
    length: int, d_model: int, *, base: float = 10000.0, offset: int = 0,
    dtype: torch.dtype = torch.float32, device: torch.device | str | None = None,
) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017), section 3.5.

    ``PE[pos, 2i] = sin(pos / base^(2i / D))`` and
    ``PE[pos, 2i + 1] = cos(pos / base^(2i / D))`` for ``pos = offset .. offset + length - 1``.
    Each feature pair is a clock at its own frequency, from ``1`` down to
    ``1 / base`` radians per step, so ``PE[pos + k]`` is a fixed linear (rotation)
    function of ``PE[pos]``. An odd ``D`` drops the last cosine column.
    Computed in float64 and cast, so large positions stay accurate. On the ``meta`` device (a model sized
    without storage) the table is its shape alone: computing it there would load ``torch._dynamo``.

    Shape:
        returns ``(length, d_model)``.
    """
    non_negative_int("length", length)
    positive_int("d_model", d_model)
    non_negative_int("offset", offset)
    if torch.empty(0, device=device).is_meta:
        return torch.empty(length, d_model, dtype=dtype, device=device)
    pos = torch.arange(offset, offset + length, dtype=torch.float64, device=device)  # (T,)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device=device)  # (ceil(D/2),)
    angle = pos[:, None] / base ** (two_i / d_model)  # (T, ceil(D/2))
    table = torch.empty(length, d_model, dtype=torch.float64, device=device)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(dtype)


class SinusoidalPositionalEncoding(nn.Module):
    """Add the fixed sinusoidal table to a batch-first sequence (Vaswani et al., 2017).

    ``forward(x, offset)`` returns ``x + PE[offset : offset + T]``; ``offset``
    is the number of positions already seen, for incremental decoding.
    ``forward(x, positions=p)`` adds ``PE[p]`` instead: explicit positions
    ``(T,)`` or ``(B, T)``, e.g. restarting at 0 for each packed document. The
    first ``max_len`` rows are precomputed; longer inputs are computed on the
    fly (the formula extrapolates), so there is no hard length limit.

    Args:
        d_model: model width D.
        max_len: rows to precompute.
        base: the wavelength base (10000 in the paper).

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)``.
    """

    table: Tensor

    def __init__(self, d_model: int, max_len: int = 4096, *, base: float = 10000.0) -> None:
        super().__init__()
        self.d_model = positive_int("d_model", d_model)
        self.max_len = positive_int("max_len", max_len)
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        self.base = float(base)
        self.register_buffer("table", sinusoidal_table(max_len, d_model, base=self.base), persistent=False)

    def forward(self, x: Tensor, offset: int = 0, *, positions: Tensor | None = None) -> Tensor:
        _check_btd("x", x, self.d_model)
        non_negative_int("offset", offset)
        t = x.shape[1]
        if positions is not None:
            pos = check_positions(positions, x.shape[0], t, x.device) + offset
            top = int(pos.max()) + 1 if pos.numel() else 0
            table = self.table if top <= self.max_len else sinusoidal_table(
                top, self.d_model, base=self.base, device=x.device)
            return x + table[pos].to(x.dtype)  # (B, T, D) or (T, D) broadcast
        if offset + t <= self.max_len:
            pe = self.table[offset : offset + t]  # (T, D)
        else:
            pe = sinusoidal_table(t, self.d_model, base=self.base, offset=offset, device=x.device)
        return x + pe.to(x.dtype)


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per absolute position, added to the input (BERT, GPT-2).

    Unlike the sinusoidal table it cannot extrapolate: positions at or past
    ``max_len`` have no vector, and asking for them raises a ``ValueError``.
    Initialised from ``N(0, 0.02)`` as in GPT-2. ``forward(x, positions=p)``
    takes explicit positions ``(T,)`` or ``(B, T)`` (packed documents restart at 0).

    Shape:
        x ``(B, T, D)``; returns ``(B, T, D)``.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len = positive_int("max_len", max_len)
        self.d_model = positive_int("d_model", d_model)
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: Tensor, offset: int = 0, *, positions: Tensor | None = None) -> Tensor:
        _check_btd("x", x, self.d_model)
        non_negative_int("offset", offset)
        t = x.shape[1]
        if positions is not None:
            pos = check_positions(positions, x.shape[0], t, x.device) + offset
            if pos.numel() and int(pos.max()) >= self.max_len:
                raise ValueError(
                    f"positions reach {int(pos.max())} but LearnedPositionalEmbedding has "
                    f"max_len={self.max_len}; build it with a larger max_len"
                )
            return x + self.weight[pos].to(x.dtype)  # (B, T, D)
        if offset + t > self.max_len:
            raise ValueError(
                f"input needs positions {offset}..{offset + t - 1} (offset={offset}, T={t}) but "
                f"LearnedPositionalEmbedding has max_len={self.max_len}; build it with a larger max_len"
            )
        return x + self.weight[offset : offset + t].to(x.dtype)  # (B, T, D)


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` on the last axis, split into halves (GPT-NeoX/LLaMA layout).

    Shape:
        x ``(..., Dh)`` with even ``Dh``; returns the same shape.
    """
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding, RoPE (Su et al., 2021, "RoFormer").

    Feature ``i`` and feature ``i + Dh/2`` of a query or key at position ``m``
    are rotated by the angle ``m * theta_i`` with ``theta_i = base^(-2i / Dh)``::

        x'[i]        = x[i] cos(m θ_i) - x[i + Dh/2] sin(m θ_i)
        x'[i + Dh/2] = x[i + Dh/2] cos(m θ_i) + x[i] sin(m θ_i)

    i.e. ``x' = x * cos + rotate_half(x) * sin`` — the half-split pairing of
    GPT-NeoX and LLaMA (the paper pairs neighbours ``2i, 2i+1``; the two differ
    only by a fixed permutation of the features). Since rotations compose,
    ``R(m) q · R(n) k = q · R(n - m) k``: the logit depends on the positions
    only through their difference.

    ``cos``/``sin`` tables are cached per device and grown on demand; they are
    computed in float32 (float64 for float64 inputs) and cast to the input dtype.

    Args:
        head_dim: Dh, even.
        base: frequency base (10000 in the paper).

    Shape:
        q ``(B, H, Tq, Dh)``, k ``(B, Hkv, Tk, Dh)``; returns rotated tensors of the same shapes.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embedding (features rotate in pairs), got {head_dim}")
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        self.head_dim, self.base = head_dim, float(base)
        # A plain float64 tensor, not a buffer: module.half() must not round the frequencies.
        self.inv_freq = 1.0 / self.base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self._cache: dict[tuple[torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def cos_sin(self, length: int, *, device: torch.device | None = None,
                dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """Cached ``cos`` and ``sin`` tables for positions ``0 .. length - 1``.

        Shape:
            returns two ``(length, Dh)`` tensors (each frequency repeated for both halves).
        """
        device = torch.device("cpu") if device is None else device
        work = torch.float64 if dtype == torch.float64 else torch.float32
        key = (torch.device(device), work)
        cached = self._cache.get(key)
        if cached is None or cached[0].shape[0] < length:
            size = max(length, 2 * cached[0].shape[0] if cached is not None else 256)
            pos = torch.arange(size, dtype=torch.float64, device=device)  # (T,)
            freqs = pos[:, None] * self.inv_freq.to(device)[None, :]  # (T, Dh/2)
            angles = torch.cat((freqs, freqs), dim=-1)  # (T, Dh)
            cached = (angles.cos().to(work), angles.sin().to(work))
            self._cache[key] = cached
        return cached[0][:length], cached[1][:length]

    def rotate(self, x: Tensor, offset: int = 0, *, positions: Tensor | None = None) -> Tensor:
        """Rotate one tensor whose positions are ``offset .. offset + T - 1``, or ``positions``.

        ``positions`` ``(T,)`` or ``(B, T)`` gives each token its own position
        (packed documents restart at 0; a cache keeps its keys' positions).

        Shape:
            x ``(B, H, T, Dh)``, positions ``(T,)`` or ``(B, T)``; returns the same shape and dtype as x.
        """
        if not isinstance(x, Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() != 4 or x.shape[-1] != self.head_dim:
            raise ValueError(f"x must be (B, H, T, {self.head_dim}), got shape {tuple(x.shape)}")
        non_negative_int("offset", offset)
        t = x.shape[2]
        if positions is not None:
            pos = check_positions(positions, x.shape[0], t, x.device) + offset
            top = int(pos.max()) + 1 if pos.numel() else 0
            cos_all, sin_all = self.cos_sin(top, device=x.device, dtype=x.dtype)
            cos, sin = cos_all[pos], sin_all[pos]  # (T, Dh) or (B, T, Dh)
            if cos.dim() == 3:
                cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, Dh)
        else:
            cos, sin = self.cos_sin(offset + t, device=x.device, dtype=x.dtype)
            cos, sin = cos[offset:], sin[offset:]  # (T, Dh)
        work = x.to(cos.dtype)
        return (work * cos + rotate_half(work) * sin).to(x.dtype)

    def forward(self, q: Tensor, k: Tensor, offset: int = 0, *,
                k_offset: int | None = None, positions: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys. ``offset`` is the position of the first query; keys
        start at ``k_offset`` (default ``offset``). With a KV cache, pass the cache's
        ``offset`` before this step and rotate only the new keys. ``positions``
        ``(T,)`` or ``(B, T)`` gives self-attention's tokens explicit positions
        (packed documents), for queries and keys alike."""
        if positions is not None:
            return self.rotate(q, positions=positions), self.rotate(k, positions=positions)
        return self.rotate(q, offset), self.rotate(k, offset if k_offset is None else k_offset)


def alibi_slopes(num_heads: int) -> Tensor:
    """The per-head ALiBi slopes of Press et al. (2022), "Train Short, Test Long".

    For ``n`` a power of two the slopes are the geometric sequence starting at
    ``2^(-8/n)`` with that same ratio: for 8 heads ``1/2, 1/4, ..., 1/256``.
    For other ``n`` the paper takes the slopes of the closest smaller power of
    two ``p``, then adds every other slope of ``2p`` heads until ``n`` are found.

    Shape:
        returns ``(num_heads,)`` float32.
    """
    positive_int("num_heads", num_heads)

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** int(math.floor(math.log2(num_heads)))
    slopes = power_of_two(closest)
    if closest < num_heads:
        slopes += power_of_two(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def relative_distance(tq: int, tk: int, *, device: torch.device | str | None = None) -> Tensor:
    """Signed distance ``j - (i + Tk - Tq)`` from query ``i`` to key ``j``, bottom-right aligned.

    The ``Tq`` queries are the last ``Tq`` positions of the ``Tk`` keys (as in
    :func:`attnkit.masks.causal` and incremental decoding), so for self-attention
    (``Tq == Tk``) this is ``j - i``: negative for earlier keys, 0 on the diagonal.

    Shape:
        returns ``(Tq, Tk)`` int64.
    """
    non_negative_int("tq", tq)
    non_negative_int("tk", tk)
    i = torch.arange(tq, device=device).unsqueeze(1) + (tk - tq)  # (Tq, 1)
    j = torch.arange(tk, device=device).unsqueeze(0)  # (1, Tk)
    return j - i  # (Tq, Tk)


def clipped_relative_index(
    tq: int, tk: int, max_distance: int, *, device: torch.device | str | None = None,
    query_start: int = 0, query_end: int | None = None,
) -> Tensor:
    """Bucket index ``clip(j - i, -k, k) + k`` in ``0 .. 2k`` for Shaw-style relative tables.

    ``query_start`` and ``query_end`` select a block of query rows, so long
    sequences can be handled a block at a time.

    Shape:
        returns ``(query_end - query_start, Tk)`` int64 (default all ``Tq`` rows).
    """
    positive_int("max_distance", max_distance)
    end = tq if query_end is None else query_end
    i = torch.arange(query_start, end, device=device).unsqueeze(1) + (tk - tq)  # (Tb, 1)
    j = torch.arange(tk, device=device).unsqueeze(0)  # (1, Tk)
    return (j - i).clamp(-max_distance, max_distance) + max_distance  # (Tb, Tk)


def alibi_bias(
    num_heads: int, tq: int, tk: int, *, device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """ALiBi additive bias ``-slope_h * |j - (i + Tk - Tq)|`` for :func:`attnkit.attention` ``bias=``.

    Distances are bottom-right aligned (see :func:`relative_distance`). On the
    keys a causal query may see (``j <= i``) this is exactly the paper's
    ``slope * (j - i)``; the absolute value extends it symmetrically to
    bidirectional attention. Combine with ``causal=True`` for the paper's
    decoder. Every entry is finite and ``<= 0``, zero on the diagonal.

    Shape:
        returns ``(1, H, Tq, Tk)``.
    """
    slopes = alibi_slopes(num_heads).to(device=device, dtype=torch.float32)  # (H,)
    dist = relative_distance(tq, tk, device=device).abs().to(torch.float32)  # (Tq, Tk)
    bias = -slopes[:, None, None] * dist[None]  # (H, Tq, Tk)
    return bias.unsqueeze(0).to(dtype)  # (1, H, Tq, Tk)
