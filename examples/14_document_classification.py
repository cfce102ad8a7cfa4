"""Document classification with a Transformer encoder and attention pooling.

:class:`attnkit.models.document.DocumentClassifier`:

    h = Encoder(Embed(ids) + PE)                 (B, T, D)
    a = softmax_t(w^T tanh(W h_t))               (B, T)   attention pooling
    logits = W_c (sum_t a_t h_t)                 (B, C)

The pooling weights ``a`` say how much each token counts for the answer, so
after training we analyse them: test accuracy, the most attended words of each
class, and one explained prediction.

Data: the MR movie reviews when their folder exists (``--data``, else
``$ATTNKIT_DATA/mr``, else ``../shared/data/mr`` next to the repository),
else (and in small mode) attnkit's generated keyword corpus, where one to
three key words of the class hide among neutral words — there the right
answer for "where should the model look" is known, and we measure it.

Try this: compare the most attended words in ``14_results.txt`` with the
corpus's key words, ``attnkit.data.synthetic.class_keywords(2)``. (Answer: the
top words of each class are its key words; filler words follow with small
weights.)
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import torch
from _common import optional_data, parse_args, quick_mode, saved, show, small
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset, bucket_batches, collate
from attnkit.data.readers import Example, read_examples
from attnkit.data.synthetic import keyword_corpus
from attnkit.data.tokenization import train_tokenizer
from attnkit.models.document import DOCUMENT_LAYER, DocumentClassifier, DocumentClassifierConfig
from attnkit.viz.explain import plot_classification

OUTPUTS = ["14_explained_prediction.png", "14_results.txt"]


def load_data(data: Path | None) -> tuple[str, list[Example], list[tuple[int, ...]] | None]:
    """The examples, the data set's name and (keyword corpus only) the key word positions."""
    mr = None if small() else optional_data("mr", data)
    if mr is not None:
        examples = read_examples(mr, format="polarity", encoding="latin-1")
        random.Random(0).shuffle(examples)
        return "MR movie reviews", examples, None
    docs = keyword_corpus(1200 if small() else 3000, seed=0)
    return "generated keyword corpus", [Example(d.text, d.label) for d in docs], [d.key_positions for d in docs]


def main() -> None:
    args = parse_args(__doc__, data="mr")
    out = args.out
    torch.manual_seed(0)
    torch.set_num_threads(1)
    name, examples, key_positions = load_data(args.data)
    quick_mode("1200 generated documents, 3 epochs: test accuracy 1.0, with about 0.3 of the pooling weight on "
               "the key words, four times chance; the MR reviews are read in full mode only")
    cut = int(0.9 * len(examples))
    train, test = examples[:cut], examples[cut:]
    tokenizer = train_tokenizer([e.text for e in train], vocab_size=20000)
    labels = LabelVocab.from_examples(train)
    train_set = TextClassificationDataset(train, tokenizer, labels, max_len=64)
    test_set = TextClassificationDataset(test, tokenizer, labels, max_len=64)
    print(f"{name}: {len(train)} train, {len(test)} test, vocabulary {tokenizer.get_vocab_size()}")

    config = DocumentClassifierConfig(vocab_size=tokenizer.get_vocab_size(), num_classes=len(labels),
                                      layer=replace(DOCUMENT_LAYER, d_model=64, num_heads=4, d_ff=128, dropout=0.2),
                                      num_layers=1)
    model = DocumentClassifier(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    epochs = 3 if small() else 4
    for epoch in range(epochs):
        model.train()
        for batch_index in bucket_batches(train_set.lengths, 32, seed=epoch):
            batch = collate([train_set[i] for i in batch_index])  # ids (B, T), lengths (B,), labels (B,)
            loss = nn.functional.cross_entropy(model(batch["ids"], batch["lengths"]), batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch + 1}: last batch loss {loss.item():.3f}")

    model.eval()
    batch = collate([test_set[i] for i in range(len(test_set))])
    with torch.no_grad():
        logits, weights = model(batch["ids"], batch["lengths"], return_weights=True)
    pooling = weights["pooling"]  # (B, T)
    show("test ids", batch["ids"])
    show("logits", logits)
    show("pooling weights", pooling)
    predicted = logits.argmax(-1)
    accuracy = (predicted == batch["labels"]).float().mean().item()
    lines = [f"data: {name}", f"test accuracy: {accuracy:.4f} ({len(test)} documents)"]

    # Most attended words per predicted class: mean pooling weight each word gets when it appears.
    tokens = [[tokenizer.id_to_token(int(i)) for i in batch["ids"][r, : batch["lengths"][r]]] for r in range(len(test))]
    mass: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r, toks in enumerate(tokens):
        for t, word in enumerate(toks):
            mass[int(predicted[r])][word].append(float(pooling[r, t]))
    for c in sorted(mass):
        frequent = {w: sum(v) / len(v) for w, v in mass[c].items() if len(v) >= 3}
        top = sorted(frequent.items(), key=lambda p: -p[1])[:8]
        lines.append(f"most attended words when predicting {labels.decode(c)!r}: "
                     + ", ".join(f"{w} ({s:.2f})" for w, s in top))
    if key_positions is not None:
        # Share of the pooling attention that lands on the planted key words; chance is their share
        # of the words (1 to 3 key words among 20 to 40: about 2/30).
        focus = [float(pooling[r, list(key_positions[cut + r])].sum()) for r in range(len(test))]
        chance = [len(key_positions[cut + r]) / int(batch["lengths"][r]) for r in range(len(test))]
        lines.append(f"attention focus on the key words: {sum(focus) / len(focus):.3f} "
                     f"(chance {sum(chance) / len(chance):.3f})")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    r = 0
    probability = float(logits[r].softmax(-1).max())
    plot_classification(tokens[r], pooling[r, : len(tokens[r])].numpy(), label=labels.decode(int(predicted[r])),
                        probability=probability, path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
