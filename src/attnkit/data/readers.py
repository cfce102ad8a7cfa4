"""Read labelled text from the formats text-classification data comes in.

Every reader returns a list of :class:`Example` (``text``, ``label``; both
strings). Formats:

====================== =======================================================
``"csv"``/``"tsv"``    a header row naming the columns; ``text_field`` and
                       ``label_field`` pick the two columns. Quoted fields may
                       span lines.
``"jsonl"``            one JSON object per line with ``text_field``/``label_field``.
                       The text must be a string; a number or ``true`` as label
                       becomes its JSON spelling (``3`` -> ``"3"``).
``"label-tab-text"``   ``label<TAB>text`` per line.
``"label-space-text"`` ``label text`` per line (label up to the first space, so
                       a line that starts with a space has an empty label).
``"folder"``           one sub-folder per class, one document per file
                       (``train/pos/1.txt`` ...), as the IMDb and 20-Newsgroups
                       archives are laid out.
``"polarity"``         a pair of files ``NAME.pos``/``NAME.neg`` (or a folder
                       holding one such pair), one document per line, labels
                       ``"pos"``/``"neg"`` -- the layout of the MR movie-review
                       set of Pang & Lee (2005).
====================== =======================================================

Lines are split on ``"\\n"`` only (a trailing ``"\\r"`` is dropped); csv and tsv
follow the ``csv`` module, which also ends an unquoted row at a bare ``"\\r"``.
``str.splitlines`` would also split on U+0085, U+2028 and friends, which a
Latin-1 decode produces from ordinary bytes (MR has 0x85 inside sentences), and
would silently invent documents. Blank lines are skipped. A ``.gz`` suffix is
decompressed transparently, and the format is guessed from the name underneath.

Malformed input raises :class:`DataFormatError` (a ``ValueError``) naming the
file and the 1-based line.

Bad rows. A row whose text is empty or whitespace only, or whose label is
empty, whitespace only, ``null`` or missing (a jsonl object without the
field), is a *bad row*: a model would learn from an empty document, or a class
called ``""`` or ``"None"``. Public data sets contain such rows, so they are
refused by default, naming the file, the line and the reason (``empty text``,
``text is null``, ``empty label``, ``label is null``, a label spelt as a missing value (``NaN``, ``None``,
``N/A``... :data:`~attnkit.data.examples.MISSING_LABELS`),
``missing field(s) ['label']``). ``skip_bad_rows=True`` (the command line's ``--skip-bad-rows``)
leaves them out instead and reports them in a :class:`SkippedRows` -- to
``on_skipped`` or, without one, as a warning.

Which formats can have bad rows: csv, tsv, jsonl, label-tab-text and
label-space-text any of them; folder an empty document file (the label is the
folder's name); polarity none (a blank line is skipped, as in every line
format). Structural errors -- invalid JSON, a missing column, a line without a
tab in label-tab-text, a JSON text that is neither a string nor null, a list or
object as label -- stay errors either way, and so does a file whose every row
is bad, which usually means a wrong ``text_field``/``label_field``.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import gzip
import io
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from attnkit._checks import check_settings, setting
from attnkit.data.examples import (
    MAX_REPORTED,
    BadRow,
    BadRowPolicy,
    DataFormatError,
    Example,
    SkippedRows,
)

__all__ = ["Example", "DataFormatError", "BadRow", "SkippedRows", "MAX_REPORTED", "FORMATS", "read_examples",
           "ReaderSettings",
           "read_lines", "guess_format", "read_texts", "detect_unicode_encoding", "encoding_hint", "sniff_delimiter",
           "check_delimiter", "format_from_name", "read_text_lines", "truncation_notice"]

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


def _stem(path: Path) -> Path:
    """The path without a trailing ``.gz``."""
    return path.with_suffix("") if path.suffix == ".gz" else path


def format_from_name(path: str | os.PathLike[str]) -> str | None:
    """The format a file's extension (under ``.gz``) names: ``reviews.csv.gz`` is ``"csv"``; None for
    a name that names none (``.txt``)."""
    return _EXTENSIONS.get(_stem(Path(path)).suffix.lower())


# Byte-order marks, longest first (UTF-32's little-endian mark begins with UTF-16's).
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def detect_unicode_encoding(raw: bytes) -> str | None:
    """``"utf-16"``, ``"utf-32"`` or ``"utf-8"`` when ``raw`` starts with that byte-order mark, and
    ``"utf-16"`` for BOM-less UTF-16 text (a zero byte in every other place of its first bytes);
    None otherwise."""
    for bom, name in _BOMS:
        if raw.startswith(bom):
            return name
    head = raw[:200]
    if len(head) >= 8:
        even, odd = head[0::2], head[1::2]
        if (odd.count(0) >= 0.9 * len(odd) and even.count(0) == 0) or (
                even.count(0) >= 0.9 * len(even) and odd.count(0) == 0):
            return "utf-16-le" if odd.count(0) else "utf-16-be"
    return None


def encoding_hint(raw: bytes, encoding: str, *, flag: str | None = "--encoding") -> str | None:
    """What to pass when ``raw``, read as ``encoding``, is really UTF-16 or UTF-32 text (None when it is not):
    such a file would fail as UTF-8 and turn to nonsense as latin-1. ``flag``: the command's encoding option
    (None: the command has none, and the advice is to save the file as UTF-8)."""
    found = detect_unicode_encoding(raw)
    try:
        asked = codecs.lookup(encoding).name
    except LookupError:
        return None
    if found is None or found == "utf-8" or asked.startswith(found[:6]):
        return None
    how = "starts with a UTF-16 byte-order mark" if found == "utf-16" else (
        "starts with a UTF-32 byte-order mark" if found == "utf-32" else "has a zero byte in every other place")
    advice = f"pass {flag} {found} (encoding='{found}' in Python) or save it as UTF-8" if flag else "save it as UTF-8"
    return f"the file is {found.upper()} text (it {how}), not {encoding}; {advice}"


def _read_text(path: Path, encoding: str) -> str:
    """Whole file as text, gunzipped when the name ends in ``.gz``."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except gzip.BadGzipFile as exc:
        raise DataFormatError(path, None, f"not a gzip file ({exc})") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"path: no such file {str(path)!r}") from None
    hint = encoding_hint(raw, encoding)
    if hint is not None:
        raise DataFormatError(path, None, hint)
    try:
        return raw.decode(encoding)
    except LookupError:
        raise ValueError(f"encoding: unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        bad = raw[exc.start : exc.start + 1].hex()
        raise DataFormatError(
            path, line,
            f"cannot decode byte 0x{bad} as {encoding}; pass the file's encoding "
            "(--encoding latin-1 on the command line, encoding='latin-1' in Python)",
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
            "class ('folder') or NAME.pos/NAME.neg files ('polarity')" + _data_files_hint(p, entries)
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


# The parts a folder's data files are often named after, and the command-line flag that reads each.
_PART_FLAGS = {"train": "--data", "training": "--data", "val": "--val", "valid": "--val", "validation": "--val",
               "dev": "--val", "test": "--test"}


def _data_files_hint(folder: Path, entries: Sequence[Path]) -> str:
    """``"; it holds the data file(s) ...: pass ..."`` for a folder that is no data set itself but holds data
    files (a known extension or ``.txt``, under ``.gz``); ``""`` when it holds none."""
    files = sorted(e for e in entries if e.is_file() and _stem(e).suffix.lower() in (*_EXTENSIONS, ".txt"))
    if not files:
        return ""
    names = ", ".join(repr(e.name) for e in files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    parts = {_PART_FLAGS[_stem(e).stem.lower()]: e for e in files if _stem(e).stem.lower() in _PART_FLAGS}
    if "--data" in parts:
        how = " ".join(f"{flag} {parts[flag]}" for flag in ("--data", "--val", "--test") if flag in parts)
    else:
        how = f"--data {files[0]}"
    return f"; it holds the data file(s) {names}: pass a file, not the folder ({how} on the command line)"


def _refuse_parts_as_classes(root: Path, folders: Sequence[Path]) -> None:
    """Refuse a folder whose sub-folders are a data set's parts (``train/``, ``test/``...), each holding class
    folders (the IMDB layout), instead of reading ``train`` and ``test`` as two classes."""
    parts = {_PART_FLAGS.get(f.name.lower()): f for f in folders}
    if None in parts or "--data" not in parts:
        return
    if not all(any(e.is_dir() and not e.name.startswith(".") for e in f.iterdir()) for f in folders):
        return
    how = " ".join(f"{flag} {parts[flag]}" for flag in ("--data", "--val", "--test") if flag in parts)
    raise DataFormatError(root, None, f"its sub-folders {', '.join(sorted(f.name for f in folders))} are the parts "
                                      f"of a data set, each with class folders, not classes: pass each part "
                                      f"({how} on the command line)")


_DELIMITERS = {",": "','", ";": "';'", "\t": "a tab", "|": "'|'"}


def _delimiter_flag(delimiter: str) -> str:
    return "--delimiter tab" if delimiter == "\t" else f"--delimiter '{delimiter}'"


def sniff_delimiter(line: str, fields: Sequence[str], delimiter: str) -> str | None:
    """Another delimiter (of ``, ; TAB |``) that splits the header ``line`` into columns naming every one of
    ``fields``, when ``delimiter`` does not; None otherwise."""
    for other in _DELIMITERS:
        if other != delimiter and other in line:
            columns = [c.strip().strip('"') for c in line.split(other)]
            if all(f in columns for f in fields):
                return other
    return None


def check_delimiter(delimiter: str) -> str:
    """``delimiter`` as the csv module takes it (``tab`` or ``\\t`` is a tab); one character, else ValueError."""
    value = "\t" if delimiter in ("tab", "\\t", "TAB") else delimiter
    if len(value) != 1 or value in ('"', "\n", "\r"):
        raise ValueError(f"--delimiter must be one character (such as ';' or tab), got {delimiter!r}")
    return value


def _header_columns(path: Path, header: list[str], delimiter: str, fields: Sequence[tuple[str, str]]) -> list[int]:
    """The index of each ``(name, field)`` column in ``header``; a missing one is a DataFormatError that names
    every missing column, or the delimiter to pass when another one splits the header into the right columns."""
    names = [field for _, field in fields]
    missing = [(name, field) for name, field in fields if field not in header]
    if not missing:
        return [header.index(field) for field in names]
    other = sniff_delimiter(delimiter.join(header), names, delimiter) if len(header) == 1 else None
    if other is not None:
        raise DataFormatError(
            path, 1, f"the header {header} is one column: the file is separated by {_DELIMITERS[other]}, "
            f"not {_DELIMITERS.get(delimiter, repr(delimiter))}; pass {_delimiter_flag(other)} "
            f"(delimiter={other!r} in Python)")
    # every missing column is named, not only the first
    what = " and ".join(f"{n}={f!r}" for n, f in missing) + (" is not a column" if len(missing) == 1
                                                             else " are not columns")
    flags = " and ".join(f"--{n.replace('_', '-')} NAME" for n, _ in missing)
    raise DataFormatError(path, 1, f"{what}; the header has {header} (pass {flags} to read "
                                   f"{'another column' if len(missing) == 1 else 'other columns'})")


@contextlib.contextmanager
def _csv_rows(text: str, delimiter: str) -> Iterator[Any]:
    """A ``csv.reader`` of ``text`` whose fields may be as long as ``text`` itself.

    The csv module refuses a field over ``csv.field_size_limit()`` (131,072 characters by default) as an
    error, so a long document in a CSV could not be read while the same text as JSONL trains. The limit is
    raised to the length of ``text`` while the rows are read, and put back afterwards.
    """
    before = csv.field_size_limit()
    csv.field_size_limit(max(before, min(len(text) + 1, 2**31 - 1)))  # a C long on every platform
    try:
        yield csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    finally:
        csv.field_size_limit(before)


def _read_delimited(path: Path, text: str, delimiter: str, text_field: str,
                    label_field: str, bad: BadRowPolicy) -> list[Example]:
    with _csv_rows(text, delimiter) as reader:
        return _delimited_rows(path, reader, delimiter, text_field, label_field, bad)


def _delimited_rows(path: Path, reader: Any, delimiter: str, text_field: str,
                    label_field: str, bad: BadRowPolicy) -> list[Example]:
    try:
        header = next(reader)
    except StopIteration:
        raise DataFormatError(path, 1, "empty file; expected a header row") from None
    ti, li = _header_columns(path, header, delimiter, (("text_field", text_field), ("label_field", label_field)))
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
            bad.add(out, path, start, row[ti], row[li].strip())
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataFormatError(path, reader.line_num, f"malformed row ({exc})") from None
    return out


def _read_jsonl(path: Path, text: str, text_field: str, label_field: str,
                bad: BadRowPolicy) -> list[Example]:
    out: list[Example] = []
    for number, line in _lines(text):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataFormatError(path, number, f"invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise DataFormatError(path, number, f"expected a JSON object, got {type(record).__name__}")
        missing = [f for f in (text_field, label_field) if f not in record]
        if missing:
            bad.reject(path, number, f"missing field(s) {missing}", f"; the object has {sorted(record)}")
            continue
        body, label = record[text_field], record[label_field]
        if body is not None and not isinstance(body, str):
            raise DataFormatError(
                path, number, f"field {text_field!r} must be a string, got {type(body).__name__}")
        if label is not None and not isinstance(label, (str, int, float)):  # bool is an int
            raise DataFormatError(
                path, number, f"field {label_field!r} must be a string or a number, got "
                f"{type(label).__name__}")
        # A number keeps its JSON spelling (3 -> "3", true -> "true"); null stays None, a bad row.
        bad.add(out, path, number, body, label if label is None or isinstance(label, str) else json.dumps(label))
    return out


def _read_label_text(path: Path, text: str, sep: str | None, fmt: str, bad: BadRowPolicy) -> list[Example]:
    """``label<TAB>text`` (``sep="\\t"``) or ``label text`` (``sep=None``: the first whitespace)."""
    out: list[Example] = []
    for number, line in _lines(text):
        if sep:
            label, found, body = line.partition(sep)
            if not found:
                raise DataFormatError(
                    path, number, f"expected 'label<TAB>text' ({fmt}), got {line[:60]!r}")
        elif line[0].isspace():  # nothing before the first space: an empty label
            label, body = "", line
        else:
            label, *rest = line.split(None, 1)
            body = rest[0] if rest else ""
        bad.add(out, path, number, body.strip(), label.strip())
    return out


def _read_folder(root: Path, encoding: str, bad: BadRowPolicy) -> list[Example]:
    classes = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not classes:
        raise DataFormatError(root, None, "expected one sub-folder per class, found none")
    _refuse_parts_as_classes(root, classes)
    out: list[Example] = []
    for folder in classes:
        for file in sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")):
            bad.add(out, file, None, _read_text(file, encoding).strip(), folder.name)
    if not out and not bad.count:
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
    skip_bad_rows: bool = False,
    on_skipped: Callable[[SkippedRows], None] | None = None,
    delimiter: str | None = None,
) -> list[Example]:
    """Read labelled documents from ``path`` in one of :data:`FORMATS`.

    Args:
        path: a file (optionally ``.gz``) or a folder (``"folder"``, ``"polarity"``).
        format: one of :data:`FORMATS`; guessed by :func:`guess_format` when None.
        encoding: text encoding of the files (MR is ``"latin-1"``).
        text_field: column or key name of the text for csv, tsv and jsonl.
        label_field: column or key name of the label for csv, tsv and jsonl.
        skip_bad_rows: leave out rows with an empty or whitespace-only text, or
            an empty, whitespace-only, null or missing label, instead of
            raising :class:`DataFormatError` at the first of them.
        on_skipped: called once with a :class:`SkippedRows` when rows were
            skipped; without it, the same report is a ``UserWarning``. Never
            called when nothing was skipped.
        delimiter: the column separator of csv (default ``,``) and tsv (default
            a tab), one character, e.g. ``";"``; ``"tab"`` is a tab. Given for a
            file whose format is guessed as neither, the file is read as csv.

    A file that is UTF-16 or UTF-32 text while ``encoding`` says otherwise, a
    header split by another delimiter than the one used, and a ``.txt`` whose
    first line is a CSV header raise a :class:`DataFormatError` that names
    what to pass instead.

    Returns:
        the examples in file order (folder: class folders and files sorted by
        name; polarity: all ``pos`` lines, then all ``neg`` lines).

    Raises:
        DataFormatError: malformed input or a bad row, naming the file and
            line; with ``skip_bad_rows``, a ``path`` whose every row is bad.
        ValueError: an unknown ``format``.

    Example:
        >>> reports = []
        >>> examples = read_examples("reviews.csv", skip_bad_rows=True,
        ...                          on_skipped=reports.append)  # doctest: +SKIP
        >>> print(reports[0].summary())  # doctest: +SKIP
        skipped 2 bad row(s) in reviews.csv: line 4 (empty text), line 9 (empty label)
    """
    bad = BadRowPolicy(skip_bad_rows)
    examples = _read_format(Path(path), format, encoding, text_field, label_field, bad,
                            None if delimiter is None else check_delimiter(delimiter))
    if bad.count:
        report = SkippedRows(str(path), bad.count, tuple(bad.rows))
        if not examples:
            raise DataFormatError(
                path, None, f"every row is bad ({report.positions()}); nothing is left to read -- "
                "check the format and text_field/label_field")
        if on_skipped is not None:
            on_skipped(report)
        else:
            warnings.warn(report.summary(), UserWarning, stacklevel=2)
    return examples


_READ = f"{__name__}:read_examples"


@dataclass(frozen=True)
class ReaderSettings:
    """How a labelled data file is read: :func:`read_examples`' keywords as settings (the commands' reader flags,
    :func:`attnkit._checks.setting`); None keeps its default, which the flag's help shows."""

    data_format: str | None = setting(None, "csv, tsv, jsonl, label-tab-text, label-space-text, folder or polarity "
                                            "(guessed from the name when omitted).", flag="--format")
    encoding: str | None = setting(None, "Text encoding of the data.", default_from=f"{_READ}.encoding")
    text_field: str | None = setting(None, "Text column/field for csv, tsv, jsonl.", default_from=f"{_READ}.text_field")
    label_field: str | None = setting(None, "Label column/field for csv, tsv, jsonl.",
                                      default_from=f"{_READ}.label_field")
    skip_bad_rows: bool = setting(False, "Skip rows with an empty text or an empty or null label, and say on stderr "
                                         "how many and where, instead of stopping at the first with an error.")
    delimiter: str | None = setting(None, "Column separator of csv/tsv data, e.g. ';' or tab (default: , for csv, "
                                          "tab for tsv).", metavar="CHAR", check=check_delimiter)

    def __post_init__(self) -> None:
        check_settings(self)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Self:
        """The settings among ``values`` (a command's flags, a saved data record): other keys are ignored."""
        return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if values.get(f.name) is not None})

    def kwargs(self, say: Callable[[str], None] | None = None) -> dict[str, Any]:
        """The keywords of :func:`read_examples` these settings give; ``say`` takes the one line that says which
        rows were skipped (their first five positions, :meth:`SkippedRows.summary`)."""
        out: dict[str, Any] = {"format": self.data_format} if self.data_format else {}
        out |= {k: getattr(self, k) for k in ("encoding", "text_field", "label_field", "delimiter") if getattr(self, k)}
        if not self.skip_bad_rows:
            return out
        return out | {"skip_bad_rows": True,
                      "on_skipped": None if say is None else lambda skipped: say(skipped.summary(limit=5))}

    def read(self, path: str | os.PathLike[str], say: Callable[[str], None] | None = None) -> list[Example]:
        """The labelled examples of data file ``path`` read with these settings (``say``: as :meth:`kwargs`); a
        file of none is a ValueError naming it."""
        examples = read_examples(path, **self.kwargs(say))
        if not examples:
            raise ValueError(f"{path} holds no examples")
        return examples


def _read_format(p: Path, format: str | None, encoding: str, text_field: str, label_field: str,
                 bad: BadRowPolicy, delimiter: str | None = None) -> list[Example]:
    fmt = guess_format(p) if format is None else format
    if format is None and delimiter is not None and fmt in ("label-tab-text", "label-space-text"):
        fmt = "csv"  # a delimiter names a delimited file, whatever its name
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {fmt!r}")
    if fmt == "folder":
        if not p.is_dir():
            raise ValueError(f"path: format 'folder' needs a folder, got {str(p)!r}")
        return _read_folder(p, encoding, bad)
    if fmt == "polarity":
        # One document per non-blank line, so a polarity pair has no bad rows to check.
        out = []
        for file, label in zip(_polarity_pair(p), ("pos", "neg"), strict=True):
            out += [Example(line.strip(), label) for _, line in _lines(_read_text(file, encoding))]
        return out
    if p.is_dir():
        raise ValueError(f"path: format {fmt!r} needs a file, got the folder {str(p)!r}")
    text = _read_text(p, encoding).removeprefix("\ufeff")
    if format is None and fmt in ("label-tab-text", "label-space-text"):
        _refuse_csv_header(p, text, fmt, (text_field, label_field))
    if fmt in ("csv", "tsv"):
        sep = delimiter or ("," if fmt == "csv" else "\t")
        return _read_delimited(p, text, sep, text_field, label_field, bad)
    if fmt == "jsonl":
        return _read_jsonl(p, text, text_field, label_field, bad)
    return _read_label_text(p, text, "\t" if fmt == "label-tab-text" else None, fmt, bad)


def _refuse_csv_header(path: Path, text: str, fmt: str, fields: Sequence[str]) -> None:
    """A file guessed as ``fmt`` (from a name such as ``.txt``) whose first line is a header naming
    ``fields`` is a delimited file: a DataFormatError says which ``--format`` (and delimiter) to pass."""
    first = next((line for _, line in _lines(text)), "")
    other = sniff_delimiter(first, fields, "")
    if other is None:
        return
    if other == "\t":
        how, python = "--format tsv", "format='tsv'"
    elif other == ",":
        how, python = "--format csv", "format='csv'"
    else:
        how, python = f"--format csv {_delimiter_flag(other)}", f"format='csv', delimiter={other!r}"
    raise DataFormatError(path, 1, f"{first[:60]!r} is a header of columns separated by {_DELIMITERS[other]}, "
                                   f"not {fmt} (guessed from the file's name); pass {how} ({python} in Python)")


def read_texts(path: str | os.PathLike[str], *, format: str | None = None, encoding: str = "utf-8",
               text_field: str = "text", delimiter: str | None = None) -> list[str]:
    """The texts of the ``text_field`` column (csv, tsv) or field (jsonl) of ``path``, in file order; other
    columns (a label) are left out and no label is needed. Rows with an empty text are skipped.

    ``format`` is ``"csv"``, ``"tsv"`` or ``"jsonl"`` (guessed from the name when None); a missing column
    raises :class:`DataFormatError` naming the header and ``--text-field``.
    """
    p = Path(path)
    fmt = format or format_from_name(p)
    if fmt not in ("csv", "tsv", "jsonl"):
        raise ValueError(f"format must be csv, tsv or jsonl to read a text column, got {fmt!r}")
    text = _read_text(p, encoding).removeprefix("\ufeff")
    if fmt == "jsonl":
        out = []
        for number, line in _lines(text):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(p, number, f"invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or text_field not in record:
                keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                raise DataFormatError(p, number, f"no field {text_field!r} (it has {keys}); pass --text-field NAME")
            if isinstance(record[text_field], str) and record[text_field].strip():
                out.append(record[text_field])
        return out
    sep = check_delimiter(delimiter) if delimiter else ("," if fmt == "csv" else "\t")
    with _csv_rows(text, sep) as reader:
        try:
            header = next(reader)
        except StopIteration:
            return []
        (ti,) = _header_columns(p, header, sep, (("text_field", text_field),))
        try:
            return [row[ti] for row in reader if len(row) > ti and row[ti].strip()]
        except csv.Error as exc:
            raise DataFormatError(p, reader.line_num, f"malformed row ({exc})") from None


def read_text_lines(path: str | Path, encoding: str = "utf-8", *,
                    encoding_flag: str | None = None) -> list[str]:
    """Every line of the text file ``path``, without its line ending.

    A UTF-8 byte-order mark is dropped. A byte that is not ``encoding`` raises a ValueError naming the file, the
    1-based line, the column and the byte; it suggests ``encoding_flag`` (e.g. ``"--encoding"``) when the command
    has such an option.
    """
    path = Path(path)
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        flag = f"{encoding_flag} " if encoding_flag else ""
        raise ValueError(f"{flag}{encoding!r} is not a known text encoding "
                         "(examples: utf-8, latin-1, cp1252, utf-16)") from None
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror or err}") from None
    hint = encoding_hint(data, encoding, flag=encoding_flag)
    if hint is not None:
        raise ValueError(f"{path}: {hint}")
    try:
        text = data.decode("utf-8-sig" if codec == "utf-8" else encoding)
    except UnicodeDecodeError as err:
        raise ValueError(_decode_error(path, data, err, encoding, encoding_flag)) from None
    return [line.removesuffix("\r") for line in text.split("\n")]


def _decode_error(path: Path, data: bytes, err: UnicodeDecodeError, encoding: str,
                  encoding_flag: str | None) -> str:
    line = data.count(b"\n", 0, err.start) + 1
    column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
    bad = data[err.start:max(err.end, err.start + 1)][:4].hex(" ")
    where = f"{path}, line {line}, column {column} (byte offset {err.start})"
    if encoding_flag:
        advice = f"pass {encoding_flag} with the file's encoding (for example {encoding_flag} latin-1)"
    else:
        advice = "save the file as UTF-8"
    return f"{where}: byte 0x{bad} is not valid {encoding} ({err.reason}); {advice}"


def truncation_notice(counts: Sequence[tuple[int, int]], *, what: str = "the model's maximum length") -> str | None:
    """One line saying which texts were cut, or None when none was.

    ``counts`` holds ``(kept, total)`` tokens per text, in order.
    """
    cut = [(i, kept, total) for i, (kept, total) in enumerate(counts, 1) if total > kept]
    if not cut:
        return None
    if len(cut) == 1:
        i, kept, total = cut[0]
        label = "the text" if len(counts) == 1 else f"text {i}"
        return f"note: kept the first {kept} of {total} tokens of {label} ({what})"
    longest = max(total for _, _, total in cut)
    limit = max(kept for _, kept, _ in cut)
    return (f"note: {len(cut)} of {len(counts)} texts were cut to {limit} tokens ({what}); "
            f"the longest had {longest}")
