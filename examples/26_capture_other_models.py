"""Reading attention out of other libraries' models with :func:`attnkit.inspect.capture`.

``nn.TransformerEncoder`` in eval mode takes a fused fast path that returns no
weights; a Hugging Face model running SDPA returns no ``attentions``. Inside
``with capture(model) as cap:`` the model runs its own kernels and gives
bit-for-bit its usual output (printed: ``torch.equal``), while the weights
are computed beside it from the same queries, keys and masks:
``cap.weights`` is ``{module name: (B, H, Tq, Tk)}`` in call order.

Two models, both with random weights (what is read is the point, not what
was learnt):

* an ``nn.TransformerEncoder`` on a padded batch: the padded keys get weight
  0 (the rows of padded queries, which the fast path never computes, are 0
  too), and ``verify=True`` compares each map with PyTorch's own
  ``need_weights=True`` computation (printed: the largest difference);
* a tiny GPT-2 from ``transformers`` (a random config, nothing downloaded),
  run with SDPA: the maps equal those the same model returns when run with
  ``attn_implementation="eager", output_attentions=True`` (printed), and show
  its causal mask. This part needs the ``[hf]`` extra
  (``pip install '.[hf]'``); without it the script says so and draws the
  first figure only.

The figure draws one head of each, its masks visible.

Try this: pass ``layers=[-1]`` to ``capture`` for the encoder. Which names
are left in ``cap.weights``? (Answer: ``layers.1.self_attn`` only, the last
attention module.)
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from _common import output_dir, save_figure, show
from matplotlib.figure import Figure
from torch import nn

from attnkit.inspect import capture

OUTPUTS = ["26_capture.png"]


def torch_encoder(lines: list[str]) -> torch.Tensor:
    """Capture ``nn.TransformerEncoder`` on a padded batch; one head's map ``(T, T)`` of the padded row."""
    warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")  # the fast path's own notice
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
    encoder = nn.TransformerEncoder(layer, num_layers=2).eval()
    x = torch.randn(2, 7, 32)  # (B, T, D)
    padding = torch.tensor([[False] * 7, [False] * 5 + [True] * 2])  # PyTorch's rule: True = padding
    with torch.no_grad():
        plain = encoder(x, src_key_padding_mask=padding)
        with capture(encoder, verify=True) as cap:
            out = encoder(x, src_key_padding_mask=padding)
    for name, weights in cap.weights.items():
        show(f"nn.TransformerEncoder {name}", weights)
    first = cap.weights["layers.0.self_attn"]  # (B, H, T, T)
    lines += [f"nn.TransformerEncoder: output unchanged by the capture: {torch.equal(out, plain)}",
              f"nn.TransformerEncoder: weight on the 2 padded keys of sequence 1: {first[1, :, :5, 5:].sum():.1f}",
              f"nn.TransformerEncoder: max |captured - PyTorch's need_weights=True| = "
              f"{max(cap.verified.values()):.1e}"]
    return first[1, 0]


def tiny_gpt2(transformers: Any, lines: list[str]) -> torch.Tensor:
    """Capture a random tiny GPT-2 under SDPA; compare with eager ``output_attentions``. One head ``(T, T)``."""
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2Model._from_config(config, attn_implementation="sdpa").eval()
    eager = transformers.GPT2Model._from_config(config, attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    ids = torch.randint(0, 64, (1, 8))  # (B, T) token ids
    with torch.no_grad():
        plain = model(input_ids=ids).last_hidden_state
        with capture(model) as cap:
            out = model(input_ids=ids).last_hidden_state
        returned = eager(input_ids=ids, output_attentions=True).attentions  # one (B, H, T, T) per layer
    for name, weights in cap.weights.items():
        show(f"GPT-2 {name}", weights)
    gap = max(float((w - r).abs().max()) for w, r in zip(cap.weights.values(), returned, strict=True))
    lines += [f"GPT-2 (sdpa): output unchanged by the capture: {torch.equal(out, plain)}",
              f"GPT-2: max |captured (sdpa) - returned by eager output_attentions| = {gap:.1e}"]
    return next(iter(cap.weights.values()))[0, 0]


def main() -> None:
    out = output_dir(__doc__)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    lines: list[str] = []
    maps = {"nn.TransformerEncoder, layer 0 head 0,\nsequence 1 (last 2 positions padded)": torch_encoder(lines)}
    try:
        import transformers
    except ImportError:
        lines.append("Hugging Face part skipped: it needs the [hf] extra (pip install '.[hf]'), "
                     "transformers is not installed")
    else:
        maps["tiny random GPT-2 (sdpa), layer 0 head 0"] = tiny_gpt2(transformers, lines)
    print("\n".join(lines))

    fig = Figure(figsize=(4.2 * len(maps), 4))
    axes = fig.subplots(1, len(maps), squeeze=False)[0]
    for axis, (title, weights) in zip(axes, maps.items(), strict=True):
        image = axis.imshow(weights.numpy(), cmap="viridis", vmin=0)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("key position")
        axis.set_ylabel("query position")
        fig.colorbar(image, ax=axis, fraction=0.046)
    save_figure(fig, out / OUTPUTS[0])


if __name__ == "__main__":
    main()
