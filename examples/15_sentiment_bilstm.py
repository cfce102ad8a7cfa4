"""Sentiment with a bidirectional LSTM and additive attention pooling.

Before Transformers, attention was added *on top of* recurrent networks
(Bahdanau et al., 2015; Yang et al., 2016). :class:`SentimentClassifier`:

    h_t = [LSTM_fwd(x)_t ; LSTM_bwd(x)_t]          (B, T, 2H)
    e_t = v^T tanh(W h_t + b),  a = softmax_t(e)    (B, T)   additive attention
    logits = W_c sum_t a_t h_t                      (B, C)

The LSTM carries word order and context (so "not good" can differ from
"good"); attention picks the positions that decide. After training we print
the attention over a few new sentences, word by word.

Data: the MR movie reviews when their folder exists (``--data``, else
``$ATTNKIT_DATA/mr``, else ``../shared/data/mr`` next to the repository),
else (and in small mode) the generated keyword corpus.

Try this: print ``weights["pooling"].sum(-1)``. (Answer: 1 for each
sentence: the padding positions of the shorter sentences get weight 0.)
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from _common import optional_data, parse_args, quick_mode, saved, show, small
from matplotlib.figure import Figure
from torch import nn

from attnkit.data.batching import LabelVocab, TextClassificationDataset, bucket_batches, collate
from attnkit.data.readers import Example, read_examples
from attnkit.data.synthetic import keyword_corpus
from attnkit.data.tokenization import encode_batch, train_tokenizer
from attnkit.models.sentiment import SentimentClassifier, SentimentClassifierConfig

OUTPUTS = ["15_sentiment_attention.png", "15_results.txt"]


# New sentences to explain, in the words each data set knows (the keyword corpus has no "not").
SENTENCES = {
    "MR movie reviews": ["a quietly moving film with a terrific cast",
                         "the plot is dull and the acting is terrible",
                         "not the delightful comedy it wants to be"],
    "generated keyword corpus": ["a brilliant film with a wonderful cast",
                                 "the plot is dull and the script was terrible",
                                 "this movie was the best picture this year"],
}


def load_data(data: Path | None) -> tuple[str, list[Example]]:
    mr = None if small() else optional_data("mr", data)
    if mr is not None:
        examples = read_examples(mr, format="polarity", encoding="latin-1")
        random.Random(0).shuffle(examples)
        return "MR movie reviews", examples
    return "generated keyword corpus", [Example(d.text, d.label) for d in keyword_corpus(1000 if small() else 3000)]


def main() -> None:
    args = parse_args(__doc__, data="mr")
    out = args.out
    torch.manual_seed(0)
    torch.set_num_threads(1)
    name, examples = load_data(args.data)
    quick_mode("1000 generated documents, 2 epochs: test accuracy 1.0, and the key words of each new sentence "
               "take nearly all of its pooling weight; the MR reviews (and 'not' before a word) are read in full "
               "mode only")
    cut = int(0.9 * len(examples))
    train, test = examples[:cut], examples[cut:]
    tokenizer = train_tokenizer([e.text for e in train], vocab_size=20000)
    labels = LabelVocab.from_examples(train)
    train_set = TextClassificationDataset(train, tokenizer, labels, max_len=64)
    test_set = TextClassificationDataset(test, tokenizer, labels, max_len=64)

    config = SentimentClassifierConfig(vocab_size=tokenizer.get_vocab_size(), num_classes=len(labels),
                                       embed_dim=64, hidden_size=64, attention_dim=64, dropout=0.3)
    model = SentimentClassifier(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    epochs = 2 if small() else 4
    for epoch in range(epochs):
        model.train()
        for batch_index in bucket_batches(train_set.lengths, 32, seed=epoch):
            batch = collate([train_set[i] for i in batch_index])  # ids (B, T), lengths (B,), labels (B,)
            loss = nn.functional.cross_entropy(model(batch["ids"], batch["lengths"]), batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        print(f"epoch {epoch + 1}: last batch loss {loss.item():.3f}")

    model.eval()
    batch = collate([test_set[i] for i in range(len(test_set))])
    with torch.no_grad():
        logits = model(batch["ids"], batch["lengths"])
    accuracy = (logits.argmax(-1) == batch["labels"]).float().mean().item()
    lines = [f"data: {name} ({len(train)} train, {len(test)} test)", f"test accuracy: {accuracy:.4f}"]

    sentences = SENTENCES[name]
    ids = encode_batch(tokenizer, sentences, max_len=64)
    padded = collate([{"ids": torch.tensor(s or [1]), "label": torch.tensor(0)} for s in ids])
    with torch.no_grad():
        logits, weights = model(padded["ids"], padded["lengths"], return_weights=True)
    show("ids", padded["ids"])
    show("logits", logits)
    show("pooling weights", weights["pooling"])
    for r in range(len(sentences)):
        words = [tokenizer.id_to_token(i) for i in ids[r]]
        label = labels.decode(int(logits[r].argmax()))
        shaded = " ".join(f"{w}[{a:.2f}]" for w, a in zip(words, weights["pooling"][r].tolist(), strict=False))
        lines.append(f"{label:>9}: {shaded}")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    # One strip per sentence, each labelled with its own words and the predicted label.
    fig = Figure(figsize=(8, 1.3 * len(sentences)))
    for r, axis in enumerate(fig.subplots(len(sentences), 1)):
        words = [tokenizer.id_to_token(i) for i in ids[r]]
        row = weights["pooling"][r, : len(words)].numpy()[None]  # (1, T)
        axis.imshow(row, cmap="viridis", vmin=0.0, vmax=float(weights["pooling"].max()), aspect="auto")
        axis.set_xticks(range(len(words)), words)
        axis.set_yticks([0], [labels.decode(int(logits[r].argmax()))])
    fig.suptitle("BiLSTM attention pooling: the weight of each word")
    fig.tight_layout()
    fig.savefig(out / OUTPUTS[0], dpi=100)
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
