"""Training for the measure: the default recipe with ``--metric macro_f1`` against the class-weighted baseline.

On each set, one seeded stratified split per seed (``--seed``, or several
with ``--seeds``: each seed its own down-sampling, split and training, and a
summary per set of each row's mean and spread and of the per-seed
differences) (train / validation / test, the shares of ``attnkit train``:
10% validation, here 20% test so that rare classes have some test support),
the same split for every row, in one run:

* ``accuracy``: the default recipe as ``attnkit train`` runs it today
  (``--metric accuracy``, no class weights, no offsets: the training path is
  the same code as before the measure could be chosen, so the two are one row);
* ``macro_f1``: the default recipe with ``--metric macro_f1`` (best epoch by
  validation macro-F1, halves weighed with balanced cross-entropy, class
  offsets tuned on the validation part);
* ``macro_f1+balanced`` (``--balanced``): the same with ``--class-weight balanced``
  (which tunes no offsets unless asked);
* the baseline (TF-IDF 1-2-grams + logistic regression) unweighted and with
  ``class_weight="balanced"``, fit on train + validation.

Under each recipe row it prints the decision fitted on the validation part
(the halves' weights, the offsets) and the test macro-F1 of each half alone,
of their sum and of the sum with the offsets (what the run predicts).

Sets: ``mr``, ``sms`` (13.4% spam: imbalanced as it is), ``agnews`` (the
7,600-article file) and imbalanced variants built from them with a fixed seed:
``agnews-imb`` (three of the four topics down-sampled to 10%, the first kept
whole) and ``mr-imb`` (the positive sentences down-sampled to 10%).

    .venv/bin/python evals/metric_recipe.py --sets sms agnews-imb mr-imb mr agnews --balanced
    .venv/bin/python evals/metric_recipe.py --sets agnews-imb sms mr-imb --rows macro_f1 macro_f1+balanced
    .venv/bin/python evals/metric_recipe.py --sets agnews-imb sms mr-imb --seeds 0 1 2 --threads 1 \
        --rows accuracy macro_f1 macro_f1+balanced   # mean and spread over three splits
    /usr/bin/time -v .venv/bin/python evals/metric_recipe.py --sets sms   # with the peak memory
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_recipe import load_set  # noqa: E402

from attnkit.data.readers import Example  # noqa: E402
from attnkit.data.sources import split_examples  # noqa: E402
from attnkit.train.config import TrainConfig  # noqa: E402
from attnkit.train.memory_budget import peak_rss_mib  # noqa: E402
from attnkit.train.runs.checkpoint import atomic_write_json  # noqa: E402
from attnkit.train.tasks.classify.baseline import baseline_scores  # noqa: E402
from attnkit.train.tasks.classify.pipeline import DataSettings, fit_classifier  # noqa: E402
from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, data_defaults, train_defaults  # noqa: E402

SETS = ("mr", "sms", "agnews", "agnews-imb", "mr-imb")
KEEP = 0.10  # the share of each down-sampled class
ROWS: dict[str, dict[str, Any]] = {  # each row names its class weighting, whatever the recipe's default
    "accuracy": {"metric": "accuracy", "class_weight": "none"},
    "macro_f1": {"metric": "macro_f1", "class_weight": "none"},
    "macro_f1+balanced": {"metric": "macro_f1", "class_weight": "balanced"},
}


def down_sample(examples: list[Example], keep_whole: set[str], seed: int) -> list[Example]:
    """``examples`` with every class outside ``keep_whole`` down-sampled to :data:`KEEP` (seeded)."""
    rng = random.Random(seed)
    return [e for e in examples if e.label in keep_whole or rng.random() < KEEP]


def load(name: str, root: Path | None, seed: int) -> list[Example]:
    if name == "agnews-imb":
        examples = load_set("agnews", root)
        return down_sample(examples, {sorted({e.label for e in examples})[0]}, seed)
    if name == "mr-imb":
        examples = load_set("mr", root)
        return down_sample(examples, {sorted({e.label for e in examples})[0]}, seed)
    return load_set(name, root)


def test_parts(result: Any) -> dict[str, float]:
    """Test macro-F1 (points) of what the decision combines: each half alone, their weighed sum without the
    tuned class offsets, and with them (what the model predicts)."""
    from attnkit.train.metrics import macro_f1

    model, data = result.model, result.test_data
    if not getattr(model, "has_ngram_half", False) or data is None or not len(data):
        return {}
    own, wide = model.each_half(data.ids)  # own: the network's logits, times a, plus the offsets
    offsets = torch.tensor(result.extra.get("decision", {}).get("offsets", [0.0] * own.shape[1]))
    b = float(model.wide_scale)
    y = list(data.labels)

    def score(z: torch.Tensor) -> float:
        return round(100 * macro_f1(y, z.argmax(1).tolist(), z.shape[1]), 2)

    return {"network": score(own - offsets), "ngrams": score(wide), "sum": score(own - offsets + b * wide),
            "sum+offsets": score(own + b * wide)}


def run_set(name: str, examples: list[Example], args: argparse.Namespace, seed: int) -> dict[str, Any]:
    tr, va, te = split_examples(examples, val=0.1, test=0.2, seed=seed)
    counts = {lb: sum(e.label == lb for e in examples) for lb in sorted({e.label for e in examples})}
    print(f"{name}, seed {seed}: {len(tr)} train, {len(va)} validation, {len(te)} test; classes {counts}",
          flush=True)
    row: dict[str, Any] = {"set": name, "seed": seed, "n": len(examples), "classes": counts, "test": len(te)}
    variants = [(label, ROWS[label]) for label in args.rows]
    if args.balanced and "macro_f1+balanced" not in args.rows:
        variants.append(("macro_f1+balanced", ROWS["macro_f1+balanced"]))
    for label, fields in variants:
        config = TrainConfig.from_dict({"device": "cpu", **train_defaults(DEFAULT_MODEL), "seed": seed,
                                        **({"epochs": args.epochs} if args.epochs else {}), **fields})
        start = time.perf_counter()
        result = fit_classifier(tr, va, te, model_name=DEFAULT_MODEL, train_config=config,
                                data=DataSettings(**data_defaults(DEFAULT_MODEL)), quiet=True)
        assert result.test is not None
        row[label] = {"accuracy": result.test["accuracy"], "macro_f1": result.test["macro_f1"],
                      "minutes": (time.perf_counter() - start) / 60, "epochs": len(result.history),
                      "per_class_recall": [round(r["recall"], 4) for r in result.test["per_class"]]}
        row[label]["decision"] = result.extra.get("decision", {})
        row[label]["test_parts"] = test_parts(result)
        print(f"  {label:<18} accuracy {result.test['accuracy'] * 100:6.2f}  macro-F1 "
              f"{result.test['macro_f1'] * 100:6.2f}  recall per class {row[label]['per_class_recall']}  "
              f"({row[label]['minutes']:.1f} min, {len(result.history)} epochs)", flush=True)
        print(f"    {'':<18} decision {row[label]['decision']}; test macro-F1 of its parts "
              f"{row[label]['test_parts']}", flush=True)
    for label, weighting in (("baseline", "none"), ("baseline balanced", "balanced")):
        base = baseline_scores([*tr, *va], te, class_weight=weighting)
        row[label] = {"accuracy": base["accuracy"], "macro_f1": base["macro_f1"],
                      "per_class_recall": [round(r["recall"], 4) for r in base["per_class"]]}
        print(f"  {label:<18} accuracy {base['accuracy'] * 100:6.2f}  macro-F1 {base['macro_f1'] * 100:6.2f}  "
              f"recall per class {row[label]['per_class_recall']}", flush=True)
    for label, _ in variants:
        if label != "accuracy":
            gap = row[label]["macro_f1"] - row["baseline balanced"]["macro_f1"]
            print(f"  macro-F1 of {label} minus the balanced baseline's: {gap * 100:+.2f} points", flush=True)
    print(f"  peak memory so far {peak_rss_mib():.0f} MiB", flush=True)
    return row


def summarize(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and spread over the seeds of each row of one set, and each seed's macro-F1 difference against the
    balanced baseline of the same split (points); with both recipe rows, ``macro_f1`` minus ``accuracy``."""
    labels = [k for k in rows[0] if isinstance(rows[0][k], dict) and "macro_f1" in rows[0][k]]
    out: dict[str, Any] = {"set": name, "seeds": [r["seed"] for r in rows]}
    print(f"{name}: {len(rows)} seeds {out['seeds']} (mean, standard deviation over the seeds, min..max)", flush=True)
    for label in labels:
        summary: dict[str, Any] = {}
        for measure in ("accuracy", "macro_f1"):
            values = [100 * r[label][measure] for r in rows]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            summary[measure] = {"mean": statistics.fmean(values), "sd": spread, "min": min(values),
                                "max": max(values), "per_seed": values}
        line = (f"  {label:<18} accuracy {summary['accuracy']['mean']:6.2f} ± {summary['accuracy']['sd']:.2f}  "
                f"macro-F1 {summary['macro_f1']['mean']:6.2f} ± {summary['macro_f1']['sd']:.2f} "
                f"({summary['macro_f1']['min']:.2f}..{summary['macro_f1']['max']:.2f})")
        if not label.startswith("baseline"):
            gaps = [100 * (r[label]["macro_f1"] - r["baseline balanced"]["macro_f1"]) for r in rows]
            summary["minus_balanced_baseline"] = gaps
            line += f"; minus the balanced baseline {statistics.fmean(gaps):+.2f} (" + \
                ", ".join(f"{g:+.2f}" for g in gaps) + ")"
        out[label] = summary
        print(line, flush=True)
    if "accuracy" in labels and "macro_f1" in labels:
        gaps = [100 * (r["macro_f1"]["macro_f1"] - r["accuracy"]["macro_f1"]) for r in rows]
        out["macro_f1_minus_accuracy_row"] = gaps
        print(f"  macro-F1 of --metric macro_f1 minus --metric accuracy's: {statistics.fmean(gaps):+.2f} ("
              + ", ".join(f"{g:+.2f}" for g in gaps) + ")", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", choices=SETS, default=list(SETS))
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding mr/, sms/, agnews/")
    parser.add_argument("--seed", type=int, default=0, help="the split's and the training's seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="several seeds (each its own down-sampling, split and training); a summary per set "
                             "gives each row's mean and spread and the per-seed differences (overrides --seed)")
    parser.add_argument("--epochs", type=int, default=None, help="at most this many epochs (default: the recipe's)")
    parser.add_argument("--rows", nargs="*", choices=list(ROWS), default=["accuracy", "macro_f1"],
                        help="the recipe's rows to train (default: accuracy macro_f1)")
    parser.add_argument("--balanced", action="store_true", help="also run --metric macro_f1 --class-weight balanced")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = args.seeds or [args.seed]
    rows = [run_set(name, load(name, args.data_root, seed), args, seed) for name in args.sets for seed in seeds]
    summaries = [summarize(name, [r for r in rows if r["set"] == name]) for name in args.sets] if len(seeds) > 1 else []
    print(f"peak resident memory {peak_rss_mib():.0f} MiB", flush=True)
    if args.json:
        atomic_write_json(args.json, {"seeds": seeds, "rows": rows, "summary": summaries,
                                      "peak_memory_mib": round(peak_rss_mib(), 1)})
    else:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
