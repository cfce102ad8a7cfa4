"""``attnkit demo``: the command; the run it trains and measures is :mod:`attnkit.train.tasks.classify.demo`."""

from __future__ import annotations

from pathlib import Path

import click

from attnkit._lazy import require_extra
from attnkit.cli.messages import echo, friendly_errors
from attnkit.cli.options import SEED

__all__ = ["demo"]

@click.command()
@click.option("--out", type=click.Path(file_okay=False), default="runs/demo", show_default=True,
              help="Run directory for the checkpoint and report.txt.")
@click.option("--quick", is_flag=True, help="A smaller corpus and fewer epochs (for tests).")
@click.option("--seed", type=SEED, default=0, show_default=True, help="Corpus and training seed.")
@click.option("--overwrite", is_flag=True,
              help="Replace a run in --out that the demo did not write (its own earlier run is replaced anyway).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar or per-epoch lines.")
@friendly_errors
def demo(out: str, quick: bool, seed: int, overwrite: bool, quiet: bool) -> None:
    """Train an attention classifier on a generated keyword corpus and show where it looks.

    Prints the test accuracy and the attention focus (mean share of the
    pooling attention on the key words), and writes a checkpoint,
    report.txt (the words that moved the decision most per class, then raw
    attention's most attended words), report.html (the offline
    interactive attention report) and explanation.png to --out.
    """
    require_extra("attnkit demo", "matplotlib")  # its explanation.png, written after training
    from attnkit.train.tasks.classify.demo import run_demo

    summary = run_demo(Path(out), quick=quick, seed=seed, overwrite=overwrite, quiet=quiet, log=echo,
                       notice=lambda line: click.echo(line, err=True))
    from attnkit.train.tasks.classify.baseline import BASELINE_NAME

    base = summary["baseline"]
    beside = (f"  ({BASELINE_NAME} on the same split: {base['accuracy']:.4f})" if base
              else "  (no baseline: pip install 'attnkit[tasks]')")
    click.echo(f"test accuracy     {summary['accuracy']:.4f}{beside}")
    click.echo(f"attention focus   {summary['focus']:.4f}  (share of pooling attention on the key words)")
    for c, rows in summary["moved"].items():
        click.echo(f"words that moved the decision most ({c}): " + ", ".join(t for t, _ in rows[:5]))
    for c, rows in summary["table"].items():
        click.echo(f"raw attention, most attended ({c}): " + ", ".join(t for t, _ in rows[:5]))
    from attnkit.train.runs.rundir import committed_dir

    checkpoint = committed_dir(out).relative_to(Path(out))
    click.echo(f"wrote {out}/ (report.txt, report.html, explanation.png; the checkpoint in {checkpoint}/) "
               f"in {summary['seconds']:.1f}s")
