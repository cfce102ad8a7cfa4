"""Measure every parity claim of the README's "Parity" paragraph and print the figures.

Each row compares an attnkit computation with an independent one and prints the
largest absolute difference on outputs, attention weights, input gradients and
parameter gradients, next to the bound the tests assert for it:

* ``attention`` against the softmax formula written plainly, for each mask kind
  (none, padding, causal with Tq = Tk and Tq < Tk, padding + causal, fully
  masked rows), on the fused and the readable (math) path, float64 and float32;
* ``MultiHeadAttention.from_torch`` against ``nn.MultiheadAttention`` (self,
  cross, key padding, causal, kdim/vdim, batch-second);
* the encoder and decoder layers (``from_torch``) against
  ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` (post- and
  pre-norm; padding, causal, padding + causal), float32, in eval mode with
  gradients on, so PyTorch computes its documented formula;
* step-by-step decoding with KV caches against the full causal pass;
* ``RelativePositionAttention`` against the Shaw et al. (2018) formula with its
  ``(B, Tq, Tk, Dh)`` tensors, and ``linear_attention`` against the same
  computation with explicit ``(T, T)`` weights;
* then the masking matrix: non-finite values in outputs, weights and gradients
  in float32, float16 and bfloat16, on both paths (must be 0).

Exit status 1 when any figure exceeds its bound. Seeded; a few seconds on CPU.

    .venv/bin/python evals/parity.py
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

import attnkit
from attnkit import masks
from attnkit.blocks import TransformerDecoder, TransformerEncoder, TransformerLayerConfig
from attnkit.blocks import TransformerDecoderLayer as OurDecoderLayer
from attnkit.blocks import TransformerEncoderLayer as OurEncoderLayer
from attnkit.core.functional import attention, split_heads
from attnkit.layers import MultiHeadAttention, RelativePositionAttention
from attnkit.layers.linear import linear_attention, linear_attention_weights

SEED = 0  # set by --seed; every case reseeds with it
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
DTYPE_NAME = {torch.float64: "float64", torch.float32: "float32", torch.float16: "float16",
              torch.bfloat16: "bfloat16"}


@dataclass
class Row:
    comparison: str
    dtype: str
    outputs: float | None
    weights: float | None
    input_grads: float | None
    param_grads: float | None
    bound: float
    param_bound: float | None = None

    def failed(self) -> bool:
        figures = (self.outputs, self.weights, self.input_grads)
        if any(f is not None and not f <= self.bound for f in figures):
            return True
        limit = self.bound if self.param_bound is None else self.param_bound
        return self.param_grads is not None and not self.param_grads <= limit


def max_diff(pairs: Iterable[tuple[Tensor | None, Tensor | None]]) -> float:
    """Largest absolute difference over tensor pairs; NaN when a gradient is missing."""
    worst = 0.0
    for a, b in pairs:
        if a is None or b is None:
            return math.nan
        worst = max(worst, (a.double() - b.double()).abs().max().item())
    return worst


# --------------------------------------------------------------------------- attention


def plain_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
    """softmax(Q K^T / sqrt(Dh)) V over the allowed keys; a row with no key gives zeros."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    allowed = torch.ones_like(scores, dtype=torch.bool) if mask is None else mask.expand_as(scores)
    has_key = allowed.any(-1, keepdim=True)
    scores = scores.masked_fill(~allowed, -math.inf).masked_fill(~has_key, 0.0)
    weights = torch.softmax(scores, dim=-1) * has_key
    return weights @ v, weights


