"""What explaining one generated sentence costs: every method and its faithfulness, beside translating it.

Usage::

    python benchmarks/explain_generation.py [--tokens 20] [--repeats 3]

A Transformer of the size trained on Multi30k (3 + 3 layers, d_model 256, 8 heads, FFN 1024, a joint
vocabulary of 8,000) with its initial weights translates a source of ``--tokens`` tokens and is asked to
explain an output of as many tokens: each method's scores (raw cross-attention, gradient x input,
integrated gradients) and the faithfulness of all three beside a random order
(:func:`attnkit.attribution.generation.explain_generation`). Prints the median seconds of each part and
the whole explanation as a multiple of one beam-4 translation of the same source, timed in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnkit.attribution.generation import GENERATION_METHODS, attribute_generation, generation_faithfulness
from attnkit.blocks import TransformerLayerConfig
from attnkit.decoding import beam_search
from attnkit.models.seq2seq import Seq2SeqConfig, Seq2SeqTransformer


def _median(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    opts = parser.parse_args()
    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(
        src_vocab_size=8000, tgt_vocab_size=8000, layer=TransformerLayerConfig(256, 8, 1024, dropout=0.1),
        shared_vocab=True)).eval()
    source = torch.randint(4, 8000, (opts.tokens,)).tolist()
    target = torch.randint(4, 8000, (opts.tokens,)).tolist()
    src = torch.tensor([source])
    translate = _median(lambda: beam_search(model, src, torch.tensor([len(source)]), beam_size=4,
                                            max_len=opts.tokens), opts.repeats)
    scores = {}
    parts = {}
    for method in GENERATION_METHODS:
        parts[method] = _median(lambda m=method: scores.__setitem__(m, attribute_generation(model, source, target, m)),
                                opts.repeats)
    parts[f"faithfulness ({len(scores)} methods + random)"] = _median(
        lambda: generation_faithfulness(model, source, target, scores), opts.repeats)
    total = sum(parts.values())
    print(f"explaining a {opts.tokens}-token output of a {opts.tokens}-token source, Multi30k-size model, "
          f"{torch.get_num_threads()} thread(s), median of {opts.repeats}")
    print(f"  one beam-4 translation (the baseline): {translate:.2f} s")
    for name, seconds in parts.items():
        print(f"  {name:>36}: {seconds:6.2f} s")
    print(f"  whole explanation: {total:.2f} s = {total / translate:.1f}x one translation")


if __name__ == "__main__":
    main()
