"""Readers: every format, gzip, encodings, and errors that name the file and line."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnkit.data.examples import MISSING_LABELS
from attnkit.data.locations import data_path
from attnkit.data.readers import DataFormatError, Example, guess_format, read_examples, read_lines

REPO = Path(__file__).resolve().parents[2]
# The real MR data set is optional: $ATTNKIT_DATA/mr, else ../shared/data/mr next to the repository.
MR = data_path("mr", base=REPO, must_exist=False)
EXPECTED = [Example("a fine film", "pos"), Example("dull , slow", "neg")]


def _write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    data = text.encode(encoding)
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.mark.parametrize(
    "name, text",
    [
        ("d.csv", 'label,text\npos,a fine film\nneg,"dull , slow"\n'),
        ("d.tsv", "text\tlabel\na fine film\tpos\ndull , slow\tneg\n"),
        ("d.jsonl", '{"text": "a fine film", "label": "pos"}\n\n{"label": "neg", "text": "dull , slow"}\n'),
        ("d.txt", "pos\ta fine film\nneg\tdull , slow\n"),
        ("d.csv.gz", "label,text\npos,a fine film\nneg,\"dull , slow\"\n"),
        ("d.jsonl.gz", '{"text": "a fine film", "label": "pos"}\n{"text": "dull , slow", "label": "neg"}'),
    ],
)
def test_each_file_format_guessed_and_read(tmp_path: Path, name: str, text: str) -> None:
    path = _write(tmp_path / name, text)
    assert read_examples(path) == EXPECTED


def test_label_space_text_and_explicit_format(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.txt", "pos a fine film\r\nneg dull , slow\r\n")
    assert guess_format(path) == "label-space-text"
    assert read_examples(path) == EXPECTED
    assert read_examples(path, format="label-space-text") == EXPECTED


def test_csv_custom_fields_and_quoted_newline(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.csv", 'id,review,sentiment\n1,"two\nlines",pos\n2,ok,neg\n')
    got = read_examples(path, text_field="review", label_field="sentiment")
    assert got == [Example("two\nlines", "pos"), Example("ok", "neg")]


def test_folder_format(tmp_path: Path) -> None:
    for label, docs in (("neg", ["dull , slow"]), ("pos", ["a fine film", "great"])):
        (tmp_path / label).mkdir()
        for i, doc in enumerate(docs):
            _write(tmp_path / label / f"{i}.txt", doc + "\n")
    _write(tmp_path / "pos" / ".hidden", "ignored")
    got = read_examples(tmp_path)
    assert got == [Example("dull , slow", "neg"), Example("a fine film", "pos"), Example("great", "pos")]


def test_polarity_latin1_splits_on_newline_only(tmp_path: Path) -> None:
    # 0x85 decodes to U+0085, which str.splitlines() would treat as a line break.
    pos = "it\x85s good\nfine caf\xe9\n"
    _write(tmp_path / "rt.pos", pos, "latin-1")
    _write(tmp_path / "rt.neg", "bad\x85really\n\nawful\n", "latin-1")
    for path in (tmp_path, tmp_path / "rt.pos", tmp_path / "rt.neg"):
        got = read_examples(path, encoding="latin-1")
        assert [e.label for e in got] == ["pos", "pos", "neg", "neg"]
        assert got[0].text == "it\x85s good" and got[1].text == "fine caf\xe9"
    assert len("it\x85s good\nfine\n".splitlines()) == 3  # the trap this reader avoids


def test_polarity_gzip_pair(tmp_path: Path) -> None:
    _write(tmp_path / "rt.pos.gz", "good\n")
    _write(tmp_path / "rt.neg.gz", "bad\n")
    assert read_examples(tmp_path / "rt.pos.gz") == [Example("good", "pos"), Example("bad", "neg")]


def test_wrong_encoding_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.txt", "pos\tok\nneg\tcaf\xe9\n", "latin-1")
    with pytest.raises(DataFormatError, match=r"d\.txt, line 2: cannot decode byte 0xe9 as utf-8"):
        read_examples(path)
    assert read_examples(path, encoding="latin-1")[1].text == "caf\xe9"


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("d.jsonl", '{"text": "a", "label": "x"}\n{"text": "b"\n', r"d\.jsonl, line 2: invalid JSON"),
        ("d.jsonl", '{"text": "a", "label": "x"}\n\n{"text": "b"}\n', r"line 3: missing field\(s\) \['label'\]"),
        ("d.jsonl", '["a", "b"]\n', r"line 1: expected a JSON object"),
        ("d.csv", "label,text\npos,ok\nneg,bad,extra\n", r"d\.csv, line 3: expected 2 fields"),
        ("d.csv", "label,body\npos,ok\n", r"line 1: text_field='text' is not a column"),
        ("d.tsv", "", r"line 1: empty file"),
        ("d.txt", "pos\tok\n\nneg no tab here\tx\nnotab\n", r"d\.txt, line 4: expected 'label<TAB>text'"),
    ],
)
def test_malformed_input_names_file_and_line(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = _write(tmp_path / name, text)
    with pytest.raises(DataFormatError, match=message):
        read_examples(path)


def test_bad_arguments(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.txt", "pos\tok\n")
    with pytest.raises(ValueError, match=r"format must be one of \['csv', 'tsv'"):
        read_examples(path, format="xml")
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_examples(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match="cannot guess the format of folder"):
        read_examples(tmp_path)
    with pytest.raises(DataFormatError, match="not a gzip file"):
        read_examples(_write(tmp_path / "x.csv", "a") .rename(tmp_path / "x.csv.gz"))


def test_read_lines_keeps_alignment(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.de.gz", "eins\n\ndrei\x85vier\n")
    assert read_lines(path) == ["eins", "", "drei\x85vier"]


def _check_mr(folder: Path, total: int, positives: int) -> None:
    """MR's layout and quirks: rt-polarity.pos/.neg in Latin-1, with U+0085 inside reviews."""
    examples = read_examples(folder, encoding="latin-1")
    assert len(examples) == total
    assert sum(e.label == "pos" for e in examples) == positives
    assert any("\x85" in e.text for e in examples)
    with pytest.raises(DataFormatError, match=r"rt-polarity\.pos, line \d+: cannot decode"):
        read_examples(folder)
    json.dumps([e.text for e in examples])  # every text is a plain, serialisable str


