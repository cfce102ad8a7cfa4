"""Explanations of generated tokens: for each token a translation model produced, a score per source token,
and how faithful each method is on that output.

The output is held fixed and read teacher-forced: target token ``t`` is scored by ``log p(y_t | y_<t, x)``.
The methods (:data:`GENERATION_METHODS`):

* ``cross_attention`` -- the last decoder layer's cross-attention, averaged over heads (raw attention);
* ``grad_input`` -- gradient x input: the source embeddings times the gradient of ``log p(y_t)``, summed
  over the width;
* ``integrated_gradients`` -- the same along a straight path from zero embeddings (Sundararajan et al.,
  2017), :data:`~attnkit.attribution.methods.IG_STEPS` steps.

Faithfulness is classification's (:mod:`attnkit.attribution.faithfulness`) on each token's log-probability:
for each target token and each bin ``q`` of :data:`~attnkit.attribution.faithfulness.PERCENTS`, the top
``q`` percent of the source tokens by that token's row are removed (comprehensiveness: ``log p(y_t | x) -
log p(y_t | x without them)``) or kept alone (sufficiency), averaged over tokens and bins, beside a seeded
random order. The method shown first is the one with the largest comprehensiveness minus sufficiency.

Shape legend: Ts source tokens, Tt target tokens, K bins, D width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnkit.attribution.faithfulness import PERCENTS, UNK_ID, erasure_counts
from attnkit.attribution.methods import IG_STEPS, METHOD_NAMES

__all__ = ["GENERATION_METHODS", "target_log_probs", "attribute_generation", "generation_faithfulness",
           "explain_generation", "explanation_lines"]

GENERATION_METHODS = ("cross_attention", "grad_input", "integrated_gradients")
TITLES = {"cross_attention": "raw cross-attention (last layer, mean over heads)",
          **{m: METHOD_NAMES.get(m, m) for m in GENERATION_METHODS[1:]}}


def _batch(model: nn.Module, sources: Sequence[Sequence[int]], target: Sequence[int]) -> tuple[Tensor, ...]:
    """Padded sources ``(N, Ts)``, their lengths, and ``[BOS] y`` / ``y`` ``(N, Tt)`` for each."""
    c: Any = model.config
    width = max(1, max(len(s) for s in sources))
    src = torch.full((len(sources), width), c.pad_id, dtype=torch.long)
    for i, s in enumerate(sources):
        src[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
    lengths = torch.tensor([len(s) for s in sources])
    tgt = torch.tensor(list(target), dtype=torch.long)
    tgt_in = torch.cat([torch.tensor([c.bos_id]), tgt[:-1]]).expand(len(sources), -1)
    return src, lengths, tgt_in, tgt.expand(len(sources), -1)


def target_log_probs(model: nn.Module, sources: Sequence[Sequence[int]], target: Sequence[int]) -> Tensor:
    """``log p(y_t | y_<t, x)`` of every target token for each source (teacher-forced), ``(N, Tt)``."""
    src, lengths, tgt_in, tgt = _batch(model, sources, target)
    with torch.no_grad():
        logits = model(src, lengths, tgt_in)  # (N, Tt, V)
    return torch.log_softmax(logits.double(), -1).gather(-1, tgt[..., None])[..., 0]


def _first_output(replacement: Tensor) -> Any:
    """A forward hook that returns ``replacement`` for the module's first call and leaves later ones alone."""
    calls = []

    def hook(_module: nn.Module, _args: Any, out: Tensor) -> Tensor:
        calls.append(1)
        return replacement if len(calls) == 1 else out

    return hook


def _embedding_scores(model: Any, source: Sequence[int], target: Sequence[int], steps: int) -> Tensor:
    """Gradient x input (``steps`` = 1) or integrated gradients, per target token, ``(Tt, Ts)``."""
    src, lengths, tgt_in, tgt = _batch(model, [source], target)
    embed = model.src_embed
    base = embed(src).detach()  # (1, Ts, D)
    alphas = [1.0] if steps == 1 else [(k + 0.5) / steps for k in range(steps)]
    total = torch.zeros(len(target), len(source), dtype=torch.float64)
    for alpha in alphas:
        scaled = (base * alpha).requires_grad_(True)
        # the first lookup is the source's (forward encodes first; a shared vocabulary then embeds the
        # target with the same module)
        handle = embed.register_forward_hook(_first_output(scaled))
        try:
            logits = model(src, lengths, tgt_in)  # (1, Tt, V)
        finally:
            handle.remove()
        picked = torch.log_softmax(logits, -1).gather(-1, tgt[..., None])[0, :, 0]  # (Tt,)
        for t in range(len(target)):
            (grad,) = torch.autograd.grad(picked[t], scaled, retain_graph=t + 1 < len(target))
            total[t] += (grad * base)[0].sum(-1).double()
    return total / len(alphas)


