"""The command line's failures: one line naming what was wrong, never a bare traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import attnkit.cli as cli_module
import attnkit.cli.visualize as visualize_module
from attnkit._lazy import missing_extra_message
from attnkit.cli import DEBUG_HINT, cli, unexpected_error_message
from attnkit.data.readers import read_text_lines, truncation_notice
from attnkit.train.tasks.classify.command import truncation_line

ROOT = Path(__file__).resolve().parents[2]
BAD_UTF8 = b"a fine film\n\xe9t\xe9 ruined it\n"  # latin-1 bytes, not UTF-8


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "ATTNKIT_DEBUG"} | env
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=environ, cwd=ROOT, timeout=120)


@pytest.fixture
def fake_run(tmp_path: Path) -> Path:
    """A folder that passes for a run directory (a manifest naming generation 1); tests replace run_attention."""
    folder = tmp_path / "run"
    (folder / "checkpoints" / "000001").mkdir(parents=True)
    (folder / "current.json").write_text(json.dumps({"generation": 1, "files": {}}), encoding="utf-8")
    (folder / "checkpoints" / "000001" / "config.json").write_text(json.dumps({"model_name": "sentiment"}),
                                                                    encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "demo"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out), "--quick", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


# --- 1. unexpected errors: one line, --debug / ATTNKIT_DEBUG for the traceback, Ctrl-C -> 130 ----------


def _failing(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def fail(folder: Path, texts: list[str], **_options: object) -> None:
        raise error

    monkeypatch.setattr(visualize_module, "run_attention", fail)


def test_unexpected_error_is_one_line_unless_debug(fake_run: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _failing(monkeypatch, RuntimeError("the kernel\nfell over"))
    args = ["visualize", str(fake_run), "x", "-o", str(tmp_path / "a.html")]
    result = CliRunner().invoke(cli, args, env={"ATTNKIT_DEBUG": None})
    assert result.exit_code == 1
    assert result.stderr == f"Error: RuntimeError: the kernel fell over ({DEBUG_HINT})\n"
    assert "Traceback" not in result.output
    for how in ({"args": ["--debug", *args], "env": {}}, {"args": args, "env": {"ATTNKIT_DEBUG": "1"}},
                {"args": args, "env": {"ATTNKIT_DEBUG": "true"}}):
        debug = CliRunner().invoke(cli, how["args"], env=how["env"])
        assert isinstance(debug.exception, RuntimeError), how  # the traceback goes through
    quiet = CliRunner().invoke(cli, args, env={"ATTNKIT_DEBUG": "0"})
    assert quiet.exit_code == 1 and "RuntimeError: the kernel" in quiet.stderr


def test_interrupt_exits_130_and_click_errors_keep_their_status(fake_run: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _failing(monkeypatch, KeyboardInterrupt())
    result = CliRunner().invoke(cli, ["visualize", str(fake_run), "x", "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 130 and "interrupted" in result.stderr and "Traceback" not in result.output
    usage = CliRunner().invoke(cli, ["visualize", str(fake_run), "-o", str(tmp_path / "a.html")])
    assert usage.exit_code == 2 and "at least one TEXT" in usage.stderr
    assert CliRunner().invoke(cli, ["no-such-command"]).exit_code == 2


def test_a_missing_extra_inside_a_command_names_it() -> None:
    err = ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert unexpected_error_message(err) == ("this command needs the 'viz' extra (module 'matplotlib' is "
                                             "missing): pip install 'attnkit[viz]'")
    assert missing_extra_message(ModuleNotFoundError("x", name="numpyx")) is None
    assert unexpected_error_message(ValueError("")) == f"ValueError: (no message) ({DEBUG_HINT})"


def test_main_in_a_process_and_python_dash_m(tmp_path: Path) -> None:
    code = """
        import sys, click
        from attnkit.cli import cli
        cli.add_command(click.Command("boom", callback=lambda: 1 / 0))
        from attnkit._console import main
        sys.argv = ["attnkit", "boom"]
        main()
    """
    plain = _python(code)
    assert plain.returncode == 1, plain.stderr
    assert plain.stderr.strip() == f"Error: ZeroDivisionError: division by zero ({DEBUG_HINT})"
    debug = _python(code, ATTNKIT_DEBUG="1")
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ZeroDivisionError" in debug.stderr
    help_ = subprocess.run([sys.executable, "-m", "attnkit", "--help"], capture_output=True, text=True,
                           cwd=ROOT, timeout=120)
    assert help_.returncode == 0 and "--debug" in help_.stdout and "ATTNKIT_DEBUG" in help_.stdout


def test_main_catches_what_escapes_click(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    def broken(**kwargs: object) -> None:
        raise RuntimeError("no package metadata")

    monkeypatch.setattr(cli_module.cli, "main", broken)
    monkeypatch.setattr(sys, "argv", ["attnkit", "--version"])
    monkeypatch.delenv("ATTNKIT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli_module.main()
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"Error: RuntimeError: no package metadata ({DEBUG_HINT})\n"
    monkeypatch.setattr(sys, "argv", ["attnkit", "--debug", "--version"])
    with pytest.raises(RuntimeError):
        cli_module.main()


# --- 2. the console script says which extra to install ------------------------------------------------


# ``attnkit --help`` in a process where importing click fails, as without the 'cli' extra.
WITHOUT_CLICK = """
        import sys

        class RefuseClick:
            def find_spec(self, name, path=None, target=None):
                if name == "click" or name.startswith("click."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, RefuseClick())
        sys.argv = ["attnkit", "--help"]
        from attnkit._console import main
        main()
