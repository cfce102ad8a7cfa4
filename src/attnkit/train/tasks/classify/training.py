"""A classification run trained from the values of ``attnkit train``'s flags, on either backend: the plan
(:mod:`~attnkit.train.tasks.classify.start`), the refusal of another run in ``--out``, the training, the test
figures beside the baseline, and the reports committed with the run. The command parses its flags and prints
what this says; it trains, analyses and commits nothing itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnkit.train.runs.resume import RUN_FLAGS
from attnkit.train.tasks.classify import start

__all__ = ["train_from_flags", "REPORTS_WRITTEN"]

REPORTS_WRITTEN = ("wrote {out}/report.txt and report.html (per-class scores, the explanation shown first and its "
                   "faithfulness, words that moved the decision, confidently wrong examples)")
"""The line that says a run's reports were written (``attnkit train`` and ``attnkit report``)."""


def train_from_flags(values: dict[str, Any], run: Any, given: list[str]) -> str | None:
    """Train (``run.resume``: go on with) the classification run of ``values``, ``attnkit train``'s flags by
    name (None: not given, the recipe decides; ``model_opt``: the model options, parsed), in ``run``
    (:class:`~attnkit.train.runs.resume.RunOptions`, whose ``log`` gets every line); ``given`` names the
    settings the command line gave, which a resume checks by the one rule. Returns the last line to print
    (None in a torchrun process other than the first). Flags that make no run are a
    :class:`~attnkit.train.tasks.classify.start.PlanError`."""
    from attnkit.data.readers import ReaderSettings
    from attnkit.train.metrics import metrics_lines

    start.require_baseline(values)
    reader = ReaderSettings.of(values).kwargs(run.warn)
    out = Path(run.out)
    backend: str = values["backend"]
    plan: Any = None  # a resume's: a numpy run's is its flags' values
    if run.resume:
        from attnkit.train.tasks.classify import TASK

        backend = TASK.resumed_config(run.out).get("backend", "torch")  # a run of this task, or refused
        _refuse_choices([name for name in given if name != "backend" or values["backend"] != backend], out)
        plan = (start.numpy_resume(values, given, log=run.log) if backend == "numpy"
                else start.resume_plan(values, given, run.warn, log=run.log))
        if plan is None:
            return f"{out} finished training already; nothing to resume (it was left as it is)"
    if backend == "numpy":  # before any torch import
        from attnkit.train.tasks.numpy.numpy_backend import train_numpy

        values = plan or values
        if not values["data"] or values["baseline"]:
            raise start.PlanError("--baseline needs --backend torch" if values["baseline"] else
                                  "missing --data (the training data); see attnkit train --help")
        reader = ReaderSettings.of(values).kwargs(run.warn)  # a resume reads as the run did
        train_numpy(values, values["model_opt"], start.data_plan(values, out, reader), echo=run.log,
                    report=lambda title, metrics, labels: run.log("\n".join(metrics_lines(title, metrics, labels))))
        return None
    start.check_model(values)
    if plan is None:
        plan = start.new_plan(values, values["model_opt"], reader)
    if plan.mode == "new":
        from attnkit.train.runs.run import refuse_existing_run

        refuse_existing_run(plan.out, lambda saved: start.run_changes(saved, plan), flags=RUN_FLAGS,
                            resume=f"attnkit train --out {plan.out} --resume")
    from attnkit.train.runs.checkpoint import read_run_config
    from attnkit.train.tasks.classify.plan import run_plan
    from attnkit.train.tasks.classify.reports import comparison_lines, write_reports

    result = run_plan(plan, log=run.log)
    if not result.is_main:
        return None
    if result.test is not None:
        run.log("\n".join(metrics_lines("test", result.test, result.label_vocab.labels)))
        base = read_run_config(out).get("metrics", {}).get("baseline") if values["baseline"] else None
        for line in comparison_lines(result.test, base, plan.train_config.metric) if base is not None else ():
            run.log(line)
        write_reports(out, result, plan.train_config.metric, base)
        run.log(REPORTS_WRITTEN.format(out=out))
    return f"saved run to {out}"


def _refuse_choices(given: list[str], out: Path) -> None:
    """A resume goes on with the run's saved settings, so a choice of what to train (the model, its options, a
    preset, the backend: :class:`~attnkit.train.tasks.classify.settings.TrainChoice`, ``Backend``) given with it
    is refused, naming it, never silently dropped (the baseline is scored again when asked; the caller leaves
    out a backend that is the run's)."""
    from attnkit._checks import setting_fields
    from attnkit.train.tasks.classify.settings import Backend, TrainChoice

    chosen = {f.name for cls in (TrainChoice, Backend) for f, _ in setting_fields(cls)} - {"baseline"}
    refused = [name for name in given if name in chosen]
    if refused:
        raise start.PlanError(
            f"`resume` continues {out} with its saved settings and does not take "
            f"{', '.join(f'`{name}`' for name in refused)}; leave {'it' if len(refused) == 1 else 'them'} out to "
            "resume, or start a new run (another `out`, or `overwrite`) with the new settings")