def attention_rows() -> list[Row]:
    b, h, dh = 2, 4, 8
    padding = masks.from_lengths(torch.tensor([7, 3]), 7)  # (B, 1, 1, Tk)
    # name: (Tq, Tk, mask passed to attention, causal, mask of the plain formula)
    cases = {
        "no mask": (5, 7, None, False, None),
        "padding": (5, 7, padding, False, padding),
        "causal, Tq = Tk": (7, 7, None, True, masks.causal(7, 7)),
        "causal, Tq < Tk": (5, 7, None, True, masks.causal(5, 7)),
        "padding + causal": (5, 7, padding, True, masks.combine(padding, masks.causal(5, 7))),
        "fully masked rows": (5, 7, masks.from_lengths(torch.tensor([7, 0]), 7), False,
                              masks.from_lengths(torch.tensor([7, 0]), 7)),
    }
    rows = []
    for dtype in (torch.float64, torch.float32):
        for name, (tq, tk, mask, causal, plain_mask) in cases.items():
            for path in ("fused", "math"):
                torch.manual_seed(SEED)
                q = torch.randn(b, h, tq, dh, dtype=dtype, requires_grad=True)
                k = torch.randn(b, h, tk, dh, dtype=dtype, requires_grad=True)
                v = torch.randn(b, h, tk, dh, dtype=dtype, requires_grad=True)
                probe = torch.linspace(-1, 1, dh, dtype=dtype)
                out, w = attention(q, k, v, mask=mask, causal=causal, return_weights=True,
                                   backend=path)  # type: ignore[call-overload]
                choice = attnkit.last_backend()
                if choice is None or choice.name != path:
                    raise SystemExit(f"attention ran {choice} where the {path} path was forced")
                grads = torch.autograd.grad((out * probe).sum(), (q, k, v))
                ref_out, ref_w = plain_attention(q, k, v, plain_mask)
                ref_grads = torch.autograd.grad((ref_out * probe).sum(), (q, k, v))
                rows.append(Row(
                    f"attention vs plain formula, {name}, {path}", DTYPE_NAME[dtype],
                    max_diff([(out, ref_out)]), max_diff([(w, ref_w)]),
                    max_diff(zip(grads, ref_grads, strict=True)), None, TOL[dtype],
                ))
    return rows


# --------------------------------------------------------------------------- MultiHeadAttention


def _mha_param_grads(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> list[tuple[Tensor | None, Tensor | None]]:
    if ref.in_proj_weight is not None:
        assert ref.in_proj_weight.grad is not None
        theirs: list[Tensor | None] = list(ref.in_proj_weight.grad.chunk(3))
    else:
        theirs = [ref.q_proj_weight.grad, ref.k_proj_weight.grad, ref.v_proj_weight.grad]
    assert ref.in_proj_bias is not None and ref.in_proj_bias.grad is not None
    theirs += [*ref.in_proj_bias.grad.chunk(3), ref.out_proj.weight.grad, ref.out_proj.bias.grad]
    mine = [ours.get_parameter(f"{p}_proj.{kind}").grad for kind in ("weight", "bias") for p in "qkv"]
    mine += [ours.out_proj.weight.grad, ours.out_proj.bias.grad]
    return list(zip(mine, theirs, strict=True))


def mha_rows() -> list[Row]:
    d, h, b, tq, tk = 16, 4, 3, 5, 6
    rows = []
    for dtype in (torch.float64, torch.float32):
        for case in ("self", "cross", "key padding", "causal", "kdim/vdim", "batch-second"):
            torch.manual_seed(SEED)
            kdim, vdim = (7, 9) if case == "kdim/vdim" else (None, None)
            ref = nn.MultiheadAttention(d, h, kdim=kdim, vdim=vdim, batch_first=case != "batch-second")
            ref = ref.to(dtype)
            ours = MultiHeadAttention.from_torch(ref)
            q = torch.randn(b, tq, d, dtype=dtype, requires_grad=True)
            self_attn = case in ("self", "causal", "batch-second")
            k = q if self_attn else torch.randn(b, tk, kdim or d, dtype=dtype, requires_grad=True)
            v = q if self_attn else torch.randn(b, tk, vdim or d, dtype=dtype, requires_grad=True)
            kwargs: dict[str, Tensor] = {}
            our_mask = None
            if case == "key padding":
                kpm = torch.zeros(b, tk, dtype=torch.bool)
                kpm[1, 3:] = True  # PyTorch's convention: True = padding, ignore
                kwargs["key_padding_mask"] = kpm
                our_mask = masks.from_key_padding_mask(kpm)
            causal = case == "causal"
            if causal:
                kwargs["attn_mask"] = ~masks.causal(tq, tq)
            if case == "batch-second":
                ref_out, ref_w = ref(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                     average_attn_weights=False, **kwargs)
                ref_out = ref_out.transpose(0, 1)
            else:
                ref_out, ref_w = ref(q, k, v, average_attn_weights=False, **kwargs)
            if self_attn:
                out, w = ours(q, mask=our_mask, causal=causal, return_weights=True)
            else:
                out, w = ours(q, k, v, mask=our_mask, return_weights=True)
            inputs = [q] if self_attn else [q, k, v]
            probe = torch.randn_like(out)
            ours_in = torch.autograd.grad((out * probe).sum(), inputs, retain_graph=True)
            ref_in = torch.autograd.grad((ref_out * probe).sum(), inputs, retain_graph=True)
            (out * probe).sum().backward()
            (ref_out * probe).sum().backward()
            rows.append(Row(
                f"MultiHeadAttention.from_torch vs nn.MultiheadAttention, {case}", DTYPE_NAME[dtype],
                max_diff([(out, ref_out)]), max_diff([(w, ref_w)]),
                max_diff(zip(ours_in, ref_in, strict=True)), max_diff(_mha_param_grads(ours, ref)),
                TOL[dtype], 10 * TOL[dtype],
            ))
    return rows


# --------------------------------------------------------------------------- encoder / decoder layers


def _layer_param_grads(ours: nn.Module, theirs: nn.Module) -> list[tuple[Tensor | None, Tensor | None]]:
    pairs: list[tuple[Tensor | None, Tensor | None]] = []
    for our_attn, their_attn in (("self_attn", "self_attn"), ("cross_attn", "multihead_attn")):
        if not hasattr(ours, our_attn):
            continue
        a, b = ours.get_submodule(our_attn), theirs.get_submodule(their_attn)
        for kind in ("weight", "bias"):
            parts = [a.get_parameter(f"{p}_proj.{kind}").grad for p in "qkv"]
            joined = None if any(g is None for g in parts) else torch.cat(parts)  # type: ignore[arg-type]
            pairs.append((joined, b.get_parameter(f"in_proj_{kind}").grad))
            pairs.append((a.get_parameter(f"out_proj.{kind}").grad, b.get_parameter(f"out_proj.{kind}").grad))
    names = [("ff.linear1", "linear1"), ("ff.linear2", "linear2")]
    names += [(f"norm{i}", f"norm{i}") for i in (1, 2, 3) if hasattr(ours, f"norm{i}")]
    for our_name, their_name in names:
        for kind in ("weight", "bias"):
            pairs.append((ours.get_parameter(f"{our_name}.{kind}").grad,
                          theirs.get_parameter(f"{their_name}.{kind}").grad))
    return pairs


def _key_padding(lengths: Sequence[int], total: int) -> Tensor:
    return torch.arange(total) >= torch.tensor(lengths)[:, None]  # (B, T), True = padding


def _torch_causal(t: int) -> Tensor:
    return torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)  # True = ignore


