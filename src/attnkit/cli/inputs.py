"""Reading the commands' own inputs: labelled data files, text files of one text per line,
and the notice printed when a text is longer than a model keeps.

Errors are one line that names the file, the line and the offending byte, so
that a file saved in another encoding is found without a traceback.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

__all__ = ["read_data", "read_text_lines", "read_texts_to_classify", "truncation_notice", "warn_truncated"]


def read_text_lines(path: str | Path, encoding: str = "utf-8", *,
                    encoding_flag: str | None = None) -> list[str]:
    """Every line of the text file ``path``, without its line ending.

    A UTF-8 byte-order mark is dropped. A byte that is not ``encoding`` raises
    a :class:`click.ClickException` naming the file, the 1-based line, the
    column and the byte; it suggests ``encoding_flag`` (e.g. ``"--encoding"``)
    when the command has such an option.
    """
    path = Path(path)
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        flag = f"{encoding_flag} " if encoding_flag else ""
        raise click.ClickException(f"{flag}{encoding!r} is not a known text encoding "
                                   "(examples: utf-8, latin-1, cp1252, utf-16)") from None
    try:
        data = path.read_bytes()
    except OSError as err:
        raise click.ClickException(f"cannot read {path}: {err.strerror or err}") from None
    from attnkit.data.readers import encoding_hint

    hint = encoding_hint(data, encoding, flag=encoding_flag)
    if hint is not None:
        raise click.ClickException(f"{path}: {hint}")
    try:
        text = data.decode("utf-8-sig" if codec == "utf-8" else encoding)
    except UnicodeDecodeError as err:
        raise click.ClickException(_decode_error(path, data, err, encoding, encoding_flag)) from None
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


def warn_truncated(tokenizer: Any, texts: Sequence[str], max_len: int) -> None:
    """Print :func:`truncation_notice` to stderr for a run's tokenizer and ``max_len``.

    Counts tokens as :func:`attnkit.data.tokenization.encode_batch` does (no
    special tokens), so ``kept`` is what the run's model sees.
    """
    from attnkit.data.tokenization import tokenizable

    encodings = tokenizer.encode_batch(tokenizable(texts), add_special_tokens=False)
    counts = [(min(len(e.ids), max_len), len(e.ids)) for e in encodings]
    notice = truncation_notice(counts, what=f"the run's maximum length, {max_len}")
    if notice is not None:
        click.echo(notice, err=True)


def read_data(path: str, values: dict[str, Any]) -> list[Any]:
    """The labelled examples of the data file ``path``, read with the reader flags in ``values``; none is an error."""
    from attnkit.cli.options import reader_kwargs
    from attnkit.data.readers import read_examples

    examples = read_examples(path, **reader_kwargs(values))
    if not examples:
        raise click.ClickException(f"{path} holds no examples")
    return examples


def read_texts_to_classify(path: str | Path, *, encoding: str = "utf-8", text_field: str = "text",
                           delimiter: str | None = None) -> list[str]:
    """The texts of a file given to ``predict --file``: the ``--text-field`` column of a .csv/.tsv/.jsonl
    (never its header or its label column; a note on stderr says which column was read), else every
    non-empty line, with a warning on stderr when the first line looks like a header of columns.
    """
    from attnkit.data.readers import format_from_name, read_texts, sniff_delimiter

    p = Path(path)
    fmt = format_from_name(p)
    if fmt in ("csv", "tsv", "jsonl"):
        texts = read_texts(p, format=fmt, encoding=encoding, text_field=text_field, delimiter=delimiter)
        click.echo(f"note: classifying the {text_field!r} {'field' if fmt == 'jsonl' else 'column'} of {p} "
                   f"({len(texts)} texts)", err=True)
        return texts
    lines = [line for line in read_text_lines(p, encoding, encoding_flag="--encoding") if line.strip()]
    if lines and sniff_delimiter(lines[0], [text_field], "") is not None and lines[0].count(" ") == 0:
        click.echo(f"warning: the first line of {p}, {lines[0][:60]!r}, looks like a header of columns; "
                   f"--file classifies every line of a plain text file as one text (a .csv, .tsv or .jsonl "
                   f"file is read by its --text-field column)", err=True)
    return lines
