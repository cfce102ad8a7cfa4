"""Explanations of generated tokens: for each token a translation model produced, a score per source token,
and how faithful each method is on that output.

The output is held fixed and read teacher-forced: target token ``t`` is scored by ``log p(y_t | y_<t, x)``.
The methods (:data:`GENERATION_METHODS`):

* ``cross_attention`` -- the last decoder layer's cross-attention, averaged over heads (raw attention);
* ``attention_norm`` -- that attention times the size of what each source part adds (Kobayashi et al., 2020):
  ``||sum_h alpha_htj f_h(x_j)||`` with ``f_h`` the head's value and output projections (translation), or
  ``alpha_tj ||a_j||`` over the region vectors the captioner reads; attnkit's own models only;
* ``grad_input`` -- gradient x input: the source embeddings times the gradient of ``log p(y_t)``, summed
  over the width;
* ``integrated_gradients`` -- the same along a straight path from zero embeddings (Sundararajan et al.,
  2017), :data:`~attnkit.attribution.methods.IG_STEPS` steps.

Faithfulness is classification's (:mod:`attnkit.attribution.faithfulness`) on each token's log-probability:
for each target token and each bin ``q`` of :data:`~attnkit.attribution.faithfulness.PERCENTS`, the top
``q`` percent of the source tokens by that token's row are removed (comprehensiveness: ``log p(y_t | x) -
log p(y_t | x without them)``) or kept alone (sufficiency), averaged over tokens and bins, beside a seeded
random order. The method shown first is the one with the largest comprehensiveness minus sufficiency: on the
run's held-out outputs when the run measured them at the end of training (:func:`measure_methods`, stored in its
metrics as ``explain``), else on the output at hand; the explanation says which (``chosen``).

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

__all__ = ["GENERATION_METHODS", "HF_METHODS", "target_log_probs", "attribute_generation", "generation_faithfulness",
           "explain_generation", "explain_causal_lm", "explanation_lines", "faithfulness_summary",
           "measure_methods", "measured_line"]

GENERATION_METHODS = ("cross_attention", "attention_norm", "grad_input", "integrated_gradients")
"""Every method; a Hugging Face model takes all but ``attention_norm`` (:data:`HF_METHODS`)."""
HF_METHODS = tuple(m for m in GENERATION_METHODS if m != "attention_norm")
TITLES = {"cross_attention": "raw attention (the generated tokens' attention over the source; last layer, mean "
                            "over heads)",
          **{m: METHOD_NAMES.get(m, m) for m in GENERATION_METHODS[1:]}}


class _Translation:
    """A translation model, one source (token ids) and its generated target: the source's parts are its tokens,
    removed by deleting them (a source left empty becomes one ``[UNK]``)."""

    methods = GENERATION_METHODS

    def __init__(self, model: Any, source: Sequence[int], target: Sequence[int]) -> None:
        self.model, self.source, self.target = model, list(source), list(target)
        self.n = len(source)

    def _batch(self, sources: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        c = self.model.config
        src = torch.full((len(sources), max(1, max(len(x) for x in sources))), c.pad_id, dtype=torch.long)
        for i, x in enumerate(sources):
            src[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        tgt = torch.tensor(self.target, dtype=torch.long)
        tgt_in = torch.cat([torch.tensor([c.bos_id]), tgt[:-1]]).expand(len(sources), -1)
        return src, torch.tensor([len(x) for x in sources]), tgt_in, tgt.expand(len(sources), -1)

    def log_probs(self, kept: Sequence[Sequence[int]]) -> Tensor:
        """``log p(y_t)`` ``(N, Tt)`` with only the ``kept`` source positions of each variant."""
        return self.sources_log_probs([[self.source[i] for i in sorted(k)] or [UNK_ID] for k in kept])

    def sources_log_probs(self, sources: Sequence[Sequence[int]]) -> Tensor:
        """``log p(y_t)`` ``(N, Tt)`` given each of ``sources``."""
        src, lengths, tgt_in, tgt = self._batch(sources)
        with torch.no_grad():
            logits = self.model(src, lengths, tgt_in)  # (N, Tt, V)
        return torch.log_softmax(logits.double(), -1).gather(-1, tgt[..., None])[..., 0]

    def attention(self) -> Tensor:
        src, lengths, tgt_in, _ = self._batch([self.source])
        with torch.no_grad():
            _, weights = self.model(src, lengths, tgt_in, return_weights=True)
        return weights.cross[-1][0].mean(0)  # (Tt, Ts): the last layer, mean over heads

    def attention_norm(self) -> Tensor:
        """``||sum_h alpha_htj f_h(x_j)||`` of the last layer's cross-attention ``(Tt, Ts)``."""
        src, lengths, tgt_in, _ = self._batch([self.source])
        layer = self.model.decoder.layers[-1].cross_attn
        with torch.no_grad():
            memory = self.model.encode(src, lengths).memory[0]  # (Ts, D)
            _, weights = self.model(src, lengths, tgt_in, return_weights=True)
            alpha = weights.cross[-1][0]  # (H, Tt, Ts)
            h, dh = layer.num_heads, layer.head_dim
            v = layer.v_proj(memory).view(memory.shape[0], layer.kv_heads, dh).repeat_interleave(
                h // layer.kv_heads, dim=1)  # (Ts, H, Dh)
            f = torch.einsum("jhd,ehd->hje", v, layer.out_proj.weight.view(-1, h, dh))  # (H, Ts, D)
            return torch.einsum("htj,hje->tje", alpha, f).norm(dim=-1)  # (Tt, Ts)

    def inputs(self) -> Tensor:
        return self.model.src_embed(self._batch([self.source])[0]).detach()  # (1, Ts, D)

    def log_probs_with(self, inputs: Tensor) -> Tensor:
        """``log p(y_t)`` ``(Tt,)`` with the source embeddings replaced by ``inputs`` (differentiable)."""
        src, lengths, tgt_in, tgt = self._batch([self.source])
        # the first lookup is the source's (forward encodes first; a shared vocabulary then embeds the
        # target with the same module)
        handle = self.model.src_embed.register_forward_hook(_first_output(inputs))
        try:
            logits = self.model(src, lengths, tgt_in)  # (1, Tt, V)
        finally:
            handle.remove()
        return torch.log_softmax(logits, -1).gather(-1, tgt[..., None])[0, :, 0]


class _Caption:
    """A captioner, one image's region features ``(1, R, C)`` and its generated words: the parts are the
    regions, removed by zeroing their features."""

    methods = GENERATION_METHODS

    def __init__(self, model: Any, features: Tensor, target: Sequence[int]) -> None:
        self.model, self.features, self.target = model, features.detach(), list(target)
        self.n = features.shape[1]
        c = model.config
        self.captions = torch.tensor([[c.bos_id, *self.target, c.eos_id]])

    def _out(self, features: Tensor) -> Any:
        n = features.shape[0]
        return self.model.forward_features(features, self.captions.expand(n, -1),
                                           torch.full((n,), self.captions.shape[1]))

    def _picked(self, logits: Tensor) -> Tensor:
        words = torch.tensor(self.target)
        return torch.log_softmax(logits[:, : len(self.target)].double(), -1).gather(
            -1, words.expand(logits.shape[0], -1)[..., None])[..., 0]  # (N, Tt)

    def log_probs(self, kept: Sequence[Sequence[int]]) -> Tensor:
        masks = torch.zeros(len(kept), self.n, 1)
        for i, k in enumerate(kept):
            masks[i, list(k)] = 1.0
        with torch.no_grad():
            return self._picked(self._out(self.features * masks).logits)

    def attention(self) -> Tensor:
        with torch.no_grad():
            return self._out(self.features).weights[0, : len(self.target)]  # (Tt, R)

    def attention_norm(self) -> Tensor:
        """``alpha_tj ||a_j||`` over the region vectors the decoder reads ``(Tt, R)``."""
        with torch.no_grad():
            return self.attention() * self.model._regions(self.features)[0].norm(dim=-1)

    def inputs(self) -> Tensor:
        return self.features

    def log_probs_with(self, inputs: Tensor) -> Tensor:
        return self._picked(self._out(inputs).logits)[0]


class _CausalLM:
    """A Hugging Face causal language model, a prompt (token ids) and the tokens it generated after it: the
    parts are the prompt's tokens, removed by deleting them (a prompt left empty keeps its first token)."""

    methods = HF_METHODS

    def __init__(self, model: Any, prompt: Sequence[int], target: Sequence[int]) -> None:
        self.model, self.source, self.target = model, list(prompt), list(target)
        self.n = len(prompt)

    def _logits(self, rows: Sequence[Sequence[int]], embeds: Tensor | None = None, **kwargs: Any) -> Any:
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        if embeds is not None:
            return self.model(inputs_embeds=embeds, attention_mask=mask, **kwargs)
        return self.model(input_ids=ids, attention_mask=mask, **kwargs)

    def _picked(self, logits: Tensor, prompt_lengths: Sequence[int]) -> Tensor:
        """``log p(y_t)`` ``(N, Tt)``: token ``t`` is read at position ``prompt length + t - 1``."""
        logp = torch.log_softmax(logits.double(), -1)
        rows = [logp[i, n - 1 : n - 1 + len(self.target)].gather(-1, torch.tensor(self.target)[:, None])[:, 0]
                for i, n in enumerate(prompt_lengths)]
        return torch.stack(rows)

    def log_probs(self, kept: Sequence[Sequence[int]]) -> Tensor:
        prompts = [[self.source[i] for i in sorted(k)] or self.source[:1] for k in kept]
        with torch.no_grad():
            out = self._logits([p + self.target for p in prompts])
        return self._picked(out.logits, [len(p) for p in prompts])

    def attention(self) -> Tensor:
        with torch.no_grad():
            out = self._logits([self.source + self.target], output_attentions=True)
        last = out.attentions[-1][0].mean(0)  # (T, T), the last layer over heads
        rows = torch.arange(self.n - 1, self.n - 1 + len(self.target))
        return last[rows, : self.n]  # (Tt, prompt)

    def inputs(self) -> Tensor:
        return self.model.get_input_embeddings()(torch.tensor([self.source])).detach()  # (1, P, D)

    def log_probs_with(self, inputs: Tensor) -> Tensor:
        generated = self.model.get_input_embeddings()(torch.tensor([self.target])).detach()
        out = self._logits([self.source + self.target], embeds=torch.cat([inputs, generated], 1))
        return self._picked(out.logits, [self.n])[0]


class _HFSeq2Seq(_CausalLM):
    """A Hugging Face sequence-to-sequence language model (T5, BART, Marian), a source (token ids) and the
    tokens it generated: the parts are the source's tokens, removed by deleting them."""

    def _logits(self, rows: Sequence[Sequence[int]], embeds: Tensor | None = None, **kwargs: Any) -> Any:
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), int(self.model.config.pad_token_id or 0), dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
        start = int(self.model.config.decoder_start_token_id)
        decoder = torch.tensor([[start, *self.target[:-1]]]).expand(len(rows), -1)
        source = {"inputs_embeds": embeds} if embeds is not None else {"input_ids": ids}
        return self.model(**source, attention_mask=mask, decoder_input_ids=decoder, **kwargs)

    def _picked(self, logits: Tensor, prompt_lengths: Sequence[int]) -> Tensor:
        logp = torch.log_softmax(logits.double(), -1)  # (N, Tt, V): token t is read at position t
        return logp.gather(-1, torch.tensor(self.target).expand(logits.shape[0], -1)[..., None])[..., 0]

    def log_probs(self, kept: Sequence[Sequence[int]]) -> Tensor:
        sources = [[self.source[i] for i in sorted(k)] or self.source[:1] for k in kept]
        with torch.no_grad():
            return self._picked(self._logits(sources).logits, [])

    def attention(self) -> Tensor:
        with torch.no_grad():
            out = self._logits([self.source], output_attentions=True)
        return out.cross_attentions[-1][0].mean(0)  # (Tt, Ts): the last layer over heads

    def log_probs_with(self, inputs: Tensor) -> Tensor:
        return self._picked(self._logits([self.source], embeds=inputs).logits, [])[0]


