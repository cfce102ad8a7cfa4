"""The ``attnkit`` command: ``demo``, ``train``, ``evaluate``, ``predict``, ``cv``, ``bench``.

Each command turns flags (and an optional ``--config`` file) into the
library's config dataclasses and calls the library; heavy imports happen
inside the commands so that ``attnkit --help`` is quick. Expected failures
(bad files, bad values, an occupied output directory) end with a one-line
``Error: ...`` and exit status 1 or 2, never a traceback.
"""

from __future__ import annotations

import click

from attnkit.cli import commands
from attnkit.cli import demo as demo_module

__all__ = ["main", "cli"]


@click.group(name="attnkit", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="attnkit", prog_name="attnkit")
@click.option("--threads", type=click.IntRange(min=1), envvar="ATTNKIT_THREADS",
              help="CPU threads for torch's intra-op parallelism (default: torch's choice).")
def cli(threads: int | None) -> None:
    """attnkit: attention mechanisms, correct, fast and visible.

    \b
    Examples:
      attnkit demo
      attnkit train --data reviews.csv --model sentiment --out runs/reviews
      attnkit evaluate runs/reviews --data test.csv
      attnkit predict runs/reviews "a quietly moving film" --explain
      attnkit cv --data path/to/mr --folds 10
      torchrun --nproc_per_node=2 -m attnkit train --data reviews.csv --out runs/ddp
    """
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


@cli.command()
@click.option("--quick", is_flag=True, help="Fewer, smaller cases.")
@click.option("--json", "out_json", type=click.Path(dir_okay=False), help="Also write the figures to this JSON file.")
@click.option("--case", "cases", multiple=True,
              help="Run only this case (repeatable; default all); see attnkit.bench.CASES.")
def bench(quick: bool, out_json: str | None, cases: tuple[str, ...]) -> None:
    """Time the attention implementations and print a table."""
    try:
        from attnkit import bench as bench_module
    except ImportError as err:
        raise click.ClickException(f"the benchmark module is not available: {err}") from None
    valid = [str(name) for name in bench_module.CASES]
    unknown = sorted(set(cases) - set(valid))
    if unknown:
        raise click.UsageError(f"unknown case(s) {unknown}; valid cases: {valid}")
    selected = [name for name in valid if name in cases] if cases else None
    bench_module.run(selected, quick=quick, out_json=out_json, echo=click.echo)


cli.add_command(demo_module.demo)
for _command in (commands.train, commands.evaluate, commands.predict, commands.cv):
    cli.add_command(_command)


def main() -> None:
    """Console entry point (``attnkit`` and ``python -m attnkit``)."""
    cli(prog_name="attnkit")
