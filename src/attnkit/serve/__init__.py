"""``attnkit serve``: trained runs behind a JSON API with dynamic batching, and a local explorer page.

* :mod:`attnkit.serve.app` -- the ASGI app (FastAPI on Starlette, run by uvicorn): ``/v1/predict``,
  ``/v1/explain``, ``/v1/attention``, ``/v1/models``, ``/v1/data``, ``/healthz``, ``/openapi.json``
  and the explorer at ``/``.
* :mod:`attnkit.serve.models` -- a run as the API answers for it.
* :mod:`attnkit.serve.batching` -- concurrent predictions gathered into batches; the bounded queue.
* :mod:`attnkit.serve.limits` -- the limits, the ``Host`` check, the body limit, the security headers.

Needs the ``serve`` extra (``pip install 'attnkit[serve]'``); docs/serve.md shows it in use.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnkit.serve.limits import Limits
from attnkit.serve.models import ServedModel, unique_names

__all__ = ["Limits", "ServedModel", "build_app", "load_models"]


def load_models(paths: Sequence[Path], *, hf: Sequence[Path] = (), allow_unfinished: bool = False
                ) -> list[Any]:
    """Each run of ``paths`` loaded by the task that claims it (:mod:`attnkit.train.registry`) and wrapped by
    its ``serve``, then each Hugging Face classifier folder of ``hf`` (:mod:`attnkit.serve.hf`), under a name
    of its folder."""
    from attnkit.train.registry import resolve, task_of_run

    names = unique_names([*paths, *hf])
    models: list[Any] = []
    for name, path in zip(names, paths, strict=False):
        task = task_of_run(path)
        loaded = resolve(task.load)(path, allow_unfinished=allow_unfinished, device="cpu")
        models.append(resolve(task.serve or ServedModel)(name, path, loaded))
    if hf:
        from attnkit.serve.hf import served_folder

        models += [served_folder(name, folder) for name, folder in zip(names[len(paths):], hf, strict=True)]
    return models


def build_app(*args: Any, **kwargs: Any) -> Any:
    """:func:`attnkit.serve.app.build_app` (imported when called: it needs FastAPI)."""
    from attnkit.serve.app import build_app as build

    return build(*args, **kwargs)
