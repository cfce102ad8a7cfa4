"""Each token a translation run generates, explained by its source tokens, with every method's faithfulness
measured on that translation (``Translator.explain``, ``attnkit translate --explain``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import attnkit
from attnkit.attribution.generation import (
    GENERATION_METHODS,
    attribute_generation,
    explain_generation,
)
from attnkit.cli import command
from tests.cli.test_cli_translate import toy_corpus, write_pair
from tests.support.cli import train_translate

translate = command("translate")

TEXTS = ["ein hund läuft im haus .", "rot kind spielt .", "ein mann läuft ."]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A word-for-word toy translation run trained until it translates (a few seconds); the explanation
    methods measured on 6 of its validation sentences."""
    root = tmp_path_factory.mktemp("explain")
    src, tgt = write_pair(root, toy_corpus(300), "train")
    val_src, val_tgt = write_pair(root, toy_corpus(10, seed=5), "val")
    result = CliRunner().invoke(train_translate, [
        "--src", str(src), "--tgt", str(tgt), "--val-src", str(val_src), "--val-tgt", str(val_tgt),
        "--explain-outputs", "6", "--out", str(root / "run"), "--vocab-size", "60", "--d-model", "32",
        "--num-heads", "4", "--d-ff", "64", "--encoder-layers", "1", "--decoder-layers", "1", "--dropout", "0",
        "--epochs", "25", "--max-tokens", "300", "--lr", "5e-3", "--warmup-steps", "30", "--label-smoothing", "0",
        "--quiet"])
    assert result.exit_code == 0, result.output
    return root / "run"


def test_the_run_chooses_the_method_shown_first_on_its_validation_sentences(run: Path) -> None:
    translator = attnkit.load_run(run)
    measured = translator.meta["metrics"]["explain"]
    assert measured["outputs"] == 6 and set(measured["methods"]) == set(GENERATION_METHODS)
    margin = {m: f["comprehensiveness"] - f["sufficiency"] for m, f in measured["methods"].items()}
    assert margin[measured["method"]] == max(margin.values())
    assert measured == translator.measure_methods(toy_corpus(10, seed=5).sources[:6])  # measured as it says
    for text in TEXTS:
        got = translator.explain(text)
        assert got["method"] == measured["method"] and got["measured"] == measured
        assert got["chosen"] == "the most faithful on 6 held-out outputs of the run"
    # without a run's measurement, the most faithful on the output at hand
    source = translator.tokenizers.encode_source([TEXTS[0]], 64)[0]
    alone = explain_generation(translator.model, source, [5, 7])
    assert alone["method"] == alone["faithfulness"]["shown_first"]
    assert alone["chosen"] == "the most faithful on this output"


def test_the_beam_alternatives_come_best_first_and_the_first_is_the_translation(run: Path) -> None:
    translator = attnkit.load_run(run)
    for text in TEXTS:
        got = translator.explain(text)
        scores = [a["score"] for a in got["alternatives"]]
        assert 1 <= len(scores) <= 4 and scores == sorted(scores, reverse=True)
        assert got["alternatives"][0]["text"] == got["translation"]
        assert len({a["text"] for a in got["alternatives"]}) == len(scores)  # distinct hypotheses


def test_each_generated_token_gets_a_row_over_the_source(run: Path) -> None:
    translator = attnkit.load_run(run)
    for text in TEXTS:
        got = translator.explain(text)
        (translation,) = translator.translate([text])
        assert got["translation"] == translation.text and got["source_tokens"] == translation.source_tokens
        assert got["target_tokens"] == translation.target_tokens[: len(got["target_tokens"])]
        assert np.asarray(got["scores"]).shape == (len(got["target_tokens"]), len(got["source_tokens"]))
        assert set(got["faithfulness"]["methods"]) == set(GENERATION_METHODS)
    asked = translator.explain(TEXTS[0], method="cross_attention")
    assert asked["method"] == "cross_attention"
    assert np.allclose(np.asarray(asked["scores"]).sum(1), 1, atol=1e-3)  # raw attention: rows sum to 1
    with pytest.raises(ValueError, match="method must be one of"):
        translator.explain(TEXTS[0], method="lime")


