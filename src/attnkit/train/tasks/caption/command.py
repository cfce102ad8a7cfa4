"""``attnkit caption``: a captioning run describes an image, optionally saving the per-word attention figure;
generated from :class:`CaptionCommand` (:func:`attnkit.cli.train.served_command`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from attnkit._checks import setting
from attnkit.train.registry import Say, allow_unfinished
from attnkit.train.tasks.caption.caption_settings import CaptionDecoding

__all__ = ["CaptionCommand", "caption_command"]


@dataclass(frozen=True)
class CaptionCommand:
    """Describe IMAGE with the captioner saved in CHECKPOINT.

    \b
    Example:
      attnkit caption runs/shapes picture.png --beam-size 3 --attention attention.png
      attnkit caption runs/f8k photo.jpg --beam-size 3 --ensemble runs/f8k-s1 --ensemble runs/f8k-s2
      attnkit caption runs/f8k photo.jpg --beam-size 10 --length-bonus 0.75 --block-repeats --consensus 40
    """

    checkpoint: str = setting("", "The captioning run.", argument=True, required=True, path="dir")
    image: str = setting("", "The image to describe.", argument=True, required=True, path="file")
    decoding: CaptionDecoding = dataclasses.field(default_factory=CaptionDecoding)
    others: tuple[str, ...] = setting((), "Another run of the same data and encoder to decode with (repeatable): the "
                                      "mean of the runs' next-word probabilities and of their attention.",
                                      flag="--ensemble", multiple=True, path="dir")
    consensus: int = setting(0, "Re-rank the beam's captions by agreement with the captions of this many nearest "
                                "training images (0: off; needs --beam-size 2 or more and a run trained on a frozen "
                                "encoder by attnkit train --task caption --data).", low=0)
    consensus_weight: float = setting(0.005, "Weight of a caption's log-probability beside its consensus when "
                                             "re-ranking.", low=0)
    attention: str | None = setting(None, "Save a figure of the attention for each word to this file (.png, .svg, "
                                          ".pdf).", path="new-file")
    explain: bool = setting(False, "Explain each word by the image regions (row, column), with the method most "
                                   "faithful on this caption and its figures beside a random order's (not with "
                                   "--ensemble or --consensus).")
    allow_unfinished: bool = allow_unfinished()


def caption_command(settings: CaptionCommand, say: Say) -> Iterator[str]:
    """The caption of the image (``(empty caption)`` when none), its explanation's lines with ``explain``, and
    the line saying where the attention figure went."""
    from attnkit.data.captions import images_to_tensor, load_image
    from attnkit.models.captioning.consensus import Consensus
    from attnkit.train.runs.resume import PlanError
    from attnkit.train.tasks.caption.captioning import generate, load_caption_ensemble, load_caption_neighbours

    s, decoding = settings, settings.decoding
    if s.consensus and decoding.beam_size < 2:
        raise PlanError("`consensus` re-ranking chooses among the beam's captions: give `beam_size` 2 or more")
    model, vocab, metas = load_caption_ensemble([s.checkpoint, *s.others], allow_unfinished=s.allow_unfinished)
    for meta in metas:
        if meta.get("notice"):
            say.warn(meta["notice"])
    rerank = Consensus(load_caption_neighbours(s.checkpoint), s.consensus, s.consensus_weight) if s.consensus else None
    pixels = load_image(s.image, model.config.image_size)
    (result,) = generate(model, images_to_tensor(pixels[None]), **dataclasses.asdict(decoding), consensus=rerank)
    words = vocab.decode(result.ids)
    yield " ".join(words) if words else "(empty caption)"
    if s.explain:
        if s.others or s.consensus or decoding != CaptionDecoding(beam_size=decoding.beam_size):
            raise PlanError("`explain` explains one run's plain beam search: leave out `others`, `consensus` and "
                            "the beam's constraints")
        from attnkit.attribution.generation import explanation_lines
        from attnkit.train.tasks.caption.captioning import CaptionRun

        run = CaptionRun(Path(s.checkpoint), model, vocab, metas[0])
        yield from explanation_lines(run.explain(images_to_tensor(pixels[None]), beam_size=decoding.beam_size))
    if s.attention:
        if not words:
            raise ValueError("the caption is empty: there is no attention to draw")
        from attnkit.viz.explain import plot_caption_attention

        maps = model.attention_maps(result.weights).numpy()  # (T, h, w)
        plot_caption_attention(pixels, maps, words, path=s.attention,
                               title=f"“{' '.join(words)}”: attention for each word")
        yield f"attention figure saved to {s.attention}"
