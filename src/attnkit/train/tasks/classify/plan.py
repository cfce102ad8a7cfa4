"""A classification run described as data: what ``attnkit train`` decided, in typed form.

The command line turns its flags into a :class:`ClassifierPlan`; :func:`run_plan`
carries it out (data reading and splitting, processes, training, the run
directory). Nothing below the command line knows a flag's spelling, and a
plan can be built in Python as well::

    plan = ClassifierPlan(out=Path("runs/a"), model_name="document", data=DataSource(train="reviews.csv"))
    result = run_plan(plan)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from attnkit.data.sources import DataSource, load_splits
from attnkit.train.config import TrainConfig
from attnkit.train.runs.run import new_run_id
from attnkit.train.tasks.classify.pipeline import DataSettings, FitResult, fit_classifier

__all__ = ["DataSource", "ClassifierPlan", "run_plan"]


@dataclass(frozen=True)
class ClassifierPlan:
    """One classification run: model, optimisation, tokenization, data and run directory.

    ``mode`` is ``"new"`` (refuse a directory holding another run),
    ``"overwrite"`` (replace it at the first commit) or ``"resume"`` (continue
    the committed state; ``run_id``, ``tokenizer`` and ``label_vocab`` come
    from the run). ``init_from`` is a pretrained BERT folder to start from.
    ``baseline`` scores :mod:`attnkit.train.tasks.classify.baseline` on the run's test part
    before training; its figures go into config.json as ``metrics.baseline``. ``max_memory`` bounds
    what the run plans to allocate, in bytes (None: a share of the available memory; see
    :mod:`attnkit.train.memory_budget`). ``flags`` spells the settings that the run directory's
    refusals name as the calling command's flags (:func:`attnkit.train.runs.rundir.check_run_dir`).
    """

    out: Path
    model_name: str
    data: DataSource
    model_options: dict[str, Any] = field(default_factory=dict)
    train_config: TrainConfig = field(default_factory=TrainConfig)
    data_settings: DataSettings = field(default_factory=DataSettings)
    mode: Literal["new", "overwrite", "resume"] = "new"
    run_id: str | None = None
    tokenizer: Any = None
    label_vocab: Any = None
    init_from: str | None = None
    quiet: bool = False
    baseline: bool = False
    max_memory: int | None = None
    flags: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ("new", "overwrite", "resume"):
            raise ValueError(f"mode must be one of ['new', 'overwrite', 'resume'], got {self.mode!r}")
        if self.mode == "resume" and (self.run_id is None or self.tokenizer is None or self.label_vocab is None):
            raise ValueError("a resume plan needs the run's run_id, tokenizer and label_vocab")


def run_plan(plan: ClassifierPlan, *, log: Callable[[str], None] | None = None) -> FitResult:
    """Carry out ``plan``: join the torchrun processes if any, read and split the data, train.

    ``log`` gets the one-line summary of the data and, unless the plan is
    quiet, one line per epoch (main process only).
    """
    from attnkit.train.loop.distributed import broadcast_object, init_distributed, shutdown_distributed
    from attnkit.train.runs import checkpoint as ckpt

    info = init_distributed(plan.train_config.device)
    echo = log if (log is not None and info.is_main) else (lambda _line: None)
    try:
        run_id = str(broadcast_object(plan.run_id or new_run_id(), info))
        overwrite = plan.mode == "overwrite"
        # the lock first (a run being written is named as such), by the main process only
        ckpt.check_run_dir(plan.out, run_id, overwrite=overwrite, check_lock=info.is_main, flags=plan.flags)
        data = plan.data
        tr, va, te = load_splits(data, seed=plan.train_config.seed)
        echo(f"{plan.model_name}: {len(tr)} train, {len(va)} validation, {len(te)} test examples"
             + (f", {info.world_size} processes ({info.backend})" if info.enabled else ""))
        base = (_baseline(tr, va, te, plan.train_config.class_weight, plan.max_memory)
                if plan.baseline and info.is_main else None)
        init_model = None
        extra: dict[str, Any] = {"data": data.record}
        if plan.init_from and plan.mode != "resume":
            from attnkit.train.runs.data_record import record_data
            from attnkit.train.tasks.classify import finetune

            init_model = finetune.pretrained_initializer(plan.init_from)
            extra.update(record_data({"init_from": plan.init_from}, plan.out))  # its path, size and SHA-256
        return fit_classifier(
            tr, va, te, model_name=plan.model_name, model_options=plan.model_options,
            train_config=plan.train_config, data=plan.data_settings, out_dir=plan.out, run_id=run_id,
            overwrite=overwrite, resume=plan.mode == "resume", quiet=plan.quiet, dist=info,
            log=None if plan.quiet else echo, tokenizer=plan.tokenizer, label_vocab=plan.label_vocab,
            init_model=init_model, extra=extra, baseline=base, max_memory=plan.max_memory, flags=plan.flags,
            reports=True)
    finally:
        shutdown_distributed()



def _baseline(train: list[Any], val: list[Any], test: list[Any], class_weight: str = "none",
              memory: int | None = None) -> dict[str, Any]:
    """The baseline's measures and ``n`` on the test part (fit on train + validation, the run's class weighting
    and memory limit)."""
    from attnkit.train.tasks.classify.baseline import baseline_scores

    if not test:
        raise ValueError("the split has no test part (--test-ratio 0 and no --test): nothing to score")
    scores = baseline_scores([*train, *val], test, class_weight=class_weight, memory=memory)
    return {k: v for k, v in scores.items() if k not in ("predictions", "labels", "confusion_matrix")}
