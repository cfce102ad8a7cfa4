"""Image captioning with visual attention ("Show, Attend and Tell", Xu et al., 2015).

A CNN turns the image into a grid of ``R = h*w`` region vectors ``a_i``; an
LSTM writes the caption word by word and, before each word, attends over the
regions with additive attention:

    e_ti = v^T tanh(W_a a_i + W_h h_{t-1}),   alpha_t = softmax_i(e_ti),   z_t = sum_i alpha_ti a_i

The weights ``alpha_t`` say where the model looked for word ``t``. A
"doubly stochastic" penalty ``lambda * sum_i (1 - sum_t alpha_ti)^2`` nudges it
to look at every region at some point.

Data: attnkit's generated shape scenes (coloured shapes on a noisy
background with captions like "a red circle left of a blue square"), so the
right place to look for each word is known.
"""

from __future__ import annotations

import torch
from _common import output_dir, saved, show, small

from attnkit.data.captions import encode_captions, images_to_tensor
from attnkit.data.shapes import generate_scenes, shapes_vocab
from attnkit.models.captioning import CaptionerConfig, ImageCaptioner
from attnkit.viz.explain import plot_caption_attention

OUTPUTS = ["16_caption_attention.png", "16_captions.txt"]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n_train, epochs = (64, 1) if small() else (1500, 12)
    scenes = generate_scenes(n_train + 8, seed=0)
    vocab = shapes_vocab()
    images = images_to_tensor([s.image for s in scenes])  # (N, 3, S, S) in [0, 1]
    captions, lengths = encode_captions([s.caption for s in scenes], vocab)  # (N, T), (N,)
    show("images", images)
    show("captions", captions)

    model = ImageCaptioner(CaptionerConfig(vocab_size=len(vocab)))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(epochs):
        model.train()
        for batch in torch.randperm(n_train).split(32):
            loss, parts = model.loss(images[batch], captions[batch], lengths[batch])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
        print(f"epoch {epoch + 1}: loss {loss.item():.3f} (word nll {parts['nll']:.3f}, "
              f"attention penalty {parts['attention_reg']:.3f})")

    model.eval()
    with torch.no_grad():
        teacher = model(images[:2], captions[:2], lengths[:2])
        generated = model.greedy(images[n_train:])
    show("teacher-forced logits", teacher.logits)
    show("teacher-forced weights", teacher.weights)
    lines = []
    for scene, caption in zip(scenes[n_train:], generated, strict=True):
        lines.append(f"truth: {scene.caption:<45} model: {' '.join(vocab.decode(caption.ids))}")
    print("\n".join(lines))
    (out / OUTPUTS[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")

    first = generated[0]
    words, weights = vocab.decode(first.ids), first.weights  # weights (T, R)
    if not words:  # a barely trained model may stop at once: show the true caption instead
        n = int(lengths[n_train])
        words = vocab.decode(captions[n_train, 1 : n - 1].tolist())
        with torch.no_grad():
            forced = model(images[n_train : n_train + 1], captions[n_train : n_train + 1], lengths[n_train : n_train + 1])
        weights = forced.weights[0, : len(words)]  # (T, R)
    maps = model.attention_maps(weights)  # (T, h, w)
    show("attention maps of one caption", maps)
    plot_caption_attention(scenes[n_train].image, maps.numpy(), words, path=out / OUTPUTS[0])
    saved(out / OUTPUTS[0])
    saved(out / OUTPUTS[1])


if __name__ == "__main__":
    main()
