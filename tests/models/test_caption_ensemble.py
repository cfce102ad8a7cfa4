"""Decoding with several captioners at once (decoding.ensemble_steps, CaptionEnsemble, --ensemble)
and the <unk> that generation never emits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from attnkit.cli import command
from attnkit.data.captions import CaptionVocab, images_to_tensor
from attnkit.data.shapes import generate_scenes, shapes_vocab
from attnkit.decoding import ensemble_steps, greedy_over_steps
from attnkit.models.captioning import CaptionEnsemble, CaptionerConfig, ImageCaptioner
from attnkit.train.tasks.caption.captioning import load_caption_ensemble, save_caption_run
from tests.support.cli import train_caption

caption = command("caption")

VOCAB = shapes_vocab()
TINY = {"image_size": 32, "channels": (4, 8, 8), "embed_dim": 8, "hidden_dim": 16, "attention_dim": 8,
        "dropout": 0.0, "max_len": 6}


def _tiny(seed: int, **changes: object) -> ImageCaptioner:
    torch.manual_seed(seed)
    settings = {"vocab_size": len(VOCAB), **TINY, **changes}
    return ImageCaptioner(CaptionerConfig(**settings)).eval()  # type: ignore[arg-type]


def _sharing(n: int) -> list[ImageCaptioner]:
    """``n`` captioners with their own decoders and the first one's encoder weights."""
    models = [_tiny(seed) for seed in range(n)]
    for m in models[1:]:
        m.encoder.load_state_dict(models[0].encoder.state_dict())
    return models


def _images(n: int = 3) -> torch.Tensor:
    return images_to_tensor([s.image for s in generate_scenes(n, seed=5, size=32)])


def _fixed_step(table: list[float], weight: float):  # type: ignore[no-untyped-def]
    """A step function that always gives the log of ``table`` and weights ``weight``; its state counts steps."""
    logp = torch.log(torch.tensor(table))

    def step(prev: torch.Tensor, state: torch.Tensor):  # type: ignore[no-untyped-def]
        n = prev.shape[0]
        return logp.expand(n, -1).clone(), torch.full((n, 2), weight), state + 1
    return step


def test_ensemble_steps_average_probabilities_and_weights_and_keep_each_state() -> None:
    a = _fixed_step([0.1, 0.2, 0.7, 0.0], 0.0)
    b = _fixed_step([0.5, 0.4, 0.1, 0.0], 1.0)
    logp, weights, state = ensemble_steps([a, b])(torch.zeros(2, dtype=torch.long), (torch.zeros(2), torch.ones(2)))
    assert torch.allclose(logp.exp(), torch.tensor([[0.3, 0.3, 0.4, 0.0]] * 2), atol=1e-6)
    assert logp[0, 3].item() == -math.inf  # impossible for every member stays impossible
    assert weights is not None and torch.equal(weights, torch.full((2, 2), 0.5))
    assert state[0].tolist() == [1.0, 1.0] and state[1].tolist() == [2.0, 2.0]
    # the searches run it like one model: token 2 (0.4) wins greedily, as neither member alone would say
    hyps = greedy_over_steps(ensemble_steps([a, b]), (torch.zeros(1), torch.zeros(1)), batch_size=1, bos_id=0,
                             eos_id=3, max_len=2)
    assert hyps[0].tokens == [2, 2] and hyps[0].log_prob == pytest.approx(2 * math.log(0.4), abs=1e-6)


def test_ensemble_steps_errors() -> None:
    with pytest.raises(ValueError, match="one or more step functions"):
        ensemble_steps([])
    a, b = _fixed_step([0.5, 0.5], 0.0), _fixed_step([0.2, 0.3, 0.5], 0.0)
    with pytest.raises(ValueError, match="one vocabulary"):
        ensemble_steps([a, b])(torch.zeros(1, dtype=torch.long), (torch.zeros(1), torch.zeros(1)))
    with pytest.raises(ValueError, match="tuple of 2 states"):
        ensemble_steps([a, a])(torch.zeros(1, dtype=torch.long), torch.zeros(1))


def test_an_ensemble_of_one_model_or_of_one_model_twice_decodes_as_that_model() -> None:
    (model,) = _sharing(1)
    images = _images()
    alone = [(c.ids, round(c.score, 4)) for c in model.beam_search(images, beam_size=3)]
    for members in ([model], [model, model]):
        ensemble = CaptionEnsemble(members).eval()
        assert [(c.ids, round(c.score, 4)) for c in ensemble.beam_search(images, beam_size=3)] == alone
        greedy = ensemble.greedy(images)
        assert [c.ids for c in greedy] == [c.ids for c in model.greedy(images)]
        assert all(torch.allclose(g.weights, m.weights) for g, m in zip(greedy, model.greedy(images), strict=True))