"""


def test_entry_point_without_click_names_the_extra() -> None:
    result = _python(WITHOUT_CLICK)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == ("attnkit's command line needs the 'cli' extra (module 'click' is "
                                     "missing): pip install 'attnkit[cli]'")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '\nattnkit = "attnkit._console:main"\n' in pyproject
    assert "from attnkit._console import main" in (ROOT / "src/attnkit/__main__.py").read_text(encoding="utf-8")


# --- 3. text files that are not UTF-8 ---------------------------------------------------------------------


def test_read_text_lines_names_file_line_and_byte(tmp_path: Path) -> None:
    path = tmp_path / "texts.txt"
    path.write_bytes(BAD_UTF8)
    with pytest.raises(ValueError) as info:
        read_text_lines(path)
    message = str(info.value)
    assert f"{path}, line 2, column 1" in message and "byte 0xe9" in message and "save the file as UTF-8" in message
    with pytest.raises(ValueError, match="pass --encoding with the file's encoding"):
        read_text_lines(path, encoding_flag="--encoding")
    assert read_text_lines(path, "latin-1") == ["a fine film", "été ruined it", ""]
    path.write_bytes(b"\xef\xbb\xbffirst\r\nsecond")
    assert read_text_lines(path) == ["first", "second"]
    with pytest.raises(ValueError, match="'klingon' is not a known text encoding"):
        read_text_lines(path, "klingon")
    with pytest.raises(ValueError, match="cannot read .*missing.txt"):
        read_text_lines(tmp_path / "missing.txt")


def test_visualize_file_not_utf8(fake_run: Path, tmp_path: Path) -> None:
    path = tmp_path / "texts.txt"
    path.write_bytes(BAD_UTF8)
    result = CliRunner().invoke(cli, ["visualize", str(fake_run), "--file", str(path), "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{path}, line 2" in result.stderr and "--encoding latin-1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# --- 4. visualize says when it cuts a text ----------------------------------------------------------------


def test_truncation_notice() -> None:
    assert truncation_notice([(3, 3)]) is None
    assert truncation_notice([(64, 600)], what="the run's maximum length") == \
        "note: kept the first 64 of 600 tokens of the text (the run's maximum length)"
    assert truncation_notice([(5, 5), (64, 90)]) == \
        "note: kept the first 64 of 90 tokens of text 2 (the model's maximum length)"
    assert truncation_notice([(64, 90), (2, 2), (64, 700)]) == \
        "note: 2 of 3 texts were cut to 64 tokens (the model's maximum length); the longest had 700"


def test_a_cut_text_is_counted_as_the_run_reads_it() -> None:
    from attnkit.data.tokenization import encode_batch, train_tokenizer

    tokenizer = train_tokenizer(["a quietly moving film", "dull and boring plot"] * 3, kind="word")
    texts = ["a quietly moving film " * 5, "dull plot"]
    assert len(encode_batch(tokenizer, texts, 8)[0]) == 8
    assert truncation_line(tokenizer, texts, 8) == \
        "note: kept the first 8 of 20 tokens of text 1 (the run's maximum length, 8)"
    assert truncation_line(tokenizer, texts, 20) is None


def test_visualize_says_how_much_of_a_long_text_it_kept(demo_run: Path, tmp_path: Path) -> None:
    long_text = "a brilliant and moving film " * 100
    result = CliRunner().invoke(cli, ["visualize", str(demo_run), long_text, "short", "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    (view, short) = visualize_module.run_attention(demo_run, [long_text, "short"])
    kept = len(view.tokens)
    assert view.total_tokens == 500 and kept < 500 and short.total_tokens == len(short.tokens) == 1
    assert result.stderr.strip() == f"note: kept the first {kept} of 500 tokens of text 1 (the run's maximum length)"
    quiet = CliRunner().invoke(cli, ["visualize", str(demo_run), "short", "-o", str(tmp_path / "s.html")])
    assert quiet.exit_code == 0 and quiet.stderr == ""


# --- 5. malformed JSON names its file ---------------------------------------------------------------------

BROKEN_JSON = '{\n  "model_name": "sentiment"\n  "vocab_size": 3\n}\n'


def test_malformed_config_json_names_the_file(tmp_path: Path) -> None:
    from attnkit.models.bert import BertConfig

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(BROKEN_JSON, encoding="utf-8")
    result = CliRunner().invoke(cli, ["visualize", str(run), "x", "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {run / 'config.json'} is not valid JSON: Expecting ',' delimiter")
    (run / "model.safetensors").write_bytes(b"")  # a BERT folder with a broken config.json
    result = CliRunner().invoke(cli, ["visualize", str(run), "x", "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 1 and f"{run / 'config.json'} is not valid JSON" in result.stderr
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON: Expecting ',' delimiter: line 3"):
        BertConfig.from_file(run / "config.json")
    (run / "config.json").write_bytes(b'{"hidden_size": "\xff"}')
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
        BertConfig.from_file(run / "config.json")
    (run / "config.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match=r"config\.json must hold a JSON object, got list"):
        BertConfig.from_file(run / "config.json")


def test_malformed_labels_and_captions_name_the_file(tmp_path: Path) -> None:
    from attnkit.data.batching import LabelVocab
    from attnkit.data.captions import read_coco_captions

    labels = tmp_path / "labels.json"
    labels.write_text('{"labels": ["neg" "pos"]}', encoding="utf-8")
    with pytest.raises(ValueError, match=r"labels\.json is not valid JSON: Expecting ',' delimiter: line 1"):
        LabelVocab.load(labels)
    captions = tmp_path / "captions.json"
    captions.write_bytes(b'{"images": ["\xff"]}')
    with pytest.raises(ValueError, match=r"captions\.json is not valid JSON"):
        read_coco_captions(captions)


# --- 6. --pretrained never unpickles, and names a file it cannot read -----------------------------------


def _backbone_model() -> torch.nn.Module:
    from attnkit.models.captioning import CaptionerConfig, ImageCaptioner

    return ImageCaptioner(CaptionerConfig(vocab_size=10, image_size=32))


def test_pretrained_pickle_with_objects_is_refused(tmp_path: Path) -> None:
    from attnkit.models.captioning import load_backbone_weights

    model = _backbone_model()
    pickled = tmp_path / "backbone.pt"
    torch.save({"epoch": Fraction(1, 2), "weight": torch.zeros(2)}, pickled)
    with pytest.raises(ValueError) as info:
        load_backbone_weights(model, pickled)
    message = str(info.value)
    assert message.startswith(f"{pickled} holds objects other than tensors (fractions.Fraction); "
                              "attnkit never unpickles arbitrary objects")
    assert "save_file(" in message and "backbone.safetensors" in message
    assert "add_safe_globals" not in message and "Weights only load failed" not in message

    random_bytes = tmp_path / "random.pt"
    random_bytes.write_bytes(bytes(range(256)) * 8)
    truncated = tmp_path / "truncated.pt"
    torch.save({"weight": torch.zeros(64)}, truncated)
    truncated.write_bytes(truncated.read_bytes()[:300])
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    bad_safetensors = tmp_path / "bad.safetensors"
    bad_safetensors.write_bytes(b"\x00" * 40)
    for path in (random_bytes, truncated, empty, bad_safetensors):
        with pytest.raises(ValueError) as info:
            load_backbone_weights(model, path)
        assert str(info.value).startswith(f"{path} is not a"), str(info.value)
        assert "\n" not in str(info.value) and "weights_only" not in str(info.value)


def test_train_caption_pretrained_pickle_is_a_cli_error(tmp_path: Path) -> None:
    pickled = tmp_path / "backbone.pt"
    torch.save({"epoch": Fraction(1, 2)}, pickled)
    result = CliRunner().invoke(cli, ["train", "--task", "caption", "--out", str(tmp_path / "run"),
                                      "--train-size", "4", "--val-size", "1", "--epochs", "1",
                                      "--image-size", "32", "--pretrained", str(pickled), "--quiet"])
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"Error: {pickled} holds objects other than tensors")
    assert "Traceback" not in result.output
