"""The default recipe against the TF-IDF baseline on the same folds, data set by data set.

What ``attnkit cv --data FILE`` does with no tuning flags -- the default model
(``attnkit.train.tasks.classify.recipe.DEFAULT_MODEL``) with its default config, the recipe's
``TrainConfig`` (:func:`attnkit.train.tasks.classify.recipe.train_defaults`) and the default
``DataSettings`` -- run by :func:`cross_validate` on each
set, with the baseline (:func:`fold_baselines`, TF-IDF 1-2-grams + logistic
regression) scored on exactly the same test folds in the same run. Prints one
line per fold and a summary per set: the model, the baseline, the mean
difference with its 95% interval and the paired t-test, and the minutes the
model took.

    .venv/bin/python evals/default_recipe.py --sets mr sms agnews --folds 10
    .venv/bin/python evals/default_recipe.py --sets mr --max-folds 1     # a quick first look
    .venv/bin/python evals/default_recipe.py --sets mr sms --fold 2 --fold 3
    .venv/bin/python evals/default_recipe.py --sets imdb                  # 25k train / 25k test
    .venv/bin/python evals/default_recipe.py --sets --file subj=data/subj.tsv --file trec=data/trec.tsv

Sets (found through ``attnkit.data.locations.data_path``: ``--data-root``,
else ``$ATTNKIT_DATA``, else ``../shared/data`` next to the repository):
``mr`` (10,662 sentences, 2 classes), ``sms`` (5,574 messages, 13.4% spam),
``agnews`` (the 7,600-article file, 4 topics, title + description),
``imdb`` (25k/25k reviews;
no folds: the fixed split, the model holding out 10% of train for early stopping).
``--file NAME=PATH`` adds any other set, a ``label<TAB>text`` file, run with
the same 10-fold protocol: the sets none of the defaults were chosen on.
``--model`` and ``--model-opt KEY=VALUE`` / ``--train-opt KEY=VALUE`` try other
settings; the defaults are what the CLI runs.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from attnkit.data.locations import DataNotFoundError, data_path
from attnkit.data.readers import Example, read_examples
from attnkit.data.sources import split_examples
from attnkit.train.config import TrainConfig
from attnkit.train.runs.checkpoint import atomic_write_json
from attnkit.train.tasks.classify.baseline import baseline_scores, fold_baselines, paired_test
from attnkit.train.tasks.classify.pipeline import DataSettings, cross_validate, fit_classifier
from attnkit.train.tasks.classify.recipe import DEFAULT_MODEL, data_defaults, train_defaults

REPO = Path(__file__).resolve().parents[1]
SETS = ("mr", "sms", "agnews", "imdb")


def load_set(name: str, root: Path | None) -> list[Example]:
    """The labelled examples of set ``name`` (see the module docstring)."""
    if name not in ("mr", "sms", "agnews"):
        raise ValueError(f"unknown set {name!r}; valid: {list(SETS)}")
    base = data_path(name, root / name if root else None, base=REPO)
    if name == "mr":
        return read_examples(base, format="polarity", encoding="latin-1")
    if name == "sms":
        return read_examples(base / "SMSSpamCollection", format="label-tab-text")
    if name == "agnews":
        with open(base / "test.csv", encoding="utf-8", newline="") as f:
            return [Example(f"{title} {desc}".replace("\\", " "), label) for label, title, desc in csv.reader(f)]
    raise AssertionError(name)


def load_imdb(root: Path | None) -> tuple[list[Example], list[Example]]:
    """IMDB's fixed 25k train and 25k test halves."""
    base = data_path("imdb", root / "imdb" if root else None, base=REPO)
    halves = []
    for part in ("train", "test"):
        with gzip.open(base / f"{part}.tsv.gz", "rt", encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f, delimiter="\t")
            halves.append([Example(row["text"], row["label"]) for row in reader])
    return halves[0], halves[1]