def test_an_ensemble_follows_the_mean_of_its_members_probabilities() -> None:
    models = _sharing(2)
    ensemble = CaptionEnsemble(models).eval()
    images = _images(2)
    found = ensemble.greedy(images)
    features = models[0].encode(images)
    with torch.no_grad():
        probs = []
        for m in models:
            logp, alpha, _ = m._step_function()(torch.full((2,), m.config.bos_id), m._start_state(features))
            probs.append((logp.exp(), alpha))
    mean = (probs[0][0] + probs[1][0]) / 2  # (B, V)
    first = [c.ids[0] if c.ids else models[0].config.eos_id for c in found]
    assert first == mean.argmax(dim=-1).tolist()
    assert found[0].ids and found[0].score <= 0 and all(c.weights.shape[1] == 16 for c in found if c.ids)
    assert torch.allclose(found[0].weights[0], (probs[0][1][0] + probs[1][1][0]) / 2, atol=1e-6)
    assert [c.ids for c in ensemble.generate_beam(features, 6, 1, 0.0)] == [c.ids for c in found]


def test_ensemble_member_errors_name_what_differs() -> None:
    models = _sharing(2)
    with pytest.raises(ValueError, match="at least one captioner"):
        CaptionEnsemble([])
    with pytest.raises(TypeError, match="member 1 must be an ImageCaptioner"):
        CaptionEnsemble([models[0], torch.nn.Linear(2, 2)])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="member 1 has other encoder weights"):
        CaptionEnsemble([models[0], _tiny(7)])
    longer = _tiny(1, max_len=9)
    longer.encoder.load_state_dict(models[0].encoder.state_dict())
    with pytest.raises(ValueError, match="member 1 has max_len=9 where member 0 has 6"):
        CaptionEnsemble([models[0], longer])


def test_generation_never_emits_unk_unless_the_config_allows_it() -> None:
    images = _images(4)
    for unk_id, emitted in ((3, False), (None, True)):
        model = _tiny(0, unk_id=unk_id)
        with torch.no_grad():
            model.out.bias[VOCAB.unk_id] = 50.0  # <unk> is by far the likeliest word
        words = [i for c in model.greedy(images) + model.beam_search(images, beam_size=2) for i in c.ids]
        assert (VOCAB.unk_id in words) is emitted
    assert CaptionerConfig.from_dict({"vocab_size": 9}).unk_id == 3  # runs saved before the field block it too
    with pytest.raises(ValueError, match="unk_id must be < vocab_size=9"):
        CaptionerConfig(vocab_size=9, unk_id=9)


def test_load_and_the_caption_command_decode_an_ensemble(tmp_path: Path) -> None:
    from PIL import Image

    runs = []
    for i, model in enumerate(_sharing(2)):
        save_caption_run(tmp_path / f"run{i}", model, VOCAB, run_id=f"r{i}")
        runs.append(tmp_path / f"run{i}")
    ensemble, vocab, metas = load_caption_ensemble(runs)
    assert isinstance(ensemble, CaptionEnsemble) and len(ensemble.members) == 2 and len(metas) == 2
    single, _, _ = load_caption_ensemble(runs[:1])
    assert isinstance(single, ImageCaptioner)
    scene = generate_scenes(1, seed=11, size=32)[0]
    Image.fromarray(np.asarray(scene.image)).save(tmp_path / "scene.png")
    expected = " ".join(vocab.decode(ensemble.greedy(images_to_tensor(scene.image[None]))[0].ids))
    result = CliRunner().invoke(caption, [str(runs[0]), str(tmp_path / "scene.png"), "--ensemble", str(runs[1]),
                                          "--attention", str(tmp_path / "att.png")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (expected or "(empty caption)")
    # a run of other data, or with its own trained encoder, is refused by name
    trained = tmp_path / "trained"
    assert CliRunner().invoke(train_caption, ["--out", str(trained), "--train-size", "8", "--val-size", "2",
                                              "--epochs", "1", "--image-size", "32", "--quiet"]).exit_code == 0
    result = CliRunner().invoke(caption, [str(runs[0]), str(tmp_path / "scene.png"), "--ensemble", str(trained)])
    assert result.exit_code != 0 and "member 1 =" in result.output and str(trained) in result.output
    other = CaptionVocab([*VOCAB.words, "zebra"])
    save_caption_run(tmp_path / "other", _tiny(0, vocab_size=len(other)), other, run_id="o")
    with pytest.raises(ValueError, match="another vocabulary"):
        load_caption_ensemble([runs[0], tmp_path / "other"])
