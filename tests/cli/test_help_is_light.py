"""``attnkit --help``, every command's ``--help`` and a mistyped flag answer without importing torch.

Help and argument errors are what a user sees first and most often; they
should take the time of importing click, not that of importing torch. The
commands import their heavy modules inside their bodies (or when a default is
shown), and this runs every one of them in a fresh interpreter to keep it so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Runs each command line in one fresh interpreter and reports, for each, its exit status, the start of
# its output and whether torch had been imported once it ended (the first to import it is the culprit).
SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys

    from attnkit.cli import cli, train_tasks

    ctx = cli.make_context("attnkit", ["--help"], resilient_parsing=True)
    names = [[name] for name in cli.list_commands(ctx)] + [["train", "--task", task] for task in train_tasks()]
    lines = [["--help"], ["--no-such-flag"]]
    lines += [[*name, "--help"] for name in names] + [[*name, "--no-such-flag"] for name in names]
    report = []
    for args in lines:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                cli.main(args, prog_name="attnkit")
                code = 0
            except SystemExit as stop:
                code = stop.code
        report.append({"args": args, "code": code, "output": out.getvalue()[:300], "torch": "torch" in sys.modules})
    print(json.dumps(report))
""")


def _run() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNKIT_DEBUG", "ATTNKIT_THREADS")}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_help_and_a_wrong_flag_import_no_torch() -> None:
    report = _run()
    commands = {" ".join(r["args"][:-1]) for r in report}
    assert {"", "demo", "train", "evaluate", "predict", "cv", "bench", "baseline", "translate", "caption",
            "visualize", "train --task translate", "train --task caption"} <= commands
    for r in report:
        if r["args"][-1] == "--help":
            assert r["code"] == 0 and r["output"].startswith("Usage: attnkit"), r
        else:
            assert r["code"] == 2 and "No such option '--no-such-flag'" in r["output"], r
    loaded = [" ".join(r["args"]) for r in report if r["torch"]]
    assert not loaded, f"torch was imported by `attnkit {loaded[0]}`"
