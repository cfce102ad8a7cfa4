"""Lazy package exports: a name is imported from its module on first use.

Packages re-export their public names this way so that importing a light
module (the NumPy twin, the data readers) never pulls in torch through a
package ``__init__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


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
