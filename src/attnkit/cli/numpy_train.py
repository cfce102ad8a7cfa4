"""``attnkit train --backend numpy``: the flags turned into NumPy training settings, then the NumPy twin.

Torch is never imported on this path. Flags the NumPy trainer has no
counterpart for are an error naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["train_numpy"]



def _torch_only(values: dict[str, Any]) -> list[str]:
    """The flags given that the NumPy trainer has no field for: the torch classifier's settings
    (``TrainConfig``, ``DataSettings``) outside ``NumpyTrainSettings``, and ``--resume``, ``--init-from``."""
    import dataclasses

    from attnkit.train.config import DataSettings, TrainConfig
    from attnkit.train.tasks.numpy.numpy_backend import NumpyTrainSettings

    own = {f.name for f in dataclasses.fields(NumpyTrainSettings)}
    names = [f.name for cls in (TrainConfig, DataSettings) for f in dataclasses.fields(cls)
             if f.name not in own and f.name != "device"] + ["resume", "init_from"]
    return ["--" + name.replace("_", "-") for name in names if values.get(name)]


def train_numpy(values: dict[str, Any], model_options: dict[str, Any], source: Any, *,
                echo: Callable[[str], None], report: Callable[[str, dict[str, Any], list[str]], None]) -> Any:
    """Train the NumPy classifier on ``source`` (a :class:`attnkit.data.sources.DataSource`) with the
    settings in the option ``values``; print the test metrics and save the run to ``--out``."""
    import dataclasses

    from attnkit.data.sources import load_splits
    from attnkit.train.tasks.numpy.numpy_backend import NumpyTrainSettings, train_numpy_run

    given = _torch_only(values)
    if values.get("device") not in (None, "auto", "cpu"):
        given.append("--device")
    if given:
        raise ValueError(f"--backend numpy does not support {', '.join(given)}; "
                         "the NumPy trainer runs on the CPU for --epochs, without label smoothing, packing, "
                         "resume or a measure other than accuracy")
    kind = values.get("model") or "transformer"
    settings = NumpyTrainSettings(**{f.name: values[f.name] for f in dataclasses.fields(NumpyTrainSettings)
                                     if values.get(f.name) is not None})
    if not values.get("overwrite"):
        from attnkit.cli.rundata import RUN_FLAGS
        from attnkit.train.runs.run import refuse_existing_run

        refuse_existing_run(values["out"], lambda saved: _changes(saved, kind, model_options, settings, source.record),
                            flags=RUN_FLAGS)
    tr, va, te = load_splits(source, seed=settings.seed)
    echo(f"numpy {kind}: {len(tr)} train, {len(va)} validation, {len(te)} test examples")
    run, test_metrics = train_numpy_run(
        tr, va, te, kind=kind, model_options=model_options, settings=settings, out_dir=values["out"],
        overwrite=bool(values.get("overwrite")), log=None if values.get("quiet") else echo,
        extra={"data": source.record})
    if test_metrics is not None:
        report("test", test_metrics, run.labels)
    echo(f"saved run to {values['out']}")
    return run


def _changes(saved: dict[str, Any], kind: str, model_options: dict[str, Any], settings: Any,
             data: dict[str, Any]) -> list[str]:
    """What differs between the numpy run committed as ``saved`` and this command: backend, model, each
    setting and ``--model-opt``, the data."""
    import json

    from attnkit.cli.rundata import data_changes, flat_config
    from attnkit.train.tasks.numpy.numpy_backend import BACKEND

    changes = [] if saved.get("backend") == BACKEND else [f"`backend` torch there, {BACKEND} now"]
    if saved.get("model_name") != kind:
        changes.append(f"`model` {saved.get('model_name')} there, {kind} now")
    before_settings, now_settings = saved.get("settings") or {}, json.loads(json.dumps(settings.__dict__))
    changes += [f"`{k}` {before_settings.get(k)!r} there, {now_settings.get(k)!r} now"
                for k in sorted(set(before_settings) | set(now_settings))
                if before_settings.get(k) != now_settings.get(k)]
    config = saved.get("model_config") or {}
    for key, value in sorted(flat_config(model_options).items()):
        there = flat_config(config).get(key)
        if there != value:
            changes.append(f"`model_opt` {key}={there!r} there, {value!r} now")
    return changes + data_changes(saved.get("data") or {}, data)

