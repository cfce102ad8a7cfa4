"""``attnkit train --backend numpy``: the flags turned into NumPy training settings, then the NumPy twin.

Torch is never imported on this path. Flags the NumPy trainer has no
counterpart for are an error naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["train_numpy"]

SETTING_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "clip_norm", "patience", "seed", "max_len",
                "min_frequency", "vocab_size", "warmup_ratio", "on_nan")
UNSUPPORTED = {"label_smoothing": "--label-smoothing", "resume": "--resume", "init_from": "--init-from",
               "tokenizer": "--tokenizer", "pack": "--pack", "metric": "--metric", "class_weight": "--class-weight",
               "tune_thresholds": "--tune-thresholds", "token_budget": "--token-budget"}


def train_numpy(values: dict[str, Any], model_options: dict[str, Any], source: Any, *,
                echo: Callable[[str], None], report: Callable[[str, dict[str, Any], list[str]], None]) -> Any:
    """Train the NumPy classifier on ``source`` (a :class:`attnkit.data.sources.DataSource`) with the
    settings in the option ``values``; print the test metrics and save the run to ``--out``."""
    from attnkit.data.sources import load_splits
    from attnkit.train.tasks.numpy.numpy_backend import NumpyTrainSettings, train_numpy_run

    given = [flag for key, flag in UNSUPPORTED.items() if values.get(key)]
    if values.get("device") not in (None, "auto", "cpu"):
        given.append("--device")
    if given:
        raise ValueError(f"--backend numpy does not support {', '.join(given)}; "
                         "the NumPy trainer runs on the CPU for --epochs, without label smoothing, packing, "
                         "resume or a measure other than accuracy")
    kind = values.get("model") or "transformer"
    settings = NumpyTrainSettings(**{k: values[k] for k in SETTING_KEYS if values.get(k) is not None})
    if not values.get("overwrite"):
        _refuse_existing_run(values["out"], kind, model_options, settings, source.record)
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


def _refuse_existing_run(out: Any, kind: str, model_options: dict[str, Any], settings: Any,
                         data: dict[str, Any]) -> None:
    """A new numpy run into an ``--out`` that holds a committed run: say whether it is this very run (the same
    model, settings and data: trained already) or which setting or data differs. Other refusals (a lock,
    files attnkit did not write) stay with the run writer."""
    import json

    from attnkit.cli.rundata import RUN_FLAGS, data_changes, flat_config
    from attnkit.train.runs.run import committed_run_id
    from attnkit.train.runs.rundir import check_run_dir, read_run_config
    from attnkit.train.tasks.numpy.numpy_backend import BACKEND

    run_id = committed_run_id(out)
    if run_id is None:
        return
    check_run_dir(out, run_id, flags=RUN_FLAGS)  # a lock or foreign files are named as they are
    saved = read_run_config(out)
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
    changes += data_changes(saved.get("data") or {}, data)
    if not changes:
        raise ValueError(f"{out} already holds this run, trained with the same data and settings; pass "
                         "--overwrite to train it again")
    shown = "; ".join(changes[:5]) + (f"; and {len(changes) - 5} more" if len(changes) > 5 else "")
    raise ValueError(f"{out} already holds a different run ({shown}); replace it with --overwrite, or choose "
                     "another --out")