def _first_output(replacement: Tensor) -> Any:
    """A forward hook that returns ``replacement`` for the module's first call and leaves later ones alone."""
    calls = []

    def hook(_module: nn.Module, _args: Any, out: Tensor) -> Tensor:
        calls.append(1)
        return replacement if len(calls) == 1 else out

    return hook


def _subject(model: nn.Module, source: Sequence[int] | Tensor, target: Sequence[int]) -> Any:
    """The adapter of ``model``: a translation model with source ids, a captioner with region features, or a
    Hugging Face causal language model with prompt ids."""
    if isinstance(source, Tensor):
        return _Caption(model, source, target)
    if hasattr(model, "generation_config"):
        return (_HFSeq2Seq if getattr(model.config, "is_encoder_decoder", False) else _CausalLM)(model, source,
                                                                                                 target)
    return _Translation(model, source, target)


def _gradient_scores(subject: Any, steps: int) -> Tensor:
    """Gradient x input (``steps`` = 1) or integrated gradients from zero, per target token, ``(Tt, parts)``."""
    base = subject.inputs()  # (1, parts, D)
    alphas = [1.0] if steps == 1 else [(k + 0.5) / steps for k in range(steps)]
    total = torch.zeros(len(subject.target), subject.n, dtype=torch.float64)
    for alpha in alphas:
        scaled = (base * alpha).requires_grad_(True)
        picked = subject.log_probs_with(scaled)  # (Tt,)
        for t in range(len(subject.target)):
            (grad,) = torch.autograd.grad(picked[t], scaled, retain_graph=t + 1 < len(subject.target))
            total[t] += (grad * base)[0].sum(-1).double()
    return total / len(alphas)


