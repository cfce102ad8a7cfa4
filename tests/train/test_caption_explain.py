"""Each word a captioning run generates, explained by the image's regions, with every method's faithfulness
measured on that caption (``CaptionRun.explain``, ``attnkit caption --explain``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import attnkit
from attnkit.attribution.generation import GENERATION_METHODS
from attnkit.cli import command
from attnkit.data.captions import images_to_tensor
from attnkit.data.shapes import generate_scenes
from tests.support.cli import train_caption

caption = command("caption")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes captioner trained until it describes the scenes (held-out BLEU-4 about 75; seconds)."""
    out = tmp_path_factory.mktemp("caption-explain") / "run"
    result = CliRunner().invoke(train_caption, ["--out", str(out), "--train-size", "600", "--val-size", "20",
                                                "--epochs", "8", "--image-size", "32", "--batch-size", "32",
                                                "--explain-outputs", "10", "--quiet"])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def images() -> object:
    return images_to_tensor([scene.image for scene in generate_scenes(3, seed=7, size=32)])


def test_each_word_gets_a_row_over_the_regions_and_the_first_method_beats_random(run: Path, images: object) -> None:
    served = attnkit.load_run(run)
    for image in images:  # type: ignore[attr-defined]
        got = served.explain(image)
        assert got["caption"] == served.caption(image[None])[0]
        rows, cols = got["grid"]
        assert np.asarray(got["scores"]).shape == (len(got["target_tokens"]), rows * cols)
        assert len(got["source_tokens"]) == rows * cols
        record, measured = got["faithfulness"], served.config["metrics"]["explain"]
        assert set(record["methods"]) == set(GENERATION_METHODS) and got["method"] == measured["method"]
        assert measured["outputs"] == 10 and got["chosen"] == "the most faithful on 10 held-out outputs of the run"
        shown = record["methods"][got["method"]]
        assert shown["comprehensiveness"] >= 2 * record["random"]["comprehensiveness"], record
        assert shown["sufficiency"] < record["random"]["sufficiency"], record
    attention = served.explain(images[0], method="cross_attention")["scores"]  # type: ignore[index]
    assert np.allclose(np.asarray(attention).sum(1), 1, atol=1e-3)  # the model's own attention: rows sum to 1


def test_the_command_prints_each_word_s_regions(run: Path, images: object, tmp_path: Path) -> None:
    from PIL import Image

    picture = tmp_path / "scene.png"
    Image.fromarray(generate_scenes(1, seed=7, size=32)[0].image).save(picture)
    result = CliRunner().invoke(caption, [str(run), str(picture), "--explain"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].startswith("explained by ") and len(lines) == 2 + len(lines[0].split())
    assert all(" <- (" in line for line in lines[2:])
    refused = CliRunner().invoke(caption, [str(run), str(picture), "--explain", "--min-len", "2"])
    assert refused.exit_code == 2 and "--explain explains one run's plain beam search" in refused.output


def test_attention_norm_weighs_each_region_s_attention_by_its_vector_s_size(run: Path, images: object) -> None:
    import torch

    from attnkit.attribution.generation import attribute_generation

    served = attnkit.load_run(run)
    image = images[0][None]  # type: ignore[index]
    with torch.no_grad():
        features = served.model.encode(image)  # (1, R, C)
    vocab = served.vocab
    target = [i for i in vocab.encode(served.caption(image)[0]) if i not in (vocab.bos_id, vocab.eos_id, vocab.pad_id)]
    attention = attribute_generation(served.model, features, target, "cross_attention")
    norms = attribute_generation(served.model, features, target, "attention_norm")
    sizes = features[0].norm(dim=-1).double().numpy()  # (R,): the run reads the regions unprojected
    assert norms.shape == attention.shape == (len(target), features.shape[1])
    assert np.allclose(norms, attention * sizes[None, :])
