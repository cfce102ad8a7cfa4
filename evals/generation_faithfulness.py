"""How faithful the explanations of generated tokens are: each method beside a random order and raw attention.

Usage::

    python evals/generation_faithfulness.py [--translation RUN --sources FILE [--val-sources FILE]]
        [--caption RUN] [--n 200] [--lm-data path/to/mr/rt-polarity.pos]

For a translation run and the first ``--n`` lines of ``--sources`` (Multi30k: ``test_2016_flickr.de.gz``),
and for a captioning run and ``--n`` generated shapes scenes, every output is explained
(:func:`attnkit.attribution.generation.explain_generation`) and the comprehensiveness and sufficiency of
each method, of the method shown first (a run's choice on its held-out outputs when it measured them at the
end of training, or, with ``--val-sources``, on 32 of those; else the most faithful on each output) and of
the random order are averaged over the outputs. Prints
those figures and two ratios: the shown-first method's comprehensiveness over the random order's
(target >= 2) and over raw attention's (target >= 1). Without runs, a word-for-word toy translation run
and a shapes captioner are trained first (about a minute on 2 cores); their figures say what the
methods do on models that learnt their task, not what they do on Multi30k or Flickr8k.

``--lm-data FILE`` (sentences, one per line, latin-1: the MR reviews) also trains a small GPT-2 (2 layers,
d 128, a word-level vocabulary of 4,000) on all but the last ``--n`` lines for ``--lm-minutes`` minutes,
saves it as a Hugging Face folder, and explains its greedy continuations (6 new tokens) of the first 8
words of each of the last ``--n`` lines (:func:`attnkit.attribution.generation.explain_causal_lm`).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attnkit

ROOT = Path(__file__).resolve().parents[1]


def _train(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "attnkit", "train", *args, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)


def toy_translation(folder: Path) -> tuple[Path, list[str]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from serve import (
        toy_pairs,  # type: ignore[import-not-found]
        train_translation,  # type: ignore[import-not-found]
    )

    return train_translation(folder), toy_pairs(1000, 7)[0]


def train_lm(folder: Path, sentences: list[str], minutes: float) -> tuple[Any, Any]:
    """A small GPT-2 fitted to ``sentences`` for ``minutes``, saved to ``folder`` and loaded back eagerly."""
    import time

    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(sentences, trainers.WordLevelTrainer(
        vocab_size=4000, special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", pad_token="[PAD]",
                                                     eos_token="[EOS]")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=128, n_embd=128, n_layer=2, n_head=4, eos_token_id=2,
        bos_token_id=2, pad_token_id=0))
    optimizer = torch.optim.AdamW(model.parameters(), 2e-3)
    ids = [tokenizer(s)["input_ids"][:63] + [2] for s in sentences]
    start, step = time.monotonic(), 0
    while time.monotonic() - start < 60 * minutes:
        batch = [ids[(step * 32 + i) % len(ids)] for i in range(32)]
        width = max(map(len, batch))
        x = torch.tensor([b + [0] * (width - len(b)) for b in batch])
        labels = x.masked_fill(x == 0, -100)
        loss = model(input_ids=x, attention_mask=(x != 0).long(), labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    print(f"language model: {step} steps of 32 sentences, last loss {loss.item():.2f}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager"), tokenizer


def shown(explanation: dict[str, Any]) -> dict[str, Any]:
    """An explanation's faithfulness record, with ``shown``: the method it shows first (a run's choice on its
    held-out outputs when the run measured them, else the most faithful on this output)."""
    return {**explanation["faithfulness"], "shown": explanation["method"]}


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    mean = {m: {k: statistics.fmean(r["methods"][m][k] for r in records) for k in ("comprehensiveness",
                                                                                   "sufficiency")}
            for m in records[0]["methods"]}  # every method of the model (a Hugging Face one: HF_METHODS)
    mean["random"] = {k: statistics.fmean(r["random"][k] for r in records) for k in ("comprehensiveness",
                                                                                       "sufficiency")}
    mean["shown first"] = {k: statistics.fmean(r["methods"][r["shown"]][k] for r in records)
                           for k in ("comprehensiveness", "sufficiency")}
    return mean


def report(title: str, records: list[dict[str, Any]]) -> None:
    mean = summary(records)
    print(f"{title}: {len(records)} outputs (log-probability of each generated token; AOPC over 1-50%)")
    for name, f in mean.items():
        print(f"  {name:>22}: comprehensiveness {f['comprehensiveness']:7.3f}   sufficiency {f['sufficiency']:7.3f}")
    shown, chance, raw = mean["shown first"], mean["random"], mean["cross_attention"]
    print(f"  shown first / random comprehensiveness: {shown['comprehensiveness'] / chance['comprehensiveness']:.2f}x "
          f"(target >= 2); / raw attention's: {shown['comprehensiveness'] / raw['comprehensiveness']:.2f}x "
          "(target >= 1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--translation", type=Path)
    parser.add_argument("--sources", type=Path, help="source sentences, one per line (plain or .gz)")
    parser.add_argument("--caption", type=Path)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--val-sources", type=Path,
                        help="validation sources of --translation: a run that did not measure its methods at the "
                             "end of training chooses the method shown first on the first 32 of them")
    parser.add_argument("--lm-data", type=Path, help="sentences to train a small GPT-2 on (e.g. MR's)")
    parser.add_argument("--lm-minutes", type=float, default=3.0)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if opts.translation:
            from attnkit.data.parallel import read_lines

            run, sources = opts.translation, [s for s in read_lines(str(opts.sources)) if s.strip()]
        else:
            run, sources = toy_translation(Path(tmp))
        translator = attnkit.load_run(run)
        metrics = translator.meta.setdefault("metrics", {})
        if opts.val_sources and not metrics.get("explain"):  # a run trained before it measured its methods
            from attnkit.data.parallel import read_lines
            from attnkit.train.config import EXPLAIN_OUTPUTS

            metrics["explain"] = translator.measure_methods(read_lines(str(opts.val_sources))[: EXPLAIN_OUTPUTS[0]])
        if metrics.get("explain"):
            print(f"the run's method shown first: {metrics['explain']['method']} (the most faithful on "
                  f"{metrics['explain']['outputs']} validation sentences)")
        records = []
        for text in sources[: opts.n]:
            try:
                records.append(shown(translator.explain(text)))
            except ValueError:  # an empty translation: nothing to explain
                continue
        report(f"translation {run if opts.translation else '(toy word-for-word run)'}", records)
        caption = opts.caption
        if caption is None:
            caption = Path(tmp) / "shapes"
            _train(["--task", "caption", "--out", str(caption), "--train-size", "600", "--val-size", "20",
                    "--epochs", "8", "--image-size", "32", "--batch-size", "32"])
        from attnkit.data.captions import images_to_tensor
        from attnkit.data.shapes import generate_scenes

        captioner = attnkit.load_run(caption)
        size = captioner.model.config.image_size
        images = images_to_tensor([s.image for s in generate_scenes(opts.n, seed=99, size=size)])
        records = [shown(captioner.explain(image)) for image in images]
        report(f"captioning {caption if opts.caption else '(shapes captioner)'} on generated scenes", records)
        if opts.lm_data:
            from attnkit.attribution.generation import explain_causal_lm

            lines = [s.strip() for s in opts.lm_data.read_text(encoding="latin-1").splitlines() if s.strip()]
            model, tokenizer = train_lm(Path(tmp) / "lm", lines[: -opts.n], opts.lm_minutes)
            records = []
            for line in lines[-opts.n :]:
                try:
                    records.append(shown(explain_causal_lm(model, tokenizer, " ".join(line.split()[:8]),
                                                           max_new_tokens=6)))
                except ValueError:  # nothing generated
                    continue
            report(f"GPT-2 (2 layers) trained on {opts.lm_data.name}, continuing 8-word prompts", records)


if __name__ == "__main__":
    main()
