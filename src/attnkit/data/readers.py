"""Read labelled text from the formats text-classification data comes in.

Every reader returns a list of :class:`Example` (``text``, ``label``; both
strings). Formats:

=================== ==========================================================
``"csv"``/``"tsv"`` a header row naming the columns; ``text_field`` and
                    ``label_field`` pick the two columns. Quoted fields may
                    span lines.
``"jsonl"``         one JSON object per line with ``text_field``/``label_field``.
``"label-tab-text"`` ``label<TAB>text`` per line.
``"label-space-text"`` ``label text`` per line (label up to the first space).
``"folder"``        one sub-folder per class, one document per file
                    (``train/pos/1.txt`` ...), as the IMDb and 20-Newsgroups
                    archives are laid out.
``"polarity"``      a pair of files ``NAME.pos``/``NAME.neg`` (or a folder
                    holding one such pair), one document per line, labels
                    ``"pos"``/``"neg"`` -- the layout of the MR movie-review
                    set of Pang & Lee (2005).
=================== ==========================================================

Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is dropped); csv and tsv
follow the ``csv`` module, which also ends an unquoted row at a bare ``"\\r"``.
``str.splitlines`` would also split on U+0085, U+2028 and friends, which a
Latin-1 decode produces from ordinary bytes (MR has 0x85 inside sentences), and
would silently invent documents. Blank lines are skipped. A ``.gz`` suffix is
decompressed transparently, and the format is guessed from the name underneath.

Malformed input raises :class:`DataFormatError` (a ``ValueError``) naming the
file and the 1-based line.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Example", "DataFormatError", "FORMATS", "read_examples", "read_lines", "guess_format"]

FORMATS = ("csv", "tsv", "jsonl", "label-tab-text", "label-space-text", "folder", "polarity")
"""The format names :func:`read_examples` accepts."""
_EXTENSIONS = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".pos": "polarity",
    ".neg": "polarity",
}


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


def _stem(path: Path) -> Path:
    """The path without a trailing ``.gz``."""
    return path.with_suffix("") if path.suffix == ".gz" else path


def _read_text(path: Path, encoding: str) -> str:
    """Whole file as text, gunzipped when the name ends in ``.gz``."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except gzip.BadGzipFile as exc:
        raise DataFormatError(path, None, f"not a gzip file ({exc})") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"path: no such file {str(path)!r}") from None
    try:
        return raw.decode(encoding)
    except LookupError:
        raise ValueError(f"encoding: unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise DataFormatError(
            path, line,
            f"cannot decode byte 0x{bad} as {encoding}; pass the file's encoding, "
            f"e.g. encoding='latin-1'",
        ) from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their 1-based numbers, split on ``\\n`` only."""
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if line.strip():
            yield number, line


def read_lines(path: str | os.PathLike[str], *, encoding: str = "utf-8") -> list[str]:
    """Every line of a (possibly gzipped) text file, split on ``\\n`` only.

    Unlike :func:`read_examples` this keeps blank lines, so line ``i`` of two
    parallel files (a translation corpus) stay aligned. A final newline does
    not add an empty last line.
    """
    text = _read_text(Path(path), encoding)
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def guess_format(path: str | os.PathLike[str]) -> str:
    """The format of ``path`` from its extension (under ``.gz``) or folder layout.

    ``.txt`` and other plain files are ``"label-tab-text"`` when their first
    non-blank line holds a tab, else ``"label-space-text"``.
    """
    p = Path(path)
    if p.is_dir():
        entries = [e for e in p.iterdir() if not e.name.startswith(".")]
        if any(e.is_dir() for e in entries):
            return "folder"
        if any(_stem(e).suffix in (".pos", ".neg") for e in entries):
            return "polarity"
        raise ValueError(
            f"path: cannot guess the format of folder {str(p)!r}: expected one sub-folder per "
            "class ('folder') or NAME.pos/NAME.neg files ('polarity')"
        )
    if not p.exists():
        raise FileNotFoundError(f"path: no such file or folder {str(p)!r}")
    suffix = _stem(p).suffix.lower()
    if suffix in _EXTENSIONS:
        return _EXTENSIONS[suffix]
    with (gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")) as handle:
        for raw in handle:
            if raw.strip():
                return "label-tab-text" if b"\t" in raw else "label-space-text"
    return "label-tab-text"


def _read_delimited(path: Path, text: str, delimiter: str, text_field: str,
                    label_field: str) -> list[Example]:
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        raise DataFormatError(path, 1, "empty file; expected a header row") from None
    for name, field in (("text_field", text_field), ("label_field", label_field)):
        if field not in header:
            raise DataFormatError(
                path, 1, f"{name}={field!r} is not a column; the header has {header}"
            )
    ti, li = header.index(text_field), header.index(label_field)
    out: list[Example] = []
    start = reader.line_num + 1
    try:
        for row in reader:
            if not row or not any(cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if len(row) != len(header):
                raise DataFormatError(
                    path, start, f"expected {len(header)} fields ({header}), got {len(row)}"
                )
            out.append(Example(row[ti], row[li].strip()))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataFormatError(path, reader.line_num, f"malformed row ({exc})") from None
    return out


def _read_jsonl(path: Path, text: str, text_field: str, label_field: str) -> list[Example]:
    out = []
    for number, line in _lines(text):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, number, f"invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DataFormatError(path, number, f"expected a JSON object, got {type(record).__name__}")
        missing = [f for f in (text_field, label_field) if f not in record]
        if missing:
            raise DataFormatError(
                path, number, f"missing field(s) {missing}; the object has {sorted(record)}"
            )
        if not isinstance(record[text_field], str):
            raise DataFormatError(path, number, f"field {text_field!r} must be a string")
        out.append(Example(record[text_field], str(record[label_field])))
    return out


def _read_label_text(path: Path, text: str, sep: str | None, fmt: str) -> list[Example]:
    out = []
    for number, line in _lines(text):
        parts = line.split(sep, 1) if sep else line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            want = "label<TAB>text" if sep else "label text"
            raise DataFormatError(
                path, number, f"expected '{want}' ({fmt}), got {line[:60]!r}"
            )
        out.append(Example(parts[1].strip(), parts[0].strip()))
    return out


def _read_folder(root: Path, encoding: str) -> list[Example]:
    classes = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise DataFormatError(root, None, "expected one sub-folder per class, found none")
    out = []
    for folder in classes:
        for file in sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")):
            text = _read_text(file, encoding).strip()
            if text:
                out.append(Example(text, folder.name))
    if not out:
        raise DataFormatError(root, None, "the class folders hold no non-empty documents")
    return out


def _polarity_pair(path: Path) -> tuple[Path, Path]:
    if path.is_dir():
        found = {
            kind: sorted(e for e in path.iterdir() if _stem(e).suffix == kind)
            for kind in (".pos", ".neg")
        }
        if len(found[".pos"]) != 1 or len(found[".neg"]) != 1:
            raise DataFormatError(
                path, None, f"expected exactly one *.pos and one *.neg file, found "
                f"{[e.name for e in found['.pos']]} and {[e.name for e in found['.neg']]}"
            )
        return found[".pos"][0], found[".neg"][0]
    base = _stem(path).with_suffix("")
    gz = ".gz" if path.suffix == ".gz" else ""
    pos, neg = Path(f"{base}.pos{gz}"), Path(f"{base}.neg{gz}")
    for p in (pos, neg):
        if not p.is_file():
            raise FileNotFoundError(f"path: polarity format needs {str(p)!r} beside {str(path)!r}")
    return pos, neg


def read_examples(
    path: str | os.PathLike[str],
    *,
    format: str | None = None,
    encoding: str = "utf-8",
    text_field: str = "text",
    label_field: str = "label",
) -> list[Example]:
    """Read labelled documents from ``path`` in one of :data:`FORMATS`.

    Args:
        path: a file (optionally ``.gz``) or a folder (``"folder"``, ``"polarity"``).
        format: one of :data:`FORMATS`; guessed by :func:`guess_format` when None.
        encoding: text encoding of the files (MR is ``"latin-1"``).
        text_field: column or key name of the text for csv, tsv and jsonl.
        label_field: column or key name of the label for csv, tsv and jsonl.

    Returns:
        the examples in file order (folder: class folders and files sorted by
        name; polarity: all ``pos`` lines, then all ``neg`` lines).

    Raises:
        DataFormatError: malformed input, naming the file and line.
        ValueError: an unknown ``format``.
    """
    p = Path(path)
    fmt = guess_format(p) if format is None else format
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt == "folder":
        if not p.is_dir():
            raise ValueError(f"path: format 'folder' needs a folder, got {str(p)!r}")
        return _read_folder(p, encoding)
    if fmt == "polarity":
        out = []
        for file, label in zip(_polarity_pair(p), ("pos", "neg"), strict=True):
            out += [Example(line.strip(), label) for _, line in _lines(_read_text(file, encoding))]
        return out
    if p.is_dir():
        raise ValueError(f"path: format {fmt!r} needs a file, got the folder {str(p)!r}")
    text = _read_text(p, encoding).removeprefix("\ufeff")
    if fmt in ("csv", "tsv"):
        return _read_delimited(p, text, "," if fmt == "csv" else "\t", text_field, label_field)
    if fmt == "jsonl":
        return _read_jsonl(p, text, text_field, label_field)
    return _read_label_text(p, text, "\t" if fmt == "label-tab-text" else None, fmt)
