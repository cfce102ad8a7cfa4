"""Reading the commands' own labelled data files (``attnkit serve --data``); a file of none is an error."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["read_data"]


def read_data(path: str, values: dict[str, Any]) -> list[Any]:
    """The labelled examples of the data file ``path``, read with the reader flags in ``values``; none is an error."""
    from attnkit.cli.options import reader_kwargs
    from attnkit.data.readers import read_examples

    examples = read_examples(path, **reader_kwargs(values))
    if not examples:
        raise click.ClickException(f"{path} holds no examples")
    return examples