def test_mr_layout_on_a_sample(tmp_path: Path) -> None:
    # A few reviews written the way MR stores them: Latin-1, 0x85 (an ellipsis) inside a line.
    _write(tmp_path / "rt-polarity.pos", "a quietly moving film\x85 truly\nthe caf\xe9 scene sings\nfun\n", "latin-1")
    _write(tmp_path / "rt-polarity.neg", "dull , slow\nit never\x85 ends\n", "latin-1")
    _check_mr(tmp_path, 5, 3)


@pytest.mark.skipif(not MR.is_dir(), reason=f"the real MR data set is absent at {MR} (set ATTNKIT_DATA to the "
                                            "folder that holds mr/)")
def test_mr_real_line_count() -> None:
    _check_mr(MR, 10662, 5331)


_labels = st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp")),
                  min_size=1, max_size=8).filter(lambda label: label not in MISSING_LABELS)  # those are bad rows
_texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda t: t.strip() != ""
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(_texts, _labels), min_size=1, max_size=6))
def test_csv_and_jsonl_round_trip_any_text(tmp_path: Path, rows: list[tuple[str, str]]) -> None:
    # Quotes, commas, tabs, U+0085 and U+2028 inside a text never split or shift a record.
    expected = [Example(text, label) for text, label in rows]
    for name in ("rt.csv", "rt.tsv"):
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, delimiter="," if name == "rt.csv" else "\t")  # \r\n rows
        writer.writerow(["text", "label"])
        writer.writerows(rows)
        assert read_examples(_write(tmp_path / name, buffer.getvalue())) == expected
    lines = [json.dumps({"text": t, "label": lab}, ensure_ascii=False) for t, lab in rows]
    assert read_examples(_write(tmp_path / "rt.jsonl.gz", "\n".join(lines))) == expected


def test_utf8_byte_order_mark_and_other_encodings(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + "text,label\nna\u00efve,pos\n".encode())
    assert read_examples(path) == [Example("na\u00efve", "pos")]
    wide = tmp_path / "wide.tsv"
    wide.write_bytes("text\tlabel\nna\u00efve\tpos\n".encode("utf-16"))
    assert read_examples(wide, encoding="utf-16") == [Example("na\u00efve", "pos")]
    with pytest.raises(ValueError, match="encoding: unknown encoding 'klingon'"):
        read_examples(wide, encoding="klingon")


def test_data_locations_order_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.data.locations import DataNotFoundError, data_root

    repo = tmp_path / "repo"
    shared = tmp_path / "shared" / "data" / "mr"
    shared.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "mr").mkdir(parents=True)
    monkeypatch.delenv("ATTNKIT_DATA", raising=False)
    assert data_root(repo) == tmp_path / "shared" / "data"  # ../shared/data next to the repository
    assert data_path("mr", base=repo) == shared
    monkeypatch.chdir(repo.parent)
    assert data_root() == (repo.parent / ".." / "shared" / "data").resolve()  # no base: the working directory
    monkeypatch.setenv("ATTNKIT_DATA", str(elsewhere))
    assert data_path("mr", base=repo) == elsewhere / "mr"
    assert data_path("mr", shared, base=repo) == shared  # --data wins
    with pytest.raises(DataNotFoundError, match=r"'multi30k' not found at .*elsewhere/multi30k \(from ATTNKIT_DATA=.*"
                                                r"; pass --data FOLDER, or set ATTNKIT_DATA"):
        data_path("multi30k", base=repo)
    with pytest.raises(DataNotFoundError, match=r"given with --data; without it the folder is \$ATTNKIT_DATA/mr"):
        data_path("mr", tmp_path / "missing", base=repo)
    monkeypatch.delenv("ATTNKIT_DATA")
    with pytest.raises(FileNotFoundError, match=r"the default \.\./shared/data, as ATTNKIT_DATA is unset"):
        data_path("imdb", base=repo)
    assert data_path("imdb", base=repo, must_exist=False) == tmp_path / "shared" / "data" / "imdb"
    with pytest.raises(ValueError, match="one data set folder name"):
        data_path("mr/train", base=repo)
