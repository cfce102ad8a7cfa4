"""Labelled examples, the error for malformed input, and the policy for bad rows.

A bad row is an empty (or whitespace-only) text, or an empty, whitespace-only
or null label. :func:`attnkit.data.readers.read_examples` refuses one with
:class:`DataFormatError` naming the file and the line, or, asked to skip such
rows, leaves them out and reports them as one :class:`SkippedRows`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Example", "DataFormatError", "BadRow", "SkippedRows", "MAX_REPORTED", "MISSING_LABELS", "BadRowPolicy"]

# How spreadsheets and pandas write a missing value (pandas' default NA strings, less "NA", which names
# classes such as North America): a label spelt so is a bad row, not a class called "NaN".
MISSING_LABELS = frozenset({"NaN", "nan", "-NaN", "-nan", "NULL", "null", "None", "<NA>", "#N/A", "N/A", "n/a"})


@dataclass(frozen=True)
class Example:
    """One labelled document."""

    text: str
    label: str


class DataFormatError(ValueError):
    """Malformed input; ``path`` and ``line`` (1-based, or None) say where."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


MAX_REPORTED = 100
"""How many bad rows a :class:`SkippedRows` lists by position (it counts them all)."""
_SKIP_HINT = ("; fix or remove the row, or skip such rows "
              "(--skip-bad-rows on the command line, skip_bad_rows=True in Python)")


@dataclass(frozen=True)
class BadRow:
    """One row that was left out: its file, 1-based line (None for a whole file) and why."""

    path: str
    line: int | None
    reason: str


@dataclass(frozen=True)
class SkippedRows:
    """What ``read_examples(path, skip_bad_rows=True)`` left out of ``path``.

    ``count`` counts every skipped row; ``rows`` holds the first
    :data:`MAX_REPORTED` of them in reading order. A row of a file inside
    ``path`` (a folder) carries that file's path.
    """

    path: str
    count: int
    rows: tuple[BadRow, ...]

    def positions(self, limit: int = 5) -> str:
        """``line 4 (empty text), line 9 (empty label)``: the first ``limit`` rows, then ``…``."""
        shown = [f"{self._where(row)} ({row.reason})" for row in self.rows[:limit]]
        return ", ".join(shown + (["…"] if self.count > len(shown) else []))

    def summary(self, limit: int = 5) -> str:
        """``skipped 3 bad row(s) in data.csv: line 4 (empty text), ...`` -- one line for a log."""
        return f"skipped {self.count} bad row(s) in {self.path}: {self.positions(limit)}"

    def _where(self, row: BadRow) -> str:
        if row.path == self.path:
            return f"line {row.line}"
        try:
            name = Path(row.path).relative_to(self.path).as_posix()
        except ValueError:  # not under path: name the file alone
            name = Path(row.path).name
        return name if row.line is None else f"{name}, line {row.line}"


class BadRowPolicy:
    """Refuses a bad row (the default), or counts it for the :class:`SkippedRows` report."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self.count = 0
        self.rows: list[BadRow] = []

    def reject(self, path: Path, line: int | None, reason: str, detail: str = "") -> None:
        """Raise for a bad row, or record it when skipping; ``detail`` only goes into the error."""
        if not self.skip:
            raise DataFormatError(path, line, reason + detail + _SKIP_HINT)
        self.count += 1
        if len(self.rows) < MAX_REPORTED:
            self.rows.append(BadRow(str(path), line, reason))

    def add(self, out: list[Example], path: Path, line: int | None, text: str | None,
            label: str | None) -> None:
        """Append ``Example(text, label)`` to ``out`` unless the text or the label is empty or null."""
        problems = []
        if text is None:
            problems.append("text is null")
        elif not text.strip():
            problems.append("empty text")
        if label is None:
            problems.append("label is null")
        elif not label.strip():
            problems.append("empty label")
        elif label.strip() in MISSING_LABELS:
            problems.append(f"label {label.strip()!r} marks a missing value")
        if problems:
            self.reject(path, line, " and ".join(problems))
        else:
            assert text is not None and label is not None  # for the type checker
            out.append(Example(text, label))
