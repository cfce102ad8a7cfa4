"""Packing: several documents in one row, and the document mask that keeps them apart.

A padded batch pads every document to the longest: the padding costs
attention time and memory and carries nothing. Packing lays the documents
end to end in rows of a fixed budget (:func:`attnkit.data.collate_packed`,
first-fit decreasing) and records who is who: ``segment_ids`` (the document
of each token, -1 for the padding left at the end of a row) and ``positions``
(each token's position in its own document, restarting at 0).

Attention must then stay inside each document: the mask
:func:`attnkit.masks.document_mod` allows query ``i`` to see key ``j`` only when
both belong to the same document, a block-diagonal mask. With it, every
document gets exactly what it would get alone; without it, documents read
each other. The script prints the padding each layout wastes, the equality of
packed and one-by-one classification, and, for the attention of one row,
the difference with and without the mask;
the figure draws one packed row's mask.

Try this: pack with a budget of 12 instead of 16. How many rows come out,
and what share is padding? (Answer: 4 rows of 12, the 12-token document alone
in the first; 48 positions again, 12% padding: 12 + 9 + 3, 7 + 5, 4 + 2.)
"""

from __future__ import annotations

from dataclasses import replace

import torch
from _common import output_dir, saved, show
from matplotlib.figure import Figure

from attnkit import MultiHeadAttention, masks
from attnkit.data import collate_packed
from attnkit.models import DocumentClassifier, DocumentClassifierConfig
from attnkit.models.document import DOCUMENT_LAYER

OUTPUTS = ["23_packing.png", "23_packing.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    lengths = [7, 3, 12, 5, 9, 4, 2]
    items = [{"ids": torch.randint(1, 100, (n,)), "label": torch.tensor(n % 2)} for n in lengths]
    budget = 16
    batch = collate_packed(items, budget)
    show("packed ids", batch["ids"])
    show("segment_ids", batch["segment_ids"])
    lines = []
    for r, row in enumerate(batch["segment_ids"].tolist()):
        lines.append(f"row {r}: segment_ids {row}")
    padded_tokens = len(lengths) * max(lengths)
    packed_tokens = batch["ids"].numel()
    lines.append(f"padded batch: {len(lengths)} x {max(lengths)} = {padded_tokens} positions, "
                 f"{100 * (1 - sum(lengths) / padded_tokens):.0f}% padding")
    lines.append(f"packed batch: {tuple(batch['ids'].shape)} = {packed_tokens} positions, "
                 f"{100 * (1 - sum(lengths) / packed_tokens):.0f}% padding")

    layer = replace(DOCUMENT_LAYER, d_model=32, num_heads=2, d_ff=64)
    model = DocumentClassifier(DocumentClassifierConfig(vocab_size=100, num_classes=2, layer=layer,
                                                        num_layers=1)).eval()
    with torch.no_grad():
        packed = model(batch["ids"], segment_ids=batch["segment_ids"], positions=batch["positions"])  # (N, C)
        alone = torch.cat([model(it["ids"][None], torch.tensor([len(it["ids"])])) for it in items])  # (N, C)
    show("logits, packed", packed)
    lines.append(f"classifier: max |packed - one document at a time| = {(packed - alone).abs().max():.1e}")

    # The attention alone, on row 0: with the document mask each document's outputs are its own.
    mha = MultiHeadAttention(32, 2).eval()
    segments = batch["segment_ids"][0]  # (T,)
    x = torch.randn(1, segments.shape[0], 32)  # (1, T, D): row 0's token vectors
    idx = torch.arange(segments.shape[0])
    allowed = masks.document_mod(segments)(None, None, idx[:, None], idx[None, :])  # (T, T)
    with torch.no_grad():
        with_mask, without_mask = mha(x, mask=allowed), mha(x)
        gaps_with, gaps_without = [], []
        for doc in segments.unique().tolist():
            if doc < 0:
                continue
            where = segments == doc
            own = mha(x[:, where])  # (1, n, D): the document alone
            gaps_with.append((with_mask[:, where] - own).abs().max().item())
            gaps_without.append((without_mask[:, where] - own).abs().max().item())
    lines.append(f"attention on row 0: max |packed - alone| with the document mask {max(gaps_with):.1e}, "
                 f"without it {max(gaps_without):.2f} (the documents read each other)")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    fig = Figure(figsize=(5, 4.5))
    ax = fig.add_subplot()
    ax.imshow(allowed.numpy(), cmap="Greys", vmin=0, vmax=1)
    ax.set_xticks(range(len(segments)), [str(s) for s in segments.tolist()], fontsize=7)
    ax.set_yticks(range(len(segments)), [str(s) for s in segments.tolist()], fontsize=7)
    ax.set_xlabel("key (its document; -1 = padding)")
    ax.set_ylabel("query (its document)")
    ax.set_title("Row 0 packed: attention stays in each document")
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
