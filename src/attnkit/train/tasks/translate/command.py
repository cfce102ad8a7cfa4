"""``attnkit translate``: a translation run turns sentences into sentences, one translation a line, generated
from :class:`TranslateCommand` (:func:`attnkit.cli.train.served_command`)::

    attnkit translate runs/de-en "Ein Mann fährt Fahrrad." --beam-size 4 --alignment align.png
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

from attnkit._checks import setting
from attnkit.train.registry import Say, allow_unfinished
from attnkit.train.tasks.translate.settings import TranslationDecoding

__all__ = ["TranslateCommand", "translate_command"]


@dataclass(frozen=True)
class TranslateCommand:
    """Translate texts with a trained translation run; prints one translation per line.

    \b
    Example:
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --beam-size 4 --alignment align.png
      attnkit translate runs/de-en "Ein Hund läuft im Schnee." --explain
    """

    checkpoint: str = setting("", "The translation run.", argument=True, required=True)
    texts: tuple[str, ...] = setting((), "Texts to translate.", argument=True, multiple=True)
    file: str | None = setting(None, "Translate every non-blank line of this file (plain or .gz) as well.",
                               path="file")
    decoding: TranslationDecoding = dataclasses.field(default_factory=TranslationDecoding)
    alignment: str | None = setting(None, "Plot the cross-attention alignment of the first text to this image "
                                    "file.", path="new-file")
    explain: bool = setting(False, "Explain each translated token by its source tokens, with the method that is "
                                   "most faithful on this translation and its figures beside a random order's.")
    allow_unfinished: bool = allow_unfinished()


def translate_command(settings: TranslateCommand, say: Say) -> Iterator[str]:
    """Each text's translation (and, with ``explain``, its explanation's lines); the alignment figure of the
    first one written to ``alignment``."""
    from attnkit.data.parallel import read_lines
    from attnkit.train.runs.resume import PlanError
    from attnkit.train.tasks.translate.translation import load_translation_run

    items = list(settings.texts) + [line for line in (read_lines(settings.file) if settings.file else [])
                                    if line.strip()]
    if not items:
        raise PlanError("give at least one TEXT argument or `file`")
    translator = load_translation_run(settings.checkpoint, allow_unfinished=settings.allow_unfinished)
    if translator.meta.get("notice"):
        say.warn(translator.meta["notice"])
    decoding = dataclasses.asdict(settings.decoding)
    results = translator.translate(items, **decoding, return_alignment=settings.alignment is not None)
    for text, r in zip(items, results, strict=True):
        yield r.text
        if settings.explain:
            from attnkit.attribution.generation import explanation_lines

            yield from explanation_lines(translator.explain(text, **decoding))
    if settings.alignment is not None:
        from attnkit.viz.explain import plot_alignment

        first = results[0]
        assert first.alignment is not None
        targets = first.target_tokens + ["[EOS]"] * (first.alignment.shape[0] - len(first.target_tokens))
        plot_alignment(first.alignment.numpy(), first.source_tokens, targets, path=settings.alignment)
        say.warn(f"alignment written to {settings.alignment}")