def target_log_probs(model: nn.Module, sources: Sequence[Sequence[int]], target: Sequence[int]) -> Tensor:
    """``log p(y_t | y_<t, x)`` of every target token for each source (teacher-forced), ``(N, Tt)``."""
    return _Translation(model, [], target).sources_log_probs(sources)


def attribute_generation(model: nn.Module, source: Sequence[int] | Tensor, target: Sequence[int], method: str, *,
                         steps: int = IG_STEPS) -> np.ndarray:
    """A score per source token (or region, for a captioner's features ``(1, R, C)``) for each target token,
    ``(Tt, parts)``: higher is more important."""
    model.eval()
    subject = _subject(model, source, target)
    if method not in subject.methods:
        raise ValueError(f"method must be one of {list(subject.methods)}, got {method!r}")
    if method in ("cross_attention", "attention_norm"):
        return (subject.attention() if method == "cross_attention" else subject.attention_norm()).double().numpy()
    return _gradient_scores(subject, 1 if method == "grad_input" else steps).numpy()


def _curves(subject: Any, orders: Sequence[np.ndarray], full: Tensor) -> tuple[float, float]:
    """Comprehensiveness and sufficiency of one order of the parts per target token (``orders[t]``)."""
    counts = erasure_counts(subject.n)
    kept: list[list[int]] = []
    for order in orders:
        for k in counts:
            top = set(order[:k].tolist())
            kept += [[i for i in range(subject.n) if i not in top], sorted(top)]
    scores = subject.log_probs(kept).view(len(orders), len(counts), 2, -1)
    picked = scores[torch.arange(len(orders)), :, :, torch.arange(len(orders))]  # (Tt, K, 2): token t's own
    return (full[:, None] - picked[..., 0]).mean().item(), (full[:, None] - picked[..., 1]).mean().item()


