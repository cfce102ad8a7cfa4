"""Fine-tune a tiny random LLaMA with context parallelism: each process holds half of every sequence.

Run with::

    torchrun --nproc-per-node 2 examples/torchrun/context_parallel_llama.py [--steps 30] [--length 256]

Every process builds the same batch (one seed), keeps its slice of the tokens
(``shard_sequence``, the balanced layout) and their global positions
(``local_positions``, for the rotary embedding), and runs the model inside
``context_parallel`` (``attnkit.integrations.context_parallel``): every
attention layer attends over the whole sequence through ``ring_attention``,
everything else runs on the local tokens. The loss is the whole batch's
(labels shifted over the full sequence, local token losses summed, divided by
the batch's token count), and the gradients summed over the processes are the
unsharded step's. Rank 0 prints the loss, which falls as the model learns the
repeating pattern; add ``--check`` to compare the first step with the same
step on one process.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from attnkit.integrations.context_parallel import context_parallel
from attnkit.parallel import local_positions, shard_sequence


def batch(length: int) -> torch.Tensor:
    """Two sequences of a repeating 8-token pattern (a different phase each): easy to learn. ``(2, T)``."""
    return torch.stack([(torch.arange(length) + 3 * b) % 8 + 1 for b in range(2)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--length", type=int, default=256, help="tokens per sequence (a multiple of 2 * world)")
    parser.add_argument("--check", action="store_true", help="compare the first step with one process's")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=16, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=args.length))
    reference = LlamaForCausalLM(model.config) if args.check else None
    if reference is not None:
        reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    ids = batch(args.length)
    shifted = torch.cat([ids[:, 1:], ids.new_full((ids.shape[0], 1), -100)], 1)  # next token, over the whole row
    positions = local_positions(args.length)[None].expand(ids.shape[0], -1)
    for step in range(args.steps):
        with context_parallel(model):
            logits = model(input_ids=shard_sequence(ids, 1), position_ids=positions, use_cache=False).logits
        loss = F.cross_entropy(logits.flatten(0, 1), shard_sequence(shifted, 1).flatten(), ignore_index=-100,
                               reduction="sum") / (shifted != -100).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)  # each process holds its tokens' share of the gradient
        total = loss.detach().clone()
        dist.all_reduce(total)
        if reference is not None and step == 0:
            whole = reference(input_ids=ids, labels=ids, use_cache=False).loss
            if dist.get_rank() == 0:
                print(f"step 0: loss on 2 slices {total.item():.6f}, on the whole sequence {whole.item():.6f}")
        optimizer.step()
        if dist.get_rank() == 0 and (step % 5 == 0 or step == args.steps - 1):
            print(f"step {step:3d}  loss {total.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
