"""The memory plan against the measured peak: ``attnkit train`` on long documents, one process per model.

For each model kind, one ``attnkit train`` process (``--epochs 1``, ``--max-len`` far above the documents)
on ``--docs`` documents of ``--tokens`` words each, in sentences of 8 to 20 words; the process prints the
plan :func:`attnkit.train.tasks.classify.memory.fit_to_memory` checks (what the run will allocate, and that plus the
resident memory at the time it is checked: the peak it predicts), and the eval reads the process's own
peak (``VmHWM``, at its exit: training, the test score and the report). Prints plan, peak and ratio.

    python evals/memory_plan.py --docs 10 --tokens 20000 --models han wide
    python evals/memory_plan.py --docs 10 --tokens 2000 --models document
    python evals/memory_plan.py --docs 10 --tokens 2000 --models bert
    python evals/memory_plan.py --models translate --pairs 2000 --pair-words 100
    python evals/memory_plan.py --models caption --docs 3000 --image-size 128

``translate`` trains the default translation model (``attnkit train --task translate``, one epoch of the
default ``--max-tokens``) on ``--pairs`` sentence pairs of ``--pair-words`` words a side (:func:`write_pairs`),
``--max-len`` at most 1,024; its plan is :func:`attnkit.train.tasks.translate.translation_memory.check_translation`'s.

``caption`` trains the default captioner (``attnkit train --task caption``, one epoch) on ``--docs``
generated shapes images of ``--image-size`` pixels a side (extra flags such as ``--batch-size`` go to the
command); its plan is :func:`attnkit.train.tasks.caption.caption_memory.check_captioning`'s.

``bert`` fine-tunes a small randomly initialised BERT folder written here (:func:`write_bert_folder`: 2
layers of 128, 4 heads, feed-forward 512, positions for 1,024 tokens, so ``--max-len`` is 1,024 at most).

A run whose plan is over the budget is refused up front; its row shows the plan and the refusal.
The figures are in docs/cli.md (Memory).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

_CHILD = r"""
import atexit, json, sys
from attnkit._memory import peak_rss_mib, resident_bytes
from attnkit.train.tasks.classify import pipeline
from attnkit.cli import cli

plan = {}
check = pipeline.fit_to_memory

def planned(model_name, config, **sizes):
    from attnkit.train.tasks.classify.memory import estimate_classifier
    keep = {k: sizes[k] for k in ("tokens", "documents", "batch_tokens", "train_documents", "longest")
            if k in sizes}
    estimate = estimate_classifier(model_name, config, **keep)
    plan["plan"], plan["parts"] = estimate.total, estimate.describe()
    plan["resident"] = resident_bytes()
    return check(model_name, config, **sizes)

pipeline.fit_to_memory = planned

from attnkit.train.tasks.translate import translation
check_pairs = translation.check_translation

def planned_pairs(config, pairs, max_tokens, **limits):
    from attnkit.train.tasks.translate.translation_memory import estimate_translation
    estimate = estimate_translation(config, pairs, max_tokens)
    plan["plan"], plan["parts"] = estimate.total, estimate.describe()
    plan["resident"] = resident_bytes()
    return check_pairs(config, pairs, max_tokens, **limits)

translation.check_translation = planned_pairs

from attnkit.train.tasks.caption import caption_memory
check_images = caption_memory.check_captioning

def planned_images(model, **sizes):
    estimate = caption_memory.estimate_captioning(model, **{k: v for k, v in sizes.items() if k != "limit"})
    plan["plan"], plan["parts"] = estimate.total, estimate.describe()
    plan["resident"] = resident_bytes()
    return check_images(model, **sizes)

caption_memory.check_captioning = planned_images
atexit.register(lambda: print("PLAN " + json.dumps({**plan, "peak": peak_rss_mib() * 2**20}), file=sys.stderr))
cli.main(sys.argv[1:], standalone_mode=False)
"""


def write_documents(path: Path, docs: int, tokens: int, seed: int = 0) -> Path:
    """``docs`` documents of ``tokens`` words (3,000 distinct) in sentences ending with ``.``, two labels, as
    JSON lines (a CSV field holds at most 131,072 characters)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(3000)]
    with open(path, "w", encoding="utf-8") as fh:
        for d in range(docs):
            out: list[str] = []
            while len(out) < tokens:
                n = min(rng.randint(8, 20), tokens - len(out))
                out.extend(rng.choice(words) for _ in range(n - 1))
                out.append(".")
            fh.write(json.dumps({"text": " ".join(out[:tokens]), "label": "pos" if d % 2 else "neg"}) + "\n")
    return path


BERT_POSITIONS = 1026
"""Positions of :func:`write_bert_folder`'s BERT: inputs of up to 1,024 tokens with [CLS] and [SEP]."""


