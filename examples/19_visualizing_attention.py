"""Seeing attention: figures, measures and the interactive HTML report.

Everything in :mod:`attnkit.viz` reads plain arrays, so the same tools serve
attnkit's torch models, the NumPy twin and pretrained BERT. This script trains
a two-layer :class:`DocumentClassifier` on the generated keyword corpus (the
key words that decide each label are known), then:

* measures the heads: entropy (how spread each head is) and focus (the share of
  attention landing on the key words; chance is the key words' share of the
  words, 1 to 3 key words among 12 to 24 words, printed beside it: about 0.11);
* draws the heads of one layer, the layer × head overview and one explained
  prediction;
* writes ``19_report.html``: one self-contained offline page with every layer
  and head of several examples, the predictions, and hover/click exploration.

**Is attention explanation?** Not by itself, and the explained figure
(``19_explained.png``, the pooling weights of the first test document) is the
case. The pooling weights say where the *last* step read from, not which input
words decided: after two encoder layers every position already holds a mix of
the others, so the pooling can read a key word's information from the filler
words that attended to it. The script prints, for that document, the pooling
weight on its key words, the share of the last layer's attention that every
query sends to them (per head), and the prediction once the key words are
replaced by "the" and by a key word of the other class. In full mode the
pooling weight on "wonderful" is 0.004 while one last-layer head sends 0.72
of every query's attention to it; replacing it by "the" leaves "positive" at
0.999 (this model reads "no negative word" as positive), and only a negative
word flips it. Neither weight said so: attention shows where information
flowed, removing or swapping inputs tests what mattered (Jain & Wallace,
2019; Wiegreffe & Pinter, 2019).

Try this: explain the second test document instead (``r = 1``); is its
pooling weight on the key words high or low, and does removing them still
change the prediction?
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from _common import output_dir, quick_mode, saved, show, small
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset, bucket_batches, collate
from attnkit.data.readers import Example
from attnkit.data.synthetic import class_keywords, keyword_corpus
from attnkit.data.tokenization import train_tokenizer
from attnkit.models.document import DOCUMENT_LAYER, DocumentClassifier, DocumentClassifierConfig
from attnkit.viz.explain import plot_classification
from attnkit.viz.measures import attention_entropy, attention_focus
from attnkit.viz.plots import plot_heads, plot_layers_heads
from attnkit.viz.report import write_report

OUTPUTS = ["19_report.html", "19_heads.png", "19_layers_heads.png", "19_explained.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    docs = keyword_corpus(800 if small() else 2000, seed=1, length=(12, 24))
    quick_mode("800 generated documents, 3 epochs: test accuracy 1.0, and the document drawn has most of its "
               "pooling weight on its key words, which decide it; the case the docstring describes (a key word "
               "with almost no pooling weight that still decides) is the full run's (2000 documents x 5 epochs)")
    examples = [Example(d.text, d.label) for d in docs]
    cut = int(0.9 * len(docs))
    tokenizer = train_tokenizer([e.text for e in examples[:cut]])
    labels = LabelVocab.from_examples(examples[:cut])
    train_set = TextClassificationDataset(examples[:cut], tokenizer, labels, max_len=32)
    test_set = TextClassificationDataset(examples[cut:], tokenizer, labels, max_len=32)
    config = DocumentClassifierConfig(vocab_size=tokenizer.get_vocab_size(), num_classes=len(labels),
                                      layer=replace(DOCUMENT_LAYER, d_model=32, num_heads=4, d_ff=64, dropout=0.1),
                                      num_layers=2, positional="none")
    model = DocumentClassifier(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(3 if small() else 5):
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
    chance = np.mean([len(k) / n for k, n in zip(keys, lengths, strict=True)])
    print(f"pooling attention on the key words: {focus:.3f} (chance about {chance:.3f})")
    n = lengths[0]
    entropy = attention_entropy(layers[0, :, :, :n, :n])  # (L, H)
    print("entropy per layer and head (nats) of the first example:", np.round(entropy, 2).tolist())

    tokens = [[tokenizer.id_to_token(int(i)) for i in batch["ids"][r, : lengths[r]]] for r in range(len(lengths))]
    probabilities = logits.softmax(-1)
    shown = range(min(6, len(tokens)))
    predictions = [{"label": labels.decode(int(probabilities[r].argmax())),
                    "probability": float(probabilities[r].max())} for r in shown]
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

    # Is the pooling weight the explanation? Compare it with the last layer and with removing the words.
    key = list(keys[0])
    last_layer = layers[0, -1, :, :n, :n]  # (H, T, T)
    print(f"document 0, key words {[tokens[0][j] for j in key]} at {key}:")
    print(f"  pooling weight on the key words: {pooling[0, key].sum():.3f}")
    print("  last layer, share of every query's attention on the key words, per head:",
          [round(float(last_layer[h][:, key].sum(-1).mean()), 3) for h in range(last_layer.shape[0])])
    label = int(probabilities[0].argmax())
    other = next(w for c, words in class_keywords(len(labels)).items() if c != docs[cut].label for w in words)
    changed = [f"P({labels.decode(label)}) as written {probabilities[0, label]:.3f}"]
    for word in ("the", other):
        ids = batch["ids"][:1, :n].clone()
        ids[0, key] = tokenizer.token_to_id(word)
        with torch.no_grad():
            replaced = model(ids, batch["lengths"][:1]).softmax(-1)[0, label]
            changed.append(f"key words replaced by {word!r} {replaced:.3f}")
    print("  " + ", ".join(changed))


if __name__ == "__main__":
    main()