def test_the_method_shown_first_is_faithful_well_above_a_random_order(run: Path) -> None:
    translator = attnkit.load_run(run)
    for text in TEXTS:
        record = translator.explain(text)["faithfulness"]
        shown = record["methods"][record["shown_first"]]
        assert shown["comprehensiveness"] >= 1.5 * record["random"]["comprehensiveness"], record
        assert shown["sufficiency"] < record["random"]["sufficiency"], record


def test_gradient_times_input_is_the_gradient_of_the_token_log_probability(run: Path) -> None:
    """Checked against central differences of ``log p(y_t)`` along each source position's embedding (the
    source's lookup alone: the target side and the tied output layer keep theirs)."""
    from attnkit.attribution.generation import _Translation

    model = attnkit.load_run(run).model.double()
    translator = attnkit.load_run(run)
    source = translator.tokenizers.encode_source([TEXTS[2]], 64)[0]
    target = [5, 7]
    scores = attribute_generation(model, source, target, "grad_input")
    subject = _Translation(model, source, target)
    base = subject.inputs()
    eps = 1e-6
    for s in range(len(source)):
        values = []
        for sign in (1, -1):
            moved = base.clone()
            moved[0, s] *= 1 + sign * eps
            with torch.no_grad():
                values.append(subject.log_probs_with(moved))
        assert torch.allclose((values[0] - values[1]) / (2 * eps), torch.from_numpy(scores[:, s]), atol=1e-5)


def test_explain_refuses_an_empty_output_and_the_command_prints_the_rows(run: Path) -> None:
    translator = attnkit.load_run(run)
    with pytest.raises(ValueError, match="at least one token"):
        explain_generation(translator.model, [], [4])
    result = CliRunner().invoke(translate, [str(run), TEXTS[2], "--explain"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == translator.translate([TEXTS[2]])[0].text
    assert lines[1].startswith("explained by ") and "random order" in lines[1]
    explained = translator.explain(TEXTS[2])
    n = len(explained["target_tokens"])
    assert all(" <- " in line for line in lines[2 : 2 + n])
    assert "held-out outputs of the run" in lines[1]
    if len(explained["alternatives"]) > 1:  # then the beam's alternatives, best first
        assert lines[2 + n] == "the beam's alternatives, best first (score):"
        assert [line.split(None, 1)[1] for line in lines[3 + n :]] == [a["text"] for a in explained["alternatives"]]
    else:
        assert len(lines) == 2 + n


def test_attention_norm_is_the_size_of_what_each_source_token_adds(run: Path) -> None:
    """With one source token every head gives it weight 1, so its ``||sum_h alpha f_h(x)||`` is the size of
    the last cross-attention's whole output, less the output projection's bias (Kobayashi et al., 2020)."""
    translator = attnkit.load_run(run)
    model = translator.model
    source = translator.tokenizers.encode_source(["hund"], 64)[0][:1]
    target = [5, 7, 9]
    seen: list[torch.Tensor] = []
    layer = model.decoder.layers[-1].cross_attn
    handle = layer.register_forward_hook(lambda _m, _a, out: seen.append(out[0] if isinstance(out, tuple) else out))
    try:
        norms = attribute_generation(model, source, target, "attention_norm")  # (Tt, 1)
    finally:
        handle.remove()
    whole = (seen[-1][0] - layer.out_proj.bias).norm(dim=-1)  # (Tt,)
    assert norms.shape == (3, 1)
    assert np.allclose(norms[:, 0], whole.detach().double().numpy(), rtol=1e-5)
    longer = translator.tokenizers.encode_source([TEXTS[0]], 64)[0]
    attention = attribute_generation(model, longer, target, "cross_attention")
    assert not np.allclose(attribute_generation(model, longer, target, "attention_norm") /
                           attribute_generation(model, longer, target, "attention_norm").sum(1, keepdims=True),
                           attention)  # the values' sizes reorder the weights