def write_bert_folder(folder: Path) -> Path:
    """A randomly initialised small BERT as Hugging Face saves one (config.json, model.safetensors, vocab.txt)
    whose vocabulary holds :func:`write_documents`' words."""
    import torch
    from safetensors.torch import save_file

    from attnkit.models.bert import BertConfig, BertModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *(f"w{i}" for i in range(3000))]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    config = {"vocab_size": len(vocab), "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 512, "max_position_embeddings": BERT_POSITIONS, "model_type": "bert"}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_dict(config))
    save_file({f"bert.{k}": v.contiguous() for k, v in model.state_dict().items()},
              str(folder / "model.safetensors"))
    return folder


def write_pairs(folder: Path, pairs: int, words: int, seed: int = 0) -> list[str]:
    """A parallel corpus of ``pairs`` sentences of ``words`` words (3,000 distinct) a side; its flags."""
    rng = random.Random(seed)
    for side in ("src", "tgt"):
        lines = (" ".join(f"{side}{rng.randrange(3000)}" for _ in range(words)) for _ in range(pairs))
        (folder / f"pairs.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ["--src", str(folder / "pairs.src"), "--tgt", str(folder / "pairs.tgt")]


def measure(model: str, data: Path, max_len: int, extra: list[str], pairs: tuple[int, int] = (2000, 100),
            data_size: tuple[int, int] = (2000, 96)) -> dict[str, float]:
    """One ``attnkit train`` process for ``model`` on ``data``: its plan, resident memory then, and peak;
    ``translate`` trains a translation model on the pairs beside ``data`` (:func:`write_pairs`),
    ``caption`` a captioner on ``data_size`` (images, pixels a side) generated shapes."""
    with tempfile.TemporaryDirectory() as run:
        if model == "translate":
            args = [sys.executable, "-c", _CHILD, "train", "--task", "translate",
                    *write_pairs(Path(run), *pairs), "--out", str(Path(run) / "run"), "--max-len", str(max_len),
                    "--epochs", "1", "--quiet", "--max-memory", "1TB", "--warmup-steps", "1", *extra]
            done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            return _found(model, done)
        if model == "caption":  # the generated shapes, --docs images of --image-size pixels
            args = [sys.executable, "-c", _CHILD, "train", "--task", "caption", "--out", str(Path(run) / "run"),
                    "--train-size", str(data_size[0]), "--val-size", "50", "--image-size", str(data_size[1]),
                    "--epochs", "1", "--quiet", "--max-memory", "1TB", *extra]
            done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            return _found(model, done)
        if model == "bert":  # fine-tunes a folder; its positions bound the input
            folder = write_bert_folder(Path(run) / "bert")
            extra = ["--init-from", str(folder), *extra]
            max_len = min(max_len, BERT_POSITIONS - 2)
        args = [sys.executable, "-c", _CHILD, "train", "--data", str(data), "--out", str(Path(run) / "run"),
                "--model", model, "--max-len", str(max_len), "--epochs", "1", "--device", "cpu", "--quiet",
                "--max-memory", "1TB", "--val-ratio", "0.2", "--test-ratio", "0.2", *extra]
        done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _found(model, done)


def _found(model: str, done: subprocess.CompletedProcess[str]) -> dict[str, float]:
    """The plan a child printed, with its peak, and the last line of its error when it failed."""
    line = next((x for x in done.stderr.splitlines() if x.startswith("PLAN ")), None)
    if line is None:
        raise RuntimeError(f"{model}: no plan printed\n{done.stderr[-2000:]}")
    found = json.loads(line[5:])
    if "plan" not in found:
        raise RuntimeError(f"{model}: no plan made\n{done.stderr[-2000:]}")
    if done.returncode != 0:
        found["failed"] = [x for x in done.stderr.strip().splitlines() if not x.startswith("PLAN ")][-1]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=10)
    parser.add_argument("--tokens", type=int, default=20000, help="words per document")
    parser.add_argument("--max-len", type=int, default=1_000_000)
    parser.add_argument("--models", nargs="+", default=["document", "han", "sentiment", "wide"])
    parser.add_argument("--pairs", type=int, default=2000, help="translate: sentence pairs")
    parser.add_argument("--pair-words", type=int, default=100, help="translate: words a sentence")
    parser.add_argument("--image-size", type=int, default=96, help="caption: pixels a side (--docs images)")
    args, extra = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "long.jsonl"
        if set(args.models) - {"translate", "caption"}:
            write_documents(data, args.docs, args.tokens)
            print(f"{args.docs} documents of {args.tokens} words, --max-len {args.max_len}")
        print(f"{'model':10} {'plan MB':>9} {'+resident':>10} {'peak MB':>9} {'ratio':>6}")
        for model in args.models:
            got = (measure(model, data, min(args.max_len, 1024), extra, (args.pairs, args.pair_words))
                   if model == "translate" else
                   measure(model, data, args.max_len, extra, data_size=(args.docs, args.image_size))
                   if model == "caption" else measure(model, data, args.max_len, extra))
            predicted = got["plan"] + got["resident"]
            if "failed" in got:  # refused up front (or failed): no peak of a run to set against the plan
                print(f"{model:10} {got['plan'] / 1e6:9.0f} {predicted / 1e6:10.0f} {'-':>9} {'-':>6}  "
                      f"{got['parts']}  {got['failed']}", flush=True)
                continue
            print(f"{model:10} {got['plan'] / 1e6:9.0f} {predicted / 1e6:10.0f} {got['peak'] / 1e6:9.0f} "
                  f"{predicted / got['peak']:6.2f}  {got['parts']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