def attribute_generation(model: nn.Module, source: Sequence[int], target: Sequence[int], method: str, *,
                         steps: int = IG_STEPS) -> np.ndarray:
    """A score per source token for each target token, ``(Tt, Ts)``: higher is more important."""
    if method not in GENERATION_METHODS:
        raise ValueError(f"method must be one of {list(GENERATION_METHODS)}, got {method!r}")
    model.eval()
    if method == "cross_attention":
        src, lengths, tgt_in, _ = _batch(model, [source], target)
        with torch.no_grad():
            _, weights = model(src, lengths, tgt_in, return_weights=True)
        return weights.cross[-1][0].mean(0).double().numpy()  # (Tt, Ts)
    return _embedding_scores(model, source, target, 1 if method == "grad_input" else steps).numpy()


def _curves(model: nn.Module, source: Sequence[int], target: Sequence[int], orders: Sequence[np.ndarray],
            full: Tensor) -> tuple[float, float]:
    """Comprehensiveness and sufficiency of one order of the source per target token (``orders[t]``)."""
    counts = erasure_counts(len(source))
    variants: list[list[int]] = []
    for order in orders:
        for k in counts:
            top = set(order[:k].tolist())
            variants.append([s for i, s in enumerate(source) if i not in top] or [UNK_ID])
            variants.append([s for i, s in enumerate(source) if i in top])
    scores = target_log_probs(model, variants, target).view(len(orders), len(counts), 2, len(target))
    picked = scores[torch.arange(len(orders)), :, :, torch.arange(len(orders))]  # (Tt, K, 2): token t's own
    drop = (full[:, None] - picked[..., 0]).mean().item()
    keep = (full[:, None] - picked[..., 1]).mean().item()
    return drop, keep


def generation_faithfulness(model: nn.Module, source: Sequence[int], target: Sequence[int],
                            scores: dict[str, np.ndarray], *, seed: int = 0) -> dict[str, Any]:
    """Comprehensiveness and sufficiency (AOPC over the bins and target tokens) of each method's ``scores``,
    beside a random order (``seed``); ``shown_first``: the largest comprehensiveness minus sufficiency."""
    full = target_log_probs(model, [source], target)[0]  # (Tt,)
    out: dict[str, Any] = {"percents": list(PERCENTS), "methods": {}}
    for method, per in scores.items():
        orders = [np.argsort(-row, kind="stable") for row in per]
        c, s = _curves(model, source, target, orders, full)
        out["methods"][method] = {"comprehensiveness": c, "sufficiency": s}
    rng = np.random.default_rng(seed)
    c, s = _curves(model, source, target, [rng.permutation(len(source)) for _ in target], full)
    out["random"] = {"comprehensiveness": c, "sufficiency": s, "seed": seed}
    out["shown_first"] = max(out["methods"], key=lambda m: out["methods"][m]["comprehensiveness"]
                             - out["methods"][m]["sufficiency"])
    return out


def explain_generation(model: nn.Module, source: Sequence[int], target: Sequence[int], *,
                       method: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Every method's scores for ``target`` generated from ``source`` and their faithfulness measured on
    this output; ``scores`` are ``method``'s (default: the most faithful, ``shown_first``)."""
    if not source or not target:
        raise ValueError("explain needs a source and a generated target of at least one token each")
    if method is not None and method not in GENERATION_METHODS:
        raise ValueError(f"method must be one of {list(GENERATION_METHODS)}, got {method!r}")
    model.eval()
    scores = {m: attribute_generation(model, source, target, m) for m in GENERATION_METHODS}
    record = generation_faithfulness(model, source, target, scores, seed=seed)
    shown = method or record["shown_first"]
    return {"method": shown, "title": TITLES[shown], "scores": scores[shown].round(4).tolist(),
            "all_scores": {m: s.round(4).tolist() for m, s in scores.items()}, "faithfulness": record}


def explanation_lines(explanation: dict[str, Any], top: int = 3) -> list[str]:
    """An :func:`explain_generation` result (with ``source_tokens`` and ``target_tokens``) as lines: the
    method and its faithfulness beside the random order's, then each target token with its ``top`` source
    tokens and their scores."""
    record, shown = explanation["faithfulness"], explanation["method"]
    figures, chance = record["methods"][shown], record["random"]
    first = "the most faithful here" if shown == record["shown_first"] else "as asked"
    lines = [f"explained by {explanation['title']} ({first}: comprehensiveness {figures['comprehensiveness']:.3f}, "
             f"sufficiency {figures['sufficiency']:.3f}; random order {chance['comprehensiveness']:.3f}, "
             f"{chance['sufficiency']:.3f}; log-probability, this translation)"]
    source = explanation["source_tokens"]
    for token, row in zip(explanation["target_tokens"], explanation["scores"], strict=True):
        best = sorted(range(len(row)), key=lambda i: -row[i])[:top]
        lines.append(f"  {token} <- " + ", ".join(f"{source[i]} {row[i]:.3f}" for i in best))
    return lines