def layer_rows() -> list[Row]:
    d, h, ff, b, t, s = 16, 4, 24, 3, 6, 5
    rows = []
    for kind in ("encoder", "decoder"):
        for norm_first in (False, True):
            for mask_case in ("padding", "causal", "padding + causal"):
                torch.manual_seed(SEED)
                padded, causal = "padding" in mask_case, "causal" in mask_case
                activation = "gelu" if norm_first else "relu"
                x = torch.randn(b, t, d)
                x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
                tgt_pad = _key_padding([t, 4, 2], t) if padded else None
                tgt_mask = None if tgt_pad is None else masks.from_key_padding_mask(tgt_pad)
                inputs: list[tuple[Tensor, Tensor]] = [(x_ours, x_theirs)]
                if kind == "encoder":
                    theirs: nn.Module = nn.TransformerEncoderLayer(
                        d, h, ff, dropout=0.2, activation=activation, norm_first=norm_first,
                        batch_first=True).eval()
                    ours: nn.Module = OurEncoderLayer.from_torch(theirs)  # type: ignore[arg-type]
                    y_theirs = theirs(x_theirs, src_mask=_torch_causal(t) if causal else None,
                                      src_key_padding_mask=tgt_pad, is_causal=causal)
                    y_ours = ours(x_ours, mask=tgt_mask, causal=causal)
                else:
                    theirs = nn.TransformerDecoderLayer(
                        d, h, ff, dropout=0.2, activation=activation, norm_first=norm_first,
                        batch_first=True).eval()
                    ours = OurDecoderLayer.from_torch(theirs)  # type: ignore[arg-type]
                    memory = torch.randn(b, s, d)
                    m_ours, m_theirs = memory.clone().requires_grad_(), memory.clone().requires_grad_()
                    inputs.append((m_ours, m_theirs))
                    mem_pad = _key_padding([s, 2, 4], s) if padded else None
                    y_theirs = theirs(x_theirs, m_theirs, tgt_mask=_torch_causal(t) if causal else None,
                                      tgt_is_causal=causal, tgt_key_padding_mask=tgt_pad,
                                      memory_key_padding_mask=mem_pad)
                    y_ours = ours(x_ours, m_ours, causal=causal, self_mask=tgt_mask,
                                  memory_mask=None if mem_pad is None else masks.from_key_padding_mask(mem_pad))
                upstream = torch.randn_like(y_ours)
                (y_ours * upstream).sum().backward()
                (y_theirs * upstream).sum().backward()
                norm = "pre-norm" if norm_first else "post-norm"
                rows.append(Row(
                    f"{kind} layer vs nn.Transformer{kind.capitalize()}Layer, {norm}, {mask_case}",
                    "float32", max_diff([(y_ours, y_theirs)]), None,
                    max_diff((a.grad, b_.grad) for a, b_ in inputs),
                    max_diff(_layer_param_grads(ours, theirs)), TOL[torch.float32],
                ))
    return rows


