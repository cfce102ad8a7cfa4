"""``attnkit caption``: a captioning run describes an image, optionally saving the per-word attention figure
(its training command is generated from the task's settings, :mod:`attnkit.cli.train`)."""

from __future__ import annotations

from pathlib import Path

import click

from attnkit.cli.messages import friendly_errors
from attnkit.cli.options import allow_unfinished_option, settings_options
from attnkit.train.tasks.caption.caption_settings import CaptionDecoding

__all__ = ["caption"]


@click.command("caption")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False))
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@settings_options(CaptionDecoding)
@click.option("--ensemble", "others", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Another run of the same data and encoder to decode with (repeatable): the mean of the "
                   "runs' next-word probabilities and of their attention.")
@click.option("--consensus", type=click.IntRange(min=0), default=0, show_default=True,
              help="Re-rank the beam's captions by agreement with the captions of this many nearest training "
                   "images (0: off; needs --beam-size 2 or more and a run trained with --data on a frozen encoder).")
@click.option("--consensus-weight", type=click.FloatRange(min=0), default=0.005, show_default=True,
              help="Weight of a caption's log-probability beside its consensus when re-ranking.")
@click.option("--attention", "attention_path", type=click.Path(dir_okay=False),
              help="Save a figure of the attention for each word to this file (.png, .svg, .pdf).")
@click.option("--explain", is_flag=True,
              help="Explain each word by the image regions (row, column), with the method most faithful on this "
                   "caption and its figures beside a random order's (not with --ensemble or --consensus).")
@allow_unfinished_option
@friendly_errors
def caption(checkpoint: str, image: str, beam_size: int, length_penalty: float, length_bonus: float, min_len: int,
            block_repeats: bool, others: tuple[str, ...], consensus: int, consensus_weight: float,
            attention_path: str | None, explain: bool, allow_unfinished: bool) -> None:
    """Describe IMAGE with the captioner saved in CHECKPOINT.

    \b
    Example:
      attnkit caption runs/shapes picture.png --beam-size 3 --attention attention.png
      attnkit caption runs/f8k photo.jpg --beam-size 3 --ensemble runs/f8k-s1 --ensemble runs/f8k-s2
      attnkit caption runs/f8k photo.jpg --beam-size 10 --length-bonus 0.75 --block-repeats --consensus 40
    """
    from attnkit.data.captions import images_to_tensor, load_image
    from attnkit.models.captioning.consensus import Consensus
    from attnkit.train.tasks.caption.captioning import generate, load_caption_ensemble, load_caption_neighbours

    if consensus and beam_size < 2:
        raise click.BadParameter("consensus re-ranking chooses among the beam's captions: give --beam-size 2 or more",
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
    (result,) = generate(model, images_to_tensor(pixels[None]), beam_size=beam_size, length_penalty=length_penalty,
                         length_bonus=length_bonus, min_len=min_len, block_repeats=block_repeats,
                         consensus=rerank)
    words = vocab.decode(result.ids)
    click.echo(" ".join(words) if words else "(empty caption)")
    if explain:
        if others or consensus or length_penalty or length_bonus or min_len or block_repeats:
            raise click.UsageError("--explain explains one run's plain beam search: leave out --ensemble, "
                                   "--consensus and the beam's constraints")
        from attnkit.attribution.generation import explanation_lines
        from attnkit.train.tasks.caption.captioning import CaptionRun

        run = CaptionRun(Path(checkpoint), model, vocab, metas[0])
        for line in explanation_lines(run.explain(images_to_tensor(pixels[None]), beam_size=beam_size)):
            click.echo(line)
    if attention_path:
        if not words:
            raise click.ClickException("the caption is empty: there is no attention to draw")
        from attnkit.viz.explain import plot_caption_attention

        maps = model.attention_maps(result.weights).numpy()  # (T, h, w)
        plot_caption_attention(pixels, maps, words, path=attention_path,
                               title=f"“{' '.join(words)}”: attention for each word")
        click.echo(f"attention figure saved to {attention_path}")
