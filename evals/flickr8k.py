"""Flickr8k test-split figures of a trained captioner, beside Show, Attend and Tell (Xu et al., 2015, Table 1).

Train first (the features of the frozen EfficientNet-Lite0 are cached under
``DATA/features/`` on the first run and reused afterwards)::

    attnkit train --task caption --data data/flickr8k --backbone efficientnet-lite0 \\
        --region-dim 384 --hidden-dim 384 --embed-dim 256 --attention-dim 256 --dropout 0.3 \\
        --min-frequency 5 --max-len 22 --batch-size 32 --lr 1e-3 --captions-per-image 1 --epochs 14 \\
        --patience 4 --time-budget 17 --out runs/flickr8k

then measure::

    python evals/flickr8k.py --run runs/flickr8k --data data/flickr8k --figures runs/flickr8k-figures

``--run`` given several times decodes with the ensemble of those runs (the
same recipe trained with other ``--seed``s): the mean of their next-word
probabilities at each step. ``--consensus K`` adds a row where the beam's
``--beam-size`` best captions are re-ranked by consensus with the human captions of
the K nearest training images (:mod:`attnkit.models.captioning.consensus`).

It decodes the 1,000 test images (``--split dev``: the dev images, to choose
the decoding settings on) greedily and with beam search (``--beam-size``, GNMT
``--length-penalty``, ``--length-bonus`` per word, ``--min-len``,
``--block-repeats``), scores corpus BLEU-1..4 (sacreBLEU, 13a) against
all 5 references of each image, and prints them beside the paper's rows with
the training time (feature caching + decoder epochs, from the cache manifest
and the run's history). METEOR is not reported: no PyPI package computes it
fully offline (nltk's needs WordNet data downloaded at run time).

``--figures DIR`` also writes per-word attention overlays for test images
whose caption names a person, a dog or a ball, and ``DIR/report.html``: the
table and those overlays in one self-contained page.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import time
from pathlib import Path
from typing import Any

import torch

from attnkit.data.flickr8k import load_flickr8k, read_rgb_image
from attnkit.models.captioning.consensus import Consensus, NeighbourIndex
from attnkit.train.metrics import bleu_scores
from attnkit.train.runs.checkpoint import RunFileError
from attnkit.train.runs.rundir import committed_dir
from attnkit.train.tasks.caption.caption_data import default_cache_dir, neighbour_index, split_inputs
from attnkit.train.tasks.caption.caption_settings import CaptionSettings
from attnkit.train.tasks.caption.captioning import (
    generate,
    load_caption_ensemble,
    load_caption_neighbours,
)

PAPER = [  # Xu et al. (2015), Table 1, Flickr8k
    ("Show and Tell (Vinyals et al., 2015)", [63.0, 41.0, 27.0, None]),
    ("Show, Attend and Tell: soft attention", [67.0, 44.8, 29.9, 19.5]),
    ("Show, Attend and Tell: hard attention", [67.0, 45.7, 31.4, 21.3]),
]
SUBJECTS = {"person": {"man", "woman", "person", "boy", "girl", "child", "people", "men", "women"},
            "dog": {"dog", "dogs"}, "ball": {"ball"}}


def _cell(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def table_rows(results: dict[str, dict[str, float]], minutes: float) -> list[list[str]]:
    rows = [[name, *map(_cell, scores), "—"] for name, scores in PAPER]
    for name, scores in results.items():
        rows.append([name, *(_cell(scores[f"bleu{n}"]) for n in range(1, 5)), f"{minutes:.0f} min"])
    return rows


def unigram_precision_and_bp(hyps: list[str], refs: list[list[str]]) -> dict[str, float]:
    """BLEU-1 = unigram precision × brevity penalty (sacreBLEU, closest reference length)."""
    from sacrebleu.metrics import BLEU

    streams = [list(r) for r in zip(*refs, strict=True)]  # every Flickr8k image has 5 references
    score = BLEU(max_ngram_order=1).corpus_score(hyps, streams)
    return {"unigram_precision": float(score.precisions[0]), "brevity_penalty": float(score.bp)}


def training_minutes(run: Path, cache_dir: Path) -> tuple[float, float]:
    """Minutes spent encoding the cached features and training the decoder."""
    history = [json.loads(line) for line in (committed_dir(run) / "history.jsonl").read_text().splitlines()]
    manifest = json.loads((cache_dir / "manifest.json").read_text()) if (cache_dir / "manifest.json").is_file() else {}
    return float(manifest.get("encode_seconds", 0.0)) / 60, sum(h["seconds"] for h in history) / 60


def overlays(model: Any, vocab: Any, data: Any, found: list[Any], out: Path, per_subject: int) -> list[dict[str, str]]:
    """Per-word attention figures of the first test images whose caption names each subject."""
    from attnkit.viz.explain import plot_caption_attention

    out.mkdir(parents=True, exist_ok=True)
    shown: list[dict[str, str]] = []
    names = data.names("test")
    for subject, words in SUBJECTS.items():
        hits = [i for i, g in enumerate(found) if words & set(vocab.decode(g.ids))][:per_subject]
        for i in hits:
            caption = vocab.decode(found[i].ids)
            pixels = read_rgb_image(data.images_dir / names[i], model.config.image_size)
            path = out / f"{subject}-{Path(names[i]).stem}.png"
            plot_caption_attention(pixels, model.attention_maps(found[i].weights).numpy(), caption, path=path,
                                   title=f"“{' '.join(caption)}”: attention for each word")
            shown.append({"subject": subject, "image": names[i], "caption": " ".join(caption), "file": str(path)})
    return shown


def write_html(path: Path, columns: list[str], rows: list[list[str]], shown: list[dict[str, str]],
               notes: list[str]) -> None:
    from attnkit.viz.report import summary_html

    page = [summary_html([{"title": "Flickr8k test split (1,000 images, 5 references each)", "text": notes,
                           "columns": columns, "rows": rows}])]
    for item in shown:
        data = base64.b64encode(Path(item["file"]).read_bytes()).decode("ascii")
        page.append(f"<h3>{html.escape(item['subject'])}: {html.escape(item['image'])} — "
                    f"“{html.escape(item['caption'])}”</h3>"
                    f"<img alt=\"attention\" src=\"data:image/png;base64,{data}\">")
    path.write_text("<!doctype html><meta charset=\"utf-8\"><title>attnkit on Flickr8k</title>\n"
                    + "\n".join(page) + "\n", encoding="utf-8")


def neighbours(run: str, model: Any, vocab: Any, data: Any, cache_dir: Path) -> NeighbourIndex:
    """The run's neighbour index; for a run saved before runs kept one, built from the cached training features."""
    try:
        return load_caption_neighbours(run)
    except RunFileError:
        inputs, _ = split_inputs(model, data, "train", cache_dir=cache_dir)
        return neighbour_index(inputs, data, vocab)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, action="append",
                        help="a finished captioning run trained with --data; repeat it to decode with an "
                             "ensemble of runs (the mean of their next-word probabilities)")
    parser.add_argument("--data", required=True, help="the Flickr8k folder")
    parser.add_argument("--beam-size", type=int, default=3)
    parser.add_argument("--length-penalty", type=float, default=0.0, help="GNMT alpha of the beam search")
    parser.add_argument("--length-bonus", type=float, default=0.0, help="beam score added per generated word")
    parser.add_argument("--min-len", type=int, default=0, help="no <eos> before this many words (beam)")
    parser.add_argument("--block-repeats", action="store_true", help="never a word right after itself (beam)")
    parser.add_argument("--consensus", type=int, default=0,
                        help="also re-rank the beam's captions by consensus with the captions of this many "
                             "nearest training images (0: off)")
    parser.add_argument("--consensus-weight", type=float, default=0.005,
                        help="weight of the log-probability beside the consensus")
    parser.add_argument("--split", choices=("test", "dev"), default="test",
                        help="choose decoding settings on dev, then measure test once")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--figures", help="write attention overlays and report.html to this folder")
    parser.add_argument("--per-subject", type=int, default=2, help="overlays per subject (person, dog, ball)")
    parser.add_argument("--json", help="write the figures to this JSON file")
    args = parser.parse_args()
    if args.figures and args.split != "test":
        parser.error("--figures draws test images: use it with --split test")
    torch.set_num_threads(args.threads)
    model, vocab, metas = load_caption_ensemble(args.run)
    meta = metas[0]
    data = load_flickr8k(args.data)
    recorded = CaptionSettings.from_saved(meta["options"]).data.feature_cache
    cache_dir = Path(recorded or default_cache_dir(args.data, model.config.backbone, model.config.image_size))
    inputs, features = split_inputs(model, data, args.split, cache_dir=cache_dir)
    inputs = inputs if features else inputs.float() / 255.0
    refs = data.references(args.split)
    search = {"length_penalty": args.length_penalty, "length_bonus": args.length_bonus,
              "min_len": args.min_len, "block_repeats": args.block_repeats}
    results: dict[str, dict[str, float]] = {}
    decoded: dict[str, list[Any]] = {}
    decodings: list[tuple[str, int, Consensus | None]] = [("attnkit greedy", 1, None),
                                                         (f"attnkit beam {args.beam_size}", args.beam_size, None)]
    if args.consensus:
        rerank = Consensus(neighbours(args.run[0], model, vocab, data, cache_dir), args.consensus,
                           args.consensus_weight)
        decodings.append((f"attnkit beam {args.beam_size}, consensus of {args.consensus} neighbours", args.beam_size,
                          rerank))
    for name, beam, consensus in decodings:
        start = time.perf_counter()
        decoded[name] = generate(model, inputs, beam_size=beam, features=features, consensus=consensus,
                                 **(search if beam > 1 else {}))
        hyps = [" ".join(vocab.decode(g.ids)) for g in decoded[name]]
        results[name] = {**bleu_scores(hyps, refs), **unigram_precision_and_bp(hyps, refs),
                         "seconds": time.perf_counter() - start,
                         "mean_words": sum(len(h.split()) for h in hyps) / len(hyps)}
    encode_min, train_min = 0.0, 0.0
    for run in args.run:  # the features are encoded once for every run
        encode_min, minutes = training_minutes(Path(run), cache_dir)
        train_min += minutes
    columns = ["model", "BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "training"]
    rows = table_rows(results, encode_min + train_min)
    cfg = model.config
    members = f"an ensemble of {len(args.run)} runs ({', '.join(args.run)}), each: " if len(args.run) > 1 else ""
    epochs = "+".join(str(m["progress"]["epoch"]) for m in metas)
    notes = [f"{members}encoder {cfg.backbone} (frozen, ImageNet weights), regions {model.grid[0]}x{model.grid[1]}x"
             f"{model.feature_dim}; decoder hidden {cfg.hidden_dim}, embed {cfg.embed_dim}, region_dim "
             f"{cfg.region_dim}, attend_with {cfg.attend_with}, gate {cfg.gate}, λ {cfg.attention_reg}; "
             f"vocabulary {len(vocab)} words",
             f"training: {encode_min:.1f} min feature caching + {train_min:.1f} min decoder epochs "
             f"({epochs} epochs); {args.split} split; beam {args.beam_size}, length penalty "
             f"{args.length_penalty}, length bonus {args.length_bonus}, min length {args.min_len}, block repeats "
             f"{args.block_repeats}; consensus re-ranking: "
             + (f"the beam's {args.beam_size} best by agreement with the captions of the {args.consensus} nearest "
                f"training images, log-probability weight {args.consensus_weight}" if args.consensus else "off")
             + "; METEOR not measured (no offline PyPI scorer)"]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    for note in notes:
        print(note)
    for name, r in results.items():
        print(f"{name}: {r['seconds']:.0f} s to decode {len(refs)} images, {r['mean_words']:.1f} words a caption; "
              f"BLEU-1 = unigram precision {r['unigram_precision']:.1f} × brevity penalty {r['brevity_penalty']:.3f}")
    last = list(decoded)[-1]
    for g_greedy, g_last, name, rs in list(zip(decoded["attnkit greedy"], decoded[last],
                                               data.names(args.split), refs, strict=True))[:5]:
        print(f"  {name}: greedy “{' '.join(vocab.decode(g_greedy.ids))}” | {last.removeprefix('attnkit ')} "
              f"“{' '.join(vocab.decode(g_last.ids))}” | ref “{rs[0]}”")
    shown: list[dict[str, str]] = []
    if args.figures:
        shown = overlays(model, vocab, data, decoded[list(decoded)[-1]], Path(args.figures),
                         args.per_subject)
        write_html(Path(args.figures) / "report.html", columns, rows, shown, notes)
        print(f"wrote {len(shown)} overlays and {Path(args.figures) / 'report.html'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "encode_minutes": encode_min,
                                               "train_minutes": train_min, "overlays": shown}, indent=1))


if __name__ == "__main__":
    main()
