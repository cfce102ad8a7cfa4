"""Padding-free fine-tuning with Hugging Face's ``Trainer`` on attnkit's backend.

``DataCollatorWithFlattening`` lays a batch's examples end to end in one row
with no padding; its ``position_ids`` restart at 0 where each example begins,
and ``attn_implementation="attnkit"`` keeps every example to itself in every
layer (:mod:`attnkit.integrations.transformers`). The ``Trainer`` needs
nothing else: no padding, no attention mask.

Here a tiny random LLaMA (a config built here, nothing downloaded; the
"tokens" are plain ids, so no tokenizer either) learns a made-up language:
each example counts up from a random start, modulo the vocabulary, so the
next token always follows from the one before. The script prints the
training loss the ``Trainer`` logged at each step (it falls: from ln 32 = 3.47,
chance, to about 2.0 in the full run's 30 steps), then checks the
packed row against the examples run one at a time: the loss of the packed
batch equals the loss of the same tokens run alone, per example, to float32
rounding (printed), and the logits of each example inside the row equal its
logits alone.

Needs ``transformers`` (the ``[hf]`` extra) and ``accelerate`` (which the
``Trainer`` needs; pinned in requirements/lock.txt). Run it with
``python examples/hf_packed_trainer.py --out DIR``; ``ATTNKIT_EXAMPLES_SMALL=1``
runs fewer steps.
"""

from __future__ import annotations

import torch
from _common import output_dir, quick_mode, small
from transformers import (
    DataCollatorWithFlattening,
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)

from attnkit.integrations.transformers import check_model  # importing it registers "attnkit"

OUTPUTS = ["hf_packed_trainer.txt"]
VOCAB = 32


def counting_examples(n: int, seed: int) -> list[dict[str, list[int]]]:
    """``n`` examples of 5 to 16 tokens, each counting up by one from a random start (modulo the vocabulary)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, 17, (n,), generator=g).tolist()
    starts = torch.randint(0, VOCAB, (n,), generator=g).tolist()
    return [{"input_ids": [(s + i) % VOCAB for i in range(length)]} for s, length in zip(starts, lengths, strict=True)]


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="attnkit")
    return check_model(LlamaForCausalLM(config))  # refusals by name; the forward's position ids for any layer


def train(model: LlamaForCausalLM, out: str, steps: int) -> list[float]:
    """``steps`` Trainer steps of 8 packed examples each; the losses it logged."""
    args = TrainingArguments(
        output_dir=out, max_steps=steps, per_device_train_batch_size=8, learning_rate=3e-3, warmup_steps=0,
        logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, seed=0,
        remove_unused_columns=False, dataloader_num_workers=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=counting_examples(8 * steps, seed=1),
                      data_collator=DataCollatorWithFlattening())
    trainer.train()
    return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


def packed_against_alone(model: LlamaForCausalLM, examples: list[dict[str, list[int]]]) -> tuple[float, float, float]:
    """The packed row's loss, the same tokens' loss with each example alone, and the largest logit gap."""
    batch = DataCollatorWithFlattening(return_tensors="pt")(examples)
    model.eval()
    with torch.no_grad():
        packed = model(**batch)
        total, count, gap, start = 0.0, 0, 0.0, 0
        for example in examples:
            ids = torch.tensor([example["input_ids"]])
            alone = model(input_ids=ids, labels=ids)
            n = ids.shape[1] - 1  # the tokens an example predicts: all but its first
            total, count = total + alone.loss.item() * n, count + n
            inside = packed.logits[0, start:start + ids.shape[1]]
            gap = max(gap, (inside - alone.logits[0]).abs().max().item())
            start += ids.shape[1]
    return packed.loss.item(), total / count, gap


def main() -> None:
    out = output_dir(__doc__)
    quick_mode("4 steps show the loss falling and the packed batch equal to its examples alone; "
               "the full run (30 steps) takes the loss from ln 32 = 3.47 (chance) to about 2.0")
    steps = 4 if small() else 30
    model = tiny_llama()
    losses = train(model, str(out / "trainer"), steps)
    lines = [f"Trainer losses over {steps} packed steps: " + " ".join(f"{x:.4f}" for x in losses),
             f"loss fell from {losses[0]:.4f} to {losses[-1]:.4f}"]
    examples = counting_examples(6, seed=2)
    batch = DataCollatorWithFlattening(return_tensors="pt")(examples)
    lines.append(f"one packed row: input_ids {tuple(batch['input_ids'].shape)}, position ids "
                 f"{batch['position_ids'][0].tolist()}")
    packed, alone, gap = packed_against_alone(model, examples)
    lines.append(f"packed batch loss {packed:.6f}, each example alone {alone:.6f}: "
                 f"|difference| = {abs(packed - alone):.2e}, largest logit gap {gap:.2e}")
    text = "\n".join(lines)
    print(text)
    path = out / "hf_packed_trainer.txt"
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
