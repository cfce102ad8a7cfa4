"""The core cases: MultiHeadAttention against PyTorch, the cost of weights, attention's FLOP rate.

Each case function takes ``quick`` (smaller sizes, for a fast check) and
returns a list of :class:`~attnkit.bench.result.Result`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attnkit.bench.result import Result, judge
from attnkit.bench.timing import TIMING_METHOD, time_pair
from attnkit.core.functional import attention
from attnkit.layers.multi_head import MultiHeadAttention

__all__ = ["mha", "mha_weights", "attention_flops"]


def _method(warmup: int, repeats: int, extra: str = "") -> str:
    text = TIMING_METHOD.format(warmup=warmup, repeats=repeats, threads=torch.get_num_threads())
    return f"{text}; {extra}" if extra else text


def _mha_pair(quick: bool) -> tuple[MultiHeadAttention, nn.MultiheadAttention, Tensor, dict[str, int]]:
    b, t, d, h = (2, 128, 128, 4) if quick else (8, 512, 512, 8)
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d, h, batch_first=True)
    ours = MultiHeadAttention.from_torch(ref)
    x = torch.randn(b, t, d, requires_grad=True)  # (B, T, D)
    return ours, ref, x, {"B": b, "T": t, "d_model": d, "heads": h}


def _step(module: nn.Module, x: Tensor, forward: Callable[[], Tensor]) -> Callable[[], None]:
    """One training step's attention work: forward, scalar loss, backward (grads cleared first)."""

    def run() -> None:
        module.zero_grad(set_to_none=True)
        x.grad = None
        forward().backward()

    return run


def mha(quick: bool) -> list[Result]:
    """attnkit MultiHeadAttention vs ``nn.MultiheadAttention(need_weights=False)``, forward+backward."""
    ours, ref, x, params = _mha_pair(quick)
    warmup, repeats = (1, 5) if quick else (2, 9)
    a = _step(ours, x, lambda: ours(x).sum())
    b = _step(ref, x, lambda: ref(x, x, x, need_weights=False)[0].sum())
    ta, tb = time_pair(a, b, warmup=warmup, repeats=repeats)
    return [judge(
        "mha", "self-attention forward+backward time", "attnkit MultiHeadAttention", ta,
        "nn.MultiheadAttention(need_weights=False)", tb, unit="s", sense="<=", bound=1.05,
        method=_method(warmup, repeats, "same weights via from_torch, loss = out.sum()"),
        params=params,
    )]


def mha_weights(quick: bool) -> list[Result]:
    """The price of ``return_weights=True``: attnkit against itself, PyTorch for context.

    The target compares the same training step with the flag on and off (loss
    ``out.sum()``; the returned weights, with their autograd graph, are kept
    through the step). A second figure puts the weights into the loss too, so
    that their backward pass runs; a third shows what ``need_weights=True``
    costs ``nn.MultiheadAttention``.
    """
    ours, ref, x, params = _mha_pair(quick)
    warmup, repeats = (1, 5) if quick else (1, 7)

    kept: list[Tensor] = []  # a caller keeps the weights (and their graph) through the step

    def ours_weights() -> Tensor:
        out, weights = ours(x, return_weights=True)
        kept[:] = [weights]
        return out.sum()

    def ours_weights_in_loss() -> Tensor:
        out, weights = ours(x, return_weights=True)
        return out.sum() + weights.sum()

    def ref_weights() -> Tensor:
        out, weights = ref(x, x, x, need_weights=True, average_attn_weights=False)
        kept[:] = [weights]
        return out.sum()

    without = _step(ours, x, lambda: ours(x).sum())
    ta, tb = time_pair(_step(ours, x, ours_weights), without, warmup=warmup, repeats=repeats)
    tc, td = time_pair(_step(ours, x, ours_weights_in_loss), without, warmup=warmup, repeats=repeats)
    te, tf = time_pair(_step(ref, x, ref_weights),
                       _step(ref, x, lambda: ref(x, x, x, need_weights=False)[0].sum()),
                       warmup=warmup, repeats=repeats)
    same = "loss = out.sum() on both sides"
    return [
        judge("mha-weights", "forward+backward time with vs without weights",
              "attnkit MHA return_weights=True", ta, "attnkit MHA return_weights=False", tb,
              unit="s", sense="<=", bound=1.4, method=_method(warmup, repeats, same), params=params),
        judge("mha-weights", "forward+backward time, weights also in the loss (context)",
              "attnkit MHA return_weights=True", tc, "attnkit MHA return_weights=False", td,
              unit="s", sense="<=", bound=None, params=params,
              method=_method(warmup, repeats, "loss = out.sum() + weights.sum() vs out.sum()")),
        judge("mha-weights", "forward+backward time with vs without weights (PyTorch, context)",
              "nn.MultiheadAttention need_weights=True", te,
              "nn.MultiheadAttention need_weights=False", tf,
              unit="s", sense="<=", bound=None, method=_method(warmup, repeats, same), params=params),
    ]


def attention_flops(quick: bool) -> list[Result]:
    """FLOP rate of :func:`attnkit.attention` forward against a float32 square matmul.

    Attention FLOPs are ``4 B H T^2 Dh`` (``Q K^T`` and ``P V``, 2 per multiply-add);
    the matmul does ``2 n^3``.
    """
    b, h, t, dh, n = (1, 4, 1024, 64, 1024) if quick else (1, 8, 4096, 64, 2048)
    warmup, repeats = (1, 3) if quick else (1, 7)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, dh, generator=gen) for _ in range(3))  # (B, H, T, Dh)
    m1, m2 = (torch.randn(n, n, generator=gen) for _ in range(2))  # (n, n)

    def run_attention() -> None:
        with torch.no_grad():
            attention(q, k, v)

    def run_matmul() -> None:
        with torch.no_grad():
            torch.mm(m1, m2)

    ta, tb = time_pair(run_attention, run_matmul, warmup=warmup, repeats=repeats)
    rate_a = 4 * b * h * t * t * dh / ta / 1e9
    rate_b = 2 * n**3 / tb / 1e9
    return [judge(
        "attention-flops", "forward FLOP rate", "attnkit.attention (4·B·H·T²·Dh / time)", rate_a,
        f"torch.mm float32 {n}x{n} (2·n³ / time)", rate_b, unit="GFLOP/s", sense=">=", bound=0.75,
        method=_method(warmup, repeats, f"attention {ta * 1e3:.1f} ms, matmul {tb * 1e3:.1f} ms"),
        params={"B": b, "H": h, "T": t, "Dh": dh, "matmul_n": n},
    )]
