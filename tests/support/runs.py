"""Run folders in tests: a file's new bytes recorded as its commit would have recorded them; a disk that fills
after a run's first commit."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

from attnkit.train.runs import fileops
from attnkit.train.runs.rundir import GENERATIONS, MANIFEST


class FullDisk(fileops.FileOps):
    """Every write into ``run`` fails with ENOSPC once ``run`` has a committed generation: a run that stops
    after its first commit (``monkeypatch.setattr(fileops, "fs", FullDisk(run))``)."""

    def __init__(self, run: Path) -> None:
        self.run = run

    def write(self, path: Path, data: bytes) -> None:
        if (self.run / MANIFEST).is_file() and self.run in path.parents:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().write(path, data)


def recorded(path: Path) -> Path:
    """Record ``path``'s present bytes (a file of a run's committed generation) in the run's manifest, as a
    writer that had written them would have: tests of the loaders' own checks of a file's content reach
    them behind the digest check, which refuses any file changed after its commit. Returns ``path``."""
    path = Path(path)
    generation = next((p for p in path.parents if p.parent.name == GENERATIONS), None)
    if generation is None:  # not a file of a generation (the manifest itself)
        return path
    manifest_path = generation.parent.parent / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    if "files" in manifest and int(generation.name) == manifest["generation"]:
        data = path.read_bytes()
        name = path.relative_to(generation).as_posix()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        manifest_path.unlink()  # never write through a link
        manifest_path.write_text(json.dumps(manifest))
    return path
