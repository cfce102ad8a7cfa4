"""Text is text: a CSV field as long as the file, every missing column named, any str tokenized."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from attnkit.data.readers import DataFormatError, Example, read_examples, read_texts

LONG = "word " * 60_000  # 300,000 characters: over the csv module's default field limit of 131,072


def test_a_csv_field_may_be_as_long_as_the_file(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["text", "label"], [LONG, "pos"], ["short", "neg"]])
    jsonl = tmp_path / "long.jsonl"
    jsonl.write_text(json.dumps({"text": LONG, "label": "pos"}) + "\n", encoding="utf-8")
    limit = csv.field_size_limit()
    examples = read_examples(path)
    assert [len(e.text) for e in examples] == [len(LONG), 5]
    assert examples[0].text == read_examples(jsonl)[0].text  # the same text as JSONL reads the same
    assert [len(t) for t in read_texts(path)] == [len(LONG), 5]  # predict --file reads it too
    assert csv.field_size_limit() == limit  # the process-wide limit is put back


def test_a_header_without_either_column_names_both(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("sentence,target\nok,pos\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"line 1: text_field='text' and label_field='label' are not columns; "
                                              r"the header has \['sentence', 'target'\] \(pass --text-field NAME "
                                              r"and --label-field NAME to read other columns\)"):
        read_examples(path)


def test_any_str_is_tokenized_a_lone_surrogate_as_the_replacement_character() -> None:
    from attnkit.data.tokenization import encode_batch, train_tokenizer

    texts = ["a fine \ud800 film", "dull \udcff", "a \ufffd"]  # JSON's "\ud800"; an argument's byte 0xff
    tokenizer = train_tokenizer(texts)  # the library refuses such a str ("surrogates not allowed")
    replacement = tokenizer.token_to_id("\ufffd")
    assert replacement is not None
    assert encode_batch(tokenizer, ["fine \udfff"], 8) == [[tokenizer.token_to_id("fine"), replacement]]


def test_translation_tokenizers_take_any_str_too() -> None:
    from attnkit.data.parallel import ParallelCorpus, encode_pairs, train_translation_tokenizers

    corpus = ParallelCorpus(["ein \ud800 haus", "ein baum"] * 4, ["a \udcff house", "a tree"] * 4)
    tokenizers = train_translation_tokenizers(corpus, vocab_size=64)
    pairs = encode_pairs(tokenizers, corpus, max_len=8)
    assert len(pairs) == 8 and tokenizers.encode_source(["haus \udfff"], 8)[0]


def test_a_folder_of_parts_is_not_read_as_classes(tmp_path: Path) -> None:
    """``DIR/train/pos/1.txt``, ``DIR/test/neg/2.txt`` (the IMDB layout): the parts are named, not taken for classes."""
    from attnkit.data.readers import read_examples

    for part in ("train", "test"):
        for label in ("pos", "neg"):
            (tmp_path / "imdb" / part / label).mkdir(parents=True)
            (tmp_path / "imdb" / part / label / "1.txt").write_text(f"a {label} review", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"sub-folders test, train are the parts of a data set, each with "
                                              r"class folders, not classes: pass each part \(--data .*train "
                                              r"--test .*test on the command line\)"):
        read_examples(tmp_path / "imdb")
    assert sorted({e.label for e in read_examples(tmp_path / "imdb" / "train")}) == ["neg", "pos"]
    (tmp_path / "classes" / "train").mkdir(parents=True)  # a class really called "train" still reads
    (tmp_path / "classes" / "train" / "1.txt").write_text("x", encoding="utf-8")
    (tmp_path / "classes" / "test").mkdir()
    (tmp_path / "classes" / "test" / "1.txt").write_text("y", encoding="utf-8")
    assert sorted(e.label for e in read_examples(tmp_path / "classes")) == ["test", "train"]


def test_the_reader_flags_are_the_reader_settings_and_check_their_values_as_python_does(tmp_path: Path) -> None:
    """Every command's reader flags are :class:`ReaderSettings`' leaves: a new field is a flag of train, cv,
    evaluate, baseline and serve; a value its ``check`` refuses is refused alike on the command line (naming
    the flag) and in Python, and ``tab`` reaches :func:`read_examples` as a tab."""
    import dataclasses

    from click.testing import CliRunner

    from attnkit.cli import cli
    from attnkit.data.readers import ReaderSettings

    fields = [f.name for f in dataclasses.fields(ReaderSettings)]
    for name in ("train", "cv", "evaluate", "baseline", "serve"):
        command = cli.get_command(None, name)  # type: ignore[arg-type]
        assert set(fields) <= {p.name for p in command.params}, name
    with pytest.raises(ValueError, match="--delimiter must be one character"):
        ReaderSettings(delimiter="ab")
    assert ReaderSettings.of({"delimiter": "tab", "encoding": None, "skip_bad_rows": False, "other": 1}).kwargs() == \
        {"delimiter": "tab"}
    data = tmp_path / "d.csv"
    data.write_text("text;label\na fine film;pos\n", encoding="utf-8")
    out = CliRunner().invoke(cli, ["baseline", "--data", str(data), "--delimiter", "ab"])
    assert out.exit_code == 2 and "Invalid value for '--delimiter': must be one character" in out.output
    assert read_examples(data, **ReaderSettings(delimiter=";").kwargs()) == [Example("a fine film", "pos")]
