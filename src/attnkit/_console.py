"""The ``attnkit`` console script, importing nothing third-party before it can say what is missing.

``pip install attnkit`` installs the library (torch, numpy) without the
command line's own dependencies, which come with the ``cli`` extra. Started
without them, ``attnkit`` would end in ``ModuleNotFoundError: No module named
'click'``; :func:`main` names the missing module and the extra that installs it
instead (:func:`attnkit._lazy.missing_extra_message`, which the command line
uses too). Both ``attnkit`` and ``python -m attnkit`` (so
``torchrun -m attnkit``) start here. Under an address-space limit too small to
load the command line's modules, it names the limit
(:func:`attnkit._memory.address_space_failure`), as the commands do when torch
or anything after it cannot be loaded or allocated.
"""

from __future__ import annotations

import sys

from attnkit._lazy import missing_extra_message
from attnkit._memory import address_space_failure

__all__ = ["main"]

def main() -> None:
    """Run the ``attnkit`` command, or say which extra to install when a dependency is missing."""
    try:
        from attnkit.cli import main as cli_main
    except (ImportError, MemoryError, OSError) as err:  # a module missing, or no room to load one
        limit = address_space_failure(err)
        hint = f"Error: {limit}" if limit else missing_extra_message(err) if isinstance(err, ImportError) else None
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        sys.exit(1)
    cli_main()
