"""Run directories as transactions, without torch: generations, one atomic commit, one writer.

A run directory moves from one complete state to the next in one atomic step::

    RUN/
      current.json          the manifest: which generation is committed, its status and epoch
      checkpoints/000007/   the committed generation: config.json, model.safetensors,
                            tokenizer.json, labels.json, history.jsonl, train_state/ ...
      checkpoints/000006/   the previous generation, kept so a reader that opened it still finishes
      report.txt ...        the committed generation's reports, copied at the root (``published``)
      .lock                 held (``flock``) by the one process that writes the run

What is derived from a committed model (its reports) joins the run in a commit of
its own, :meth:`RunWriter.amend`: the generation again with those files added. The
files it publishes are also copied at the root for the user to open; the manifest
names them (``published``), and the next commit that does not publish them again
removes them first, so the root never shows the reports of a model the run no
longer serves; a root file of that name that the writer did not put there is
the user's and is left alone.

A writer fills a staging folder (``RUN/.staging-*``), flushes every file to
disk, renames the folder to the next generation and then replaces
``current.json`` through a temporary file and ``os.replace``: that rename is
the commit. An interruption at any moment leaves ``current.json`` naming a
complete generation, old or new; what an interrupted writer left behind
(a staging folder, a generation that was never named) is swept by the next
writer. Readers call :func:`committed_dir` and never see half a checkpoint.

Only runs are replaced: a folder is written into when it is missing, empty,
or an attnkit run: a manifest ``current.json`` that a writer wrote (its
format, generation and run id), or nothing but what a writer leaves before its
first commit (staging folders, the lock, generation folders). A generation
folder is a writer's only when its name has six digits and it holds the mark
``.attnkit-generation`` that :meth:`RunWriter.stage` puts in every staging
folder (or, for runs written before the mark, it is a committed generation
with its ``config.json``); whatever else lies under ``checkpoints/`` is the
user's. Any other folder is refused, ``overwrite`` or not, naming the files
that would be lost; an overwrite removes the old run's own generations and
manifest and nothing else.
A folder that another process is writing is named as such before anything
else is judged. An operating-system error while writing (a full disk, a
read-only folder) names the path and says what stays intact: the last commit,
from which the run resumes.

Every file operation goes through :data:`attnkit.train.runs.fileops.fs`, one small
object, so that the fault-injection tests can make the n-th operation fail and
prove the promise for every point of a commit. The lock is
:class:`attnkit.train.runs.runlock.RunLock`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnkit.train.runs import fileops
from attnkit.train.runs.digests import check_record, generation_files, record_files, verify_files
from attnkit.train.runs.fileops import (
    FileOps,
    RunFileError,
    RunWriteError,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    os_error_message,
    read_json,
)
from attnkit.train.runs.run_files import check_run_config
from attnkit.train.runs.runlock import LOCK, RunLock, RunLockedError, check_unlocked

__all__ = [
    "RunExistsError", "RunLockedError", "RunFileError", "RunWriteError", "UnfinishedRunError", "FileOps",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "read_json", "read_run_config",
    "read_manifest", "committed_dir", "check_output_path", "check_run_dir", "RunLock", "RunWriter", "run_status",
    "require_finished", "data_fingerprint", "clear_run", "check_unlocked", "MANIFEST", "GENERATIONS", "reports_dir",
    "verify_committed", "verify_run", "record_digests", "RESUME_ONLY",
]

MANIFEST = "current.json"
GENERATIONS = "checkpoints"
STAGING_PREFIX = ".staging-"
GENERATION_MARK = ".attnkit-generation"
FORMAT = 1
RESUME_ONLY = "train_state/"  # the files of a generation that only resuming reads (verified by it)
_GENERATION_NAME = re.compile(r"[0-9]{6}")
_log = logging.getLogger("attnkit")
_UNRECORDED_NOTED: set[tuple[str, int]] = set()


class RunExistsError(FileExistsError):
    """The output directory already holds another run (or other files)."""


class UnfinishedRunError(ValueError):
    """The run's training did not finish; it can be resumed, or read with ``allow_unfinished``."""


