"""Run every attention benchmark (or some) and print both sides, their ratio and the target.

Usage::

    python benchmarks/run_all.py [--quick] [--json out.json] [CASE ...]

The same code runs behind ``attnkit bench``; see :mod:`attnkit.bench` for the
cases and :mod:`attnkit.bench.timing` for how time and memory are measured.
Run it on a machine with nothing else heavy going on: the load average is
printed with the figures.
"""

from __future__ import annotations

import argparse
import sys

from attnkit.bench import CASES, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"cases to run: {', '.join(CASES)}")
    parser.add_argument("--quick", action="store_true", help="small sizes, about a minute")
    parser.add_argument("--json", metavar="PATH", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    try:
        results = run(args.cases or None, quick=args.quick, out_json=args.json)
    except ValueError as exc:
        parser.error(str(exc))
    return 1 if any(r.status == "MISS" for r in results) and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
