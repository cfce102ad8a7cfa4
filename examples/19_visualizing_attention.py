"""Seeing attention: figures, measures and the interactive HTML report.

Everything in :mod:`attnkit.viz` reads plain arrays, so the same tools serve
attnkit's torch models, the NumPy twin and pretrained BERT. This script trains
a two-layer :class:`DocumentClassifier` on the generated keyword corpus (the
key words that decide each label are known), then:

* measures the heads: entropy (how spread each head is) and focus (the share of
  attention landing on the key words — chance is about 2/30);
* draws the heads of one layer, the layer × head overview and one explained
  prediction;
* writes ``19_report.html``: one self-contained offline page with every layer
  and head of several examples, the predictions, and hover/click exploration.
"""

from __future__ import annotations

import numpy as np
import torch
from _common import output_dir, saved, show, small
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset, bucket_batches, collate
from attnkit.data.readers import Example
from attnkit.data.synthetic import keyword_corpus
from attnkit.data.tokenization import train_tokenizer
from attnkit.models.document import DocumentClassifier, DocumentClassifierConfig
from attnkit.viz.explain import plot_classification
from attnkit.viz.measures import attention_entropy, attention_focus
from attnkit.viz.plots import plot_heads, plot_layers_heads
from attnkit.viz.report import write_report

OUTPUTS = ["19_report.html", "19_heads.png", "19_layers_heads.png", "19_explained.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    docs = keyword_corpus(300 if small() else 2000, seed=1, length=(12, 24))
    examples = [Example(d.text, d.label) for d in docs]
    cut = int(0.9 * len(docs))
    tokenizer = train_tokenizer([e.text for e in examples[:cut]])
    labels = LabelVocab.from_examples(examples[:cut])
    train_set = TextClassificationDataset(examples[:cut], tokenizer, labels, max_len=32)
    test_set = TextClassificationDataset(examples[cut:], tokenizer, labels, max_len=32)
    config = DocumentClassifierConfig(vocab_size=tokenizer.get_vocab_size(), num_classes=len(labels), d_model=32,
                                      num_heads=4, num_layers=2, d_ff=64, dropout=0.1, positional="none")
    model = DocumentClassifier(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(1 if small() else 5):
        model.train()
        for index in bucket_batches(train_set.lengths, 32, seed=epoch):
            batch = collate([train_set[i] for i in index])  # ids (B, T), lengths (B,), labels (B,)
            loss = nn.functional.cross_entropy(model(batch["ids"], batch["lengths"]), batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    model.eval()
    batch = collate([test_set[i] for i in range(len(test_set))])
    with torch.no_grad():
        logits, weights = model(batch["ids"], batch["lengths"], return_weights=True)
    layers = np.stack([weights[f"encoder.{i}"].numpy() for i in range(config.num_layers)], axis=1)  # (B, L, H, T, T)
    pooling = weights["pooling"].numpy()  # (B, T)
    show("encoder weights (B, L, H, T, T)", layers)
    show("pooling weights", pooling)
    accuracy = float((logits.argmax(-1) == batch["labels"]).float().mean())
    print(f"test accuracy {accuracy:.3f}")

    lengths = batch["lengths"].tolist()
    keys = [docs[cut + r].key_positions for r in range(len(lengths))]
    focus = np.mean([attention_focus(pooling[r, None, : lengths[r]], list(keys[r]))
                     for r in range(len(lengths))])
    print(f"pooling attention on the key words: {focus:.3f} (chance about {np.mean([len(k) / n for k, n in zip(keys, lengths, strict=True)]):.3f})")
    n = lengths[0]
    entropy = attention_entropy(layers[0, :, :, :n, :n])  # (L, H)
    print("entropy per layer and head (nats) of the first example:", np.round(entropy, 2).tolist())

    tokens = [[tokenizer.id_to_token(int(i)) for i in batch["ids"][r, : lengths[r]]] for r in range(len(lengths))]
    probabilities = logits.softmax(-1)
    shown = range(min(6, len(tokens)))
    predictions = [{"label": labels.decode(int(probabilities[r].argmax())), "probability": float(probabilities[r].max())}
                   for r in shown]
    report = write_report(out / OUTPUTS[0], [tokens[r] for r in shown], layers[: len(shown)],
                          title="Keyword classifier: encoder attention", predictions=predictions,
                          example_names=[f"test {r}: {docs[cut + r].label}" for r in shown])
    saved(report)
    plot_heads(layers[0, -1, :, :n, :n], tokens[0], title="Last encoder layer, first test document",
               path=out / OUTPUTS[1])
    plot_layers_heads(layers[0, :, :, :n, :n], path=out / OUTPUTS[2])
    plot_classification(tokens[0], pooling[0, :n], label=predictions[0]["label"],
                        probability=predictions[0]["probability"], path=out / OUTPUTS[3])
    for name in OUTPUTS[1:]:
        saved(out / name)


if __name__ == "__main__":
    main()
