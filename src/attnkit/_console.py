"""The ``attnkit`` console script, importing nothing third-party before it can say what is missing.

``pip install attnkit`` installs the library (torch, numpy) without the
command line's own dependencies, which come with the ``cli`` extra. Started
without them, ``attnkit`` would end in ``ModuleNotFoundError: No module named
'click'``; :func:`main` names the missing module and the extra that installs it
instead. Both ``attnkit`` and ``python -m attnkit`` (so ``torchrun -m attnkit``)
start here.
"""

from __future__ import annotations

import sys

__all__ = ["main", "EXTRA_MODULES", "missing_extra_message"]

# Top-level module -> the pyproject.toml extra that installs it.
EXTRA_MODULES: dict[str, str] = {
    "click": "cli",
    "tqdm": "cli",
    "safetensors": "cli",
    "tokenizers": "cli",
    "yaml": "cli",  # pyyaml
    "matplotlib": "viz",
    "sacrebleu": "tasks",
    "sklearn": "tasks",  # scikit-learn
}


def missing_extra_message(err: ImportError) -> str | None:
    """The install hint for ``err`` when it is a missing module of one of attnkit's extras, else None."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    module = err.name.partition(".")[0]
    extra = EXTRA_MODULES.get(module)
    if extra is None:
        return None
    what = "attnkit's command line" if extra == "cli" else "this command"
    return f"{what} needs the '{extra}' extra (module '{module}' is missing): pip install 'attnkit[{extra}]'"


def main() -> None:
    """Run the ``attnkit`` command, or say which extra to install when a dependency is missing."""
    try:
        from attnkit.cli import main as cli_main
    except ModuleNotFoundError as err:
        hint = missing_extra_message(err)
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        sys.exit(1)
    cli_main()
