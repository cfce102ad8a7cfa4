"""Bad rows: an empty text or an empty/null label is refused with file and line, or skipped and reported.

Every format is checked the same way: by default the first bad row raises a
``DataFormatError`` naming ``file, line N`` and what was wrong; with
``skip_bad_rows=True`` the good rows come back and the ``SkippedRows`` report
counts the bad ones and names their lines. Structural errors stay errors.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.cli.options import reader_options
from attnkit.data.readers import DataFormatError, Example, ReaderSettings, SkippedRows, read_examples

GOOD = [Example("a fine film", "pos"), Example("dull , slow", "neg")]


def _jsonl(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


# name, content, the first error, the skipped lines and reasons. Good rows are GOOD, in order.
CASES = [
    ("d.csv", 'text,label\na fine film,pos\n   ,neg\nfine,\n"dull , slow",neg\n',
     r"d\.csv, line 3: empty text", [(3, "empty text"), (4, "empty label")]),
    ("d.tsv", "label\ttext\npos\ta fine film\nneg\t\n \tfine\nneg\tdull , slow\n",
     r"d\.tsv, line 3: empty text", [(3, "empty text"), (4, "empty label")]),
    ("d.jsonl", _jsonl({"text": "a fine film", "label": "pos"}, {"text": " ", "label": "neg"},
                       {"text": "fine", "label": ""}, {"text": "ok", "label": None}, {"text": "ok"},
                       {"text": None, "label": "neg"}, {"text": "dull , slow", "label": "neg"}),
     r"d\.jsonl, line 2: empty text",
     [(2, "empty text"), (3, "empty label"), (4, "label is null"), (5, "missing field(s) ['label']"),
      (6, "text is null")]),
    ("d.txt", "pos\ta fine film\nneg\t  \n\tfine\nneg\tdull , slow\n",
     r"d\.txt, line 2: empty text", [(2, "empty text"), (3, "empty label")]),
    ("s.txt", "pos a fine film\nneg\n fine\nneg dull , slow\n",
     r"s\.txt, line 2: empty text", [(2, "empty text"), (3, "empty label")]),
]


@pytest.mark.parametrize("name, text, message, skipped", CASES, ids=[c[0] for c in CASES])
def test_bad_rows_refused_with_file_and_line(tmp_path: Path, name: str, text: str, message: str,
                                             skipped: list[tuple[int, str]]) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message + r"; fix or remove the row.*--skip-bad-rows") as info:
        read_examples(path)
    assert info.value.path == str(path) and info.value.line == skipped[0][0]


@pytest.mark.parametrize("name, text, message, skipped", CASES, ids=[c[0] for c in CASES])
def test_skip_bad_rows_keeps_the_good_ones_and_reports(tmp_path: Path, name: str, text: str,
                                                       message: str, skipped: list[tuple[int, str]]) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    reports: list[SkippedRows] = []
    assert read_examples(path, skip_bad_rows=True, on_skipped=reports.append) == GOOD
    (report,) = reports
    assert report.path == str(path) and report.count == len(skipped)
    assert [(row.path, row.line, row.reason) for row in report.rows] == [
        (str(path), line, reason) for line, reason in skipped]
    first = ", ".join(f"line {line} ({reason})" for line, reason in skipped[:5])
    assert report.summary() == f"skipped {len(skipped)} bad row(s) in {path}: {first}"


def test_null_label_never_becomes_the_class_none_and_numbers_keep_their_spelling(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl({"text": "a", "label": 3}, {"text": "b", "label": True},
                           {"text": "c", "label": None}), encoding="utf-8")
    got = read_examples(path, skip_bad_rows=True, on_skipped=lambda report: None)
    assert got == [Example("a", "3"), Example("b", "true")]


@pytest.mark.parametrize(
    "record, message",
    [({"text": 5, "label": "pos"}, r"line 2: field 'text' must be a string, got int"),
     ({"text": ["a"], "label": "pos"}, r"line 2: field 'text' must be a string, got list"),
     ({"text": "a", "label": ["pos", "neg"]}, r"line 2: field 'label' must be a string or a number, got list")],
)
def test_wrong_json_types_stay_errors_when_skipping(tmp_path: Path, record: dict[str, Any], message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl({"text": "ok", "label": "pos"}, record), encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_examples(path, skip_bad_rows=True)


@pytest.mark.parametrize(
    "name, text, message",
    [("d.jsonl", '{"text": "ok", "label": "pos"}\n{"text": \n', r"line 2: invalid JSON"),
     ("d.csv", "body,label\nok,pos\n", r"line 1: text_field='text' is not a column"),
     ("d.csv", "text,label\nok,pos\n,neg,extra\n", r"line 3: expected 2 fields"),
     ("d.txt", "pos\tok\nno tab at all\n", r"line 2: expected 'label<TAB>text'")],
)
def test_structural_errors_stay_errors_when_skipping(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError, match=message):
        read_examples(path, skip_bad_rows=True)


def test_every_row_bad_is_an_error_not_an_empty_list(tmp_path: Path) -> None:
    # A misspelt label field makes every row "missing": skipping them all would hide the mistake.
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl({"text": "a", "sentiment": "pos"}, {"text": "b", "sentiment": "neg"}), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"d\.jsonl: every row is bad \(line 1 \(missing field"):
        read_examples(path, skip_bad_rows=True)
    assert read_examples(path, label_field="sentiment") == [Example("a", "pos"), Example("b", "neg")]


def test_folder_empty_document_is_a_bad_row(tmp_path: Path) -> None:
    for label, docs in (("neg", ["dull , slow", " \n"]), ("pos", ["a fine film"])):
        (tmp_path / label).mkdir()
        for i, doc in enumerate(docs):
            (tmp_path / label / f"{i}.txt").write_text(doc, encoding="utf-8")
    empty = tmp_path / "neg" / "1.txt"
    with pytest.raises(DataFormatError, match=rf"{empty}: empty text") as info:
        read_examples(tmp_path)
    assert info.value.path == str(empty) and info.value.line is None
    reports: list[SkippedRows] = []
    assert read_examples(tmp_path, skip_bad_rows=True, on_skipped=reports.append) == [
        Example("dull , slow", "neg"), Example("a fine film", "pos")]
    assert reports[0].count == 1
    assert reports[0].summary() == f"skipped 1 bad row(s) in {tmp_path}: neg/1.txt (empty text)"


def test_polarity_has_no_bad_rows(tmp_path: Path) -> None:
    # One document per line: a whitespace-only line is a blank line, skipped silently as everywhere.
    (tmp_path / "rt.pos").write_text("a fine film\n   \n", encoding="utf-8")
    (tmp_path / "rt.neg").write_text("\t\ndull , slow\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_examples(tmp_path) == GOOD
        assert read_examples(tmp_path, skip_bad_rows=True) == GOOD


def test_without_a_callback_the_report_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\na fine film,pos\n,neg\n\"dull , slow\",neg\n", encoding="utf-8")
    with pytest.warns(UserWarning, match=r"skipped 1 bad row\(s\) in .*d\.csv: line 3 \(empty text\)$"):
        assert read_examples(path, skip_bad_rows=True) == GOOD
    path.write_text("text,label\na fine film,pos\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped: no report, no warning
        assert read_examples(path, skip_bad_rows=True) == GOOD[:1]


def test_summary_lists_five_positions_then_an_ellipsis(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\n" + "".join(f"t{i},\n" for i in range(7)) + "ok,pos\n", encoding="utf-8")
    reports: list[SkippedRows] = []
    read_examples(path, skip_bad_rows=True, on_skipped=reports.append)
    lines = ", ".join(f"line {n} (empty label)" for n in range(2, 7))
    assert reports[0].summary() == f"skipped 7 bad row(s) in {path}: {lines}, …"


def test_encoding_error_names_the_flag_and_the_keyword(tmp_path: Path) -> None:
    path = tmp_path / "d.txt"
    path.write_bytes("pos\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"--encoding latin-1 on the command line, encoding='latin-1' in Python"):
        read_examples(path)


# --- the command line -------------------------------------------------------------------------


@click.command()
@click.argument("path")
@reader_options
def _read_command(path: str, **values: Any) -> None:
    """What train, evaluate and cv do with their reader options."""
    click.echo(len(ReaderSettings.of(values).read(path, lambda line: click.echo(line, err=True))))


def test_skip_bad_rows_flag_reaches_the_reader_and_reports_on_stderr(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(_jsonl({"text": "a", "label": "pos"}, {"text": "", "label": "neg"},
                           {"text": "b", "label": None}, {"text": "c", "label": "neg"}), encoding="utf-8")
    result = CliRunner().invoke(_read_command, [str(path), "--skip-bad-rows"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "2\n"
    assert result.stderr == f"skipped 2 bad row(s) in {path}: line 2 (empty text), line 3 (label is null)\n"
    assert ReaderSettings.of({"skip_bad_rows": False}).kwargs() == {}
    for command in ("train", "evaluate", "cv"):
        assert "--skip-bad-rows" in CliRunner().invoke(cli, [command, "--help"]).output


def test_train_refuses_a_bad_row_without_creating_a_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\na fine film,pos\n\"dull , slow\",neg\nfine,\n", encoding="utf-8")
    out = tmp_path / "run"
    result = CliRunner().invoke(cli, ["train", "--data", str(bad), "--out", str(out), "--device", "cpu"])
    assert result.exit_code == 1
    assert f"{bad}, line 4: empty label" in result.output and "Traceback" not in result.output
    assert not out.exists()


@pytest.mark.parametrize("marker", ["NaN", "nan", "None", "NULL", "N/A", "#N/A"])
def test_a_label_spelt_as_a_missing_value_is_a_bad_row_not_a_class(tmp_path: Path, marker: str) -> None:
    """A CSV whose missing labels pandas wrote as ``NaN`` never trains a class called "NaN"."""
    path = tmp_path / "d.csv"
    path.write_text(f"text,label\na fine film,pos\nno label here,{marker}\n\"dull , slow\",neg\n")
    with pytest.raises(DataFormatError, match=rf"d\.csv, line 3: label '{re.escape(marker)}' marks a missing value"):
        read_examples(path)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert read_examples(path, skip_bad_rows=True) == GOOD
    path.write_text("text,label\na fine film,NA\n\"dull , slow\",neg\n")  # "NA" may name a class
    assert [e.label for e in read_examples(path)] == ["NA", "neg"]


def test_a_data_file_of_no_examples_is_named(tmp_path: Path) -> None:
    """The empty header: a file of column names and no rows is refused by name, by the library and by the
    commands that read labelled data through it."""
    path = tmp_path / "empty.csv"
    path.write_text("text,label\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"{path} holds no examples"):
        ReaderSettings().read(path)
    assert ReaderSettings().read(tmp_path.joinpath("one.csv").write_text("text,label\nfine,pos\n") and
                                 tmp_path / "one.csv") == [Example("fine", "pos")]
    result = CliRunner().invoke(cli, ["baseline", "--data", str(path), "--folds", "2"])
    assert result.exit_code == 1 and f"Error: {path} holds no examples" in result.output, result.output