# --------------------------------------------------------------------------- KV cache


def kv_cache_rows() -> list[Row]:
    d, h, ff, b, t, s = 16, 4, 32, 3, 7, 5
    rows = []
    for norm_first, kv_heads, activation in [(False, None, "relu"), (True, None, "gelu"),
                                             (False, 2, "swiglu"), (True, 1, "relu")]:
        torch.manual_seed(SEED)
        config = TransformerLayerConfig(d, h, ff, dropout=0.1, activation=activation,
                                        norm_first=norm_first, kv_heads=kv_heads)
        decoder = TransformerDecoder(config, 2).eval()
        x, memory = torch.randn(b, t, d), torch.randn(b, s, d)
        memory_mask = masks.from_lengths([s, 3, 1], s)
        with torch.no_grad():
            full, full_w = decoder(x, memory, memory_mask=memory_mask, return_weights=True)
            cache = decoder.init_cache()
            steps, weight_pairs = [], []
            for i in range(t):
                out, w = decoder(x[:, i : i + 1], memory, memory_mask=memory_mask, cache=cache,
                                 return_weights=True)
                steps.append(out)
                for layer in range(2):
                    weight_pairs.append((w[layer].self_attn[:, :, 0], full_w[layer].self_attn[:, :, i, : i + 1]))
                    weight_pairs.append((w[layer].cross_attn[:, :, 0], full_w[layer].cross_attn[:, :, i]))
        heads = f"{kv_heads} kv heads" if kv_heads else f"{h} heads"
        norm = "pre-norm" if norm_first else "post-norm"
        rows.append(Row(
            f"KV-cache decoding vs full pass, decoder, {norm}, {heads}, {activation}", "float32",
            max_diff([(torch.cat(steps, dim=1), full)]), max_diff(weight_pairs), None, None, 1e-5,
        ))
    for norm_first, kv_heads in [(False, None), (True, 2)]:
        torch.manual_seed(SEED)
        config = TransformerLayerConfig(d, h, ff, dropout=0.1, norm_first=norm_first, kv_heads=kv_heads)
        stack = TransformerEncoder(config, 2).eval()
        x = torch.randn(b, t, d)
        with torch.no_grad():
            full, full_w = stack(x, causal=True, return_weights=True)
            cache = stack.init_cache()
            outs, weight_pairs = [stack(x[:, :2], causal=True, cache=cache)], []
            for i in range(2, t):
                out, w = stack(x[:, i : i + 1], causal=True, cache=cache, return_weights=True)
                outs.append(out)
                weight_pairs += [(w[layer][:, :, 0], full_w[layer][:, :, i, : i + 1]) for layer in range(2)]
        heads = f"{kv_heads} kv heads" if kv_heads else f"{h} heads"
        norm = "pre-norm" if norm_first else "post-norm"
        rows.append(Row(
            f"KV-cache decoding vs full pass, causal encoder stack, {norm}, {heads}", "float32",
            max_diff([(torch.cat(outs, dim=1), full)]), max_diff(weight_pairs), None, None, 1e-5,
        ))
    return rows


# --------------------------------------------------------------------------- relative and linear attention


