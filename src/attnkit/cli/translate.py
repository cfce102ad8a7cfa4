"""``attnkit translate``: a translation run turns sentences into sentences (its training command is generated
from the task's settings, :mod:`attnkit.cli.train`)::

    attnkit translate runs/de-en "Ein Mann fährt Fahrrad." --beam-size 4 --alignment align.png
"""

from __future__ import annotations

import click

from attnkit.cli.messages import friendly_errors
from attnkit.cli.options import allow_unfinished_option, settings_options
from attnkit.train.tasks.translate.settings import TranslationDecoding

__all__ = ["translate"]


@click.command("translate")
@click.argument("checkpoint", type=click.Path())
@click.argument("texts", nargs=-1)
@click.option("--file", "text_file", type=click.Path(exists=True, dir_okay=False),
              help="Translate every non-blank line of this file (plain or .gz) as well.")
@settings_options(TranslationDecoding)
@click.option("--alignment", "alignment_path", type=click.Path(dir_okay=False),
              help="Plot the cross-attention alignment of the first text to this image file.")
@click.option("--explain", is_flag=True,
              help="Explain each translated token by its source tokens, with the method that is most faithful on "
                   "this translation and its figures beside a random order's.")
@allow_unfinished_option
@friendly_errors
def translate(checkpoint: str, texts: tuple[str, ...], text_file: str | None, beam_size: int, length_penalty: float,
              alignment_path: str | None, explain: bool, allow_unfinished: bool) -> None:
    """Translate texts with a trained translation run; prints one translation per line.

    \b
    Example:
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --beam-size 4 --alignment align.png
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --explain
    """
    from attnkit.data.parallel import read_lines
    from attnkit.train.tasks.translate.translation import load_translation_run

    items = list(texts)
    if text_file:
        items += [line for line in read_lines(text_file) if line.strip()]
    if not items:
        raise click.UsageError("give at least one TEXT argument or --file")
    translator = load_translation_run(checkpoint, allow_unfinished=allow_unfinished)
    if translator.meta.get("notice"):
        click.echo(translator.meta["notice"], err=True)
    results = translator.translate(items, beam_size=beam_size, length_penalty=length_penalty,
                                   return_alignment=alignment_path is not None)
    for text, r in zip(items, results, strict=True):
        click.echo(r.text)
        if explain:
            from attnkit.attribution.generation import explanation_lines

            for line in explanation_lines(translator.explain(text, beam_size=beam_size,
                                                             length_penalty=length_penalty)):
                click.echo(line)
    if alignment_path is not None:
        from attnkit.viz.explain import plot_alignment

        first = results[0]
        assert first.alignment is not None
        targets = first.target_tokens + ["[EOS]"] * (first.alignment.shape[0] - len(first.target_tokens))
        plot_alignment(first.alignment.numpy(), first.source_tokens, targets, path=alignment_path)
        click.echo(f"alignment written to {alignment_path}", err=True)
