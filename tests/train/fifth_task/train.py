"""Train and load the word counter through the run folder every task commits to."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any

from attnkit.train.runs.data_record import locate_data, record_data
from attnkit.train.runs.resume import RUN_FLAGS, RunOptions
from attnkit.train.runs.run import commit_generation, start_run
from attnkit.train.runs.rundir import read_run_config

from . import MODEL_NAME, TASK
from .settings import CountSettings


def train_counter(settings: CountSettings, run: RunOptions) -> str:
    paths = {"text": settings.data.text}
    saved = read_run_config(run.out) if run.resume else None
    known = locate_data(saved["data"], paths, run.out, {"text": "--text"}) if saved else None
    data = record_data(paths, run.out, known=known)
    words = collections.Counter(Path(data["text"]).read_text(encoding="utf-8").split())
    counts: dict[str, float] = saved["counts"] if saved else {}
    start = saved["progress"]["epoch"] if saved else 0
    with start_run(run.out, run_id=saved["run_id"] if saved else None, overwrite=run.overwrite,
                   flags=RUN_FLAGS) as writer:
        for epoch in range(start + 1, settings.training.epochs + 1):
            for word, n in words.items():
                counts[word] = counts.get(word, 0.0) + settings.training.lr * n
            done = epoch == settings.training.epochs
            commit_generation(writer, {"model_name": MODEL_NAME, "settings": dataclasses.asdict(settings),
                                       "data": data, "counts": counts}, status="done" if done else "training",
                              progress={"epoch": epoch, "epochs": settings.training.epochs}, files={})
            if run.epoch_log is not None:
                run.epoch_log(f"epoch {epoch}: {len(counts)} words")
            if epoch == settings.training.stop_after and not done:
                raise KeyboardInterrupt
    return f"counted {len(counts)} words into {run.out}"


def load_counter(path: Path, *, allow_unfinished: bool = False, device: str = "cpu") -> dict[str, Any]:
    folder, config = TASK.committed(path, allow_unfinished=allow_unfinished)  # another task's run is refused
    return json.loads((folder / "config.json").read_text())["counts"]
