"""Run folders in tests: a file's new bytes recorded as its commit would have recorded them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from attnkit.train.runs.rundir import GENERATIONS, MANIFEST


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
