"""Training attention in plain NumPy: the twin of attnkit with hand-written backward passes.

:mod:`attnkit.reference` re-implements the layers with explicit ``forward``
and ``backward`` methods — no autograd, NumPy only (this script never imports
torch). For softmax attention ``P = softmax(S)``, ``S = Q K^T / sqrt(Dh)``,
``O = P V``, the backward pass is

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dP * P)),
    dQ = dS K / sqrt(Dh),   dK = dS^T Q / sqrt(Dh)

We first check a multi-head attention layer's backward against central
differences in float64, then train a small Transformer classifier with the
twin's AdamW and trainer on a generated keyword task, look at its attention,
and save it in safetensors (the same layout the torch models load).

Try this: break the backward of the softmax (``attnkit.reference.attention.
softmax_backward = lambda p, dp: p * dp``, forgetting the rowsum term) and run
step 1 again. Which arrays fail the check? (Answer: those behind the softmax:
the query and the q/k projections; v_proj and out_proj stay near 1e-11.
``docs/concepts.md`` derives the right formula.)
"""

from __future__ import annotations

import sys

import numpy as np
from _common import output_dir, quick_mode, saved, show, small

from attnkit.layer_config import TransformerLayerConfig
from attnkit.reference.analysis import accuracy, most_attended_tokens
from attnkit.reference.checking import module_gradcheck
from attnkit.reference.io import load_model, save_model
from attnkit.reference.models import ClassifierConfig, TransformerClassifier
from attnkit.reference.multi_head import MultiHeadAttention
from attnkit.reference.optim import AdamW
from attnkit.reference.text import Vocabulary, pad_batch
from attnkit.reference.trainer import Trainer, predict
from attnkit.viz.plots import plot_attention

OUTPUTS = ["18_numpy_training.txt", "18_numpy_attention.png", "18_model/config.json", "18_model/model.safetensors"]
FILLER = "the a film story it was is and of to with this that some very".split()
KEYWORDS = {0: ["awful", "boring", "dull"], 1: ["great", "moving", "superb"]}


def keyword_texts(n: int, rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """Filler sentences with one or two key words of their class hidden inside."""
    labels = rng.integers(0, 2, size=n)
    texts = []
    for label in labels:
        words = list(rng.choice(FILLER, size=int(rng.integers(8, 16))))
        for _ in range(int(rng.integers(1, 3))):
            words.insert(int(rng.integers(0, len(words) + 1)), str(rng.choice(KEYWORDS[int(label)])))
        texts.append(" ".join(words))
    return texts, labels


def main() -> None:
    out = output_dir(__doc__)
    rng = np.random.default_rng(0)

    # 1. The hand-written backward of multi-head attention against central differences.
    mha = MultiHeadAttention(8, 2, rng=rng, dtype=np.float64)
    x = rng.normal(size=(2, 5, 8))  # (B, T, D)
    errors = module_gradcheck(mha, {"query": x}, lambda query: mha.forward(query)).errors
    show("MHA output", mha.forward(x))
    show("MHA weights", mha.weights)
    print("gradcheck, largest relative error per array:", {k: f"{v:.1e}" for k, v in errors.items()})

    # 2. Train a Transformer classifier with attention pooling.
    n = 600 if small() else 3000
    quick_mode("600 generated documents, 3 epochs: validation accuracy reaches 1.0 by the last epoch and the "
               "held-out test accuracy is 1.0; the full run (3000 documents x 6 epochs) gets 1.0 from its first epoch")
    texts, labels = keyword_texts(n, rng)
    cut, held = int(0.8 * n), int(0.9 * n)  # 80% train, 10% validation (per epoch), 10% test (once, at the end)
    vocab = Vocabulary.build(texts[:cut])
    encoded = [vocab.encode(t) for t in texts]
    layer = TransformerLayerConfig(d_model=32, num_heads=2, d_ff=64, dropout=0.1)
    config = ClassifierConfig(vocab_size=len(vocab), num_classes=2, layer=layer, num_layers=1, pooling="attention")
    model = TransformerClassifier(config)
    optimizer = AdamW(model.parameters(), model.gradients(), lr=3e-3)
    trainer = Trainer(model, optimizer, batch_size=32, seed=0)
    history = trainer.fit(encoded[:cut], labels[:cut], epochs=3 if small() else 6,
                          val_x=encoded[cut:held], val_y=labels[cut:held], log=print)
    test_accuracy = accuracy(predict(model, encoded[held:]), labels[held:])

    ids = pad_batch(encoded[held:])  # (B, T): the test documents
    model.eval()
    logits = model.forward(ids)
    weights = model.attention_weights()  # (B, H, T, T)
    show("test ids", ids)
    show("logits", logits)
    show("self-attention weights", weights)
    top = most_attended_tokens(weights, ids, vocab.itos, k=6, mask=ids != 0, min_frequency=3)
    lines = [f"train loss per epoch: {[round(v, 3) for v in history.train_loss]}",
             f"validation accuracy per epoch: {[round(v, 3) for v in history.val_accuracy]}",
             f"test accuracy (held-out 10%, never seen in training or validation): {test_accuracy:.3f}",
             "most attended tokens: " + ", ".join(f"{t} ({w:.3f})" for t, w, _ in top)]

    # 3. Save (safetensors + JSON config) and load back: the same predictions.
    save_model(model, out / "18_model")
    reloaded = load_model(out / "18_model")
    reloaded.eval()
    same = bool(np.allclose(reloaded.forward(ids), logits, atol=1e-6))
    lines.append(f"reloaded from safetensors gives the same logits: {same}")
    assert same
    print("\n".join(lines))
    (out / OUTPUTS[0]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    length = int((ids[0] != 0).sum())
    tokens = [vocab.itos[i] for i in ids[0, :length]]
    plot_attention(weights[0, 0, :length, :length], tokens, title="NumPy twin: self-attention, head 0",
                   path=out / OUTPUTS[1])
    for name in OUTPUTS:
        saved(out / name)
    print("torch was imported:", "torch" in sys.modules)  # False when run as a script


if __name__ == "__main__":
    main()