def generation_faithfulness(model: nn.Module, source: Sequence[int] | Tensor, target: Sequence[int],
                            scores: dict[str, np.ndarray], *, seed: int = 0) -> dict[str, Any]:
    """Comprehensiveness and sufficiency (AOPC over the bins and target tokens) of each method's ``scores``,
    beside a random order (``seed``); ``shown_first``: the largest comprehensiveness minus sufficiency."""
    subject = _subject(model, source, target)
    full = subject.log_probs([range(subject.n)])[0]  # (Tt,)
    out: dict[str, Any] = {"percents": list(PERCENTS), "methods": {}}
    for method, per in scores.items():
        c, s = _curves(subject, [np.argsort(-row, kind="stable") for row in per], full)
        out["methods"][method] = {"comprehensiveness": c, "sufficiency": s}
    rng = np.random.default_rng(seed)
    c, s = _curves(subject, [rng.permutation(subject.n) for _ in target], full)
    out["random"] = {"comprehensiveness": c, "sufficiency": s, "seed": seed}
    out["shown_first"] = max(out["methods"], key=lambda m: out["methods"][m]["comprehensiveness"]
                             - out["methods"][m]["sufficiency"])
    return out


def faithfulness_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The mean comprehensiveness and sufficiency of each method and of the random order over many outputs'
    :func:`generation_faithfulness` records, ``outputs`` (their count) and ``method``: the most faithful
    over them (the largest mean comprehensiveness minus sufficiency)."""
    if not records:
        raise ValueError("faithfulness_summary needs at least one output's record")

    def mean(pick: Any) -> dict[str, float]:
        return {k: round(float(np.mean([pick(r)[k] for r in records])), 4)
                for k in ("comprehensiveness", "sufficiency")}

    methods = {m: mean(lambda r, m=m: r["methods"][m]) for m in records[0]["methods"]}
    return {"outputs": len(records), "methods": methods, "random": mean(lambda r: r["random"]),
            "method": max(methods, key=lambda m: methods[m]["comprehensiveness"] - methods[m]["sufficiency"])}


def measure_methods(model: nn.Module, outputs: Sequence[tuple[Sequence[int] | Tensor, Sequence[int]]], *,
                    seed: int = 0) -> dict[str, Any] | None:
    """Every method's faithfulness over ``outputs`` (``(source, generated target)`` pairs, such as a run's
    held-out sentences and their translations; empty targets are left out): :func:`faithfulness_summary`,
    None when no output has a token. A run stores it as ``metrics["explain"]``, and :func:`explain_generation`
    then shows its ``method`` first."""
    model.eval()
    records = [generation_faithfulness(model, source, target, {m: attribute_generation(model, source, target, m)
                                                               for m in _subject(model, source, target).methods},
                                       seed=seed) for source, target in outputs if len(source) and len(target)]
    return faithfulness_summary(records) if records else None


def measured_line(measured: dict[str, Any] | None, outputs: str) -> str:
    """A :func:`measure_methods` result as the line a run's log gives (``outputs``: what was explained)."""
    if measured is None:
        return (f"explanations: no generated token on the {outputs} to measure the methods on; each "
                "explanation of this run chooses its method on its own output")
    best, chance = measured["methods"][measured["method"]], measured["random"]["comprehensiveness"]
    return (f"explanations: {measured['method']} is the most faithful on {measured['outputs']} {outputs} "
            f"(comprehensiveness {best['comprehensiveness']:.3f}, random order {chance:.3f})")


