"""``attnkit visualize``: attention of a trained run, a Hugging Face folder or a timm model.

The source is either an attnkit run directory (its manifest ``current.json``
and committed ``config.json`` with a ``model_name``, written by ``attnkit
train`` or ``attnkit demo``) or a Hugging
Face BERT folder (``config.json`` + ``model.safetensors`` + a tokenizer), read
with attnkit's own :class:`~attnkit.models.bert.BertModel`
(:func:`~attnkit.models.bert_attentions.attentions_per_text`). Any other Hugging
Face folder (GPT-2, LLaMA, ViT, ...), and a timm model given by name with a
local weights file, run under :func:`attnkit.inspect.capture`
(:func:`attnkit.inspect.sources.model_views`).

The output's extension picks the form: ``.html`` writes the interactive,
offline report (every layer and head, every text of the batch); ``.png``,
``.svg`` and ``.pdf`` write a static figure of the first text (tokens shaded
by pooling attention for a classifier with attention pooling, else the
layers x heads overview).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from attnkit._hf_folder import hf_model_type
from attnkit._lazy import require_extra
from attnkit.cli.options import allow_unfinished_option
from attnkit.data.readers import read_text_lines, truncation_notice
from attnkit.viz.views import AttentionView, is_attnkit_report, write_views

__all__ = [
    "visualize", "AttentionView", "run_attention", "bert_attention", "write_views",
    "is_attnkit_report",
]

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def _is_run(folder: Path) -> bool:
    """Whether ``folder`` is an attnkit run; a damaged config.json raises a ValueError naming it."""
    from attnkit.train.runs.rundir import read_run_config

    if not any((folder / name).exists() for name in ("current.json", "checkpoints")):
        return False
    return "model_name" in read_run_config(folder)


def run_attention(folder: Path, texts: list[str], *, allow_unfinished: bool = False) -> list[AttentionView]:
    """The attention of a trained run on ``texts``, through the task that claims it (a run that serves
    ``attention_views``: a classification run, either backend). A run whose training did not finish is refused
    unless ``allow_unfinished`` (then a warning line says which weights are shown)."""
    from attnkit.train.registry import resolve, task_of_run

    task = task_of_run(folder)
    served = resolve(task.load)(folder, allow_unfinished=allow_unfinished, device="cpu")
    if not hasattr(served, "attention_views"):
        raise click.ClickException(f"{folder} is a {task.description} run, whose attention attnkit visualize does "
                                   f"not draw over texts: use {task.command} {folder} ...")
    if getattr(served, "notice", None):
        click.echo(served.notice, err=True)
    return list(served.attention_views(texts))


def bert_attention(folder: Path, texts: list[str], max_len: int) -> list[AttentionView]:
    """Run a BERT folder on ``texts`` with attnkit's BertModel; all layers and heads per text."""
    from attnkit.data.tokenization import tokenizable
    from attnkit.models.bert_attentions import attentions_per_text

    return [AttentionView(tokens, layers, None, total_tokens=total)
            for tokens, layers, total in attentions_per_text(folder, tokenizable(texts), max_len=max_len)]


@click.command()
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.argument("texts", nargs=-1)
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Output file: .html (interactive report) or .png/.svg/.pdf (figure).")
@click.option("--file", "text_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also visualize every non-empty line of this text file.")
@click.option("--encoding", default="utf-8", show_default=True, help="Text encoding of --file.")
@click.option("--max-len", type=click.IntRange(min=2), default=512, show_default=True,
              help="Longest token sequence kept for a Hugging Face folder.")
@click.option("--image", "images", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="An image for a vision model (repeatable).")
@click.option("--timm", "timm_name", default=None,
              help="A timm model name; SOURCE is then its local weights file (.safetensors or .pth).")
@click.option("--target", "targets", multiple=True,
              help="For an encoder-decoder folder (T5, BART, Marian): the text the decoder reads, one per "
                   "TEXT in order (repeatable; default: only the decoder's start token).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing output file (an HTML report attnkit wrote is replaced without it).")
@allow_unfinished_option
def visualize(source: Path, texts: tuple[str, ...], out: Path, text_file: Path | None, encoding: str,
              max_len: int, images: tuple[str, ...], timm_name: str | None, targets: tuple[str, ...],
              overwrite: bool, allow_unfinished: bool) -> None:
    """Show where a trained run, a Hugging Face folder or a timm model attends.

    \b
    Examples:
      attnkit visualize runs/demo "a brilliant and moving film" -o report.html
      attnkit visualize path/to/bert "Attention filters noise." -o heads.png
      attnkit visualize path/to/gpt2-folder "Attention filters noise." -o gpt2.html
      attnkit visualize path/to/t5-folder "translate: a cat" --target "eine Katze" -o t5.html
      attnkit visualize vit.safetensors --timm vit_tiny_patch16_224 --image cat.png -o rollout.png
    """
    items = list(texts)
    if text_file is not None:
        try:
            lines = read_text_lines(text_file, encoding, encoding_flag="--encoding")
        except ValueError as err:
            raise click.ClickException(str(err)) from None
        items += [line for line in lines if line.strip()]
    if not items and not images:
        raise click.UsageError("give at least one TEXT argument, --file or --image")
    if out.suffix not in (".html", *FIGURE_SUFFIXES):
        raise click.BadParameter(
            f"unknown output type {out.suffix!r}; use one of ['.html', '.png', '.svg', '.pdf']",
            param_hint="--out",
        )
    if out.suffix in FIGURE_SUFFIXES:  # a figure needs matplotlib, the HTML report does not
        require_extra(f"attnkit visualize -o FILE{out.suffix}", "matplotlib",
                      otherwise="write an HTML report (-o report.html)")
    if out.exists() and not overwrite and not is_attnkit_report(out):
        raise click.ClickException(f"{out} already exists and is not a report attnkit wrote; "
                                   "pass --overwrite to replace it")
    captured: list[Any] = []
    model_type = hf_model_type(source) if timm_name is None else None
    try:
        if timm_name is None and source.is_dir() and _is_run(source):
            views = run_attention(source, items, allow_unfinished=allow_unfinished)
            title = f"attnkit run {source.name}"
            limit = "the run's maximum length"
        elif model_type == "bert" and (source / "model.safetensors").is_file() and not images:
            views = bert_attention(source, items, max_len)
            title = f"BERT {source.name}"
            limit = "--max-len or the model's position limit"
        elif timm_name is not None or model_type is not None:
            from attnkit.inspect.sources import model_views

            views, title, captured = model_views(source, items, list(images), timm_name, max_len, list(targets))
            limit = "--max-len or the model's position limit"
        else:
            if (source / "config.json").is_file():  # name a config.json that is not JSON at all
                from attnkit.train.runs.fileops import read_json

                read_json(source / "config.json")
            raise click.ClickException(
                f"{source} is neither an attnkit run (current.json naming a checkpoint) nor a Hugging Face "
                "model folder (config.json with model_type); for a timm model pass --timm NAME"
            )
        notice = truncation_notice([(len(v.tokens), v.total_tokens or len(v.tokens)) for v in views],
                                   what=limit)
        if notice is not None:
            click.echo(notice, err=True)
        if targets and not captured:
            raise click.BadParameter("only an encoder-decoder Hugging Face folder reads a target text",
                                     param_hint="--target")
        if captured and captured[0][1] is not None and out.suffix != ".html":
            from attnkit.inspect.sources import write_image_rollout

            path = write_image_rollout(captured[0], views[0].tokens, out)
        else:
            path = write_views(views, out, title)
    except (ValueError, FileNotFoundError) as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"wrote {path}")