def _parse(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        out[key] = json.loads(value)
    return out


def run_cv(name: str, examples: list[Example], args: argparse.Namespace, model: str, options: dict[str, Any],
           config: TrainConfig) -> dict[str, Any]:
    start = time.perf_counter()
    results = cross_validate(examples, folds=args.folds, model_name=model, model_options=options,
                             train_config=config,
                             data=DataSettings(**{**data_defaults(model), **_parse(args.data_opt)}),
                             max_folds=args.max_folds, log=lambda line: print(f"  {line}", flush=True),
                             epoch_log=args.epoch_log, only=args.fold)
    minutes = (time.perf_counter() - start) / 60
    base = fold_baselines(examples, folds=args.folds, seed=config.seed, max_folds=args.max_folds)
    base = [b for b in base if b["fold"] in {r["fold"] for r in results}]
    ours, theirs = [r["accuracy"] for r in results], [b["accuracy"] for b in base]
    test = paired_test(ours, theirs)
    return {"set": name, "protocol": f"fold(s) {', '.join(str(r['fold']) for r in results)} of {args.folds}",
            "model": statistics.mean(ours),
            "baseline": statistics.mean(theirs), "model_f1": statistics.mean(r["macro_f1"] for r in results),
            "baseline_f1": statistics.mean(b["macro_f1"] for b in base), "paired": test, "minutes": minutes,
            "folds": results, "baseline_folds": [{"fold": b["fold"], "accuracy": b["accuracy"]} for b in base]}


def run_imdb(args: argparse.Namespace, model: str, options: dict[str, Any], config: TrainConfig) -> dict[str, Any]:
    train, test = load_imdb(args.data_root)
    if args.imdb_train:
        train = split_examples(train, val=0.0, test=1 - args.imdb_train / len(train), seed=config.seed)[0]
    tr, va, _ = split_examples(train, val=0.1, test=0.0, seed=config.seed)
    start = time.perf_counter()
    result = fit_classifier(tr, va, test, model_name=model, model_options=options, train_config=config,
                            data=DataSettings(**{**data_defaults(model), **_parse(args.data_opt)}), quiet=True,
                            log=lambda line: print(f"  {line}", flush=True))
    minutes = (time.perf_counter() - start) / 60
    base = baseline_scores(train, test)
    assert result.test is not None
    if getattr(result.model, "has_ngram_half", False) and result.test_data is not None:
        own, ngrams = result.model.each_half(result.test_data.ids)  # type: ignore[operator]
        target = torch.as_tensor(list(result.test_data.labels))
        print(f"  each half alone on the test part: the network {(own.argmax(-1) == target).double().mean():.4f}, "
              f"the n-gram half {(ngrams.argmax(-1) == target).double().mean():.4f}", flush=True)
    return {"set": "imdb", "protocol": f"{len(train)} train / {len(test)} test", "model": result.test["accuracy"],
            "baseline": base["accuracy"], "model_f1": result.test["macro_f1"], "baseline_f1": base["macro_f1"],
            "paired": None, "minutes": minutes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", nargs="*", choices=SETS, default=["mr", "sms", "agnews"])
    parser.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                        help="another set: a label<TAB>text file, cross-validated like the others (repeatable)")
    parser.add_argument("--data-root", type=Path, default=None, help="folder holding mr/, sms/, agnews/, imdb/")
    parser.add_argument("--folds", type=int, default=10)
    parser.add_argument("--max-folds", type=int, default=None, help="run only the first N folds")
    parser.add_argument("--fold", type=int, action="append", default=None,
                        help="run only this fold, 1-based (repeatable); the baseline is scored on the same folds")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--model-opt", action="append", default=[], help="KEY=JSON model option (trials only)")
    parser.add_argument("--train-opt", action="append", default=[], help="KEY=JSON TrainConfig field (trials only)")
    parser.add_argument("--data-opt", action="append", default=[], help="KEY=JSON DataSettings field (trials only)")
    parser.add_argument("--imdb-train", type=int, default=None, help="train on this many IMDB reviews (trials)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    parser.add_argument("--epoch-log", action="store_true", help="print every epoch")
    parser.add_argument("--json", type=Path, default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    options = _parse(args.model_opt)
    config = TrainConfig.from_dict({"device": "auto", **train_defaults(args.model), **_parse(args.train_opt)})
    print(f"model {args.model} {options or '(defaults)'}, {config}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    files = {}
    for pair in args.file:
        name, sep, path = pair.partition("=")
        if not sep or not name or not Path(path).is_file():
            parser.error(f"--file wants NAME=PATH of an existing label<TAB>text file, got {pair!r}")
        files[name] = Path(path)
    rows = []
    for name in [*args.sets, *files]:
        try:
            if name == "imdb":
                row = run_imdb(args, args.model, options, config)
            else:
                examples = (read_examples(files[name], format="label-tab-text") if name in files
                            else load_set(name, args.data_root))
                print(f"{name}: {len(examples)} examples, labels {sorted({e.label for e in examples})}", flush=True)
                row = run_cv(name, examples, args, args.model, options, config)
        except DataNotFoundError as err:
            print(f"{name}: skipped ({err})", file=sys.stderr)
            continue
        rows.append(row)
        p = row["paired"]
        interval = (f", 95% interval [{p['ci_low'] * 100:+.2f}, {p['ci_high'] * 100:+.2f}], p = {p['p_value']:.3g}"
                    if p and p["p_value"] is not None else "")
        print(f"{name} ({row['protocol']}): model {row['model'] * 100:.2f}%  baseline {row['baseline'] * 100:.2f}%  "
              f"difference {(row['model'] - row['baseline']) * 100:+.2f} points{interval}; macro-F1 "
              f"{row['model_f1'] * 100:.2f} vs {row['baseline_f1'] * 100:.2f}; model {row['minutes']:.1f} min",
              flush=True)
    if args.json:
        atomic_write_json(args.json, {"model": args.model, "options": options, "train": config.to_dict(),
                                      "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
