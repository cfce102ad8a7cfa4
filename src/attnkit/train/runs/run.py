"""One run pipeline: the run folder, its run id, resume, overwrite and the commits, for every task.

Classification (:func:`~attnkit.train.tasks.classify.pipeline.fit_classifier` and the
:class:`~attnkit.train.loop.trainer.Trainer`), translation, captioning and the
NumPy backend write their runs through this module; none builds a
:class:`~attnkit.train.runs.rundir.RunWriter` itself. A task

1. calls :func:`start_run` once its flags are read: an occupied folder is
   refused now, with nothing touched; the run id is the continued run's
   (``resume``) or a new one;
2. checks every input (data, saved state), then opens the writer
   (``with writer:``), which takes the run's lock;
3. commits one generation per epoch and a last one through
   :func:`commit_generation`, the one writer of a generation for every task
   (which files a run holds is the task's business; its ``config.json``
   frame, what is carried from the previous generation and how it is
   published are this module's); an ``overwrite`` replaces the old run only
   at the first commit.

:func:`save_run` is the same in one step: a finished model saved as one
generation. The transaction itself (generations, the atomic commit, the
lock) is :mod:`attnkit.train.runs.rundir`. Nothing here imports torch.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from attnkit._version import __version__
from attnkit.train.runs import fileops
from attnkit.train.runs.rundir import RunExistsError, RunFileError, RunWriter, read_manifest

__all__ = ["new_run_id", "committed_run_id", "start_run", "save_run", "add_to_run", "interrupted_advice",
           "commit_generation"]


def new_run_id() -> str:
    """A fresh run id (32 hex digits)."""
    return uuid.uuid4().hex


def committed_run_id(directory: str | os.PathLike[str]) -> str | None:
    """The run id of the run committed in ``directory`` (None when nothing is committed there)."""
    path = Path(directory)
    if not path.is_dir():
        return None
    manifest = read_manifest(path)
    return None if manifest is None else str(manifest.get("run_id"))


def interrupted_advice(out: str | os.PathLike[str], run_id: str | None, *, resume: str,
                       after: str | None = None, before: str | None = None) -> str:
    """The one rule of an interrupted run, for every task: what to do after Ctrl-C stopped the run writing
    ``out``, from what it had committed. Nothing of it (start again: the run that was there before, if any, is
    as it was), some epochs (``resume``, the command that goes on), or all of its training (``after``: what is
    left to do then, such as reports; None: nothing). The run is ``run_id``, or where that is not known, the
    run committed in ``out`` unless it is ``before``, the one committed there when the command started."""
    from attnkit.train.runs.rundir import read_run_config, run_status

    if os.environ.get("RANK", "0") != "0":  # another process of a torchrun run: the first one advises
        return "see the first process for what to do"
    try:
        committed = committed_run_id(out)
        ours = committed is not None and (committed == run_id if run_id is not None else committed != before)
        status = run_status(read_run_config(out)) if ours else None
    except (OSError, ValueError):  # a folder being written as Ctrl-C came: only what is certain is said
        committed, ours, status = None, False, None
    if not ours:
        kept = f" ({out} holds the run that was there before, as it was)" if committed else ""
        return (f"nothing of this run was saved before its first epoch ended{kept}, so there is nothing to "
                "resume: start it again with the same command")
    if status != "done":
        return f"continue with: {resume}"
    return f"training had finished and {out} is saved" + (f", but {after}" if after else "")


def start_run(directory: str | os.PathLike[str], *, run_id: str | None = None, resume: bool = False,
              overwrite: bool = False, resumable: bool = True, flags: Mapping[str, str] | None = None) -> RunWriter:
    """The writer of a run in ``directory``, not yet opened: the folder is judged now and touched only
    once the task opens the writer (``with writer:``, which takes the lock).

    Args:
        directory: the run folder (made when the writer opens).
        run_id: the run written; default: with ``resume`` the run committed in
            ``directory``, else a new id.
        resume: continue the run committed in ``directory`` (excludes ``overwrite``).
        overwrite: replace another run in ``directory``, at the first commit.
        resumable: whether this kind of run can be resumed (a refusal then
            suggests ``resume``).
        flags: the calling command's flags for the messages (``{"overwrite": "--overwrite", ...}``,
            :func:`~attnkit.train.runs.rundir.check_run_dir`).

    Raises:
        ValueError: ``resume`` and ``overwrite`` both.
        RunFileError: ``resume`` with nothing committed in ``directory``.
        RunExistsError, RunLockedError: the folder holds something else, or
            another process writes it (:func:`~attnkit.train.runs.rundir.check_run_dir`).
    """
    if resume and overwrite:
        raise ValueError(f"resume continues the run in {directory} and overwrite replaces it; give one")
    if run_id is None:
        run_id = committed_run_id(directory) if resume else new_run_id()
        if run_id is None:
            raise RunFileError(f"cannot resume: {directory} holds no committed run")
    return RunWriter(directory, run_id, overwrite=overwrite, resumable=resumable, flags=flags)


def commit_generation(writer: RunWriter, fields: Mapping[str, Any], *, status: str, files: Mapping[str, Any],
                      progress: Mapping[str, Any] | None = None, carry: Iterable[str] = ()) -> Path:
    """Write one generation of any task's run into a staging folder of the open ``writer`` and commit it.

    ``files``: name -> text, bytes, a JSON value, or a function that writes the path it is given. A name in
    ``carry`` (a name ending in ``/``: every file of that folder) is linked from the committed generation
    where that holds it, and a file of ``files`` so carried is not written again. ``config.json`` is the
    same frame for every task: the run id, the task's ``fields`` (its model, settings, data, metrics),
    ``status``, ``progress`` (or ``fields``' own) and the attnkit version that wrote it. Returns the
    generation folder."""
    current = writer.current()
    names = [n for name in carry for n in ([name] if not name.endswith("/") else [] if current is None else [
        p.relative_to(current).as_posix() for p in sorted((current / name).glob("*")) if p.is_file()])]
    staging = writer.stage(carry=names)
    for name, content in files.items():
        target = staging / name
        if target.is_file():
            continue  # carried from the committed generation
        fileops.fs.mkdir(target.parent)
        if callable(content):
            content(target)
        elif isinstance(content, bytes):
            fileops.atomic_write_bytes(target, content)
        elif isinstance(content, str):
            fileops.atomic_write_text(target, content)
        else:
            fileops.atomic_write_json(target, content)
    config = {**fields, "run_id": writer.run_id, "status": status}  # the frame's own keys are the writer's
    if progress is not None:
        config["progress"] = dict(progress)
    config["attnkit_version"] = __version__
    fileops.atomic_write_json(staging / "config.json", config)
    return writer.commit(staging, status=status, epoch=(config.get("progress") or {}).get("epoch"))


def save_run(directory: str | os.PathLike[str], commit: Callable[[RunWriter], Path], *, run_id: str,
             overwrite: bool = False, resumable: bool = False) -> Path:
    """Save a finished run as one generation: ``commit(writer)`` stages and commits it under the lock.

    Returns the generation folder. A folder holding another run is refused
    unless ``overwrite`` (see :func:`start_run`); a saved run is written whole, so the refusal suggests
    ``resume`` only when ``resumable``.
    """
    with start_run(directory, run_id=run_id, overwrite=overwrite, resumable=resumable) as writer:
        return commit(writer)


def add_to_run(directory: str | os.PathLike[str], files: Mapping[str, str | bytes]) -> Path:
    """Add ``files`` (name -> text or bytes: a finished model's reports) to the run committed in
    ``directory``, in one commit under the run's lock (:meth:`~attnkit.train.runs.rundir.RunWriter.amend`), and
    copy them at the run's root. Returns the new generation folder."""
    run_id = committed_run_id(directory)
    if run_id is None:
        raise RunFileError(f"{directory} holds no committed run to add {', '.join(sorted(files))} to")
    with start_run(directory, run_id=run_id, resume=True) as writer:
        return writer.amend(files)


def refuse_existing_run(out: str | os.PathLike[str], changes: Callable[[dict[str, Any]], list[str]], *,
                        flags: Mapping[str, str] | None = None, resume: str | None = None) -> None:
    """A new run into ``out`` that holds a committed run, for every kind: say whether it is this very run
    (``changes`` of its saved config finds nothing: trained already, or interrupted) or what differs
    (``changes``: one line per setting, ``` `setting` there, now```; the first five shown). ``resume``: how
    to continue an unfinished run (None: the kind cannot resume). A lock or files attnkit did not write are
    named by :func:`~attnkit.train.runs.rundir.check_run_dir` first. Raises :class:`RunExistsError`."""
    from attnkit.train.runs.rundir import check_run_dir, read_run_config, run_status

    run_id = committed_run_id(out)
    if run_id is None:
        return
    check_run_dir(out, run_id, flags=flags)
    saved = read_run_config(out)
    found, done = changes(saved), run_status(saved) == "done"
    if not found:
        if done or resume is None:
            raise RunExistsError(f"{out} already holds this run, trained with the same data and options; pass "
                                 "--overwrite to train it again")
        raise RunExistsError(f"{out} holds this run, interrupted before it finished; continue it with {resume}, "
                             "or pass --overwrite to start again")
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    raise RunExistsError(f"{out} already holds a different run ({shown}); replace it with --overwrite"
                         + ("" if done or resume is None else " or continue it with --resume")
                         + ", or choose another --out")
