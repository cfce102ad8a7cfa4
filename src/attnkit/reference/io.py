"""Weight exchange: safetensors for weights, JSON for configs, both written atomically.

Tensors keep their torch-style dotted names, so a file written here loads
into the torch model with ``load_state_dict`` and back. ``safetensors.numpy``
is imported only when a file is read or written.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from attnkit.reference.models import ClassifierConfig, build_model
from attnkit.reference.module import Module

__all__ = ["save_weights", "load_weights", "save_model", "load_model"]


def _atomic_write(path: Path, write: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)  # type: ignore[operator]
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def save_weights(module: Module, path: str | os.PathLike[str]) -> None:
    """Write every parameter of ``module`` to a safetensors file (temp file + rename)."""
    from safetensors.numpy import save_file

    tensors = {k: np.ascontiguousarray(v) for k, v in module.parameters().items()}
    _atomic_write(Path(path), lambda tmp: save_file(tensors, tmp))


def load_weights(module: Module, path: str | os.PathLike[str], *, strict: bool = True, cast: bool = True) -> list[str]:
    """Copy tensors from a safetensors file into ``module``'s parameters, in place.

    Values are cast to each parameter's dtype; with ``cast=False`` a tensor of
    another dtype (int64 where the parameter is float32) is a ValueError naming
    it and the file instead. With ``strict`` every parameter
    must be in the file and every tensor of the file must be a parameter;
    otherwise the names left unused are returned.
    """
    from safetensors.numpy import load_file

    tensors = load_file(os.fspath(path))
    params = module.parameters()
    missing = sorted(set(params) - set(tensors))
    unexpected = sorted(set(tensors) - set(params))
    if strict and (missing or unexpected):
        raise ValueError(f"weights do not match the model: missing {missing}, unexpected {unexpected}")
    for name, p in params.items():
        if name not in tensors:
            continue
        t = tensors[name]
        if t.shape != p.shape:
            raise ValueError(f"weight {name!r} has shape {t.shape} in {os.fspath(path)}, model expects {p.shape}")
        if not cast and t.dtype != p.dtype:
            raise ValueError(f"weight {name!r} is {t.dtype} in {os.fspath(path)}, model holds {p.dtype}")
        p[...] = t.astype(p.dtype)
    return missing + unexpected


def save_model(model: Module, directory: str | os.PathLike[str]) -> None:
    """Write ``config.json`` and ``model.safetensors`` into ``directory``."""
    config = getattr(model, "config", None)
    if not isinstance(config, ClassifierConfig):
        raise TypeError(f"model must carry a ClassifierConfig, got {type(config).__name__}")
    d = Path(directory)
    text = json.dumps(config.to_dict(), indent=2, sort_keys=True)
    _atomic_write(d / "config.json", lambda tmp: Path(tmp).write_text(text))
    save_weights(model, d / "model.safetensors")


def load_model(directory: str | os.PathLike[str], dtype: type = np.float32) -> Module:
    """Rebuild a classifier from :func:`save_model` output."""
    d = Path(directory)
    config = ClassifierConfig.from_dict(json.loads((d / "config.json").read_text()))
    model = build_model(config, dtype)
    load_weights(model, d / "model.safetensors")
    return model