def explain_generation(model: nn.Module, source: Sequence[int] | Tensor, target: Sequence[int], *,
                       method: str | None = None, seed: int = 0, measured: dict[str, Any] | None = None
                       ) -> dict[str, Any]:
    """Every method's scores for ``target`` generated from ``source`` and their faithfulness measured on
    this output; ``scores`` are ``method``'s (default: ``measured["method"]``, the most faithful on a run's
    held-out outputs (:func:`measure_methods`), else the most faithful on this output); ``chosen`` says which."""
    if len(source) == 0 or not target:
        raise ValueError("explain needs a source and a generated target of at least one token each")
    methods = _subject(model, source, target).methods
    if method is not None and method not in methods:
        raise ValueError(f"method must be one of {list(methods)}, got {method!r}")
    model.eval()
    scores = {m: attribute_generation(model, source, target, m) for m in methods}
    record = generation_faithfulness(model, source, target, scores, seed=seed)
    if method:
        shown, chosen = method, "as asked"
    elif measured:
        shown, chosen = measured["method"], f"the most faithful on {measured['outputs']} held-out outputs of the run"
    else:
        shown, chosen = record["shown_first"], "the most faithful on this output"
    return {"method": shown, "chosen": chosen, "title": TITLES[shown], "scores": scores[shown].round(4).tolist(),
            "all_scores": {m: s.round(4).tolist() for m, s in scores.items()}, "faithfulness": record,
            **({"measured": measured} if measured else {})}


