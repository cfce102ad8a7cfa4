"""``attnkit verify RUN [RUN ...]``: check runs' bytes against the digests their commits recorded, loading no model."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

__all__ = ["verify"]


def _check(run: str, record: bool) -> dict[str, Any]:
    """One run's result: ``status`` ok, recorded, unrecorded, damaged or error, and its one-line ``message``."""
    from attnkit.train.runs.digests import RunIntegrityError
    from attnkit.train.runs.rundir import record_digests, verify_run

    try:
        if record:
            before = verify_run(run)
            result = record_digests(run) if not before["recorded"] else before
            status = "ok" if before["recorded"] else "recorded"
        else:
            result = verify_run(run)
            status = "ok" if result["recorded"] else "unrecorded"
    except RunIntegrityError as err:
        return {"run": run, "status": "damaged", "message": f"{run}: damaged: {err}"}
    except (OSError, ValueError) as err:
        from attnkit.cli.messages import user_os_error

        text = user_os_error(err) if isinstance(err, OSError) else str(err)
        return {"run": run, "status": "error", "message": f"{run}: not verified: {text}"}
    size = f"{result['files']} files, {result['bytes']:,} bytes"
    message = {
        "ok": f"{run}: ok: generation {result['generation']}, {size} match their SHA-256",
        "recorded": f"{run}: recorded the SHA-256 of generation {result['generation']}'s {size}",
        "unrecorded": f"{run}: not verified: committed without the digests of its files; "
                      f"attnkit verify --record {run} adds them",
    }[status]
    return {**result, "run": run, "status": status, "message": message}


@click.command("verify")
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--record", is_flag=True,
              help="Add the digests to runs committed without them (a run that has them is verified, never "
                   "recorded again).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per run (run, status, message...).")
def verify(runs: tuple[str, ...], record: bool, as_json: bool) -> None:
    """Check that each run's committed files hold the bytes their commit recorded (SHA-256 and size),
    without loading a model: one line per run; exit status 0 when every run is verified, else 1.

    \b
    Example:
      attnkit verify runs/reviews runs/de-en
      attnkit verify --record runs/old-run
    """
    results = [_check(run, record) for run in runs]
    for result in results:
        click.echo(json.dumps(result, sort_keys=True) if as_json else result["message"])
    if any(r["status"] not in ("ok", "recorded") for r in results):
        sys.exit(1)