def shaw_formula(layer: RelativePositionAttention, x: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """e_ij = q_i·(k_j + a^K_ij)/sqrt(Dh); z_i = Σ_j α_ij (v_j + a^V_ij), with (B, Tq, Tk, Dh) tables."""
    h, dh, kmax = layer.num_heads, layer.head_dim, layer.max_relative_position
    q, k, v = (split_heads(p(x), h) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    b, t = x.shape[0], x.shape[1]
    bucket = (torch.arange(t).view(1, t) - torch.arange(t).view(t, 1)).clamp(-kmax, kmax) + kmax
    a_k = layer.rel_k[bucket].expand(b, t, t, dh)  # (B, Tq, Tk, Dh)
    a_v = layer.rel_v[bucket].expand(b, t, t, dh)  # (B, Tq, Tk, Dh)
    e = (q[:, :, :, None, :] * (k[:, :, None] + a_k[:, None])).sum(-1) / math.sqrt(dh)
    if causal:
        e = e.masked_fill(~masks.causal(t, t), float("-inf"))
    alpha = torch.softmax(e, dim=-1)  # (B, H, Tq, Tk)
    z = (alpha[..., None] * (v[:, :, None] + a_v[:, None])).sum(-2)  # (B, H, Tq, Dh)
    return layer.out_proj(z.transpose(1, 2).reshape(b, t, h * dh)), alpha


def relative_rows() -> list[Row]:
    rows = []
    for dtype in (torch.float64, torch.float32):
        for causal in (False, True):
            torch.manual_seed(SEED)
            layer = RelativePositionAttention(16, 4, 3).to(dtype)
            x = torch.randn(2, 9, 16, dtype=dtype)
            params = list(layer.parameters())
            results = []
            for formula in (False, True):
                xr = x.clone().requires_grad_(True)
                if formula:
                    out, w = shaw_formula(layer, xr, causal)
                else:
                    out, w = layer(xr, causal=causal, return_weights=True)
                grads = torch.autograd.grad((out * torch.cos(out)).sum(), [xr, *params])
                results.append((out, w, grads))
            (out, w, g), (ref_out, ref_w, ref_g) = results
            rows.append(Row(
                f"RelativePositionAttention vs Shaw formula, {'causal' if causal else 'no mask'}",
                DTYPE_NAME[dtype], max_diff([(out, ref_out)]), max_diff([(w, ref_w)]),
                max_diff([(g[0], ref_g[0])]), max_diff(zip(g[1:], ref_g[1:], strict=True)), TOL[dtype],
            ))
    return rows


def explicit_linear(q: Tensor, k: Tensor, v: Tensor, causal: bool, key_mask: Tensor) -> tuple[Tensor, Tensor]:
    """out_i = Σ_d softmax_D(q_i)[d] Σ_j n_ijd v_j, n a softmax over the allowed keys j, (T, T) masks."""
    b, h, t, dh = q.shape
    allowed = key_mask.view(b, 1, 1, 1, t).expand(b, 1, 1, t, t)
    if causal:
        allowed = allowed & torch.ones(t, t, dtype=torch.bool).tril()
    logits = k.transpose(-1, -2)[:, :, :, None, :].expand(b, h, dh, t, t)  # (B, H, Dh, Tq, Tk)
    row_ok = allowed.any(-1, keepdim=True)
    n = torch.softmax(logits.masked_fill(~allowed, float("-inf")).masked_fill(~row_ok, 0.0), dim=-1) * row_ok
    weights = torch.einsum("bhid,bhdij->bhij", torch.softmax(q, dim=-1), n)  # (B, H, Tq, Tk)
    return weights @ v, weights


def linear_rows() -> list[Row]:
    rows = []
    for dtype in (torch.float64, torch.float32):
        for causal in (True, False):
            torch.manual_seed(SEED)
            q = torch.randn(2, 3, 150, 8, dtype=dtype, requires_grad=True)
            k = (2 * torch.randn(2, 3, 150, 8, dtype=dtype)).requires_grad_(True)
            v = torch.randn(2, 3, 150, 5, dtype=dtype, requires_grad=True)
            key_mask = masks.from_lengths([150, 97], 150)[:, 0, 0]  # (B, Tk)
            out = linear_attention(q, k, v, causal=causal, mask=key_mask, chunk=32)
            grads = torch.autograd.grad(out.pow(2).sum(), [q, k, v])
            w = linear_attention_weights(q, k, causal=causal, mask=key_mask)
            ref, ref_w = explicit_linear(q, k, v, causal, key_mask)
            ref_grads = torch.autograd.grad(ref.pow(2).sum(), [q, k, v])
            rows.append(Row(
                f"linear_attention vs explicit T x T weights, {'causal' if causal else 'non-causal'}, padding",
                DTYPE_NAME[dtype], max_diff([(out, ref)]), max_diff([(w, ref_w)]),
                max_diff(zip(grads, ref_grads, strict=True)), None, TOL[dtype],
            ))
    return rows


# --------------------------------------------------------------------------- masking matrix


def nonfinite_matrix() -> list[tuple[str, str, int, int]]:
    """(case, dtype, non-finite values on the fused path, on the math path)."""
    b, h, dh = 2, 4, 8
    cases: dict[str, tuple[int, int, Callable[[], Tensor | None], bool]] = {
        "right padding": (5, 7, lambda: masks.from_lengths(torch.tensor([7, 2]), 7), False),
        "left padding": (5, 7, lambda: masks.from_lengths(torch.tensor([7, 2]), 7).flip(-1), False),
        "fully padded example": (5, 7, lambda: masks.from_lengths(torch.tensor([7, 0]), 7), False),
        "causal Tq > Tk, top-left": (9, 4, lambda: masks.causal(9, 4, align="top_left"), False),
        "causal Tq > Tk, bottom-right": (9, 4, lambda: None, True),
    }
    table = []
    for name, (tq, tk, make_mask, causal) in cases.items():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            counts = []
            for path in ("fused", "math"):
                torch.manual_seed(SEED)
                q = torch.randn(b, h, tq, dh, dtype=dtype, requires_grad=True)
                k = torch.randn(b, h, tk, dh, dtype=dtype, requires_grad=True)
                v = torch.randn(b, h, tk, dh, dtype=dtype, requires_grad=True)
                out, w = attention(q, k, v, mask=make_mask(), causal=causal, return_weights=True,
                                   backend=path)  # type: ignore[call-overload]
                (out.float().sum() + w.float().sum()).backward()
                tensors = (out, w, q.grad, k.grad, v.grad)
                counts.append(sum(int((~torch.isfinite(t.float())).sum()) if t is not None else 1
                                  for t in tensors))
            table.append((name, DTYPE_NAME[dtype], counts[0], counts[1]))
    return table


# --------------------------------------------------------------------------- report


def fmt(x: float | None) -> str:
    if x is None:
        return "–"
    return "0" if x == 0 else f"{x:.1e}"


def print_rows(rows: list[Row]) -> None:
    print("| comparison | dtype | outputs | weights | input grads | param grads | bound |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        bound = f"{r.bound:g}" + (f" (params {r.param_bound:g})" if r.param_bound is not None else "")
        flag = " **FAIL**" if r.failed() else ""
        print(f"| {r.comparison} | {r.dtype} | {fmt(r.outputs)} | {fmt(r.weights)} | "
              f"{fmt(r.input_grads)} | {fmt(r.param_grads)} | {bound}{flag} |")


def summary(rows: list[Row]) -> None:
    """Worst figure per group and dtype, the numbers the README quotes."""
    groups: dict[tuple[str, str], list[float | None]] = {}
    for r in rows:
        worst = groups.setdefault((r.comparison.split(",")[0], r.dtype), [None] * 4)
        for i, f in enumerate((r.outputs, r.weights, r.input_grads, r.param_grads)):
            if f is not None:
                worst[i] = max(worst[i] or 0.0, f)
    print("\nWorst per comparison (outputs / weights / input grads / param grads):")
    for (name, dtype), worst in groups.items():
        print(f"  {name}, {dtype}: " + " / ".join(fmt(w) for w in worst))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="seed of every case (default 0)")
    args = parser.parse_args(argv)
    global SEED
    SEED = args.seed
    rows = [*attention_rows(), *mha_rows(), *layer_rows(), *kv_cache_rows(), *relative_rows(),
            *linear_rows()]
    print(f"torch {torch.__version__}, attnkit {attnkit.__version__}, seed {SEED}; max abs difference\n")
    print_rows(rows)
    summary(rows)
    matrix = nonfinite_matrix()
    print("\nMasking matrix: non-finite values in outputs, weights and q/k/v gradients (bound 0)\n")
    print("| case | dtype | fused | math |")
    print("|---|---|---|---|")
    for name, dtype, fused, math_path in matrix:
        flag = " **FAIL**" if fused or math_path else ""
        print(f"| {name} | {dtype} | {fused} | {math_path}{flag} |")
    failures = sum(r.failed() for r in rows) + sum(1 for m in matrix if m[2] or m[3])
    print(f"\n{failures} figure(s) over their bound" if failures else "\nall figures within their bounds")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