def explanation_lines(explanation: dict[str, Any], top: int = 3) -> list[str]:
    """An :func:`explain_generation` result (with ``source_tokens`` and ``target_tokens``) as lines: the
    method and its faithfulness beside the random order's, then each target token with its ``top`` source
    tokens and their scores, then the beam's alternatives (if any)."""
    record, shown = explanation["faithfulness"], explanation["method"]
    figures, chance = record["methods"][shown], record["random"]
    lines = [f"explained by {explanation['title']} ({explanation['chosen']}; here: comprehensiveness "
             f"{figures['comprehensiveness']:.3f}, "
             f"sufficiency {figures['sufficiency']:.3f}; random order {chance['comprehensiveness']:.3f}, "
             f"{chance['sufficiency']:.3f}; log-probability, this output)"]
    source = explanation["source_tokens"]
    for token, row in zip(explanation["target_tokens"], explanation["scores"], strict=True):
        best = sorted(range(len(row)), key=lambda i: -row[i])[:top]
        lines.append(f"  {token} <- " + ", ".join(f"{source[i]} {row[i]:.3f}" for i in best))
    if len(explanation.get("alternatives", ())) > 1:
        lines.append("the beam's alternatives, best first (score):")
        lines += [f"  {a['score']:8.3f}  {a['text']}" for a in explanation["alternatives"]]
    return lines


def explain_causal_lm(model: nn.Module, tokenizer: Any, prompt: str, *, max_new_tokens: int = 20,
                      method: str | None = None, seed: int = 0, explain: bool = True) -> dict[str, Any]:
    """A Hugging Face language model's greedy output for ``prompt`` (at most ``max_new_tokens``): a causal
    model's continuation, or a sequence-to-sequence model's (T5, BART, Marian) output, each generated token
    explained by the prompt's tokens as :func:`explain_generation` explains a translation (the model loaded
    with ``attn_implementation="eager"`` gives its attention too); ``explain=False``: the output alone."""
    model.eval()
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("the prompt is empty after tokenization; nothing to continue")
    with torch.no_grad():
        generate: Any = model.generate
        out = generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id or 0)
    new = out[0, 1:] if getattr(model.config, "is_encoder_decoder", False) else out[0, len(ids):]  # past the start
    target = [t for t in new.tolist() if t not in (tokenizer.eos_token_id, tokenizer.pad_token_id)]
    if not explain:
        return {"prompt": prompt, "generated": tokenizer.decode(target, skip_special_tokens=True)}
    if not target:
        raise ValueError(f"the model generated nothing after {prompt!r}: there is no token to explain")
    return {"prompt": prompt, "generated": tokenizer.decode(target, skip_special_tokens=True),
            "source_tokens": [str(t) for t in tokenizer.convert_ids_to_tokens(ids)],
            "target_tokens": [str(t) for t in tokenizer.convert_ids_to_tokens(target)],
            **explain_generation(model, ids, target, method=method, seed=seed)}
