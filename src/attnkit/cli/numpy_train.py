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
               "tune_thresholds": "--tune-thresholds"}


def train_numpy(values: dict[str, Any], model_options: dict[str, Any], source: Any, *,
                echo: Callable[[str], None], report: Callable[[str, dict[str, Any], list[str]], None]) -> Any:
    """Train the NumPy classifier on ``source`` (a :class:`attnkit.data.sources.DataSource`) with the
    settings in the option ``values``; print the test metrics and save the run to ``--out``."""
    from attnkit.data.sources import load_splits
    from attnkit.train.numpy_backend import NumpyTrainSettings, train_numpy_run

    given = [flag for key, flag in UNSUPPORTED.items() if values.get(key)]
    if values.get("device") not in (None, "auto", "cpu"):
        given.append("--device")
    if given:
        raise ValueError(f"--backend numpy does not support {', '.join(given)}; "
                         "the NumPy trainer runs on the CPU without label smoothing, packing or resume")
    kind = values.get("model") or "transformer"
    settings = NumpyTrainSettings(**{k: values[k] for k in SETTING_KEYS if values.get(k) is not None})
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