def _is_writer_file(name: str) -> bool:
    """Whether a name in a run folder is one a run writer makes (lock, manifest, generations, staging)."""
    return (name in (LOCK, MANIFEST, GENERATIONS) or name.startswith(STAGING_PREFIX)
            or (name.startswith(f".{MANIFEST}.") and name.endswith(".tmp")))


def _foreign_entries(directory: Path) -> list[str]:
    """The names in ``directory`` that no run writer made, sorted."""
    return sorted(p.name for p in directory.iterdir() if not _is_writer_file(p.name))


def read_manifest(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The committed manifest ``RUN/current.json`` (None when there is none)."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("generation"), int):
        raise RunFileError(f"{path} is not an attnkit run manifest (no generation number)")
    return data


def _generation_dir(directory: Path, generation: int) -> Path:
    return directory / GENERATIONS / f"{generation:06d}"


def _writers_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest when a run writer wrote it (its format, generation and run id), else None."""
    try:
        manifest = read_manifest(directory)
    except RunFileError:
        return None
    if manifest is None or not isinstance(manifest.get("run_id"), str) or not isinstance(
            manifest.get("format"), int) or manifest["generation"] < 1:
        return None
    return manifest


def _generations(directory: Path, manifest: dict[str, Any] | None) -> tuple[list[int], list[str]]:
    """The generation folders under ``checkpoints/`` that a run writer made (numbers, sorted), and every
    other entry there (paths relative to ``directory``, sorted).

    A writer's generation has a six-digit name and holds :data:`GENERATION_MARK`; a run committed before
    the mark existed is recognised by its manifest: generations up to the committed one holding ``config.json``.
    """
    folder = directory / GENERATIONS
    if not folder.exists() and not folder.is_symlink():
        return [], []
    if folder.is_symlink() or not folder.is_dir():
        return [], [GENERATIONS]
    committed = manifest["generation"] if manifest else 0
    owned: list[int] = []
    foreign: list[str] = []
    for entry in folder.iterdir():
        ours = (_GENERATION_NAME.fullmatch(entry.name) is not None and entry.is_dir() and not entry.is_symlink()
                and ((entry / GENERATION_MARK).is_file()
                     or (int(entry.name) <= committed and (entry / "config.json").is_file())))
        if ours:
            owned.append(int(entry.name))
            foreign += [f"{GENERATIONS}/{entry.name}/{name}" for name in _unlisted(entry)]
        else:
            foreign.append(f"{GENERATIONS}/{entry.name}")
    return sorted(owned), sorted(foreign)


def _mark_record(generation: Path) -> dict[str, Any] | None:
    """The files the writer of ``generation`` made, as its mark records them (None for a generation whose
    mark records none: one written before the record, or a mark that is not the writer's JSON)."""
    try:
        mark = json.loads((generation / GENERATION_MARK).read_text("utf-8"))
        return check_record(mark["files"], str(generation / GENERATION_MARK))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _unlisted(generation: Path) -> list[str]:
    """The files in ``generation`` that its writer did not make (none known for a generation without a record)."""
    record = _mark_record(generation)
    return [] if record is None else [n for n in generation_files(generation, GENERATION_MARK) if n not in record]


def _remove_generation(generation: Path) -> None:
    """Remove what the writer of ``generation`` made: the files its mark records, the mark, then the folders
    left empty; a file a user put there stays, with its folder. A generation without a record (written
    before it) is removed whole."""
    record = _mark_record(generation)
    if record is None:
        fileops.fs.remove_tree(generation)
        return
    for name in record:
        fileops.fs.remove(generation / name)
    fileops.fs.remove(generation / GENERATION_MARK)
    for folder in sorted((p for p in generation.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    if not any(generation.iterdir()):
        generation.rmdir()


def clear_run(directory: str | os.PathLike[str]) -> None:
    """Delete what a run writer made in ``directory``: its own generations, then the manifest and the lock;
    a folder holding anything else under ``checkpoints/`` is refused first (:class:`RunExistsError`)."""
    path = Path(directory)
    manifest = _writers_manifest(path)
    owned, strays = _generations(path, manifest)
    if strays or ((path / MANIFEST).is_file() and manifest is None):
        raise RunExistsError(f"{path} holds files attnkit did not write: {_listing(strays or [MANIFEST])}; "
                             "nothing was removed")
    for number in owned:
        _remove_generation(_generation_dir(path, number))
    fileops.fs.remove(path / MANIFEST)
    if (path / GENERATIONS).is_dir() and not any((path / GENERATIONS).iterdir()):
        (path / GENERATIONS).rmdir()
    fileops.fs.remove(path / LOCK)


def _listing(names: list[str]) -> str:
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def committed_dir(directory: str | os.PathLike[str]) -> Path:
    """The folder that holds the committed files of run ``directory``: the generation named by
    ``current.json``. A :class:`RunFileError` says what is wrong when there is none.
    """
    path = Path(directory)
    folder, manifest = _committed(path)
    _verify(path, manifest, folder, skip=RESUME_ONLY)
    return folder


def _committed(path: Path) -> tuple[Path, dict[str, Any]]:
    """The committed generation folder of run ``path`` and its manifest, unverified."""
    manifest = read_manifest(path)
    if manifest is None:
        leftovers = (path / GENERATIONS).is_dir() or any(path.glob(f"{STAGING_PREFIX}*")) or (path / LOCK).is_file()
        if leftovers and not _generations(path, None)[1]:
            check_unlocked(path)  # a run still in its first epoch is named as being written
            raise RunFileError(f"{path} holds no committed checkpoint: its training was interrupted before "
                               "the first epoch ended; start its training again with overwrite")
        raise RunFileError(f"{path} is not an attnkit run directory (no {MANIFEST})")
    folder = _generation_dir(path, manifest["generation"])
    if not folder.is_dir():
        raise RunFileError(f"{path / MANIFEST} names checkpoint {folder}, which is missing")
    return folder, manifest


def _verify(path: Path, manifest: dict[str, Any], folder: Path, *, under: str = "", skip: str | None = None,
            notice: bool = True) -> int:
    """Check ``folder``'s files against ``manifest``'s record (:mod:`attnkit.train.runs.digests`); returns the
    bytes checked. A run committed before the record is read as it is, with a one-line notice (once)."""
    if "files" not in manifest:
        if notice and (str(path), manifest["generation"]) not in _UNRECORDED_NOTED:
            _UNRECORDED_NOTED.add((str(path), manifest["generation"]))
            _log.warning(f"notice: {path} was committed without the digests of its files, so its bytes are not "
                         f"verified; attnkit verify --record {path} adds them")
        return 0
    return verify_files(folder, check_record(manifest["files"], str(path / MANIFEST)), under=under, skip=skip)


def verify_committed(directory: str | os.PathLike[str], *, under: str = "") -> Path:
    """The committed generation of run ``directory`` once the files whose names start with ``under`` match
    their record (:func:`committed_dir` checks all but :data:`RESUME_ONLY`); else a
    :class:`~attnkit.train.runs.digests.RunIntegrityError` naming the first file that does not."""
    folder, manifest = _committed(Path(directory))
    _verify(Path(directory), manifest, folder, under=under)
    return folder


def verify_run(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Check every file of run ``directory``'s committed generation against its record, loading nothing.

    Returns ``{"run", "generation", "files", "bytes", "recorded"}``; ``recorded`` is False for a run
    committed before the record (nothing could be checked). A file that differs raises
    :class:`~attnkit.train.runs.digests.RunIntegrityError`; a folder that is no run, :class:`RunFileError`."""
    path = Path(directory)
    folder, manifest = _committed(path)
    checked = _verify(path, manifest, folder, notice=False)
    files = manifest.get("files")
    return {"run": str(path), "generation": manifest["generation"], "files": len(files or {}), "bytes": checked,
            "recorded": files is not None}


def record_digests(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Add the record of its files to run ``directory``'s committed generation when it has none (a run
    committed before the record), under the run's lock: the generation's mark first, then the manifest, in
    one atomic replace. A run that has a record is verified instead, never recorded again (that would
    bless damaged bytes). Returns what :func:`verify_run` returns."""
    path = Path(directory)
    if _writers_manifest(path) is None:
        _committed(path)  # names what is wrong
        raise RunFileError(f"{path / MANIFEST} was not written by an attnkit run writer")
    with RunLock(path):
        manifest = _writers_manifest(path)
        assert manifest is not None
        if "files" in manifest:
            return verify_run(path)
        folder = _committed(path)[0]
        files = record_files(folder, skip=GENERATION_MARK)
        atomic_write_json(folder / GENERATION_MARK, {"run_id": manifest["run_id"], "files": files})
        atomic_write_json(path / MANIFEST, {**manifest, "files": files})
        fileops.fs.sync_dir(path)
    return verify_run(path)


def reports_dir(directory: str | os.PathLike[str]) -> Path:
    """Where run ``directory``'s reports are read: its committed generation once it holds them, else the
    run's root (a run whose reports were written before they joined the commit, or none yet)."""
    try:
        folder = committed_dir(directory)
    except RunFileError:
        return Path(directory)
    published = (read_manifest(directory) or {}).get("published")
    return folder if published else Path(directory)


def read_run_config(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """The committed ``config.json`` of a run directory, each field it holds of the type and range it was
    written with (:func:`attnkit.train.runs.run_files.check_run_config`); else a RunFileError naming the file
    and the field."""
    path = committed_dir(directory) / "config.json"
    if not path.is_file():
        raise RunFileError(f"{path} is missing: {directory} is not a complete attnkit run")
    return check_run_config(path, read_json(path))


def run_status(meta: dict[str, Any]) -> str:
    """``"done"`` or ``"training"`` (runs that predate the status field count as done)."""
    return str(meta.get("status", "done"))


def require_finished(directory: str | os.PathLike[str], meta: dict[str, Any], *,
                     allow_unfinished: bool = False, hint: str | None = None) -> str | None:
    """Refuse a run whose training did not finish, unless ``allow_unfinished``.

    Returns None for a finished run, else (when allowed) one line that says
    which weights are served, for the caller to show. ``hint`` says how to
    finish the run (default: ``attnkit train --out RUN --resume``).
    """
    if run_status(meta) == "done":
        return None
    progress = meta.get("progress") or {}
    epoch, epochs = progress.get("epoch", "?"), progress.get("epochs", "?")
    best = progress.get("best_epoch")
    weights = f"the best weights so far (epoch {best})" if best else f"the weights after epoch {epoch}"
    if not allow_unfinished:
        raise UnfinishedRunError(
            f"{directory} did not finish training (stopped after epoch {epoch} of {epochs}); "
            f"{hint or f'continue it with attnkit train --out {directory} --resume'}, or pass "
            f"`allow_unfinished` to use {weights}")
    return f"warning: {directory} is unfinished (epoch {epoch} of {epochs}); using {weights}"


def named(setting: str, flags: Mapping[str, str] | None, otherwise: str | None = None) -> str:
    """How a message names ``setting`` (``"overwrite"``): the caller's flag for it (``flags``, such as
    ``{"overwrite": "--overwrite"}`` from a command that has that flag), else ``otherwise`` or its Python name."""
    return (flags or {}).get(setting) or otherwise or setting


def check_output_path(directory: str | os.PathLike[str], *, flags: Mapping[str, str] | None = None) -> Path:
    """``directory`` as a Path, unless it is a symbolic link that leads nowhere (missing, or a loop);
    ``flags`` as in :func:`check_run_dir`."""
    path = Path(directory)
    if path.is_symlink() and not path.exists():
        try:
            path.stat()
            leads = "which does not exist"
        except OSError as err:
            leads = "which loops back on itself" if err.errno == errno.ELOOP else "which does not exist"
        raise RunFileError(f"output path {path} is a symbolic link to {os.readlink(path)}, {leads}; "
                           f"choose another {named('out', flags, 'output path')}")
    return path


def check_run_dir(directory: str | os.PathLike[str], run_id: str, *, overwrite: bool = False,
                  resumable: bool = True, check_lock: bool = True, flags: Mapping[str, str] | None = None) -> None:
    """Refuse to write run ``run_id`` into a directory that holds something else.

    First, with ``check_lock``, a directory that another live process writes
    raises :class:`RunLockedError`. Then it passes when the directory is
    missing or empty, when it holds the same run (same ``run_id`` in its
    manifest), or, with ``overwrite``, when it holds another attnkit run
    (:func:`_foreign_entries` finds nothing a run writer did not make, or it
    has a manifest). A folder that is not an attnkit run is refused even with
    ``overwrite``, naming the files that would be lost. The error suggests
    ``resume`` only for ``resumable`` kinds of run. Touches nothing.

    ``flags`` spells the settings the messages name as the calling command's flags
    (``{"out": "--out", "overwrite": "--overwrite", "resume": "--resume"}``, :func:`named`);
    without it they are named as in Python (``overwrite``, ``resume``).
    """
    path = check_output_path(directory, flags=flags)
    if not path.exists():
        return
    if not path.is_dir():
        raise RunExistsError(f"output path {path} exists and is not a directory")
    if check_lock:
        check_unlocked(path)
    if not any(p.name != LOCK for p in path.iterdir()):
        return
    manifest = _writers_manifest(path) if (path / MANIFEST).is_file() else None
    foreign = _foreign_entries(path)
    if (path / MANIFEST).is_file() and manifest is None:
        foreign = sorted({*foreign, MANIFEST})
    if manifest is None:  # the root may hold only what a writer leaves before its first commit
        foreign = sorted({*foreign, *_generations(path, None)[1]})
        if foreign:
            raise RunExistsError(
                f"output directory {path} is not an attnkit run and not empty: it holds {_listing(foreign)}; "
                f"attnkit writes only into an empty folder or one of its own runs and never removes files it did "
                f"not write, so choose another {named('out', flags, 'output directory')}")
        if overwrite:
            return
        raise RunExistsError(f"output directory {path} holds a run interrupted before its first checkpoint; "
                             f"start again with {named('overwrite', flags)}")
    owned, strays = _generations(path, manifest)
    if strays or manifest["generation"] not in owned:
        lost = strays or [f"{GENERATIONS}/{manifest['generation']:06d} (missing)"]
        raise RunExistsError(
            f"output directory {path} holds an attnkit run whose {GENERATIONS}/ also holds files attnkit did not "
            f"write: {_listing(lost)}; attnkit never removes files it did not write, so move them or choose another "
            f"{named('out', flags, 'output directory')}")
    other = manifest.get("run_id")
    if other == run_id or overwrite:
        return
    hint = f"replace it with {named('overwrite', flags)}" + (
        f" or continue it with {named('resume', flags)}" if resumable else "")
    raise RunExistsError(f"output directory {path} already holds a different run (run_id {other}); {hint}")


# --- the writer -----------------------------------------------------------------------------------


class RunWriter:
    """Writes the generations of one run, one atomic commit each, under the run's lock.

    Args:
        directory: the run directory.
        run_id: the run written; a directory holding a different run is refused
            (:func:`check_run_dir`) unless ``overwrite``.
        overwrite: replace whatever run is there, but only at this writer's
            first commit: until then the old run stays whole and readable.
        resumable: whether the refusal message may suggest ``resume``.
        flags: the calling command's flags, by the settings they set, for the messages
            (:func:`check_run_dir`).

    Use::

        with RunWriter(out, run_id) as writer:
            staging = writer.stage(carry=["tokenizer.json"])
            ... write files into staging ...
            writer.commit(staging, status="training", epoch=1)
    """

    def __init__(self, directory: str | os.PathLike[str], run_id: str, *, overwrite: bool = False,
                 resumable: bool = True, flags: Mapping[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.run_id = run_id
        self.overwrite = overwrite
        self.resumable = resumable
        self.flags = dict(flags or {})
        check_run_dir(self.directory, run_id, overwrite=overwrite, resumable=resumable, flags=self.flags)
        self.lock = RunLock(self.directory)
        self.commits = 0
        self._staging: list[Path] = []

    # lifecycle
    def open(self) -> RunWriter:
        """Take the lock (creating the directory) and sweep what an interrupted writer left."""
        self.lock.acquire()
        try:
            # again, under the lock (held by this writer, so not checked again)
            check_run_dir(self.directory, self.run_id, overwrite=self.overwrite, check_lock=False, flags=self.flags)
            self._sweep()
        except BaseException:
            self.lock.release()
            raise
        return self

    def close(self) -> None:
        for path in self._staging:
            fileops.fs.remove_tree(path)
        self._staging.clear()
        self.lock.release()

    def __enter__(self) -> RunWriter:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: object) -> None:
        self.close()
        if isinstance(err, OSError) and not isinstance(err, (RunLockedError, RunExistsError)):
            raise RunWriteError(f"{os_error_message(err, self.directory)}; {self.intact()}") from err

    def intact(self) -> str:
        """What stays of the run after a failed write: its last commit (resumable), or nothing yet."""
        manifest = read_manifest(self.directory) if (self.directory / MANIFEST).is_file() else None
        if manifest is None:
            return f"nothing was committed to {self.directory} yet: fix that and start again"
        if self.overwrite and self.commits == 0:
            return f"{self.directory} still holds the run it held before, unchanged"
        epoch = manifest.get("epoch")
        state = f"{self.directory} is intact at its last commit" + (f" (epoch {epoch})" if epoch else "")
        if manifest.get("status") == "done":
            return f"{state}, finished"
        return f"{state}: fix that, then continue it with {named('resume', self.flags)}" if self.resumable \
            else f"{state}"

    # generations
    def current(self) -> Path | None:
        """The committed generation folder of this run (None before the first commit or for another run)."""
        manifest = read_manifest(self.directory)
        if manifest is None or (self.overwrite and self.commits == 0):
            return None
        return _generation_dir(self.directory, manifest["generation"])

    def stage(self, carry: Iterable[str] = ()) -> Path:
        """A fresh staging folder; files named in ``carry`` come from the committed generation (hard links)."""
        path = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.directory))
        os.chmod(path, 0o777 & ~fileops.umask())
        self._staging.append(path)
        atomic_write_text(path / GENERATION_MARK, self.run_id + "\n")
        source = self.current()
        for name in carry:
            if source is not None and (source / name).is_file():
                fileops.fs.mkdir((path / name).parent)
                fileops.fs.link(source / name, path / name)
        return path

    def commit(self, staging: Path, *, status: str, epoch: int | None = None,
               info: dict[str, Any] | None = None, publish: Iterable[str] = ()) -> Path:
        """Publish ``staging`` as the next generation; returns the generation folder.

        Order: the staged files are already flushed; the folder is renamed to
        ``checkpoints/NNNNNN``; the root copies of the previous generation's
        files that this one does not ``publish`` again are removed; ``current.json``
        is replaced (the commit); the generation's files named in ``publish``
        are copied at the run's root (:meth:`_publish`); then generations older
        than the previous one (on an overwrite's first commit: all the replaced
        run's generations) are removed.
        """
        manifest = read_manifest(self.directory)
        previous = manifest["generation"] if manifest else 0
        number = max([previous, *self._generation_numbers()]) + 1
        target = _generation_dir(self.directory, number)
        current = self.current()
        files = record_files(staging, skip=GENERATION_MARK, carried_from=current,
                             carried=(manifest or {}).get("files") if current is not None else None)
        atomic_write_json(staging / GENERATION_MARK, {"run_id": self.run_id, "files": files})
        fileops.fs.mkdir(target.parent)
        fileops.fs.sync_dir(staging)
        fileops.fs.replace(staging, target)
        self._staging.remove(staging)
        fileops.fs.sync_dir(target.parent)
        publish = sorted(set(publish))
        self._withdraw(manifest, keep=publish)
        atomic_write_json(self.directory / MANIFEST, {
            "format": FORMAT, "generation": number, "run_id": self.run_id, "status": status, "epoch": epoch,
            "committed": time.strftime("%Y-%m-%d %H:%M:%S"), **(info or {}), "files": files,
            **({"published": publish} if publish else {})})
        fileops.fs.sync_dir(self.directory)
        self._publish(target, publish)
        replacing = self.overwrite and self.commits == 0
        self.commits += 1
        keep = {number} if replacing else {number, previous}
        for old in self._generation_numbers():
            if old not in keep:
                _remove_generation(_generation_dir(self.directory, old))
        return target

    def amend(self, files: Mapping[str, str | bytes], *, publish: bool = True) -> Path:
        """Commit the run's current generation again with ``files`` (name -> text or bytes) added or
        replaced, its status, epoch and other files kept: what is derived from a committed model (its
        reports) joins the run in one commit. With ``publish`` each of ``files`` is also copied at the run's
        root, beside those published before. Returns the new generation folder."""
        manifest = _writers_manifest(self.directory)
        if manifest is None or manifest["run_id"] != self.run_id or (self.overwrite and self.commits == 0):
            raise RunFileError(f"{self.directory} holds no committed generation of run {self.run_id} to add "
                               f"{', '.join(sorted(files))} to")
        current = _generation_dir(self.directory, manifest["generation"])
        kept = [p.relative_to(current).as_posix() for p in sorted(current.rglob("*"))
                if p.is_file() and p.name != GENERATION_MARK and p.relative_to(current).as_posix() not in files]
        staging = self.stage(carry=kept)
        for name, content in files.items():
            fileops.fs.mkdir((staging / name).parent)
            if isinstance(content, bytes):
                atomic_write_bytes(staging / name, content)
            else:
                atomic_write_text(staging / name, content)
        info = {k: v for k, v in manifest.items()
                if k not in ("format", "generation", "run_id", "status", "epoch", "committed", "published", "files")}
        names = [*manifest.get("published", []), *files] if publish else manifest.get("published", [])
        return self.commit(staging, status=manifest["status"], epoch=manifest.get("epoch"), info=info,
                           publish=names)

    def _ours_at_root(self, name: str, generations: Iterable[Path]) -> bool:
        """Whether the root's ``name`` is a copy this writer published (the same file, or the same bytes, as
        that name in one of ``generations``): anything else there is the user's and is left alone."""
        import filecmp

        root = self.directory / name
        if not root.is_file() or root.is_symlink():
            return False
        return any((g / name).is_file() and (os.path.samefile(root, g / name) or filecmp.cmp(root, g / name, False))
                   for g in generations)

    def _withdraw(self, manifest: dict[str, Any] | None, keep: Sequence[str]) -> None:
        """Remove the root copies published with ``manifest``'s generation that are not in ``keep``, before
        the next commit: a run's root never shows the reports of a model it no longer serves."""
        if not manifest or not manifest.get("published"):
            return
        generation = _generation_dir(self.directory, manifest["generation"])
        for name in manifest["published"]:
            if name not in keep and self._ours_at_root(name, [generation]):
                fileops.fs.remove(self.directory / name)

    def _publish(self, generation: Path, names: Sequence[str]) -> None:
        """Copy each of ``names`` of ``generation`` to the run's root (through a temporary name and one
        rename each), where the root holds nothing of that name or a copy this writer published. A copy, not
        a link: the root's file is the user's to open and edit, the generation's stays as recorded."""
        older = [_generation_dir(self.directory, n) for n in self._generation_numbers()]
        for name in names:
            root = self.directory / name
            if root.exists() and not self._ours_at_root(name, older):
                continue  # the user's file of that name stays; the generation holds the run's own
            temporary = self.directory / f"{STAGING_PREFIX}{name}"
            fileops.fs.remove(temporary)
            fileops.fs.write(temporary, (generation / name).read_bytes())
            fileops.fs.replace(temporary, root)

    def _generation_numbers(self) -> list[int]:
        """The generations this writer may number after and remove: those a run writer made, never a user's."""
        return _generations(self.directory, _writers_manifest(self.directory))[0]

    def _sweep(self) -> None:
        for path in self.directory.glob(f"{STAGING_PREFIX}*"):  # folders, and files being published
            fileops.fs.remove_tree(path) if path.is_dir() and not path.is_symlink() else fileops.fs.remove(path)
        for path in self.directory.glob(f".{MANIFEST}.*.tmp"):
            fileops.fs.remove(path)
        manifest = read_manifest(self.directory)
        if manifest is None:
            return
        newest = manifest["generation"]
        for number in self._generation_numbers():
            if number > newest:  # renamed into place, never committed
                _remove_generation(_generation_dir(self.directory, number))


# --- what a run was trained on --------------------------------------------------------------------


def data_fingerprint(path: str | os.PathLike[str]) -> str:
    """A SHA-256 over a data file, or over a folder's files (relative names and contents, sorted)."""
    root = Path(path)
    digest = hashlib.sha256()
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    for file in files:
        if file is not root:
            digest.update(file.relative_to(root).as_posix().encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()
