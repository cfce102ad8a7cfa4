"""Text is text and the command line says what is true: any ``str`` is classified, the terminal shows a
text's control characters escaped (JSON keeps them exact), and each message names what happened."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from tests.support.cli import TINY, write_keyword_csv


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("truthful")
    data = write_keyword_csv(folder / "reviews.csv", 120)
    out = folder / "run"
    result = _invoke("train", "--data", str(data), *TINY, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


# --- any str is a text ---------------------------------------------------------------------------------------

# A lone surrogate: what JSON's "\ud800" gives, and what an argument's undecodable byte 0xff becomes.
ODD = ["a fine \ud800 film", "dull \udcff"]


def test_lone_surrogates_are_classified(trained: Path) -> None:
    printed = _invoke("predict", str(trained), *ODD, "--explain")
    assert printed.exit_code == 0, printed.output
    rows = [line.split("\t") for line in printed.output.splitlines() if not line.startswith("    ")]
    assert [r[2] for r in rows] == ["a fine \\ud800 film", "dull \\udcff"]  # escaped, never an encoding error
    as_json = _invoke("predict", str(trained), *ODD, "--json")
    assert as_json.exit_code == 0, as_json.output
    assert [json.loads(line)["text"] for line in as_json.output.splitlines()] == ODD  # exact


def test_the_terminal_shows_control_and_bidi_characters_escaped(trained: Path) -> None:
    text = "evil\u202eelif.exe\x00\x1b[2J\nnext"
    printed = _invoke("predict", str(trained), text)
    assert printed.exit_code == 0, printed.output
    assert printed.output.split("\t")[2] == "evil\\u202eelif.exe\\x00\\x1b[2J\\x0anext\n"
    assert not {"\u202e", "\x00", "\x1b"} & set(printed.output)
    as_json = _invoke("predict", str(trained), text, "--json")
    assert json.loads(as_json.output)["text"] == text
