"""Lazy imports: a package's names imported from their modules on first use, and the hint
for an optional dependency that is missing when it is first imported.

Packages re-export their public names this way so that importing a light
module (the NumPy twin, the data readers) never pulls in torch through a
package ``__init__``. What an extra of ``pip install attnkit[...]`` brings is
imported only where it is used; :func:`missing_extra_message` says which extra
to install when it is missing (the console script and the command line both
show it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports", "EXTRA_MODULES", "missing_extra_message"]

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


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``exports`` (public name -> module).

    ``namespace`` is the package's ``globals()``; a name is cached there once
    imported. ``submodules`` are names of the package's own modules.
    """
    package = namespace["__name__"]
    subs = set(submodules)
    public = sorted([*exports, *subs])

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            namespace[name] = value
            return value
        if name in subs:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return public

    return __getattr__, __dir__
